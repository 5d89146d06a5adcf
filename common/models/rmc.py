"""Linear regression with missing covariates: y = ⟨x, β*⟩ + V, x_j missing w.p. p_m (MATH (1.3)).

Missing covariates are NaN in ``records.x``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ldpem.common.models.base import Draw, FloatArray, Model, Records, tau_spread
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

    def gradients(self, beta: FloatArray, records: Records, sigma: float) -> FloatArray:
        """Per-record ∇q_i(β; β) = y_i·m_i − K_i β (docs/MATH.md (1.3)–(1.5)), shape (n, d).

        With z the observed mask, u = (1−z)⊙β:
            m   = z⊙x + (y − ⟨β, z⊙x⟩) / (σ² + ‖u‖²) · u
            K β = u + m⟨m, β⟩ − ((1−z)⊙m)⟨(1−z)⊙m, β⟩
        so no d×d matrix is formed per record.
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

    def sample_records(self, draw: Draw) -> Records:
        """x ~ N(0, I_d), y = ⟨x, β*⟩ + V, V ~ N(0, σ²); x_j NaN w.p. ``missing``."""
        x = draw.rng.standard_normal((draw.n, draw.beta_star.size))
        y = x @ draw.beta_star + draw.sigma * draw.rng.standard_normal(draw.n)
        x[draw.rng.random(x.shape) < draw.missing] = np.nan
        return Records(x, y)

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        """τ = B²/d + σ² + B² (Lemma 8, as for MRM)."""
        return tau_spread(beta_bound=beta_bound, sigma=sigma, d=d) + beta_bound**2


MODEL = register_model(RegressionWithMissingCovariates())
