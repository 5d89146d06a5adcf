"""The latent-variable models (docs/MATH.md §1) and their registry (docs/EXTENDING.md).

Importing this package registers the built-in models: gmm, gmmk, lca, mrm, rmc.
"""

from __future__ import annotations

from ldpem.common.models import gmm, gmmk, lca, mrm, rmc  # noqa: F401  (they register themselves)
from ldpem.common.models.base import Model, ModelOption, Records, estimation_error
from ldpem.common.models.registry import (
    get_model,
    model_names,
    register_model,
)

__all__ = [
    "Model",
    "ModelOption",
    "Records",
    "estimation_error",
    "get_model",
    "model_names",
    "register_model",
]
