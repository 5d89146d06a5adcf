"""The one base of the wire's schemas (``ldpem.common.wire`` and the modules it is split
into): unknown fields refused, instances frozen, types strict, no NaN or infinity."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Schema"]


class Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
