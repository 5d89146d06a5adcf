"""The three latent-variable models (docs/MATH.md §1): per-record gradients and generators."""

from __future__ import annotations

from ldpem.common.models import gmm, mrm, rmc
from ldpem.common.models.base import Model, Records, estimation_error

__all__ = ["MODELS", "MODEL_NAMES", "Model", "Records", "estimation_error", "get_model"]

MODELS: dict[str, Model] = {m.name: m for m in (gmm.MODEL, mrm.MODEL, rmc.MODEL)}
MODEL_NAMES: tuple[str, ...] = tuple(MODELS)


def get_model(name: str) -> Model:
    """The model called ``name`` ("gmm", "mrm" or "rmc")."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"model must be one of {MODEL_NAMES}, got {name!r}") from None
