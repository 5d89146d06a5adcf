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
    "combine",
    "combine_secret",
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


@lru_cache(maxsize=64)
def lagrange_at_zero(xs: tuple[int, ...], prime: int = PRIME) -> tuple[int, ...]:
    """The Lagrange coefficients λ_i with f(0) = Σ λ_i f(x_i) for every polynomial of
    degree < len(xs). Cached: an aggregator combines many secrets from the same holders.

    λ_i = Π_{j≠i} x_j / (x_j − x_i): O(t²) products, one modular inverse per coefficient.
    """
    if len(set(xs)) != len(xs):
        raise ShamirError("duplicate x-coordinates")
    coefficients = []
    for i, xi in enumerate(xs):
        numerator = 1
        denominator = 1
        for j, xj in enumerate(xs):
            if j != i:
                numerator = numerator * xj % prime
                denominator = denominator * (xj - xi) % prime
        coefficients.append(numerator * pow(denominator, -1, prime) % prime)
    return tuple(coefficients)


def _interpolate(shares: Sequence[Share], at: int, prime: int) -> int:
    """f(at) for the polynomial of degree < len(shares) through ``shares``."""
    shifted = tuple(s.x - at for s in shares)  # f(at) = g(0) with g(x) = f(x + at)
    weights = lagrange_at_zero(shifted, prime)
    return sum(w * s.y for w, s in zip(weights, shares, strict=True)) % prime


def combine(shares: Sequence[Share], threshold: int, *, prime: int = PRIME) -> int:
    """The secret of ``shares``: from the first ``threshold`` of them in x order; any
    further share must lie on the same polynomial (else ShamirError: a share was altered,
    or belongs to another secret)."""
    _check_threshold(threshold)
    for share in shares:
        _checked(share, prime)
    ordered = sorted(shares, key=lambda s: s.x)
    if len({s.x for s in ordered}) != len(ordered):
        raise ShamirError("two shares have the same x-coordinate")
    if len(ordered) < threshold:
        raise ShamirError(f"{len(ordered)} shares are fewer than the threshold {threshold}")
    basis, extra = ordered[:threshold], ordered[threshold:]
    for share in extra:
        if _interpolate(basis, share.x, prime) != share.y:
            raise ShamirError("the shares are not of one secret (an altered or foreign share)")
    return _interpolate(basis, 0, prime)


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
