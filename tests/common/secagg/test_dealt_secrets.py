"""The secrets a holder deals in GF(2^255 − 19) (common/secagg/dealing.py): its seed b is
drawn below the prime, and its X25519 masking key is dealt as its clamped scalar's 251
free bits, rebuilt into a key with the same public key; a reconstructed value that is no
such key is refused."""

from __future__ import annotations

import secrets

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.secagg.dealing import masking_key_from_secret, masking_key_secret, new_seed
from ldpem.common.secagg.shamir import PRIME, combine_secret, split_secret


def public(private_key: bytes) -> bytes:
    return X25519PrivateKey.from_private_bytes(private_key).public_key().public_bytes_raw()


# All bits clear, all set, alternating, and keys whose free bits are the extremes.
EDGE_KEYS = [bytes(32), b"\xff" * 32, b"\xaa" * 32, b"\x55" * 32, bytes(31) + b"\x40"]


@pytest.mark.parametrize("raw", [*EDGE_KEYS, *(bytes.fromhex(f"{i:02x}" * 32) for i in (7, 200))])
def test_a_dealt_masking_key_rebuilds_a_key_with_the_same_public_key(raw: bytes) -> None:
    secret = masking_key_secret(raw)
    assert len(secret) == 32 and int.from_bytes(secret, "big") < 2**251 < PRIME
    rebuilt = masking_key_from_secret(secret)
    assert public(rebuilt) == public(raw)
    assert masking_key_secret(rebuilt) == secret  # the clamped key deals the same secret


def test_a_random_masking_key_survives_sharing_and_reconstruction() -> None:
    raw = X25519PrivateKey.generate().private_bytes_raw()
    shares = split_secret(masking_key_secret(raw), 3, [4, 9, 17, 30])
    assert public(masking_key_from_secret(combine_secret(shares[1:], 3))) == public(raw)


def test_the_free_bits_are_bits_3_to_253_of_the_little_endian_key() -> None:
    raw = ((2**251 - 1) << 3).to_bytes(32, "little")  # every free bit set, none other
    assert int.from_bytes(masking_key_secret(raw), "big") == 2**251 - 1
    clamped_away = (7 | 1 << 254 | 1 << 255).to_bytes(32, "little")  # only fixed bits
    assert int.from_bytes(masking_key_secret(clamped_away), "big") == 0


@pytest.mark.parametrize("k", [2**251, 2**254, PRIME - 1])
def test_a_value_over_251_bits_is_no_dealt_key(k: int) -> None:
    with pytest.raises(ValueError, match="251 bits in 32 bytes"):
        masking_key_from_secret(k.to_bytes(32, "big"))
    assert masking_key_from_secret((2**251 - 1).to_bytes(32, "big"))[31] == 0x7F


def test_lengths_are_checked() -> None:
    with pytest.raises(ValueError, match="X25519 private key is 32 bytes, got 31"):
        masking_key_secret(bytes(31))
    with pytest.raises(ValueError, match="251 bits in 32 bytes"):
        masking_key_from_secret(bytes(33))


def test_the_seed_is_drawn_below_the_prime_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    bounds: list[int] = []

    def randbelow(bound: int) -> int:
        bounds.append(bound)
        return bound - 1

    monkeypatch.setattr(secrets, "randbelow", randbelow)  # the module dealing.py draws from
    assert new_seed() == (PRIME - 1).to_bytes(32, "big")
    assert bounds == [PRIME]


def test_fresh_seeds_are_field_elements_and_differ() -> None:
    seeds = {new_seed() for _ in range(64)}
    assert len(seeds) == 64
    assert all(len(s) == 32 and int.from_bytes(s, "big") < PRIME for s in seeds)
