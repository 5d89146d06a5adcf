"""Sums of smoothed truncations for simulations: Σ_i T(g_i) by one interpolation table.

The mechanisms truncate with ``truncation.smoothed_truncation``: exact to ~1e-13 and at a
cost per element that does not depend on the values (a holder's time must not reveal its
records), about 40 array passes per element. A simulation needs neither: its records are
synthetic and only the sums of the truncated gradients enter the M-step. ``truncated_sum``
evaluates the same function T(x) = s·E φ(x/s + |x/s| Z/√β_s) (docs/MATH.md (2.2)) from a
table of E φ(a) on a uniform grid of u = |a|/(1 + |a|) ∈ [0, 1] (u = 1 is |a| = ∞, the
limit for huge values), linearly interpolated. The sums read it through its odd extension
to u = a/(1 + |a|) ∈ [−1, 1] (``signed_table``), so no sign is restored: 13 array passes
a value, none of them a copysign or a mixed integer-float subtraction, the two costliest
of the 12 the positive table took (docs/PERFORMANCE.md, "One simulated study, second
pass").
E φ is smooth in u on the whole interval (analytic in 1/|a| near u = 1, see
``truncation``), so linear interpolation on ``CELLS`` cells misses it by at most
h²/8·max|f''|: 0.8–1.5e-8·s for β_s from 0.83 to 6.3 with 2¹³ cells, measured at the cells'
midpoints (``TABLE_ERROR``, 1e-7, checked against the exact form when the table is built
and in tests/common/test_truncation_sum.py): far below the privacy noise of any
simulated round (σ_r ≥ 1e-3·s for every calibrated mechanism), so the simulated sums
have the distribution of the exact ones to that precision. The table's values are
clipped to the certified bound ``truncation_bound(β_s)``, as the mechanisms clip T.

Used by ``ldpem.common.planning.fastsim`` only: never by an agent, never on real records.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_positive
from ldpem.common.core.truncation import _expected_phi
from ldpem.common.core.truncation_bound import truncation_bound

__all__ = ["CELLS", "TABLE_ERROR", "signed_table", "truncated_sum", "truncation_table"]

FloatArray = NDArray[np.float64]

#: Cells of the table in u = |a|/(1 + |a|) on [0, 1]. 2¹³: the signed table and its
#: slopes (2 × 2¹⁴ + 2 floats, 256 KiB) stay in a core's L2 cache, which the gathers of
#: a simulation read at random; with 2¹⁶ cells (2 MiB signed) the gathers of a study
#: took 1.8× as long as the positive half's (1 MiB) had.
CELLS = 1 << 13
#: Largest |interpolated − exact| of E φ (in units of s) the table may have at the check
#: points (the midpoints of its cells, where linear interpolation errs most); else the
#: table is refused (ValueError).
TABLE_ERROR = 1e-7
#: Elements handled at once: the temporaries of one block stay in the cache.
_BLOCK = 1 << 14


@lru_cache(maxsize=8)
def truncation_table(sqrt_beta: float) -> tuple[FloatArray, FloatArray]:
    """E φ at the grid points u_j = j/CELLS (j = 0 … CELLS) and each cell's slope, for
    β_s = ``sqrt_beta``²: ``values`` (CELLS + 1,) and ``slopes`` (CELLS + 1,) with a
    zero last slope (u = 1 lands exactly on the last point). ValueError when the
    interpolant misses the exact form by more than ``TABLE_ERROR`` at a cell's midpoint."""
    sqrt_beta = check_positive("sqrt_beta", sqrt_beta)
    u = np.arange(CELLS + 1, dtype=np.float64) / CELLS
    mid = (np.arange(CELLS, dtype=np.float64) + 0.5) / CELLS
    with np.errstate(divide="ignore"):  # u = 1 is |a| = inf, which the exact form takes
        values = _expected_phi(u / (1.0 - u), sqrt_beta)
    exact_mid = _expected_phi(mid / (1.0 - mid), sqrt_beta)
    bound = truncation_bound(sqrt_beta * sqrt_beta)
    np.clip(values, -bound, bound, out=values)
    slopes = np.append(np.diff(values), 0.0)
    error = float(np.max(np.abs(values[:-1] + 0.5 * slopes[:-1] - exact_mid)))
    if not error <= TABLE_ERROR:
        raise ValueError(
            f"the truncation table misses the exact form by {error:.3g} at beta_s = "
            f"{sqrt_beta * sqrt_beta!r} (limit {TABLE_ERROR:g})"
        )
    return values, slopes


