"""The base of every wire schema: strict types, no unknown field, frozen, no NaN or
infinity (``ldpem.common.wire``'s module docstring)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Schema"]


class Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
