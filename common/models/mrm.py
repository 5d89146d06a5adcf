"""Mixture of linear regressions: y = Z·⟨β*, x⟩ + V, x ~ N(0, I_d), V ~ N(0, σ²) (MATH (1.2))."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ldpem.common._validation import check_count, check_positive
from ldpem.common.models._synthetic import true_parameter
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

        Parameters
        ----------
        beta : array of shape (d,)
            The current estimate β.
        records : Records
            n records of dimension d with a response (``x`` (n, d), ``y`` (n,)).
        sigma : float
            The model's noise std σ (> 0), not the privacy noise.

        Returns
        -------
        gradients : array of shape (n, d)
            Row i is ∇q_i(β; β).
        """
        if records.y is None:
            raise ValueError("model mrm needs a response y")
        x, y = records.x, records.y
        fitted = x @ beta
        coefficient = np.tanh(y * fitted / (sigma * sigma)) * y - fitted
        return coefficient[:, None] * x

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
        """n records (x, y) with ‖β*‖ = snr·σ; returns (records, β*).

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
            Must be 0 (missing covariates are model rmc's).
        rng : numpy.random.Generator
            The only source of randomness.

        Returns
        -------
        records : Records
            ``x`` of shape (n, d), ``y`` of shape (n,).
        beta_star : array of shape (d,)
            The true parameter β*.
        """
        n = check_count("n", n)
        sigma = check_positive("sigma", sigma)
        if missing:
            raise ValueError(f"missing must be 0 for model mrm, got {missing!r}")
        beta_star = true_parameter(d, snr=snr, sigma=sigma, rng=rng)
        x = rng.standard_normal((n, d))
        labels = rng.choice(np.array([-1.0, 1.0]), size=n)
        y = labels * (x @ beta_star) + sigma * rng.standard_normal(n)
        return Records(x, y), beta_star

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        """τ = B²/d + σ² + B² (Lemma 6: the x xᵀ β term adds ‖β‖² to a coordinate's variance)."""
        return tau_spread(beta_bound=beta_bound, sigma=sigma, d=d) + beta_bound**2


MODEL = register_model(MixtureOfRegressions())
