"""t-of-n Shamir secret sharing over the prime field GF(2^255 − 19).

A secret s is the constant term of a random polynomial f of degree t − 1 over the field;
share i is (x_i, f(x_i)). Any t shares determine f, hence s = f(0) (Lagrange interpolation
at 0); any t − 1 shares are uniformly distributed whatever s is, so they say nothing
about it (tests/common/secagg/test_shamir.py checks both, the second exhaustively in a
small field).

Why this field and this code rather than a library:

* The secrets (a self-mask seed, an X25519 private key) have at most 255 bits of entropy
  and are encoded as field elements below the prime (``common/secagg/dealing.py``: the
  seed is drawn uniformly below it, the key's 251 free bits are shared). p = 2^255 − 19
  is Curve25519's field prime, known prime without a primality test of our own, and a
  share is 32 bytes: half the 66 bytes of the Mersenne prime 2^521 − 1 used before, which
  held any 256-bit string (every holder receives and reveals a share per neighbour and
  kind: the field sets most of a holder's bytes per round, docs/SECAGG_GRAPH.md).
* pycryptodome's ``Shamir`` works in GF(2^128), i.e. on 16-byte secrets: a 32-byte secret
  would be split in two halves shared separately, it produces shares at x = 1..n only
  (our x-coordinates are roster positions, a subset of them), and it would add a
  dependency for twenty lines of polynomial arithmetic. Sharing is not a cipher: the
  secrecy is information-theoretic and rests only on the coefficients being uniform,
  which come from ``secrets.randbelow``.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = [
    "PRIME",
    "SECRET_BYTES",
    "SHARE_BYTES",
    "ShamirError",
    "Share",
    "barycentric_weights",
    "combine",
    "combine_secret",
    "decode",
    "lagrange_at",
    "lagrange_at_zero",
    "split",
    "split_secret",
]

#: The field's modulus: Curve25519's field prime 2^255 − 19.
PRIME = (1 << 255) - 19
#: The secrets shared here (seeds and encoded X25519 private keys): big-endian field
#: elements, below PRIME.
SECRET_BYTES = 32
#: A share's value, big-endian: enough bytes for any field element.
SHARE_BYTES = (PRIME.bit_length() + 7) // 8
#: Horner steps between two reductions modulo PRIME: the x-coordinates are small (roster
#: positions), so the accumulator grows by a few bits per step and one reduction every few
#: steps is cheaper than one per step (a holder shares two secrets with each of up to
#: ~1000 participants: this loop is its largest cost).
_LAZY_STEPS = 6
#: Bits of a product of x-coordinate differences computed in int64 (``_difference_products``).
_GROUP_BITS = 62


class ShamirError(ValueError):
    """Shares that cannot give a secret: too few, duplicated, malformed or inconsistent."""


@dataclass(frozen=True)
class Share:
    """One share: the point (x, y) of the secret's polynomial, 1 ≤ x and 0 ≤ y < PRIME."""

    x: int
    y: int

    def y_bytes(self) -> bytes:
        """The share's value as SHARE_BYTES big-endian bytes (x is implied by its holder)."""
        return self.y.to_bytes(SHARE_BYTES, "big")

    @classmethod
    def from_bytes(cls, x: int, data: bytes) -> Share:
        """The share at ``x`` whose value is ``data`` (SHARE_BYTES big-endian bytes)."""
        if len(data) != SHARE_BYTES:
            raise ShamirError(f"a share's value is {SHARE_BYTES} bytes, got {len(data)}")
        return _checked(cls(x, int.from_bytes(data, "big")))


def _checked(share: Share, prime: int = PRIME) -> Share:
    x, y = share.x, share.y
    if type(x) is int and type(y) is int and 0 < x < prime and 0 <= y < prime:
        return share  # the common case, in two comparisons (an aggregator checks ~10⁵)
    if isinstance(share.x, bool) or not isinstance(share.x, int) or not 0 < share.x < prime:
        raise ShamirError("a share's x-coordinate must be an integer in [1, prime)")
    if isinstance(share.y, bool) or not isinstance(share.y, int) or not 0 <= share.y < prime:
        raise ShamirError("a share's value must be an integer in [0, prime)")
    return share


