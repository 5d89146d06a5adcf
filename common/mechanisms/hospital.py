"""The hospital-level mechanism (docs/HOSPITAL.md): each data holder is the curator of its
own records and adds one draw of noise to its sum."""

from __future__ import annotations

from typing import ClassVar

from ldpem.common.mechanisms.base import NoiseSite, ScaleRule
from ldpem.common.mechanisms.local import LocalTruncation
from ldpem.common.mechanisms.registry import register_mechanism

__all__ = ["HospitalTruncation"]


@register_mechanism
class HospitalTruncation(LocalTruncation):
    """Hospital-level mechanism (docs/HOSPITAL.md): the data holder is the curator of its
    own records. Each record is truncated as in the local model, the holder sums them and
    adds ONE draw of N(0, σ_r² I_d) to the sum, σ_r calibrated to the replace-one sensitivity
    of the sum, 2·record_bound·√d — the same as that of one record's report.

    The scale is Algorithm 2's central rule with the holder's own records per round, so it
    differs between holders; ``privatize`` gives what a holder of a single record would
    send (its contribution plus one draw), the tightest case for the privacy audit.
    """

    name = "hospital"
    label = "hospital-level DP (same trust boundary)"
    noise_site: ClassVar[NoiseSite] = "holder"
    scale_rule: ClassVar[ScaleRule | None] = "square-root"
    per_holder_scale = True
