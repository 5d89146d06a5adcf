"""The holder-to-holder channel: Shamir shares encrypted for one recipient, relayed by the
aggregator, which can neither read nor alter them.

Sender u and recipient v agree on X25519(c_sk_u, c_pk_v) with their fresh per-round
*encryption* keys (c, distinct from the masking keys s). HKDF-SHA256 derives a
ChaCha20-Poly1305 key with ``info`` binding the run, the round, the sender and the
recipient *in that order*: the key of u → v differs from the key of v → u although the
agreement is symmetric, so each key encrypts one message. The associated data binds the
same four values, so a ciphertext moved to another round, run or pair fails to decrypt.
The 12-byte nonce is random all the same (one key, one message: any nonce would do; a
random one needs no argument). A ciphertext is nonce ‖ AEAD output.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ldpem.common.secagg._encoding import binding
from ldpem.common.secagg.masks import agree

__all__ = ["NONCE_BYTES", "TAG_BYTES", "channel_secret", "open_sealed", "seal"]

NONCE_BYTES = 12
TAG_BYTES = 16
_KEY_INFO = "ldpem secagg share channel v1"
_AD = "ldpem secagg shares v1"


def _key(
    shared_secret: bytes, run_id: str, round_: int, sender: str, recipient: str
) -> ChaCha20Poly1305:
    info = binding(_KEY_INFO, run_id, round_, sender, recipient)
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared_secret)
    return ChaCha20Poly1305(key)


def channel_secret(own_encryption_key: X25519PrivateKey, peer_encryption_key: bytes) -> bytes:
    """X25519(c_sk_own, c_pk_peer): the same for both directions of a pair, so a holder
    computes it once per peer for the shares it sends and those it receives."""
    return agree(own_encryption_key, peer_encryption_key)


def _associated(run_id: str, round_: int, sender: str, recipient: str) -> bytes:
    return binding(_AD, run_id, round_, sender, recipient)


def seal(
    shared_secret: bytes,
    plaintext: bytes,
    *,
    run_id: str,
    round_: int,
    sender: str,
    recipient: str,
) -> bytes:
    """``plaintext`` encrypted and authenticated from ``sender`` to ``recipient``, who share
    ``shared_secret`` (``channel_secret`` of their encryption keys)."""
    aead = _key(shared_secret, run_id, round_, sender, recipient)
    nonce = os.urandom(NONCE_BYTES)
    return nonce + aead.encrypt(nonce, plaintext, _associated(run_id, round_, sender, recipient))


def open_sealed(
    shared_secret: bytes,
    ciphertext: bytes,
    *,
    run_id: str,
    round_: int,
    sender: str,
    recipient: str,
) -> bytes:
    """The plaintext of ``ciphertext`` from ``sender`` to ``recipient``; ValueError when it
    was altered, or sealed for another pair, round or run."""
    if len(ciphertext) < NONCE_BYTES + TAG_BYTES:
        raise ValueError("the ciphertext is too short")
    aead = _key(shared_secret, run_id, round_, sender, recipient)
    nonce, body = ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:]
    try:
        return aead.decrypt(nonce, body, _associated(run_id, round_, sender, recipient))
    except InvalidTag:
        raise ValueError("the ciphertext does not authenticate") from None
