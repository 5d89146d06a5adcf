"""Privacy mechanisms applied to per-record gradients, one per module: their contract
(``ldpem.common.mechanisms.base``), the interface of noise shares
(``ldpem.common.mechanisms.secagg_contract``) and their registry
(``ldpem.common.mechanisms.registry``; docs/EXTENDING.md).

Importing this package registers the built-in mechanisms: local, hospital, central,
local-clip, central-clip, secagg, none.
"""

from __future__ import annotations

from ldpem.common.mechanisms.base import Mechanism
from ldpem.common.mechanisms.registry import get_mechanism, mechanism_names, register_mechanism
from ldpem.common.mechanisms.secagg_contract import (
    SharedNoise,
    honest_holders,
    noise_shares,
    sum_arithmetic,
)

# isort: off
# Registration order is the order of every list of mechanisms (CLI choices, plan, audit).
from ldpem.common.mechanisms.local import LocalTruncation
from ldpem.common.mechanisms.hospital import HospitalTruncation
from ldpem.common.mechanisms.central import CentralTruncation
from ldpem.common.mechanisms.local_clip import LocalClipped, clip_rows
from ldpem.common.mechanisms.central_clip import CentralClipped
from ldpem.common.mechanisms.secagg import SecAggSkellam
from ldpem.common.mechanisms.none import NoPrivacy

# isort: on

__all__ = [
    "CentralClipped",
    "CentralTruncation",
    "HospitalTruncation",
    "LocalClipped",
    "LocalTruncation",
    "Mechanism",
    "NoPrivacy",
    "SecAggSkellam",
    "SharedNoise",
    "clip_rows",
    "get_mechanism",
    "honest_holders",
    "mechanism_names",
    "noise_shares",
    "register_mechanism",
    "sum_arithmetic",
]
