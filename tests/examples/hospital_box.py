"""LocalBox with hospital-level noise (docs/EXTENDING.md): one draw on each holder's sum."""

from __future__ import annotations

from typing import ClassVar

from ldpem.common.mechanisms import register_mechanism
from ldpem.common.mechanisms.base import NoiseSite
from tests.examples.local_box import LocalBox


# No @dataclass of its own: it adds no field, so LocalBox's (clip, noise_std) are its own.
@register_mechanism
class HospitalBox(LocalBox):
    """Each coordinate clipped to [−C, C]; the holder adds ONE Gaussian draw to its sum."""

    name: ClassVar[str] = "hospital-box"
    label: ClassVar[str] = "hospital-level DP, coordinates clipped"
    noise_site: ClassVar[NoiseSite] = "holder"

    # sensitivity(d) is LocalBox's, 2C√d: replacing one record changes the holder's SUM
    # by the difference of two contributions, as it changes one record's report
    # (docs/HOSPITAL.md, "Sensitivity argument"). So the same σ, drawn once per holder.
