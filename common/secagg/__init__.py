"""Distributed differential privacy over secure aggregation (docs/SECAGG.md).

* ``quantize``: a holder's sum of truncated contributions on an integer grid of step
  γ = 2^-j, its integer sensitivity and the modulus 2^k of the aggregation;
* ``noise``: integer Skellam noise shares;
* ``accounting``: the privacy of the aggregated sum (Rényi DP of the Skellam mechanism),
  its calibration, the fallback ε of one holder's own share, and the exact one-dimensional
  privacy loss that checks them.
"""

from __future__ import annotations
