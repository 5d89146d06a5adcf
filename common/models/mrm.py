"""Mixture of linear regressions: y = Z·⟨β*, x⟩ + V, x ~ N(0, I_d), V ~ N(0, σ²) (MATH (1.2))."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ldpem.common.models.base import Model, Records, tau_spread
from ldpem.common.models.registry import register_model

__all__ = ["MODEL", "MixtureOfRegressions"]


class MixtureOfRegressions(Model):
    """The mixture of linear regressions (module docstring)."""

    name = "mrm"
    sign_invariant = True
    has_response = True
    allows_missing = False

    def gradients(
        self, beta: NDArray[np.float64], records: Records, sigma: float
    ) -> NDArray[np.float64]:
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

    def sample_records(
        self,
        n: int,
        beta_star: NDArray[np.float64],
        *,
        sigma: float,
        missing: float,
        rng: np.random.Generator,
    ) -> Records:
        """x ~ N(0, I_d), y = Z·⟨β*, x⟩ + V with Z = ±1 equally likely, V ~ N(0, σ²)."""
        d = beta_star.size
        x = rng.standard_normal((n, d))
        labels = rng.choice(np.array([-1.0, 1.0]), size=n)
        y = labels * (x @ beta_star) + sigma * rng.standard_normal(n)
        return Records(x, y)

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        """τ = B²/d + σ² + B² (Lemma 6: the x xᵀ β term adds ‖β‖² to a coordinate's variance)."""
        return tau_spread(beta_bound=beta_bound, sigma=sigma, d=d) + beta_bound**2


MODEL = register_model(MixtureOfRegressions())