def _check_threshold(threshold: int) -> None:
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise ShamirError(f"the threshold must be an integer of at least 1, got {threshold!r}")


def _evaluate(coefficients: Sequence[int], xs: Sequence[int], prime: int) -> list[int]:
    """f(x) mod prime at every x of ``xs``, by Horner's rule on all points at once (numpy
    object arrays: the loop over points runs in C, one Python step per coefficient), with
    one reduction every _LAZY_STEPS steps (exact: the reductions only keep numbers small)."""
    points = np.array(xs, dtype=object)
    acc = np.zeros(len(points), dtype=object)
    for step, c in enumerate(reversed(coefficients), start=1):
        acc = acc * points + c
        if step % _LAZY_STEPS == 0:
            acc %= prime
    return [int(v) for v in acc % prime]


def split(secret: int, threshold: int, xs: Sequence[int], *, prime: int = PRIME) -> list[Share]:
    """Shares of the field element ``secret`` at the distinct x-coordinates ``xs``; any
    ``threshold`` of them give it back, fewer say nothing about it. ``prime``: the field
    (another one only for tests that enumerate a small field)."""
    _check_threshold(threshold)
    if not 0 <= secret < prime:
        raise ShamirError("the secret must be a field element")
    if len(set(xs)) != len(xs):
        raise ShamirError("the x-coordinates of the shares must be distinct")
    if len(xs) < threshold:
        raise ShamirError(f"{len(xs)} shares cannot reach the threshold {threshold}")
    for x in xs:
        _checked(Share(x, 0), prime)
    coefficients = [secret, *(secrets.randbelow(prime) for _ in range(threshold - 1))]
    return [Share(x, y) for x, y in zip(xs, _evaluate(coefficients, xs, prime), strict=True)]


