"""Shamir sharing: any t shares reconstruct, t − 1 shares are independent of the secret,
and duplicate, malformed or altered shares are errors."""

from __future__ import annotations

import itertools
import math
import random
import secrets
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpem.common.secagg.shamir import (
    PRIME,
    SECRET_BYTES,
    SHARE_BYTES,
    ShamirError,
    Share,
    barycentric_weights,
    combine,
    combine_secret,
    decode,
    lagrange_at,
    lagrange_at_zero,
    split,
    split_secret,
)


def test_the_field_is_curve25519s_prime_2_255_minus_19() -> None:
    assert PRIME == 2**255 - 19
    assert SHARE_BYTES == SECRET_BYTES == 32
    # Fermat's test for a few bases: a sanity check of the constant, not a proof (2^255 − 19
    # is Curve25519's field prime, RFC 7748).
    assert all(pow(a, PRIME - 1, PRIME) == 1 for a in (2, 3, 5, 7, 11))


@settings(max_examples=60, deadline=None)
@given(
    secret=st.integers(0, PRIME - 1).map(lambda v: v.to_bytes(32, "big")),
    threshold=st.integers(1, 6),
    extra=st.integers(0, 5),
    data=st.data(),
)
def test_any_t_of_n_shares_reconstruct_the_secret(
    secret: bytes, threshold: int, extra: int, data: st.DataObject
) -> None:
    n = threshold + extra
    xs = data.draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n, unique=True))
    shares = split_secret(secret, threshold, xs)
    chosen = data.draw(st.permutations(shares)).copy()[: data.draw(st.integers(threshold, n))]
    assert combine_secret(chosen, threshold) == secret
    subset = data.draw(st.lists(st.sampled_from(shares), min_size=threshold, unique=True))
    assert combine_secret(subset[:threshold], threshold) == secret


@settings(max_examples=30, deadline=None)
@given(secret=st.integers(0, PRIME - 1), threshold=st.integers(2, 5))
def test_shares_of_two_secrets_differ_below_the_threshold_only_by_chance(
    secret: int, threshold: int
) -> None:
    """t − 1 shares combined as if they were enough give a field element that is not the
    secret (but for a 1/p chance): they carry no usable information."""
    shares = split(secret, threshold, list(range(1, threshold + 1)))
    assert combine(shares[: threshold - 1], threshold - 1) != secret


def enumerated(values: list[int]) -> Iterator[int]:
    yield from values


@pytest.mark.parametrize(("prime", "threshold"), [(5, 2), (5, 3), (7, 3)])
def test_fewer_than_t_shares_are_uniform_whatever_the_secret(
    monkeypatch: pytest.MonkeyPatch, prime: int, threshold: int
) -> None:
    """Exhaustively in a small field: the real ``split``, with its random coefficients
    enumerated instead of drawn. For every secret, every combination of t − 1 share values
    (at x = 1..t−1) comes from exactly one choice of coefficients: their distribution is
    uniform and the same for every secret."""
    xs = list(range(1, prime))  # every non-zero point of the field
    per_secret = []
    for secret in range(prime):
        seen: Counter[tuple[int, ...]] = Counter()
        for coefficients in itertools.product(range(prime), repeat=threshold - 1):
            draws = enumerated(list(coefficients))
            monkeypatch.setattr(secrets, "randbelow", lambda _n, d=draws: next(d))
            shares = split(secret, threshold, xs, prime=prime)
            for subset in itertools.combinations(shares, threshold - 1):
                seen[tuple(s.y for s in subset)] += 1
            # And all of them reconstruct the secret (in the small field too).
            assert combine(shares, threshold, prime=prime) == secret
        per_secret.append(seen)
    subsets = len(list(itertools.combinations(xs, threshold - 1)))
    uniform = Counter(
        {values: subsets for values in itertools.product(range(prime), repeat=threshold - 1)}
    )
    assert all(seen == uniform for seen in per_secret)


def test_the_coefficients_come_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def spy(n: int) -> int:
        calls.append(n)
        return secrets.SystemRandom().randrange(n)

    monkeypatch.setattr(secrets, "randbelow", spy)
    split(5, 4, [1, 2, 3, 4])
    assert calls == [PRIME] * 3


