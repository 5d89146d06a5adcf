"""Helpers for the seeded synthetic generators."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_count, check_positive

__all__ = ["true_parameter"]


def true_parameter(
    d: int, *, snr: float, sigma: float, rng: np.random.Generator
) -> NDArray[np.float64]:
    """β* with ‖β*‖₂ = snr·σ, equal magnitudes on every coordinate and random signs.

    Equal magnitudes keep ‖β*‖∞ = ‖β*‖₂/√d, the case the default τ (calibration) assumes.

    Parameters
    ----------
    d : int
        Dimension (≥ 1).
    snr : float
        ‖β*‖₂/σ (> 0).
    sigma : float
        The model's noise std σ (> 0).
    rng : numpy.random.Generator
        Draws the signs.

    Returns
    -------
    beta_star : array of shape (d,)
    """
    d = check_count("d", d)
    snr = check_positive("snr", snr)
    sigma = check_positive("sigma", sigma)
    signs = rng.choice(np.array([-1.0, 1.0]), size=d)
    return signs * (snr * sigma / math.sqrt(d))
