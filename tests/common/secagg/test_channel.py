"""The holder-to-holder channel: what u seals to v opens for v only, in its round only."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.secagg.channel import NONCE_BYTES, TAG_BYTES, channel_secret, open_sealed, seal


def keys() -> tuple[X25519PrivateKey, bytes]:
    key = X25519PrivateKey.from_private_bytes(secrets.token_bytes(32))
    return key, key.public_key().public_bytes_raw()


def sealed(secret: bytes, plaintext: bytes) -> bytes:
    """``plaintext`` sealed on the test's route: run "run", round 4, alice → bob."""
    return seal(secret, plaintext, run_id="run", round_=4, sender="alice", recipient="bob")


def opened(
    secret: bytes,
    ciphertext: bytes,
    run_id: str = "run",
    round_: int = 4,
    sender: str = "alice",
    recipient: str = "bob",
) -> bytes:
    return open_sealed(
        secret, ciphertext, run_id=run_id, round_=round_, sender=sender, recipient=recipient
    )


def test_what_alice_seals_to_bob_opens_for_bob() -> None:
    (ka, pa), (kb, pb) = keys(), keys()
    ciphertext = sealed(channel_secret(ka, pb), b"shares")
    assert len(ciphertext) == NONCE_BYTES + len(b"shares") + TAG_BYTES
    assert opened(channel_secret(kb, pa), ciphertext) == b"shares"


@pytest.mark.parametrize(
    "change",
    [
        {"run_id": "other"},
        {"round_": 5},
        {"sender": "bob", "recipient": "alice"},  # the other direction of the pair
        {"sender": "carol"},
        {"recipient": "carol"},
    ],
)
def test_a_ciphertext_opens_only_on_its_route(change: dict[str, Any]) -> None:
    (ka, _), (_, pb) = keys(), keys()
    secret = channel_secret(ka, pb)
    ciphertext = sealed(secret, b"shares")
    with pytest.raises(ValueError, match="does not authenticate"):
        opened(secret, ciphertext, **change)


def test_an_altered_or_short_ciphertext_does_not_open() -> None:
    (ka, _), (_, pb) = keys(), keys()
    secret = channel_secret(ka, pb)
    ciphertext = sealed(secret, b"shares")
    for position in (0, NONCE_BYTES, len(ciphertext) - 1):
        altered = bytearray(ciphertext)
        altered[position] ^= 1
        with pytest.raises(ValueError):
            opened(secret, bytes(altered))
    with pytest.raises(ValueError, match="too short"):
        opened(secret, bytes(ciphertext[:20]))


def test_another_pairs_secret_does_not_open_it() -> None:
    (ka, _), (_, pb), (kc, _) = keys(), keys(), keys()
    ciphertext = sealed(channel_secret(ka, pb), b"shares")
    with pytest.raises(ValueError):
        opened(channel_secret(kc, pb), ciphertext)


def test_two_seals_of_the_same_shares_differ() -> None:
    (ka, _), (_, pb) = keys(), keys()
    secret = channel_secret(ka, pb)
    assert sealed(secret, b"s") != sealed(secret, b"s")
