"""Shamir sharing: any t shares reconstruct, t − 1 shares are independent of the secret,
and duplicate, malformed or altered shares are errors."""

from __future__ import annotations

import itertools
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
    combine,
    combine_secret,
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