def test_duplicate_shares_are_refused() -> None:
    shares = split(42, 2, [1, 2, 3])
    with pytest.raises(ShamirError, match="two shares have the same x-coordinate"):
        combine([shares[0], shares[0]], 2)
    with pytest.raises(ShamirError, match="must be distinct"):
        split(42, 2, [1, 1, 2])


def test_too_few_shares_are_refused() -> None:
    shares = split(42, 3, [1, 2, 3])
    with pytest.raises(ShamirError, match="2 shares are fewer than the threshold 3"):
        combine(shares[:2], 3)
    with pytest.raises(ShamirError, match="cannot reach the threshold"):
        split(42, 4, [1, 2, 3])


@pytest.mark.parametrize(
    "bad",
    [Share(0, 1), Share(-1, 1), Share(PRIME, 1), Share(1, PRIME), Share(1, -1), Share(True, 1)],
)
def test_malformed_shares_are_refused(bad: Share) -> None:
    good = split(42, 2, [2, 3])
    with pytest.raises(ShamirError):
        combine([bad, good[0]], 2)


def test_share_bytes_must_have_their_length_and_be_below_the_prime() -> None:
    with pytest.raises(ShamirError, match="32 bytes, got 31"):
        Share.from_bytes(1, bytes(31))
    with pytest.raises(ShamirError, match="32 bytes, got 66"):
        Share.from_bytes(1, bytes(66))  # a share of the former field GF(2^521 − 1)
    for too_large in (PRIME, PRIME + 1, 2**256 - 1):
        with pytest.raises(ShamirError, match=r"in \[0, prime\)"):
            Share.from_bytes(1, too_large.to_bytes(32, "big"))
    assert Share.from_bytes(1, (PRIME - 1).to_bytes(32, "big")).y == PRIME - 1
    share = split(42, 1, [9])[0]
    assert Share.from_bytes(9, share.y_bytes()) == share


def test_an_altered_extra_share_is_detected() -> None:
    shares = split(42, 3, [1, 2, 3, 4])
    altered = [*shares[:3], Share(4, (shares[3].y + 1) % PRIME)]
    with pytest.raises(ShamirError, match="not of one secret"):
        combine(altered, 3)
    foreign = split(43, 3, [5, 6, 7])[0]  # a share of another secret, at a new x
    with pytest.raises(ShamirError, match="not of one secret"):
        combine([*shares[:3], foreign], 3)


def test_a_secret_must_be_32_bytes_below_the_prime() -> None:
    largest = (PRIME - 1).to_bytes(32, "big")
    assert combine_secret(split_secret(largest, 2, [1, 2]), 2) == largest
    for outside in (PRIME, 2**256 - 1):
        with pytest.raises(ShamirError, match="the secret must be a field element"):
            split_secret(outside.to_bytes(32, "big"), 2, [1, 2])
    with pytest.raises(ShamirError, match="a secret is 32 bytes"):
        split_secret(bytes(31), 2, [1, 2])


def test_threshold_must_be_a_positive_integer() -> None:
    for bad in (0, -1, True):
        with pytest.raises(ShamirError, match="threshold"):
            split(1, bad, [1, 2])


def textbook_lagrange(xs: tuple[int, ...], at: int, prime: int = PRIME) -> list[int]:
    """λ_i(at) = Π_{j≠i} (at − x_j) / (x_i − x_j) mod prime, one inverse per coefficient:
    the definition the fast weights (barycentric, one batched inversion) must reproduce."""
    out = []
    for i, xi in enumerate(xs):
        numerator = denominator = 1
        for j, xj in enumerate(xs):
            if j != i:
                numerator = numerator * (at - xj) % prime
                denominator = denominator * (xi - xj) % prime
        out.append(numerator * pow(denominator, -1, prime) % prime)
    return out


@settings(max_examples=80, deadline=None)
@given(
    xs=st.one_of(
        st.lists(st.integers(1, 1000), min_size=1, max_size=40, unique=True),
        st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=12, unique=True),
        st.lists(st.integers(1, PRIME - 1), min_size=1, max_size=8, unique=True),
    ),
    at=st.integers(-(2**20), 2**20),
)
def test_the_fast_lagrange_weights_are_the_textbook_ones(xs: list[int], at: int) -> None:
    """Small roster positions (the int64 groups), spreads past 62 bits and whole-field
    x-coordinates (the plain loop), negative ones (shifted points), at 0, at any point and
    at a point of the set."""
    points = tuple(xs)
    assert list(lagrange_at_zero(points)) == textbook_lagrange(points, 0)
    assert lagrange_at(points, at) == textbook_lagrange(points, at)
    assert lagrange_at(points, points[-1]) == textbook_lagrange(points, points[-1])
    weights = barycentric_weights(points)
    assert all(w * math.prod(xi - xj for xj in points if xj != xi) % PRIME == 1
               for w, xi in zip(weights, points, strict=True))  # fmt: skip


