"""Sums of smoothed truncations for simulations: Σ_i T(g_i) by one interpolation table.

The mechanisms truncate with ``truncation.smoothed_truncation``: exact to ~1e-13 and at a
cost per element that does not depend on the values (a holder's time must not reveal its
records), about 40 array passes per element. A simulation needs neither: its records are
synthetic and only the sums of the truncated gradients enter the M-step. ``truncated_sum``
evaluates the same function T(x) = s·E φ(x/s + |x/s| Z/√β_s) (docs/MATH.md (2.2)) from a
table of E φ(a) on a uniform grid of u = |a|/(1 + |a|) ∈ [0, 1] (u = 1 is |a| = ∞, the
limit for huge values), linearly interpolated, the sign restored: about 10 array passes.
E φ is smooth in u on the whole interval (analytic in 1/|a| near u = 1, see
``truncation``), so linear interpolation on ``CELLS`` cells misses it by at most
h²/8·max|f''| ≈ 1e-8·s (``TABLE_ERROR``, checked against the exact form when the table
is built and in tests/common/test_truncation_sum.py): far below the privacy noise of any
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

__all__ = ["CELLS", "TABLE_ERROR", "truncated_sum", "truncation_table"]

FloatArray = NDArray[np.float64]

#: Cells of the table in u = |a|/(1 + |a|) on [0, 1].
CELLS = 1 << 16
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
    table, slopes = truncation_table(math.sqrt(check_positive("beta_s", beta_s)))
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
        if not np.all(np.isfinite(block)):  # rare: NaN counts as 0 (only NaN gives NaN)
            np.copyto(x, 0.0, where=np.isnan(x))
            block = _block_sum(x, s, table, slopes, (u, index, part, ones))
        total += block
    total *= s
    return total


def _block_sum(
    x: FloatArray,
    s: float,
    table: FloatArray,
    slopes: FloatArray,
    scratch: tuple[FloatArray, NDArray[np.intp], FloatArray, FloatArray],
) -> FloatArray:
    """Σ_i E φ(x_i/s) over the rows of the block ``x`` (m, d) → (d,), in units of s:
    the table at CELLS·u = CELLS − CELLS·s/(s + |x|) (= CELLS·|x|/(s + |x|), exact at
    |x| = ∞, where u = 1; its rounding, ~1e-16·CELLS in u, is far below the table's error),
    interpolated and the sign restored. NaN in ``x`` makes the sum NaN."""
    m = x.shape[0]
    u, index, part, ones = scratch[0][:m], scratch[1][:m], scratch[2][:m], scratch[3][:m]
    np.abs(x, out=u)
    u += s
    np.divide(-CELLS * s, u, out=u)
    u += CELLS
    with np.errstate(invalid="ignore"):  # NaN (cast to any index, clipped below)
        index[...] = u
    u -= index  # the position within the cell, in [0, 1)
    slopes.take(index, out=part, mode="clip")
    part *= u
    part += table.take(index, mode="clip")
    np.copysign(part, x, out=part)
    summed: FloatArray = ones @ part
    return summed
