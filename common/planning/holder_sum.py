"""What a simulated hospital sends in a round, on the fast path (``ldpem.common.planning.fastsim``).

The sum of its records' contributions as its mechanism sums them — a smoothed truncation's
from the table of ``ldpem.common.planning.truncation_sum``, any other mechanism's with its
own ``partial_sum`` — then its noise (``finish_sum``). Used by simulations only, never by
an agent, never on real records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core.secagg_quantize import FINE_BITS
from ldpem.common.core.truncation import smoothed_truncation
from ldpem.common.mechanisms import Mechanism, SharedNoise, sum_arithmetic
from ldpem.common.mechanisms.local import LocalTruncation
from ldpem.common.mechanisms.local_clip import LocalClipped
from ldpem.common.mechanisms.secagg import SecAggSkellam
from ldpem.common.mechanisms.secagg_contract import FloatSum
from ldpem.common.models import Model
from ldpem.common.models.base import Records
from ldpem.common.planning.truncation_sum import truncated_sum

__all__ = ["CHUNK", "holder_total"]

FloatArray = NDArray[np.float64]

#: Values (records × d) whose gradients are computed and summed at once: the arrays of one
#: chunk stay in the cache, and the per-chunk overhead is small against its work.
CHUNK = 1 << 15


#: Values a mechanism's contributions are probed at (``_tabled``): zero, tiny, moderate,
#: large and huge, both signs.
_PROBE = np.array([[0.0, 1e-9, 0.3, -0.7, 2.5, -40.0, 1e6, -1e300]])
_TABLED: dict[type[Mechanism], bool] = {}


def _tabled(mechanism: Mechanism) -> bool:
    """Whether ``mechanism`` contributes the smoothed truncation of each gradient at its
    scale and smoothing (local, hospital, central, noise shares), which the table sums:
    its class's ``contributions`` are probed once against ``smoothed_truncation``."""
    if not isinstance(mechanism, LocalTruncation):
        return False
    kind = type(mechanism)
    if kind not in _TABLED:
        expected = smoothed_truncation(_PROBE, mechanism.scale, mechanism.smoothing)
        _TABLED[kind] = bool(np.array_equal(mechanism.contributions(_PROBE.copy()), expected))
    return _TABLED[kind]


def _holder_sum(mechanism: Mechanism, gradients: FloatArray) -> NDArray[Any]:
    """Σ of a holder's contributions before its noise, (m, d) → (d,), in the mechanism's
    arithmetic (``sum_arithmetic``); ``gradients`` is scratch. A truncation's sum comes
    from the table; for noise shares it is then put on their fine grid
    (``secagg.quantize.fine_sum``'s integers, here rint of the float sum in fine units
    instead of the sum of each record's rint: they differ by at most m/2 fine units,
    m·γ·2⁻³¹, far below the grid γ the sum is rounded to); any other mechanism's
    contributions are summed in floats (a product with ones: a sum over rows is slow) or
    with its own arithmetic's ``partial_sum``."""
    arithmetic = sum_arithmetic(mechanism)
    if not _tabled(mechanism):
        if isinstance(arithmetic, FloatSum):
            clipped = _clipped_sum(mechanism, gradients)
            if clipped is not None:
                return clipped
            contributions = mechanism.contributions(gradients)
            summed: FloatArray = np.ones(contributions.shape[0]) @ contributions
            return summed
        return arithmetic.partial_sum(gradients)
    assert isinstance(mechanism, LocalTruncation)
    total = truncated_sum(gradients, mechanism.scale, mechanism.smoothing)
    if isinstance(mechanism, SecAggSkellam):
        fine = np.rint(total / (mechanism.grid * 2.0**-FINE_BITS))
        return np.array([int(v) for v in fine], dtype=object)
    if isinstance(mechanism, SharedNoise):
        return arithmetic.partial_sum(gradients)
    return total


#: Rows whose squared norm reaches this are summed by ``clip_rows`` itself (``_clipped_sum``).
_SQUARES_LIMIT = 1e300


def _clipped_sum(mechanism: Mechanism, gradients: FloatArray) -> FloatArray | None:
    """Σ_i of ``clip_rows(g_i, C)`` for a mechanism whose contributions are those of
    ``LocalClipped`` (local-clip, central-clip): each row's factor min(1, C/‖g_i‖) times
    the rows, one product, the same function as ``clip_rows`` to rounding (~1e-16 of each
    row); None when a squared norm is NaN, infinite or near the float range (``clip_rows``'
    careful form then sums them)."""
    if not isinstance(mechanism, LocalClipped):
        return None
    # A subclass that defines its own contributions is not summed this way. The classes of
    # the mechanism's MRO that are LocalClipped come first and end with LocalClipped itself.
    below = [c for c in type(mechanism).__mro__ if issubclass(c, LocalClipped)][:-1]
    if any("contributions" in vars(c) for c in below):
        return None
    squares = np.einsum("ij,ij->i", gradients, gradients)
    if not squares.max() < _SQUARES_LIMIT:
        return None
    factors = mechanism.clip / np.maximum(np.sqrt(squares), mechanism.clip)
    summed: FloatArray = factors @ gradients
    return summed


def holder_total(
    model: Model,
    mechanism: Mechanism,
    beta: FloatArray,
    chunks: Iterable[Records],
    sigma: float,
    rng: np.random.Generator,
) -> FloatArray:
    """What one holder sends in a round: the gradients at β of its round's records, given
    as ``chunks`` (each of at most ``CHUNK`` values: its arrays stay in the cache), summed
    as the mechanism sums them, then ``finish_sum`` (its noise, from ``rng``)."""
    arithmetic = sum_arithmetic(mechanism)
    total = arithmetic.empty_sum(beta.size)
    count = 0
    for chunk in chunks:
        with np.errstate(all="ignore"):  # as holder_round: the mechanism bounds ±inf and NaN
            gradients = model.gradients(beta, chunk, sigma)
        total = total + _holder_sum(mechanism, gradients)
        count += chunk.n
    return arithmetic.finish_sum(total, count, rng)
