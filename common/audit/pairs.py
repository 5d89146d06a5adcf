"""The neighbouring inputs the privacy audit attacks (``ldpem.common.audit.empirical``): a pool of
candidate values covering every binade of the float range, and the exact search for the
pair whose noiseless outputs are farthest apart (step 1 of the audit's procedure)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_count
from ldpem.common.models import Model, Records

__all__ = ["candidate_values", "farthest_pair", "holder_candidates", "mechanism_candidates"]

FloatArray = NDArray[np.float64]

#: Seed of the random magnitudes and sign patterns: every audit, on every machine, tries
#: the same pool, so a result can be reproduced.
CANDIDATE_SEED = 20_251_126
#: Grid magnitudes per decade: a step of 10^(1/8) ≈ 1.33 < 2 puts a grid point in every
#: binade [2^k, 2^(k+1)) of the normal floats.
PER_DECADE = 8
#: Log-uniform random magnitudes added to the grid (between its points, seeded).
RANDOM_MAGNITUDES = 2048
#: Random mixed-sign, mixed-magnitude rows added for d > 1.
RANDOM_ROWS = 4096
#: Entries of the (chunk, k) block of pair distances ``farthest_pair`` holds at once: 32 MiB.
PAIR_BLOCK = 1 << 22

_TINY = float(np.finfo(np.float64).tiny)  # 2.2e-308, the smallest normal float
_HUGE = float(np.finfo(np.float64).max)  # 1.8e308


def _magnitudes() -> FloatArray:
    """Positive magnitudes from the smallest subnormal to the largest float: every 1/8
    decade from 2.2e-308 to 1.7e308 (so every binade), both ends, and seeded log-uniform
    draws between the grid points."""
    exponents = np.arange(
        math.ceil(PER_DECADE * math.log10(_TINY)), math.floor(PER_DECADE * math.log10(_HUGE)) + 1
    )
    grid = 10.0 ** (exponents / PER_DECADE)
    rng = np.random.default_rng(CANDIDATE_SEED)
    # 2^u for u uniform in [−1022, 1024): log-uniform over the normal range, never inf.
    drawn = np.exp2(rng.uniform(-1022.0, np.nextafter(1024.0, 0.0), RANDOM_MAGNITUDES))
    ends = np.array([5e-324, _TINY, _HUGE])
    return np.unique(np.concatenate([grid, drawn, ends]))


def candidate_values() -> FloatArray:
    """Scalar values for worst-case gradient coordinates: 0 and ± every magnitude of
    ``_magnitudes`` (about 7,000: each 1/8 decade over the whole float range plus seeded
    log-uniform draws), so no binade a mechanism could misbehave in goes untried.

    Returns
    -------
    values : array of shape (k,)
    """
    magnitudes = _magnitudes()
    return np.concatenate([[0.0], magnitudes, -magnitudes])


def _patterns(values: FloatArray, d: int) -> FloatArray:
    """Rows (k, d) built from scalar ``values``: all coordinates equal, a single non-zero
    coordinate, alternating signs (+v, −v, +v, …), and seeded random rows whose coordinates
    have independent random signs and magnitudes drawn from ``values``."""
    equal = np.repeat(values[:, None], d, axis=1)
    if d == 1:
        return equal
    spikes = np.zeros((values.size, d))
    spikes[:, 0] = values
    alternating = equal * np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
    rng = np.random.default_rng(CANDIDATE_SEED + d)
    mixed = rng.choice(values, size=(RANDOM_ROWS, d)) * rng.choice([-1.0, 1.0], (RANDOM_ROWS, d))
    return np.concatenate([equal, spikes, alternating, mixed])


def farthest_pair(
    candidates: FloatArray, transform: Callable[[FloatArray], FloatArray]
) -> tuple[int, int, float]:
    """Indices (i, j) of the two candidate rows whose transforms are farthest apart in L2.

    Parameters
    ----------
    candidates : array of shape (k, d)
        The inputs.
    transform : callable
        Maps an array of shape (k, d) to the noiseless outputs, shape (k, d').

    Returns
    -------
    i, j : int
        Row indices into ``candidates`` (i = j = 0 when all outputs are equal).
    distance : float
        ‖transform(candidates)[i] − transform(candidates)[j]‖₂; inf if an output is not
        finite (itself a leak).

    Exact, in bounded memory: identical outputs are merged first (many candidates saturate
    to the same value); a pair found by two farthest-point sweeps gives a lower bound L on
    the diameter, and since ‖o_i − o_j‖ ≤ ‖o_i − c‖ + max_k ‖o_k − c‖ for the centroid c,
    only outputs with ‖o_i − c‖ + max ≥ L can belong to the farthest pair. The distances
    among those are computed in blocks of at most ``PAIR_BLOCK`` entries (32 MiB), so the
    memory is O(PAIR_BLOCK + k·d') for any k, and the time O(k'²·d') for the k' outputs kept.
    """
    outputs = transform(candidates)
    finite = np.all(np.isfinite(outputs), axis=1)
    if not finite.all():
        # An output that is not finite is itself a leak: report it as infinitely far.
        bad = int(np.argmin(finite))
        return bad, (bad + 1) % len(candidates), math.inf
    peak = float(np.max(np.abs(outputs))) or 1.0
    distinct, first_seen = np.unique(outputs / peak, axis=0, return_index=True)
    if len(distinct) == 1:
        return 0, 0, 0.0
    centre = distinct.mean(axis=0)
    radius = np.sqrt(np.sum((distinct - centre) ** 2, axis=1))
    start = int(np.argmax(radius))
    end = int(np.argmax(np.sum((distinct - distinct[start]) ** 2, axis=1)))
    other = int(np.argmax(np.sum((distinct - distinct[end]) ** 2, axis=1)))
    lower = math.sqrt(float(np.sum((distinct[end] - distinct[other]) ** 2)))
    # The slack covers rounding in the radii (outputs are scaled to |entry| ≤ 1).
    kept = np.flatnonzero(radius + radius.max() >= lower - 1e-9)
    points = distinct[kept]
    squared = np.sum(points**2, axis=1)
    best, best_i, best_j = -1.0, end, other
    rows = max(1, PAIR_BLOCK // len(points))
    for begin in range(0, len(points), rows):
        block = points[begin : begin + rows]
        distances = squared[begin : begin + rows, None] + squared[None, :] - 2.0 * block @ points.T
        flat = int(np.argmax(distances))
        i, j = divmod(flat, len(points))
        if distances[i, j] > best:
            best, best_i, best_j = float(distances[i, j]), int(kept[begin + i]), int(kept[j])
    i, j = int(first_seen[best_i]), int(first_seen[best_j])
    difference = outputs[i] / peak - outputs[j] / peak
    return i, j, peak * math.sqrt(float(np.sum(difference**2)))


def mechanism_candidates(d: int) -> FloatArray:
    """Candidate per-record gradients: the ``_patterns`` of every candidate value and of a
    dense grid around the truncation's extremum.

    Returns
    -------
    candidates : array of shape (k, d)
    """
    d = check_count("d", d)
    values = np.concatenate([candidate_values(), np.linspace(-25.0, 25.0, 401)])
    return _patterns(values, d)


def holder_candidates(model: Model, d: int) -> Records:
    """Candidate single records for ``model``: the ``_patterns`` of every candidate value
    (the whole float range, as for the mechanism path) and spikes on each coordinate;
    responses ±|v| and 0; and for a model that allows missing covariates (rmc, lca) the
    same records with all but the first covariate missing.

    Returns
    -------
    Records
        k candidate records: ``x`` of shape (k, d), ``y`` of shape (k,) for models with a
        response.
    """
    rows = np.concatenate([_patterns(candidate_values(), d), np.eye(d) * 1e6])
    x = rows
    y = None
    if model.has_response:
        x = np.concatenate([rows, rows, rows])
        y = np.concatenate([np.abs(rows[:, 0]), -np.abs(rows[:, 0]), np.zeros(len(rows))])
    if model.allows_missing:
        holes = x.copy()
        holes[:, 1:] = np.nan
        x = np.concatenate([x, holes])
        y = None if y is None else np.concatenate([y, y])
    return Records(x, y)
