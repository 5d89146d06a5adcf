"""Symmetric two-component Gaussian mixture: y = Z·β* + V, Z = ±1, V ~ N(0, σ² I_d) (MATH (1.1))."""

from __future__ import annotations

import numpy as np

from ldpem.common.models.base import Draw, FloatArray, Model, Records, tau_spread
from ldpem.common.models.registry import register_model

__all__ = ["MODEL", "GaussianMixture"]


class GaussianMixture(Model):
    """The symmetric two-component Gaussian mixture (module docstring)."""

    name = "gmm"
    sign_invariant = True
    has_response = False

    def gradients(self, beta: FloatArray, records: Records, sigma: float) -> FloatArray:
        """Per-record ∇q_i(β; β) = tanh(⟨β, y_i⟩/σ²)·y_i − β, shape (n, d).

        The paper writes the weight as 2w − 1 with w = sigmoid(⟨β, y⟩/σ²), which is
        tanh(⟨β, y⟩/(2σ²)); the posterior P(Z = 1 | y) is sigmoid(2⟨β, y⟩/σ²), so the correct
        weight is tanh(⟨β, y⟩/σ²) (docs/MATH.md (1.1)).
        """
        y = records.x
        weight = np.tanh((y @ beta) / (sigma * sigma))
        # The same numbers as w·y − β, with one (n, d) array instead of two.
        gradients = y * weight[:, None]
        gradients -= beta
        return gradients

    def sample_records(self, draw: Draw) -> Records:
        """y = Z·β* + V with Z = ±1 equally likely, V ~ N(0, σ² I_d)."""
        labels = draw.rng.choice(np.array([-1.0, 1.0]), size=draw.n)
        # The same draws and numbers as Z·β* + σ·V, with one (n, d) temporary instead of three.
        y = draw.rng.standard_normal((draw.n, draw.beta_star.size))
        if draw.sigma != 1.0:
            y *= draw.sigma
        y += labels[:, None] * draw.beta_star[None, :]
        return Records(y)

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        """τ = B²/d + σ² (Lemma 4 with ‖β*‖∞² spread over d coordinates; docs/MATH.md)."""
        return tau_spread(beta_bound=beta_bound, sigma=sigma, d=d)


MODEL = register_model(GaussianMixture())
