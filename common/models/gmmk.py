"""K-component Gaussian mixture: y ~ Σ_k π_k N(μ_k, σ² I_d), σ known (docs/MATH.md (7.1)).

β = (μ_1, …, μ_K, α): the K means in R^d, then K weight logits, π = softmax(α); its size
is K·(d + 1). The error is taken up to a relabelling of the components
(``_mixture.permutation_error``).
"""

from __future__ import annotations

import math

import numpy as np

from ldpem.common.core._validation import check_count, check_positive
from ldpem.common.models._mixture import (
    MixtureModel,
    class_logits,
    log_weights,
    posterior,
    split,
)
from ldpem.common.models.base import Draw, FloatArray, Records, tau_spread
from ldpem.common.models.registry import register_model

__all__ = ["MODEL", "GaussianMixtureK"]

#: The preconditioner of the weight logits' gradient: 1/L for L = ½, the largest
#: curvature of Σ_k π̄_k log softmax(α)_k (Böhning's bound; docs/MATH.md §7).
LOGIT_STEP = 2.0


class GaussianMixtureK(MixtureModel):
    """The K-component Gaussian mixture with unknown means and weights (module docstring)."""

    name = "gmmk"
    start_rule = "random-means"

    def gradients(self, beta: FloatArray, records: Records, sigma: float) -> FloatArray:
        """Per-record preconditioned ∇q_i(β; β), shape (n, K·(d + 1)) (docs/MATH.md (7.2)).

        With w_ik the posterior weight of component k (softmax over k of
        log π_k − ‖y_i − μ_k‖²/(2σ²)): the mean block k is σ²·∂q_i/∂μ_k = w_ik (y_i − μ_k),
        the logits 2·∂q_i/∂α = 2 (w_i − π).
        """
        y = records.x
        means, logits = split(beta, self.components)
        # ‖y − μ_k‖² = ‖y‖² − 2⟨y, μ_k⟩ + ‖μ_k‖²; ‖y‖² is the same for every k and cancels.
        scores = (y @ means.T - 0.5 * np.einsum("kj,kj->k", means, means)) / (sigma * sigma)
        weights = posterior(scores + log_weights(logits))
        mean_part = weights[:, :, None] * (y[:, None, :] - means[None, :, :])
        logit_part = LOGIT_STEP * (weights - np.exp(log_weights(logits)))
        return np.concatenate([mean_part.reshape(y.shape[0], -1), logit_part], axis=1)

    def draw_parameter(
        self, d: int, *, snr: float, sigma: float, rng: np.random.Generator
    ) -> FloatArray:
        """β* with means at separation snr·σ and weight logits ``class_logits``.

        K ≤ d: the vertices of a regular simplex with edge snr·σ, centred at 0, in a random
        orientation (every pair of means at distance snr·σ). K > d: K points evenly spaced
        by snr·σ on a random line through 0 (neighbours at distance snr·σ).
        """
        d = check_count("d", d)
        separation = check_positive("snr", snr) * check_positive("sigma", sigma)
        k = self.components
        if k <= d:
            frame, _ = np.linalg.qr(rng.standard_normal((d, k)))
            means = frame.T * (separation / math.sqrt(2.0))
            means -= means.mean(axis=0)
        else:
            direction = rng.standard_normal(d)
            direction /= np.linalg.norm(direction)
            means = separation * (np.arange(k) - (k - 1) / 2.0)[:, None] * direction[None, :]
        return np.concatenate([means.ravel(), class_logits(k)])

    def sample_records(self, draw: Draw) -> Records:
        """y = μ_z + σ·V, z ~ Categorical(softmax(α)), V ~ N(0, I_d)."""
        means, logits = split(draw.beta_star, self.components)
        labels = draw.rng.choice(self.components, size=draw.n, p=np.exp(log_weights(logits)))
        y = draw.rng.standard_normal((draw.n, means.shape[1]))
        if draw.sigma != 1.0:
            y *= draw.sigma
        y += means[labels]
        return Records(y)

    def start(self, d: int, sigma: float, rng: np.random.Generator) -> FloatArray:
        """β⁰: K means each of norm σ in independent uniformly random directions (equal
        means are a fixed point: every component would get the same gradient), equal
        weights (α = 0). Public: d, σ and the run's start stream only."""
        d = check_count("d", d)
        means = rng.standard_normal((self.components, d))
        means *= sigma / np.linalg.norm(means, axis=1, keepdims=True)
        return np.concatenate([means.ravel(), np.zeros(self.components)])

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        """τ = max(B²/d + σ², 4)/K, B the declared bound on each ‖μ_k‖ (docs/MATH.md (7.4)).

        Checked by sweeping τ over {¼, ½, 1, 2, 4}× this rule (n = 2·10⁵ over 4 hospitals,
        K = 3, d = 5, separation 3σ, ε = 1, seeds 0–9, 2026-12-08; mean final error, bold:
        the rule): central T = 10 1.22 / 1.13 / **1.08** / 1.05 / 1.03, T = 20 0.572 /
        0.425 / **0.359** / 0.356 / 0.433, T = 30 0.331 / 0.200 / **0.153** / 0.157 / 0.261,
        T = 50 0.332 / 0.207 / **0.162** / 0.177 / 0.230; hospital T = 10 1.50 / 1.31 /
        **1.19** / 1.12 / 1.08, T = 20 1.00 / 0.678 / **0.465** / 0.352 / 0.316, T = 30
        0.797 / 0.441 / **0.263** / 0.204 / 0.225, T = 50 0.872 / 0.449 / **0.289** / 0.243 /
        0.275; local T = 10 2.79 / 2.77 / **2.73** / 2.65 / 2.51, T = 20 2.77 / 2.71 /
        **2.64** / 2.64 / 2.99, T = 30 2.84 / 2.84 / **2.95** / 3.31 / 4.14. The rule is
        central's best at T = 30 and 50 and within 5% of it at T = 10 and 20; only
        hospital, which truncates at each hospital's smaller m_k, is clearly better at 2×
        (docs/MATH.md §7)."""
        spread = tau_spread(beta_bound=beta_bound, sigma=sigma, d=d)
        return max(spread, LOGIT_STEP**2) / self.components


MODEL = register_model(GaussianMixtureK())
