"""Mixture of linear regressions: y = Z·⟨β*, x⟩ + V, x ~ N(0, I_d), V ~ N(0, σ²) (MATH (1.2))."""

from __future__ import annotations

import numpy as np

from ldpem.common.models.base import Draw, FloatArray, Model, Records, tau_spread
from ldpem.common.models.registry import register_model

__all__ = ["MODEL", "MixtureOfRegressions"]


class MixtureOfRegressions(Model):
    """The mixture of linear regressions (module docstring)."""

    name = "mrm"
    sign_invariant = True
    has_response = True

    def gradients(self, beta: FloatArray, records: Records, sigma: float) -> FloatArray:
        """Per-record ∇q_i(β; β) = tanh(y_i⟨β, x_i⟩/σ²)·y_i·x_i − x_i x_iᵀ β, shape (n, d).

        Weight corrected as for GMM (the paper halves the argument of tanh; docs/MATH.md (1.2)).
        x xᵀ β is formed as x·⟨x, β⟩, never as a d×d matrix.
        """
        if records.y is None:
            raise ValueError("model mrm needs a response y")
        x, y = records.x, records.y
        fitted = x @ beta
        coefficient = np.tanh(y * fitted / (sigma * sigma)) * y - fitted
        return coefficient[:, None] * x

    def sample_records(self, draw: Draw) -> Records:
        """x ~ N(0, I_d), y = Z·⟨β*, x⟩ + V with Z = ±1 equally likely, V ~ N(0, σ²)."""
        x = draw.rng.standard_normal((draw.n, draw.beta_star.size))
        labels = draw.rng.choice(np.array([-1.0, 1.0]), size=draw.n)
        return Records(
            x, labels * (x @ draw.beta_star) + draw.sigma * draw.rng.standard_normal(draw.n)
        )

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        """τ = B²/d + σ² + B² (Lemma 6: the x xᵀ β term adds ‖β‖² to a coordinate's variance)."""
        return tau_spread(beta_bound=beta_bound, sigma=sigma, d=d) + beta_bound**2


MODEL = register_model(MixtureOfRegressions())
