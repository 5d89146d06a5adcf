"""A holder's sum on an integer grid, its integer sensitivity and the aggregation's modulus
(docs/SECAGG.md, "Integer noise and quantization").

Secure aggregation adds integers modulo 2^k, so each holder sends its sum of truncated
contributions S = Σ_i c_i (|c_i| ≤ B per coordinate, B the mechanism's ``record_bound``)
as an integer Q on a grid of step γ, plus an integer noise share. Here:

* **The grid is a power of two**, γ = 2^-j, chosen from B alone (public): the smallest γ
  with 2B/γ ≥ 2^``SLACK_BITS``, so 2B/γ ∈ [2^10, 2^11). Then γ·q is an exact float64 for
  every integer |q| < 2^53, the float sum of such values (``math.fsum`` in the M-step) is the
  exact γ·Σq, and a federated run (integers mod 2^k, unmasked, times γ) gives the same
  float as the simulation, bit for bit.
* **The SUM is rounded, once** (round half to even): its rounding error is at most γ/2
  whatever the number of records, where rounding each record would add up to n·γ/2 of
  bias. To round the exact sum, not a float sum whose error grows with n, each
  contribution is first put on a grid 2^``FINE_BITS`` times finer (c/γ_f is exact in
  float64: γ_f is a power of two; rint is exact), the fine integers are added exactly
  (int64 per chunk, Python ints across chunks), and the exact fine sum F is rounded:
  Q = round(F / 2^30).
* **Integer sensitivity.** Replacing one record i by i' changes F by f_i − f_i', where
  |f_i − c_i/γ_f| ≤ 1/2, so |F − F'| ≤ 2B/γ_f + 1 per coordinate. |Q − F/2^30| ≤ 1/2 on
  both sides, so |Q − Q'| ≤ |F − F'|/2^30 + 1 ≤ 2B/γ + 2^-30 + 1, and since Q − Q' is an
  integer, Δ∞ = ⌊2B/γ + 2^-30⌋ + 1 per coordinate (computed exactly, with fractions);
  Δ₂ ≤ √d·Δ∞ and Δ₁ ≤ d·Δ∞. The "+ 1" is the rounding slack: the two sums can round in
  opposite directions. With 2B/γ ≥ 2^10 it costs at most 0.1% of the sensitivity.
* **The modulus** 2^k (``modulus_bits``) holds the round's integer sum, data and noise,
  in the signed range [−2^(k−1), 2^(k−1)) except with probability ``WRAP_FAILURE``, from
  public values: the round's record count, the holders, B, γ and the share's Skellam mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_count, check_positive

__all__ = [
    "EXACT_LIMIT",
    "FINE_BITS",
    "SLACK_BITS",
    "WRAP_FAILURE",
    "IntegerSensitivity",
    "dequantize",
    "fine_sum",
    "grid_step",
    "integer_sensitivity",
    "modulus_bits",
    "quantize_rows",
    "round_fine",
    "skellam_tail",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
#: An object array of Python ints (exact, unbounded): the fine sums across chunks.
ExactArray = NDArray[np.object_]

#: 2B/γ ≥ 2^SLACK_BITS: the rounding slack (+1) is at most 2^-10 of the sensitivity.
SLACK_BITS = 10
#: The fine grid γ_f = γ·2^-FINE_BITS on which each contribution is put before the exact sum.
FINE_BITS = 30
#: |integer| < 2^53: γ·integer is an exact float64, and so is the float sum of such values.
EXACT_LIMIT = 1 << 53
#: The probability that a round's integer sum leaves the modulus' signed range.
WRAP_FAILURE = 2.0**-40

_FINE = 1 << FINE_BITS
_HALF_FINE = 1 << (FINE_BITS - 1)
#: Fine integers of one chunk are summed in int64: |f| < 2^(SLACK_BITS + FINE_BITS) and a
#: chunk of at most 2^(62 − SLACK_BITS − FINE_BITS) rows cannot overflow.
_CHUNK_ROWS = 1 << (62 - SLACK_BITS - FINE_BITS)


def _grid_exponent(bound: float) -> int:
    """The j of γ = 2^-j: with B = m·2^e, m ∈ [1/2, 1) (``math.frexp``), j = SLACK_BITS − e
    gives 2B/γ = m·2^(SLACK_BITS + 1) ∈ [2^10, 2^11), the smallest γ with 2B/γ ≥ 2^10."""
    _, exponent = math.frexp(check_positive("bound", bound))
    return SLACK_BITS - exponent


def grid_step(bound: float) -> float:
    """γ = 2^-j for contributions bounded by ``bound`` = B per coordinate (module doc)."""
    return math.ldexp(1.0, -_grid_exponent(bound))


@dataclass(frozen=True)
class IntegerSensitivity:
    """How far one record can move a holder's quantized sum Q (replace-one), in grid units.

    ``linf`` is Δ∞ per coordinate; ``l1`` = d·Δ∞ and ``l2_squared`` = d·Δ∞² are exact
    integers; ``l2`` = √(l2_squared).
    """

    linf: int
    d: int

    @property
    def l1(self) -> int:
        return self.d * self.linf

    @property
    def l2_squared(self) -> int:
        return self.d * self.linf * self.linf

    @property
    def l2(self) -> float:
        return math.sqrt(self.l2_squared)


def integer_sensitivity(bound: float, grid: float, d: int) -> IntegerSensitivity:
    """Δ∞ = ⌊2B/γ + 2^-FINE_BITS⌋ + 1 for contributions bounded by ``bound`` = B on the grid
    ``grid`` = γ, in dimension ``d`` (module doc: the derivation)."""
    bound = check_positive("bound", bound)
    grid = check_positive("grid", grid)
    ratio = Fraction(2.0 * bound) / Fraction(grid) + Fraction(1, _FINE)
    return IntegerSensitivity(linf=math.floor(ratio) + 1, d=check_count("d", d))


def fine_sum(contributions: FloatArray, *, bound: float, grid: float) -> ExactArray:
    """Σ_i f_i, f_i = rint(c_i/γ_f) the contributions on the fine grid γ_f = γ·2^-30, exact.

    Parameters
    ----------
    contributions : array of shape (n, d)
        The records' contributions c_i, each coordinate in [−B, B] (clipped to it here:
        mathematically a no-op for a mechanism that keeps its ``record_bound``).
    bound : float
        B.
    grid : float
        γ, a power of two (``grid_step(B)``).

    Returns
    -------
    fine : object array of shape (d,)
        Python ints (unbounded: no overflow for any n).
    """
    rows = _rows(contributions)
    total = np.zeros(rows.shape[1], dtype=object)
    for start in range(0, rows.shape[0], _CHUNK_ROWS):
        fine = _fine(rows[start : start + _CHUNK_ROWS], bound=bound, grid=grid)
        total = total + fine.sum(axis=0).astype(object)
    return total


def quantize_rows(contributions: FloatArray, *, bound: float, grid: float) -> IntArray:
    """Each row's own quantized sum, round(f_i / 2^30) half to even: what ``round_fine``
    gives for the fine sum of that one record, vectorized (the privacy audit's releases).

    Parameters
    ----------
    contributions : array of shape (n, d)
        Contributions, each coordinate in [−B, B].
    bound : float
        B.
    grid : float
        γ, a power of two.

    Returns
    -------
    quantized : int64 array of shape (n, d)
    """
    fine = _fine(_rows(contributions), bound=bound, grid=grid)
    quotient = fine >> FINE_BITS  # floor division by 2^30, also for negative values
    remainder = fine & (_FINE - 1)
    up = (remainder > _HALF_FINE) | ((remainder == _HALF_FINE) & (quotient % 2 == 1))
    rounded: IntArray = quotient + up.astype(np.int64)
    return rounded


def _rows(contributions: FloatArray) -> FloatArray:
    rows = np.asarray(contributions, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"contributions must be an (n, d) array, got shape {rows.shape}")
    return rows


def _fine(rows: FloatArray, *, bound: float, grid: float) -> IntArray:
    """rint(c/γ_f) of each entry, int64 (|·| < 2^(SLACK_BITS + FINE_BITS))."""
    bound = check_positive("bound", bound)
    mantissa, exponent = math.frexp(check_positive("grid", grid))
    if mantissa != 0.5:
        raise ValueError(f"grid must be a power of two, got {grid!r}")
    if 2.0 * bound / grid >= 2.0 ** (SLACK_BITS + 1):
        raise ValueError(f"grid {grid!r} is coarser than grid_step({bound!r})")
    # NaN (never a mechanism's contribution) would become an arbitrary int64: 0 instead.
    part = np.clip(np.nan_to_num(rows, nan=0.0), -bound, bound)
    # c/γ_f = c·2^(FINE_BITS + 1 − exponent): a power-of-two scaling, exact, |c/γ_f| < 2^40;
    # rint of it is exact too.
    fine: IntArray = np.rint(np.ldexp(part, FINE_BITS + 1 - exponent)).astype(np.int64)
    return fine


def round_fine(fine: ExactArray) -> ExactArray:
    """Q = round(F / 2^FINE_BITS), half to even, of exact fine sums F (Python ints).

    Parameters
    ----------
    fine : object array of shape (d,)
        F, Python ints.

    Returns
    -------
    quantized : object array of shape (d,)
        Q, Python ints.
    """
    out = np.empty(len(fine), dtype=object)
    for index, value in enumerate(fine):
        quotient, remainder = divmod(int(value), _FINE)  # remainder in [0, 2^30)
        if remainder > _HALF_FINE or (remainder == _HALF_FINE and quotient % 2 == 1):
            quotient += 1
        out[index] = quotient
    return out


def dequantize(integers: ExactArray | IntArray, grid: float) -> FloatArray:
    """γ·q as float64, exact: ValueError unless every |q| < 2^53.

    Parameters
    ----------
    integers : array of shape (d,)
        q, Python ints or int64.
    grid : float
        γ, a power of two.

    Returns
    -------
    values : array of shape (d,)
    """
    values = [int(v) for v in integers]
    for value in values:
        if not -EXACT_LIMIT < value < EXACT_LIMIT:
            raise ValueError(f"an integer sum of {value} is not exact in float64 (|q| < 2^53)")
    return np.array(values, dtype=np.float64) * grid


def skellam_tail(mean: float, *, failure: float) -> int:
    """The least integer t ≥ 0 with P(|Z| > t) ≤ ``failure`` for Z = Poisson(λ) −
    Poisson(λ), λ = ``mean``, from the Chernoff bound.

    E e^{uZ} = exp(2λ(cosh u − 1)), so P(Z ≥ t) ≤ exp(2λ(cosh u − 1) − u t); at
    u = asinh(x), x = t/(2λ): log P(Z ≥ t) ≤ 2λ(√(1 + x²) − 1 − x·asinh(x)), decreasing in
    t. Two-sided: twice that.
    """
    mean = check_positive("mean", mean)
    if not 0.0 < failure < 1.0:
        raise ValueError(f"failure must be in (0, 1), got {failure!r}")
    target = math.log(failure / 2.0)

    def log_tail(t: float) -> float:
        x = t / (2.0 * mean)
        return 2.0 * mean * (math.sqrt(1.0 + x * x) - 1.0 - x * math.asinh(x))

    high = max(1.0, math.sqrt(mean))
    while log_tail(high) > target:
        high *= 2.0
    low = 0.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if log_tail(middle) > target:
            low = middle
        else:
            high = middle
        if high - low < 0.5:
            break
    return math.ceil(high)


def modulus_bits(
    *,
    records: int,
    holders: int,
    bound: float,
    grid: float,
    share_mean: float,
    d: int,
    failure: float = WRAP_FAILURE,
) -> int:
    """k such that the round's integer sum Σ_k (Q_k + Z_k) lies in [−2^(k−1), 2^(k−1))
    except with probability ``failure`` (per round, all coordinates together), from
    public values.

    Data: |Q_k| ≤ |F_k|/2^30 + 1/2 ≤ n_k(B/γ + 2^-31) + 1/2, so |Σ Q_k| ≤
    records·(B/γ + 2^-31) + holders/2, always. Noise: the shares of all ``holders`` sum to
    Poisson(Kλ) − Poisson(Kλ); ``skellam_tail`` bounds each coordinate with failure/d
    (a union bound over the d coordinates).

    Parameters
    ----------
    records : int
        The most records a round can sum (over all holders).
    holders : int
        K, the most holders whose shares the sum can hold.
    bound : float
        B, the contributions' bound per coordinate.
    grid : float
        γ.
    share_mean : float
        λ of one holder's share, Poisson(λ) − Poisson(λ).
    d : int
        Dimension.
    failure : float
        The probability of a wrap, in (0, 1).

    Returns
    -------
    k : int
        At most 54: ValueError when the sum could reach 2^53 (γ·q would not be exact).
    """
    records = check_count("records", records, minimum=0)
    holders = check_count("holders", holders)
    d = check_count("d", d)
    units = Fraction(check_positive("bound", bound)) / Fraction(check_positive("grid", grid))
    data = math.ceil(records * (units + Fraction(1, 2 * _FINE)) + Fraction(holders, 2))
    noise = skellam_tail(holders * check_positive("share_mean", share_mean), failure=failure / d)
    largest = data + noise
    if largest >= EXACT_LIMIT:
        raise ValueError(
            f"a round of {records} records from {holders} holders can reach the integer "
            f"{largest}, beyond 2^53: the float path would not be exact"
        )
    return largest.bit_length() + 1