@pytest.mark.parametrize(("roster", "t"), [(1000, 87), (10_000, 109), (2**31, 40), (2**32, 40)])
def test_the_fast_weights_at_neighbourhood_sizes(roster: int, t: int) -> None:
    """The graph's (K, t_k) of docs/SECAGG_GRAPH.md, and spreads of 31 and 32 bits (the
    last that int64 groups of two hold, and the first that takes the plain loop)."""
    rng = random.Random(roster)
    for _ in range(3):
        xs = tuple(sorted({1, roster, *rng.sample(range(2, roster), t - 2)}))
        assert list(lagrange_at_zero(xs)) == textbook_lagrange(xs, 0)
        at = rng.randrange(1, roster + 1)
        assert lagrange_at(xs, at) == textbook_lagrange(xs, at)


def test_the_fast_weights_in_a_small_field() -> None:
    for prime in (5, 7, 13):
        for size in range(1, prime):
            for xs in itertools.combinations(range(1, prime), size):
                for at in range(prime):
                    assert lagrange_at(xs, at, prime) == textbook_lagrange(xs, at, prime)


def test_lagrange_weights_need_distinct_x_coordinates_and_take_zero() -> None:
    with pytest.raises(ShamirError, match="duplicate"):
        lagrange_at_zero((3, 5, 3))
    assert list(lagrange_at_zero((0, 3, 5))) == textbook_lagrange((0, 3, 5), 0) == [1, 0, 0]
    with pytest.raises(ShamirError, match="not distinct in the field"):
        lagrange_at((1, 6), 0, 5)  # 6 ≡ 1 (mod 5)


def test_any_altered_share_of_a_neighbourhood_is_caught() -> None:
    """A graph neighbourhood at K = 1000 (t_k = 87 of k + 1 = 131 shares): with redundant
    shares, a share altered anywhere (in the basis or among the extras) is detected; the
    untouched shares give the secret."""
    rng = random.Random(29)
    xs = rng.sample(range(1, 1001), 131)
    secret = secrets.randbelow(PRIME).to_bytes(32, "big")  # a field element, as dealt seeds are
    shares = split_secret(secret, 87, xs)
    assert combine_secret(shares, 87) == secret
    ordered = sorted(shares, key=lambda s: s.x)
    for position in (0, 40, 86, 87, 130):
        altered = list(ordered)
        victim = altered[position]
        altered[position] = Share(victim.x, (victim.y + rng.randrange(1, PRIME)) % PRIME)
        with pytest.raises(ShamirError, match="not of one secret"):
            combine(altered, 87)
    with pytest.raises(ShamirError, match="86 shares are fewer than the threshold 87"):
        combine(ordered[:86], 87)


@pytest.mark.parametrize(("n", "t"), [(5, 3), (8, 5), (20, 11), (60, 31)])
def test_decode_corrects_up_to_half_the_spare_shares_and_no_more(n: int, t: int) -> None:
    """Shamir shares are a Reed–Solomon codeword: from n shares of which e ≤ (n − t)/2 are
    wrong (anywhere, any values), ``decode`` gives f(0); with one more wrong it returns
    None or another value, never silently the same secret from too little (the caller
    checks the result against the dealer's commitment)."""
    rng = random.Random(n * 1000 + t)
    secret = rng.randrange(PRIME)
    xs = rng.sample(range(1, 10 * n), n)
    shares = split(secret, t, xs)
    assert decode(shares, t) == secret  # no error
    most = (n - t) // 2
    wrong = rng.sample(range(n), most + 1)

    def spoilt(count: int) -> list[Share]:
        bad = set(wrong[:count])
        return [
            Share(s.x, (s.y + rng.randrange(1, PRIME)) % PRIME) if i in bad else s
            for i, s in enumerate(shares)
        ]

    assert decode(spoilt(most), t) == secret
    assert decode(spoilt(most + 1), t) != secret
    assert decode(shares[: t - 1], t) is None  # fewer than t: nothing to decode
