"""Symmetric two-component Gaussian mixture: y = Z·β* + V, Z = ±1, V ~ N(0, σ² I_d) (MATH (1.1))."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ldpem.common._validation import check_count, check_positive
from ldpem.common.models._synthetic import true_parameter
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

        Parameters
        ----------
        beta : array of shape (d,)
            The current estimate β.
        records : Records
            n records of dimension d (``x``: the observations y_i).
        sigma : float
            The model's noise std σ (> 0), not the privacy noise.

        Returns
        -------
        gradients : array of shape (n, d)
            Row i is ∇q_i(β; β).
        """
        y = records.x
        weight = np.tanh((y @ beta) / (sigma * sigma))
        return weight[:, None] * y - beta[None, :]

    def generate(
        self,
        n: int,
        d: int,
        *,
        snr: float = 3.0,
        sigma: float = 1.0,
        missing: float = 0.0,
        rng: np.random.Generator,
    ) -> tuple[Records, NDArray[np.float64]]:
        """n records of dimension d with ‖β*‖ = snr·σ; returns (records, β*).

        Parameters
        ----------
        n : int
            Number of records (≥ 1).
        d : int
            Dimension (≥ 1).
        snr : float
            ‖β*‖₂/σ (> 0).
        sigma : float
            The model's noise std σ (> 0).
        missing : float
            Must be 0 (the model has no covariates to miss).
        rng : numpy.random.Generator
            The only source of randomness.

        Returns
        -------
        records : Records
            ``x`` of shape (n, d), the observations; no ``y``.
        beta_star : array of shape (d,)
            The true parameter β*.
        """
        n = check_count("n", n)
        sigma = check_positive("sigma", sigma)
        if missing:
            raise ValueError(f"missing must be 0 for model gmm, got {missing!r}")
        beta_star = true_parameter(d, snr=snr, sigma=sigma, rng=rng)
        labels = rng.choice(np.array([-1.0, 1.0]), size=n)
        y = labels[:, None] * beta_star[None, :] + sigma * rng.standard_normal((n, d))
        return Records(y), beta_star

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        """τ = B²/d + σ² (Lemma 4 with ‖β*‖∞² spread over d coordinates; docs/MATH.md)."""
        return tau_spread(beta_bound=beta_bound, sigma=sigma, d=d)


MODEL = register_model(GaussianMixture())
