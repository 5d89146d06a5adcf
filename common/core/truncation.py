"""Catoni's soft truncation and its Gaussian-smoothed form T(x) (docs/MATH.md, section 2).

The smoothed truncation of a value ``x`` with scale ``s`` and smoothing ``beta_s`` is

    T(x) = s · E_η φ((x + η x) / s),   η ~ N(0, 1/β_s)                     (MATH (2.2))
         = s · E_Z φ(a + b Z),          a = x/s,  b = |x| / (s √β_s),  Z ~ N(0, 1)

with φ(u) = u − u³/6 on [−√2, √2] and ±2√2/3 outside (MATH (2.1)), so |T(x)| ≤ s·2√2/3.

The paper's closed form (docs/MATH.md §2) is exact but cancels catastrophically when |a| is large
(its a³ term against Ĉ): in float64 it returns −64 at a = 1e6, which would void the privacy
guarantee. Here E φ(a + bZ) is evaluated by one of three forms, each used only where it is
well-conditioned:

* ``small``: max(|a|, b) ≤ 0.1. Z almost never leaves the polynomial piece
  (P < 1e-35), so E φ = a − (a³ + 3ab²)/6, the full-line moments.
* ``closed``: |a| ≤ 3 and b ≤ 3. Truncated-normal moments of Z on the inner interval, the
  same function as the closed form; every term is O(10), so the rounding error is ~1e-14.
* ``quadrature``: everything else. Integration by parts gives a form with no cancellation,

      E φ(U) = 2√2/3 − ∫_{−√2}^{√2} (1 − u²/2) · P(U < u) du,

  whose integrand is non-negative and bounded by 1. Outside the other two regions the
  step of P(U > u) (at u = a, width b) is either ≥ 1.58 away from the interval or wider
  than 3, so the integrand is smooth and 48-point Gauss–Legendre is exact to ~1e-15.
  The arguments are formed as u·√β_s/a − √β_s (for a > 0), so a = inf (x/s
  overflowing) is handled exactly.

All three are evaluated at |a| and the sign restored, so T is exactly odd.

Speed and constant cost: for a given β_s, E φ depends on |a| alone. On first use of a
β_s, the exact form above is tabulated twice as piecewise polynomials (10 Chebyshev nodes
per cell): in |a| on [0, 16) (256 cells) and in t = 1/|a| on [0, 1/16] (16 cells; E φ is
analytic in t there, by the by-parts form with P(U < u) = Φ(√β_s(u·t − 1)), and t = 0
is a = ±∞). Each is checked against the exact form at both ends and 3 interior points
per cell and used only if all agree to 1e-13 (they do for β_s ∈ [0.5, 100], which holds
every β_s = √log(d/ζ) with d ≤ 10⁵ and ζ ∈ [1e-12, 0.5], i.e. [0.83, 6.3]). Every
element then takes the same operations — one Horner pass on the cell of one table or
the other, selected by np.where, and the near-zero series — so the time a holder takes
does not reveal how many of its values are large, NaN or infinite (docs/PERFORMANCE.md).
Where a table fails its check, the exact form is used instead, itself branch-free (all
three forms on every element, selected): ~1 µs per element, 30–50× slower, but equally
value-independent.

The result is finally clipped to [−s·2√2/3, s·2√2/3]: mathematically a no-op, it makes
the bound the privacy proof relies on hold under any floating-point rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtr

from ldpem.common.core._validation import check_positive
from ldpem.common.core.truncation_bound import truncation_bound

__all__ = ["TRUNCATION_BOUND", "catoni_phi", "smoothed_truncation"]

SQRT2 = math.sqrt(2.0)
#: sup |φ| = 2√2/3; the smoothed truncation is bounded by s times this.
TRUNCATION_BOUND = 2.0 * SQRT2 / 3.0
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

_SMALL = 0.1
_CLOSED_A = 3.0
_CLOSED_B = 3.0
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(48)
# Nodes and weights mapped onto [−√2, √2]; the weight already holds (1 − u²/2).
_QUAD_U = SQRT2 * _GL_NODES
_QUAD_W = SQRT2 * _GL_WEIGHTS * (1.0 - 0.5 * _QUAD_U**2)

# Elements are processed in blocks so that the temporaries stay in cache.
_BLOCK = 1 << 14

# Piecewise-polynomial table of E φ as a function of |a| (see module docstring).
_TABLE_DEGREE = 10  # coefficients per cell
_TABLE_CELL = 1.0 / 16.0
_TABLE_END = 16.0
_CELLS = round(_TABLE_END / _TABLE_CELL)
_TABLE_TOLERANCE = 1e-13
# Second table, in t = 1/|a| on [0, 1/16] (|a| ≥ 16), 16 cells.
_FAR_CELLS = 16
_FAR_CELL = (1.0 / _TABLE_END) / _FAR_CELLS


def catoni_phi(u: ArrayLike) -> NDArray[np.float64]:
    """Catoni's soft truncation φ (MATH (2.1)), elementwise; |φ(u)| ≤ 2√2/3.

    Parameters
    ----------
    u : array-like of any shape

    Returns
    -------
    phi : array of the shape of ``u``
    """
    u = np.asarray(u, dtype=np.float64)
    inner = u - u**3 / 6.0
    return np.where(u > SQRT2, TRUNCATION_BOUND, np.where(u < -SQRT2, -TRUNCATION_BOUND, inner))


def smoothed_truncation(values: ArrayLike, s: float, beta_s: float) -> NDArray[np.float64]:
    """Noise-smoothed soft truncation T(x) = s·E_η φ((x+ηx)/s), η ~ N(0, 1/β_s) (MATH (2.2)).

    Parameters
    ----------
    values : array_like of float, any shape
        The values x to truncate (e.g. an (n, d) array of per-record gradients).
    s : float > 0
        Scale; the output lies in [−s·2√2/3, s·2√2/3].
    beta_s : float > 0
        Precision of the multiplicative smoothing noise (the paper's β).

    Returns
    -------
    ndarray of float64, same shape as ``values``.

    Every value maps to a bounded output, non-finite ones included: ±inf to the limit
    ±s·E φ at a = ±∞ (the value huge finite x tend to) and NaN to 0. A gradient that
    overflows must not make the mechanism refuse: whether a report is sent would then
    reveal whether the record met the condition a hostile coordinator encoded in β or σ.

    Raises
    ------
    ValueError
        If ``s`` or ``beta_s`` is not a finite positive number (never for any ``values``).
    """
    s = check_positive("s", s)
    beta_s = check_positive("beta_s", beta_s)
    x = np.asarray(values, dtype=np.float64)
    flat = x.ravel()
    out = np.empty_like(flat)
    sqrt_beta = math.sqrt(beta_s)
    for start in range(0, flat.size, _BLOCK):
        stop = min(start + _BLOCK, flat.size)
        with np.errstate(over="ignore", invalid="ignore"):  # x/s = ±inf is handled exactly
            a = flat[start:stop] / s
        np.copyto(a, 0.0, where=np.isnan(a))
        out[start:stop] = _expected_phi_fast(a, sqrt_beta)
    out *= s
    bound = s * truncation_bound(beta_s)  # certified sup |T|/s (truncation_bound.py)
    np.clip(out, -bound, bound, out=out)
    return out.reshape(x.shape)


def _expected_phi_fast(a: NDArray[np.float64], sqrt_beta: float) -> NDArray[np.float64]:
    """E φ(a + bZ) for a 1-D block of ``a`` (±inf allowed, no NaN), at a cost per element
    that does not depend on the values: both verified tables and the near-zero series are
    evaluated for every element and the right one selected, so how long a holder takes
    cannot tell a coordinator how many of its records are large. Without verified tables
    (β_s outside their range) the exact form, itself branch-free, does the same."""
    table = _tables(sqrt_beta)
    if table is None:
        return _expected_phi(a, sqrt_beta)
    abs_a = np.abs(a)
    # |a| < 16: cell and local variable of the table in |a|; min(|a|, 16) so that huge |a|
    # cannot overflow. |a| ≥ 16: those of the table in t = 1/|a| ∈ [0, 1/16], whose cells
    # follow (|a| = inf is t = 0, exactly). One Horner pass then serves both.
    near_index, near_local = _cell(np.minimum(abs_a, _TABLE_END) * (1.0 / _TABLE_CELL), _CELLS)
    t = 1.0 / np.maximum(abs_a, _TABLE_END)
    far_index, far_local = _cell(t * (1.0 / _FAR_CELL), _FAR_CELLS)
    inside = abs_a < _TABLE_END
    index = np.where(inside, near_index, far_index + _CELLS)
    local = np.where(inside, near_local, far_local)
    result: NDArray[np.float64] = table[_TABLE_DEGREE - 1].take(index)
    for k in range(_TABLE_DEGREE - 2, -1, -1):
        result *= local
        result += table[k].take(index)
    # Near 0 the series a − a(a² + 3b²)/6 is exact to 1e-35 and keeps T(x) ≈ x to full
    # relative precision for tiny x (and T(0) = 0 exactly), which the table cannot.
    small = abs_a <= _SMALL * min(1.0, sqrt_beta)
    # Only the small entries enter the series (others use 0), so b = |a|/√β_s ≤ 0.1 there
    # and nothing overflows even for a subnormal β_s.
    close = np.where(small, abs_a, 0.0)
    b = close / sqrt_beta
    series = close - close * (close * close + 3.0 * (b * b)) / 6.0
    result = np.where(small, series, result)
    signed: NDArray[np.float64] = np.copysign(result, a)
    return signed


def _cell(scaled: NDArray[np.float64], cells: int) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """Cell ⌊scaled⌋ (the last one for scaled = cells) and the local variable in [−1, 1]
    of ``scaled``, a position in cell units, 0 ≤ scaled ≤ cells."""
    index = np.minimum(scaled, cells - 1).astype(np.intp)
    local: NDArray[np.float64] = 2.0 * (scaled - index) - 1.0
    return index, local


@lru_cache(maxsize=32)
def _tables(sqrt_beta: float) -> NDArray[np.float64] | None:
    """Both verified tables of E φ for this β_s side by side, (degree, 256 + 16) — cells of
    |a| on [0, 16), then cells of t = 1/|a| on [0, 1/16] — or None if either misses the
    exact form by more than 1e-13 at a check point."""
    near = _table(sqrt_beta)
    far = _far_table(sqrt_beta)
    if near is None or far is None:
        return None
    return np.ascontiguousarray(np.concatenate([near, far], axis=1))


def _table(sqrt_beta: float) -> NDArray[np.float64] | None:
    """Monomial coefficients (degree, cells) of E φ on each cell of |a| ∈ [0, 16), in the
    cell's local variable t ∈ [−1, 1]; None if the interpolant misses the exact form by
    more than 1e-13 at any check point."""
    return _build_table(
        lambda points: _expected_phi(points, sqrt_beta),
        round(_TABLE_END / _TABLE_CELL),
        _TABLE_CELL,
    )


def _far_table(sqrt_beta: float) -> NDArray[np.float64] | None:
    """As ``_table`` for E φ as a function of t = 1/|a| on [0, 1/16] (|a| ≥ 16): by parts,
    E φ = 2√2/3 − ∫ (1 − u²/2) Φ(√β_s(u·t − 1)) du, analytic in t, and t = 0 is a = ∞."""

    def exact(t: NDArray[np.float64]) -> NDArray[np.float64]:
        with np.errstate(divide="ignore"):  # t = 0 is |a| = inf, which the exact form takes
            return _expected_phi(1.0 / t, sqrt_beta)

    return _build_table(exact, _FAR_CELLS, _FAR_CELL)


def _build_table(
    exact: Callable[[NDArray[np.float64]], NDArray[np.float64]], cells: int, width: float
) -> NDArray[np.float64] | None:
    """Chebyshev interpolants of ``exact`` on cells [k·width, (k+1)·width), k < ``cells``,
    as monomial coefficients (degree, cells) in each cell's local variable in [−1, 1];
    None unless they match ``exact`` to 1e-13 at both ends and 3 interior points of every
    cell (points that are not interpolation nodes)."""
    cheb = np.polynomial.chebyshev
    left = np.arange(cells) * width
    nodes = np.cos(np.pi * (np.arange(_TABLE_DEGREE) + 0.5) / _TABLE_DEGREE)
    points = left[:, None] + (nodes[None, :] + 1.0) * (width / 2.0)
    values = exact(points.ravel()).reshape(cells, _TABLE_DEGREE)
    cheb_coefficients = np.linalg.solve(cheb.chebvander(nodes, _TABLE_DEGREE - 1), values.T)
    to_monomial = np.zeros((_TABLE_DEGREE, _TABLE_DEGREE))
    for k in range(_TABLE_DEGREE):
        column = cheb.cheb2poly(np.eye(_TABLE_DEGREE)[k])
        to_monomial[: column.size, k] = column
    table = np.ascontiguousarray(to_monomial @ cheb_coefficients)

    local = np.array([-1.0, -0.5, 0.0, 0.5, 0.999, 1.0])
    check = (left[:, None] + (local[None, :] + 1.0) * (width / 2.0)).ravel()
    interpolated = np.polynomial.polynomial.polyval(local, table).ravel()
    if not np.max(np.abs(interpolated - exact(check))) <= _TABLE_TOLERANCE:
        return None
    return table


def _expected_phi(a: NDArray[np.float64], sqrt_beta: float) -> NDArray[np.float64]:
    """E φ(a + bZ) with b = |a|/√β_s, for a 1-D block of finite-or-±inf ``a``.

    φ is odd and Z symmetric, so E φ(−a + bZ) = −E φ(a + bZ): evaluate at |a| and restore
    the sign, which makes T exactly odd (no rounding bias between ±x).

    Branch-free: all three forms are evaluated for every element, each fed a harmless
    stand-in where another form applies, and the right one selected; so the cost per
    element does not depend on the values (see ``_expected_phi_fast``).
    """
    abs_a = np.abs(a)
    with np.errstate(over="ignore"):  # b = inf only routes the element to the quadrature
        b = abs_a / sqrt_beta

    small = (abs_a <= _SMALL) & (b <= _SMALL)
    closed = ~small & (abs_a <= _CLOSED_A) & (b <= _CLOSED_B)
    quad = ~(small | closed)

    a_small, b_small = np.where(small, abs_a, 0.0), np.where(small, b, 0.0)
    series = a_small - a_small * (a_small * a_small + 3.0 * b_small * b_small) / 6.0
    closed_form = _closed_form(np.where(closed, abs_a, 1.0), np.where(closed, b, 1.0))
    quadrature = _by_parts_quadrature(np.where(quad, abs_a, _TABLE_END), sqrt_beta)
    result: NDArray[np.float64] = np.where(small, series, np.where(closed, closed_form, quadrature))
    result *= np.sign(a)
    return result


def _closed_form(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """E φ(a + bZ) from truncated-normal moments; needs moderate |a|, b and b > 0."""
    lo = (-SQRT2 - a) / b
    hi = (SQRT2 - a) / b
    # For a huge β_s (b → 0), lo² overflows to inf and exp(−inf) = 0: the exact density.
    with np.errstate(over="ignore"):
        pdf_lo = _INV_SQRT_2PI * np.exp(-0.5 * lo * lo)
        pdf_hi = _INV_SQRT_2PI * np.exp(-0.5 * hi * hi)
    below = ndtr(lo)
    above = ndtr(-hi)
    # M_k = ∫_lo^hi z^k φ(z) dz
    m0 = 1.0 - below - above
    m1 = pdf_lo - pdf_hi
    lo_pdf = lo * pdf_lo
    hi_pdf = hi * pdf_hi
    m2 = m0 + lo_pdf - hi_pdf
    m3 = 2.0 * m1 + lo * lo_pdf - hi * hi_pdf
    # ψ(a + bz) = c0 + c1 z + c2 z² + c3 z³ with ψ(u) = u − u³/6
    a2 = a * a
    c0 = a - a * a2 / 6.0
    c1 = b * (1.0 - 0.5 * a2)
    c2 = -0.5 * a * b * b
    c3 = -(b * b * b) / 6.0
    result: NDArray[np.float64] = c0 * m0 + c1 * m1 + c2 * m2 + c3 * m3
    result += TRUNCATION_BOUND * (above - below)
    return result


def _by_parts_quadrature(a: NDArray[np.float64], sqrt_beta: float) -> NDArray[np.float64]:
    """E φ(U) = 2√2/3 − ∫ (1 − u²/2) P(U < u) du over [−√2, √2], by Gauss–Legendre; a > 0.

    For a > 0, P(U < u) = Φ((u − a)/b) = Φ(u·√β_s/a − √β_s): small when E φ is near its
    bound, so the subtraction loses nothing there.
    """
    # a = inf gives 1/b = 0, exactly the limit. Here a > 0.1·√β_s or a > 3, so no overflow.
    inv_b = sqrt_beta / a
    z = _QUAD_U[None, :] * inv_b[:, None] - sqrt_beta
    integral: NDArray[np.float64] = ndtr(z) @ _QUAD_W
    return TRUNCATION_BOUND - integral