@lru_cache(maxsize=8)
def signed_table(sqrt_beta: float) -> tuple[FloatArray, FloatArray]:
    """``truncation_table``'s interpolant extended oddly to u ∈ [−1, 1]: E φ at the grid
    points u_k = k/CELLS − 1 (k = 0 … 2·CELLS) and each cell's slope, shapes
    (2·CELLS + 1,), with a zero last slope. The negative half mirrors the checked positive
    one exactly (value for value, slope for slope), so it interpolates −E φ(|a|) at the
    same points to the same error."""
    values, _ = truncation_table(sqrt_beta)
    signed = np.concatenate([-values[:0:-1], values])
    return signed, np.append(np.diff(signed), 0.0)


def truncated_sum(values: FloatArray, s: float, beta_s: float) -> FloatArray:
    """Σ_i T(x_i) over the rows of ``values`` (module docstring): (n, d) → (d,).

    Parameters
    ----------
    values : array of shape (n, d)
        The per-record gradients; NaN counts as 0 and ±inf as the limit, as in
        ``smoothed_truncation``. Overwritten (the caller's scratch).
    s : float
        The truncation scale (> 0).
    beta_s : float
        The smoothing precision β_s (> 0).

    Returns
    -------
    array of shape (d,)
        Σ_i T(x_i), each term within ±s·truncation_bound(β_s).
    """
    s = check_positive("s", s)
    table, slopes = signed_table(math.sqrt(check_positive("beta_s", beta_s)))
    n, d = values.shape
    total = np.zeros(d)
    rows = max(1, min(n, _BLOCK // max(d, 1)))
    # Scratch of one block, reused: the position in the table, its cell and the terms.
    u = np.empty((rows, d))
    index = np.empty((rows, d), dtype=np.intp)
    part = np.empty((rows, d))
    ones = np.ones(rows)
    for start in range(0, n, rows):
        x = values[start : start + rows]
        block = _block_sum(x, s, table, slopes, (u, index, part, ones))
        if not np.all(np.isfinite(block)):
            # Rare: NaN counts as 0, and ±inf as the largest float, whose position is
            # the table's end (u = ±1, s + |x| rounding to |x|): the limit at ±inf.
            np.nan_to_num(x, copy=False, nan=0.0, posinf=_HUGE, neginf=-_HUGE)
            block = _block_sum(x, s, table, slopes, (u, index, part, ones))
        total += block
    total *= s
    return total


#: The largest float: ±inf is summed as it (``truncated_sum``).
_HUGE = float(np.finfo(np.float64).max)


def _block_sum(
    x: FloatArray,
    s: float,
    table: FloatArray,
    slopes: FloatArray,
    scratch: tuple[FloatArray, NDArray[np.intp], FloatArray, FloatArray],
) -> FloatArray:
    """Σ_i E φ(x_i/s) over the rows of the block ``x`` (m, d) → (d,), in units of s: the
    signed table at CELLS·(1 + x/(s + |x|)), interpolated (its rounding, ~1e-16·CELLS in
    u, is far below the table's error). NaN or ±inf in ``x`` make the sum NaN (x/(s + |x|)
    is NaN there)."""
    m = x.shape[0]
    u, index, part, ones = scratch[0][:m], scratch[1][:m], scratch[2][:m], scratch[3][:m]
    np.abs(x, out=u)
    u += s
    with np.errstate(invalid="ignore"):  # ±inf/inf: NaN, which the caller handles
        np.divide(x, u, out=u)
    u *= CELLS
    u += CELLS
    np.floor(u, out=part)
    with np.errstate(invalid="ignore"):  # NaN (cast to any index, clipped below)
        index[...] = part
    u -= part  # the position within the cell, in [0, 1)
    slopes.take(index, out=part, mode="clip")
    part *= u
    part += table.take(index, mode="clip")
    summed: FloatArray = ones @ part
    return summed
