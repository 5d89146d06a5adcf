"""Linear regression with missing covariates: y = ⟨x, β*⟩ + V, x_j missing w.p. p_m (MATH (1.3)).

Missing covariates are NaN in ``records.x``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ldpem.common._validation import check_count, check_positive
from ldpem.common.models._synthetic import true_parameter
from ldpem.common.models.base import Model, Records, tau_spread
from ldpem.common.models.registry import register_model

__all__ = ["MODEL", "RegressionWithMissingCovariates"]


class RegressionWithMissingCovariates(Model):
    """Linear regression with missing covariates (module docstring)."""

    name = "rmc"
    sign_invariant = False
    has_response = True
    allows_missing = True
    #: The share of covariates the demo and the extension examples leave missing.
    demo_missing = 0.1

    def gradients(
        self, beta: NDArray[np.float64], records: Records, sigma: float
    ) -> NDArray[np.float64]:
        """Per-record ∇q_i(β; β) = y_i·m_i − K_i β (docs/MATH.md (1.3)–(1.5)), shape (n, d).

        With z the observed mask, u = (1−z)⊙β:
            m   = z⊙x + (y − ⟨β, z⊙x⟩) / (σ² + ‖u‖²) · u
            K β = u + m⟨m, β⟩ − ((1−z)⊙m)⟨(1−z)⊙m, β⟩
        so no d×d matrix is formed per record.

        Parameters
        ----------
        beta : array of shape (d,)
            The current estimate β.
        records : Records
            n records of dimension d with a response (``x`` (n, d), NaN where a covariate is
            missing; ``y`` (n,)).
        sigma : float
            The model's noise std σ (> 0), not the privacy noise.

        Returns
        -------
        gradients : array of shape (n, d)
            Row i is ∇q_i(β; β).
        """
        if records.y is None:
            raise ValueError("model rmc needs a response y")
        x, y = records.x, records.y
        missing = np.isnan(x)
        observed_x = np.where(missing, 0.0, x)
        u = np.where(missing, beta[None, :], 0.0)
        residual = y - observed_x @ beta
        imputed = (
            observed_x + (residual / (sigma * sigma + np.einsum("ij,ij->i", u, u)))[:, None] * u
        )
        missing_part = np.where(missing, imputed, 0.0)
        k_beta = (
            u + imputed * (imputed @ beta)[:, None] - missing_part * (missing_part @ beta)[:, None]
        )
        gradient: NDArray[np.float64] = y[:, None] * imputed - k_beta
        return gradient

    def generate(
        self,
        n: int,
        d: int,
        *,
        snr: float = 3.0,
        sigma: float = 1.0,
        missing: float = 0.1,
        rng: np.random.Generator,
    ) -> tuple[Records, NDArray[np.float64]]:
        """n records (x with NaN where missing, y) with ‖β*‖ = snr·σ; returns (records, β*).

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
            Probability that a covariate is missing, in [0, 1).
        rng : numpy.random.Generator
            The only source of randomness.

        Returns
        -------
        records : Records
            ``x`` of shape (n, d) with NaN where missing, ``y`` of shape (n,).
        beta_star : array of shape (d,)
            The true parameter β*.
        """
        n = check_count("n", n)
        sigma = check_positive("sigma", sigma)
        if not 0.0 <= missing < 1.0:
            raise ValueError(f"missing must be in [0, 1), got {missing!r}")
        beta_star = true_parameter(d, snr=snr, sigma=sigma, rng=rng)
        x = rng.standard_normal((n, d))
        y = x @ beta_star + sigma * rng.standard_normal(n)
        x[rng.random((n, d)) < missing] = np.nan
        return Records(x, y), beta_star

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        """τ = B²/d + σ² + B² (Lemma 8, as for MRM)."""
        return tau_spread(beta_bound=beta_bound, sigma=sigma, d=d) + beta_bound**2


MODEL = register_model(RegressionWithMissingCovariates())
