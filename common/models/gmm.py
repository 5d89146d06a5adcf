"""Symmetric two-component Gaussian mixture: y = Z·β* + V, Z = ±1, V ~ N(0, σ² I_d) (MATH (1.1))."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ldpem.common.models.base import Model, Records, tau_spread
from ldpem.common.models.registry import register_model

__all__ = ["MODEL", "GaussianMixture"]


class GaussianMixture(Model):
    """The symmetric two-component Gaussian mixture (module docstring)."""

    name = "gmm"
    sign_invariant = True
    has_response = False
    allows_missing = False

    def gradients(
        self, beta: NDArray[np.float64], records: Records, sigma: float
    ) -> NDArray[np.float64]:
        """Per-record ∇q_i(β; β) = tanh(⟨β, y_i⟩/σ²)·y_i − β, shape (n, d).

        The paper writes the weight as 2w − 1 with w = sigmoid(⟨β, y⟩/σ²), which is
        tanh(⟨β, y⟩/(2σ²)); the posterior P(Z = 1 | y) is sigmoid(2⟨β, y⟩/σ²), so the correct
        weight is tanh(⟨β, y⟩/σ²) (docs/MATH.md (1.1)).
        """
        y = records.x
        weight = np.tanh((y @ beta) / (sigma * sigma))
        return weight[:, None] * y - beta[None, :]

    def sample_records(
        self,
        n: int,
        beta_star: NDArray[np.float64],
        *,
        sigma: float,
        missing: float,
        rng: np.random.Generator,
    ) -> Records:
        """y = Z·β* + V with Z = ±1 equally likely, V ~ N(0, σ² I_d)."""
        d = beta_star.size
        labels = rng.choice(np.array([-1.0, 1.0]), size=n)
        y = labels[:, None] * beta_star[None, :] + sigma * rng.standard_normal((n, d))
        return Records(y)

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        """τ = B²/d + σ² (Lemma 4 with ‖β*‖∞² spread over d coordinates; docs/MATH.md)."""
        return tau_spread(beta_bound=beta_bound, sigma=sigma, d=d)


MODEL = register_model(GaussianMixture())
