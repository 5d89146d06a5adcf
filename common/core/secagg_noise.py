"""Integer noise shares: Skellam, the difference of two Poisson draws (docs/SECAGG.md).

Why Skellam. Sk(λ) = Poisson(λ) − Poisson(λ) (variance 2λ) is closed under sums:
independent Sk(λ₁) and Sk(λ₂) add up to Sk(λ₁ + λ₂) exactly. So if every holder adds
Sk(λ/t_min) to its quantized sum, any t_min honest holders' shares add up to exactly
Sk(λ), the noise the accounting (``ldpem.common.core.secagg_accounting``) calibrates, and more
honest holders only add more noise (post-processing). The discrete Gaussian has no such
identity: a sum of discrete Gaussians is only close to one (Kairouz, Liu & Steinke 2021),
with an extra term in the accounting.

The sampler. Each Poisson draw is numpy's (``Generator.poisson``: PTRS transformed
rejection, Hörmann 1993, for λ ≥ 10; multiplication of uniforms below), so the output is
an integer by construction: the float artefacts that break floating-point Laplace or
Gaussian noise (Mironov 2012: holes in the support) cannot occur, and the only deviation
from the exact law is the rounding inside the acceptance test, of relative order 1e-15 in
the probabilities — far inside the accounting's slack. The tests check the draws against
the exact pmf (``ldpem.common.core.secagg_accounting.skellam_pmf``) by chi-square, for means
from 0.3 to 10^7, and that t shares sum to the law of Sk(tλ).

Randomness. The caller passes the generator: the simulator its study generator (seeded,
for reproducible research runs), the agent ``protocol.noise_rng``, a PCG64 seeded with 256
bits from the operating system for every report (a research seed only when the operator
gives one, which voids the guarantee). ``os_generator`` gives such a generator.
"""

from __future__ import annotations

import math
import secrets

import numpy as np
from numpy.typing import NDArray

__all__ = ["MAX_MEAN", "os_generator", "skellam_noise"]

IntArray = NDArray[np.int64]

#: The largest λ accepted: numpy's Poisson takes λ up to ~9.2e18, and a draw must stay far
#: inside int64 and below 2^53 (``ldpem.common.core.secagg_quantize.EXACT_LIMIT``).
MAX_MEAN = 1e15


def os_generator() -> np.random.Generator:
    """A generator seeded with 256 bits from the operating system (``secrets``)."""
    return np.random.default_rng(secrets.randbits(256))


def _check_mean(mean: float) -> float:
    value = float(mean)
    if not (math.isfinite(value) and 0.0 < value <= MAX_MEAN):
        raise ValueError(f"mean must be a finite number in (0, {MAX_MEAN:g}], got {mean!r}")
    return value


def skellam_noise(
    mean: float, size: int | tuple[int, ...], rng: np.random.Generator | None = None
) -> IntArray:
    """Independent draws of Sk(λ) = Poisson(λ) − Poisson(λ), λ = ``mean`` (variance 2λ).

    Parameters
    ----------
    mean : float
        λ > 0, the mean of each Poisson.
    size : int or tuple of int
        The shape of the output, e.g. (d,) for one holder's share.
    rng : numpy.random.Generator, optional
        The noise stream; a fresh ``os_generator()`` when None.

    Returns
    -------
    noise : int64 array of shape ``size``
    """
    mean = _check_mean(mean)
    generator = os_generator() if rng is None else rng
    first = generator.poisson(mean, size)
    second = generator.poisson(mean, size)
    noise: IntArray = (first - second).astype(np.int64)
    return noise
