"""Masks: pairwise masks cancel, keys bind run/round/pair, the PRG is uniform mod 2^bits,
and the inputs are checked residues."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.secagg.masks import (
    add,
    agree,
    as_residues,
    expand,
    mask_sign,
    pair_seed,
    pairwise_mask,
    self_mask,
    subtract,
)


def x25519() -> tuple[X25519PrivateKey, bytes]:
    key = X25519PrivateKey.from_private_bytes(secrets.token_bytes(32))
    return key, key.public_key().public_bytes_raw()


@pytest.mark.parametrize("bits", [1, 13, 32, 64])
def test_the_two_masks_of_a_pair_cancel(bits: int) -> None:
    (ku, pu), (kv, pv) = x25519(), x25519()
    m_uv = pairwise_mask(ku, pv, run_id="r", round_=3, own="a", peer="b", length=50, bits=bits)
    m_vu = pairwise_mask(kv, pu, run_id="r", round_=3, own="b", peer="a", length=50, bits=bits)
    assert not np.array_equal(m_uv, np.zeros(50, dtype=np.uint64))
    np.testing.assert_array_equal(add(m_uv, m_vu, bits), np.zeros(50, dtype=np.uint64))
    assert int(m_uv.max()) < 2**bits


def test_the_masks_of_many_holders_cancel_in_the_sum() -> None:
    names = [f"h{i}" for i in range(7)]
    keys = {n: x25519() for n in names}
    total = np.zeros(9, dtype=np.uint64)
    for u in names:
        for v in names:
            if u != v:
                mask = pairwise_mask(
                    keys[u][0], keys[v][1], run_id="r", round_=0, own=u, peer=v, length=9, bits=20
                )
                total = add(total, mask, 20)
    np.testing.assert_array_equal(total, np.zeros(9, dtype=np.uint64))


def test_the_sign_convention() -> None:
    assert mask_sign("a", "b") == 1 and mask_sign("b", "a") == -1
    assert mask_sign("B", "a") == 1  # code-point order: upper case first
    with pytest.raises(ValueError):
        mask_sign("a", "a")


def test_the_pair_key_is_symmetric_and_binds_run_round_and_names() -> None:
    secret = secrets.token_bytes(32)
    key = pair_seed(secret, "run", 1, "a", "b")
    assert key == pair_seed(secret, "run", 1, "b", "a")
    others = {
        pair_seed(secret, "run2", 1, "a", "b"),
        pair_seed(secret, "run", 2, "a", "b"),
        pair_seed(secret, "run", 1, "a", "c"),
        pair_seed(secret, "run1", 1, "a", "b"),
        pair_seed(secrets.token_bytes(32), "run", 1, "a", "b"),
    }
    assert key not in others and len(others) == 5


def test_the_agreement_is_x25519_and_refuses_a_low_order_key() -> None:
    (ku, pu), (kv, pv) = x25519(), x25519()
    assert agree(ku, pv) == agree(kv, pu)
    with pytest.raises(ValueError):
        agree(ku, bytes(32))
    with pytest.raises(ValueError):
        agree(ku, bytes(31))


def test_the_self_mask_binds_its_holder_and_round() -> None:
    seed = secrets.token_bytes(32)

    def mask(round_: int = 0, name: str = "a", key: bytes = seed) -> bytes:
        return self_mask(key, run_id="r", round_=round_, name=name, length=8, bits=64).tobytes()

    assert mask() == mask()
    assert len({mask(), mask(round_=1), mask(name="b"), mask(key=secrets.token_bytes(32))}) == 4
    with pytest.raises(ValueError, match="32 bytes"):
        mask(key=seed[:16])


def test_expand_is_deterministic_and_a_prefix_of_itself() -> None:
    key = bytes(range(32))
    long, short = expand(key, 100, 64), expand(key, 10, 64)
    np.testing.assert_array_equal(long[:10], short)
    np.testing.assert_array_equal(expand(key, 100, 12), long & np.uint64(2**12 - 1))


@pytest.mark.parametrize("bits", [1, 3, 8])
def test_expand_is_uniform_modulo_2_bits(bits: int) -> None:
    """Chi-square goodness of fit over all 2^bits values (fixed key: deterministic)."""
    n = 200_000
    values = expand(bytes(range(32)), n, bits)
    counts = np.bincount(values.astype(np.int64), minlength=2**bits)
    expected = n / 2**bits
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = 2**bits - 1
    # Mean df, sd sqrt(2 df): 6 sd is far outside chance, well inside any bias.
    assert chi2 < df + 6 * (2 * df) ** 0.5 + 10


def test_the_top_bit_of_64_bit_residues_is_used() -> None:
    values = expand(bytes(range(32)), 10_000, 64)
    top = (values >> np.uint64(63)).astype(np.int64)
    assert 4_500 < top.sum() < 5_500


def test_residue_arithmetic_wraps() -> None:
    a = np.array([0, 5, 2**16 - 1], dtype=np.uint64)
    b = np.array([1, 5, 1], dtype=np.uint64)
    np.testing.assert_array_equal(subtract(a, b, 16), [2**16 - 1, 0, 2**16 - 2])
    np.testing.assert_array_equal(add(a, b, 16), [1, 10, 0])
    top = np.array([2**64 - 1], dtype=np.uint64)
    np.testing.assert_array_equal(add(top, top, 64), [2**64 - 2])


def test_inputs_are_lists_or_integer_arrays_of_residues() -> None:
    expected = np.array([0, 7, 2**64 - 1], dtype=np.uint64)
    np.testing.assert_array_equal(as_residues([0, 7, 2**64 - 1], 64), expected)
    np.testing.assert_array_equal(
        as_residues(np.array([0, 7, 2**64 - 1], dtype=object), 64), expected
    )
    np.testing.assert_array_equal(as_residues(np.array([0, 7], dtype=np.int64), 3), [0, 7])
    assert as_residues(np.array([3], dtype=np.int64), 2).dtype == np.uint64


@pytest.mark.parametrize(
    ("values", "bits", "message"),
    [
        ([-1], 8, r"in \[0, 2\^8\)"),
        ([256], 8, r"in \[0, 2\^8\)"),
        (np.array([-1], dtype=np.int64), 64, r"in \[0, 2\^64\)"),
        ([2**64], 64, r"in \[0, 2\^64\)"),
        ([1.0], 8, "integers, got float"),
        (np.array([1.0]), 8, "integers, got float64"),
        ([True], 8, "not booleans"),
        (np.zeros((2, 2), dtype=np.int64), 8, "a vector"),
        ([1], 0, "bits must be"),
        ([1], 65, "bits must be"),
    ],
)
def test_inputs_that_are_not_residues_are_refused(values: object, bits: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        as_residues(values, bits)  # type: ignore[arg-type]