def _difference_products(xs: Sequence[int], prime: int) -> list[int]:
    """D_i = Π_{j≠i} (x_i − x_j) mod prime for every i: the barycentric denominators.

    t(t − 1) exact products of small integers (roster positions, or their shifts): numpy
    multiplies the |differences| of each row in int64 groups of as many as fit in
    _GROUP_BITS bits, then ``math.prod`` (a C loop) the row's t/g group products; the sign
    is the parity of the negative differences. t²/g big-integer steps in C instead of t²
    modular steps in Python. x-coordinates too far apart for groups of two (no roster has
    them) take the plain loop."""
    low = min(xs)
    width = (max(xs) - low).bit_length()
    group = _GROUP_BITS // max(width, 1)
    if group < 2:
        products = []
        for i, xi in enumerate(xs):
            product = 1
            for j, xj in enumerate(xs):
                if j != i:
                    product = product * (xi - xj) % prime
            products.append(product)
        return products
    t = len(xs)
    points = np.array([x - low for x in xs], dtype=np.int64)  # 0 ≤ x − low < 2^width
    differences = points[:, None] - points[None, :]
    np.fill_diagonal(differences, 1)
    negatives = (differences < 0).sum(axis=1).tolist()
    columns = -(-t // group) * group
    padded = np.ones((t, columns), dtype=np.int64)
    padded[:, :t] = np.abs(differences)
    groups = padded.reshape(t, columns // group, group).prod(axis=2).tolist()
    return [
        (-1 if odd % 2 else 1) * math.prod(row) % prime
        for row, odd in zip(groups, negatives, strict=True)
    ]


def _inverses(values: Sequence[int], prime: int) -> list[int]:
    """v⁻¹ mod prime for every v of ``values`` with one modular inversion (Montgomery's
    trick: the prefix products, the inverse of their last, then back down, 3(n − 1)
    products). ShamirError if one is 0 mod prime."""
    prefixes = []
    running = 1
    for value in values:
        prefixes.append(running)  # the product of the values before this one
        running = running * value % prime
    try:
        inverse = pow(running, -1, prime)
    except ValueError:
        raise ShamirError("the x-coordinates are not distinct in the field") from None
    out = [0] * len(values)
    for i in range(len(values) - 1, -1, -1):
        out[i] = inverse * prefixes[i] % prime
        inverse = inverse * values[i] % prime
    return out


@lru_cache(maxsize=64)
def barycentric_weights(xs: tuple[int, ...], prime: int = PRIME) -> tuple[int, ...]:
    """w_i = 1 / Π_{j≠i} (x_i − x_j) mod prime: with them the Lagrange coefficient of x_i at
    any point a is λ_i(a) = w_i Π_{j≠i} (a − x_j) (``lagrange_at``), O(t) per point.
    O(t²) small-integer products and one modular inversion for all t (``_difference_products``,
    ``_inverses``). Cached per x-set (the full mesh combines every secret from the same
    responders; on the SecAgg+ graph each neighbourhood has its own)."""
    if len(set(xs)) != len(xs):
        raise ShamirError("duplicate x-coordinates")
    return tuple(_inverses(_difference_products(xs, prime), prime))


def lagrange_at(
    xs: tuple[int, ...], at: int, prime: int = PRIME, *, weights: Sequence[int] | None = None
) -> list[int]:
    """The Lagrange coefficients λ_i(at) with f(at) = Σ λ_i f(x_i) for every polynomial of
    degree < len(xs): λ_i(at) = w_i Π_{j≠i} (at − x_j) (``barycentric_weights``), the
    products from prefix and suffix products, about 4t modular products."""
    if weights is None:
        weights = barycentric_weights(xs, prime)
    factors = [(at - x) % prime for x in xs]
    prefixes = []
    running = 1
    for factor in factors:
        prefixes.append(running)  # Π_{j<i} (at − x_j)
        running = running * factor % prime
    out = [0] * len(xs)
    suffix = 1  # Π_{j>i} (at − x_j)
    for i in range(len(xs) - 1, -1, -1):
        out[i] = weights[i] * prefixes[i] % prime * suffix % prime
        suffix = suffix * factors[i] % prime
    return out


@lru_cache(maxsize=64)
def lagrange_at_zero(xs: tuple[int, ...], prime: int = PRIME) -> tuple[int, ...]:
    """The Lagrange coefficients λ_i with f(0) = Σ λ_i f(x_i) for every polynomial of
    degree < len(xs), i.e. λ_i = Π_{j≠i} x_j / (x_j − x_i) = w_i Π_{j≠i} (−x_j), with w_i
    the barycentric weights and Π_{j≠i} x_j = (Π_j x_j) / x_i, an exact integer division
    (t modular products besides the weights' 3t). Cached: the full mesh combines many
    secrets from the same holders."""
    if 0 in xs:  # f(0) is a given value: λ is 1 there, 0 elsewhere
        return tuple(lagrange_at(xs, 0, prime))
    weights = barycentric_weights(xs, prime)
    product = math.prod(xs)
    sign = -1 if (len(xs) - 1) % 2 else 1
    return tuple(sign * (product // x) * w % prime for x, w in zip(xs, weights, strict=True))


def _dot(coefficients: Sequence[int], shares: Sequence[Share], prime: int) -> int:
    return sum(c * s.y for c, s in zip(coefficients, shares, strict=True)) % prime


def combine(shares: Sequence[Share], threshold: int, *, prime: int = PRIME) -> int:
    """The secret of ``shares``: from the first ``threshold`` of them in x order; any
    further share must lie on the same polynomial (else ShamirError: a share was altered,
    or belongs to another secret). The basis's barycentric weights serve both the secret
    (at 0) and each further share's check (at its x)."""
    _check_threshold(threshold)
    for share in shares:
        _checked(share, prime)
    ordered = sorted(shares, key=lambda s: s.x)
    if len({s.x for s in ordered}) != len(ordered):
        raise ShamirError("two shares have the same x-coordinate")
    if len(ordered) < threshold:
        raise ShamirError(f"{len(ordered)} shares are fewer than the threshold {threshold}")
    basis, extra = ordered[:threshold], ordered[threshold:]
    xs = tuple(s.x for s in basis)
    for share in extra:
        if _dot(lagrange_at(xs, share.x, prime), basis, prime) != share.y:
            raise ShamirError("the shares are not of one secret (an altered or foreign share)")
    return _dot(lagrange_at_zero(xs, prime), basis, prime)


def split_secret(secret: bytes, threshold: int, xs: Sequence[int]) -> list[Share]:
    """Shares of a SECRET_BYTES-byte secret, a big-endian field element (ShamirError if
    it is PRIME or more)."""
    if len(secret) != SECRET_BYTES:
        raise ShamirError(f"a secret is {SECRET_BYTES} bytes, got {len(secret)}")
    return split(int.from_bytes(secret, "big"), threshold, xs)


def combine_secret(shares: Sequence[Share], threshold: int) -> bytes:
    """The SECRET_BYTES-byte secret of ``shares`` (every field element is one: whether it
    is the dealer's is for its commitment to say, ``dealing.py``)."""
    return combine(shares, threshold).to_bytes(SECRET_BYTES, "big")


# Decoding shares some of which are wrong (a dealer that signed shares not on one
# polynomial, aggregator.py): Shamir shares are a Reed–Solomon codeword, and Gao's
# algorithm (S. Gao, "A new algorithm for decoding Reed-Solomon codes", 2003) recovers f
# from n shares of which at most (n − t)/2 are wrong. Polynomials are coefficient lists,
# lowest degree first, without trailing zeros ([] is the zero polynomial).


def _trim(p: list[int]) -> list[int]:
    while p and p[-1] == 0:
        p.pop()
    return p


def _sub(a: Sequence[int], b: Sequence[int], prime: int) -> list[int]:
    out = [0] * max(len(a), len(b))
    for i, v in enumerate(a):
        out[i] = v
    for i, v in enumerate(b):
        out[i] = (out[i] - v) % prime
    return _trim(out)


def _mul(a: Sequence[int], b: Sequence[int], prime: int) -> list[int]:
    if not a or not b:
        return []
    out = [0] * (len(a) + len(b) - 1)
    for i, u in enumerate(a):
        if u:
            for j, v in enumerate(b):
                out[i + j] += u * v
    return _trim([v % prime for v in out])


def _divmod(a: Sequence[int], b: Sequence[int], prime: int) -> tuple[list[int], list[int]]:
    """(q, r) with a = q·b + r and deg r < deg b (b non-zero)."""
    remainder = list(a)
    inverse = pow(b[-1], prime - 2, prime)
    quotient = [0] * max(len(a) - len(b) + 1, 0)
    for shift in range(len(a) - len(b), -1, -1):
        factor = remainder[shift + len(b) - 1] * inverse % prime
        quotient[shift] = factor
        if factor:
            for j, v in enumerate(b):
                remainder[shift + j] = (remainder[shift + j] - factor * v) % prime
    return _trim(quotient), _trim(remainder[: len(b) - 1])


def decode(shares: Sequence[Share], threshold: int, *, prime: int = PRIME) -> int | None:
    """f(0) of the polynomial of degree < ``threshold`` that agrees with all but at most
    ⌊(n − threshold)/2⌋ of the n ``shares`` (Gao's algorithm), or None when there is none:
    too many wrong shares to tell which are right. O(n²) field products; used only when a
    dealer's shares do not combine to its commitment, never in an honest round."""
    _check_threshold(threshold)
    points = [_checked(s, prime) for s in shares]
    n = len(points)
    if n < threshold:
        return None
    xs = tuple(s.x for s in points)
    weights = barycentric_weights(xs, prime)
    vanishing = [1]  # g0 = Π (X − x_i)
    for x in xs:
        vanishing = _mul(vanishing, [(-x) % prime, 1], prime)
    interpolated = [0] * n  # g1: degree < n through every share
    for x, w, s in zip(xs, weights, points, strict=True):
        quotient, _ = _divmod(vanishing, [(-x) % prime, 1], prime)
        factor = s.y * w % prime
        for i, v in enumerate(quotient):
            interpolated[i] = (interpolated[i] + factor * v) % prime
    r_prev, r_cur = vanishing, _trim(interpolated)
    v_prev: list[int] = []
    v_cur = [1]
    bound = (n + threshold) / 2
    while len(r_cur) - 1 >= bound:
        q, r = _divmod(r_prev, r_cur, prime)
        r_prev, r_cur = r_cur, r
        v_prev, v_cur = v_cur, _sub(v_prev, _mul(q, v_cur, prime), prime)
    if not v_cur:
        return None
    f, remainder = _divmod(r_cur, v_cur, prime)
    if remainder or len(f) > threshold:
        return None
    return f[0] if f else 0
