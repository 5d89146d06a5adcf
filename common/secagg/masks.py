"""Masks of secure aggregation: pairwise masks from X25519 agreements, and self-masks.

Arithmetic is on vectors of integers modulo 2^bits (1 ≤ bits ≤ 64), held in numpy uint64
arrays: uint64 addition and subtraction wrap modulo 2^64, and 2^bits divides 2^64, so
reducing with ``& (2^bits − 1)`` at the end gives the result modulo 2^bits exactly.

**Pairwise masks.** Holders u and v agree on s_uv = X25519(s_sk_u, s_pk_v) =
X25519(s_sk_v, s_pk_u). HKDF-SHA256 turns it into a 32-byte PRG key, with ``info`` binding
the run id, the round and the two names in canonical (sorted) order, so that both derive
the same key and no key serves two rounds, runs or pairs. Sign convention: u adds
+PRG(s_uv) when v > u (by name, code-point order) and −PRG(s_uv) when v < u, so each pair's
masks cancel in the sum.

**Self-mask.** Each holder also adds PRG(b_u) for a fresh 32-byte seed b_u (HKDF binding
the run, round and the holder's name, as above). It is what hides a holder's input when
the aggregator later reconstructs the pairwise key of that holder because it was (or was
reported) dropped: the aggregator may learn b_u or s_sk_u, never both.

**The PRG** is the ChaCha20 keystream (``cryptography``, i.e. OpenSSL) under the derived
key with a zero nonce: every key is used for exactly one keystream, so no nonce can repeat.
It is chosen over HKDF-expand, which would also do for small vectors, because HKDF-expand
stops at 255·32 bytes (1020 values) and ChaCha20 has no such limit, at a few ns a byte.
The keystream is read as little-endian 64-bit words and each word keeps its low ``bits``
bits: a uniform 64-bit word taken modulo 2^bits is exactly uniform (2^bits divides 2^64),
so there is no modulo bias and nothing is rejected.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from numpy.typing import NDArray

from ldpem.common.secagg._encoding import binding

__all__ = [
    "MAX_BITS",
    "X25519_KEY_BYTES",
    "Vector",
    "add",
    "agree",
    "as_residues",
    "expand",
    "mask_sign",
    "pair_seed",
    "pairwise_mask",
    "self_mask",
    "self_mask_key",
    "subtract",
]

#: uint64 arithmetic holds at most 64-bit residues.
MAX_BITS = 64
X25519_KEY_BYTES = 32
_PAIR_INFO = "ldpem secagg pairwise mask v1"
_SELF_INFO = "ldpem secagg self mask v1"
#: ChaCha20 in ``cryptography`` takes a 16-byte nonce (counter and nonce); zero is safe
#: because each derived key produces one keystream only.
_ZERO_NONCE = bytes(16)

#: A vector of residues modulo 2^bits.
Vector = NDArray[np.uint64]


def _check_bits(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MAX_BITS:
        raise ValueError(f"bits must be an integer in [1, {MAX_BITS}], got {bits!r}")
    return bits


def _reduce(vector: Vector, bits: int) -> Vector:
    return vector & np.uint64((1 << bits) - 1)


def as_residues(values: Iterable[object], bits: int) -> Vector:
    """``values`` (a list of ints, or a 1-D numpy integer or object array) as a uint64
    vector; ValueError unless every value is an integer in [0, 2^bits)."""
    _check_bits(bits)
    if isinstance(values, np.ndarray) and values.ndim != 1:
        raise ValueError(f"the input must be a vector, got an array of shape {values.shape}")
    ints = []
    for value in values:
        if isinstance(value, bool | np.bool_):
            raise ValueError("the input must hold integers, not booleans")
        if not isinstance(value, int | np.integer):  # a float is refused, never rounded
            raise ValueError(f"the input must hold integers, got {type(value).__name__}")
        ints.append(int(value))
    if any(not 0 <= v < 1 << bits for v in ints):
        raise ValueError(f"every input value must be in [0, 2^{bits})")
    return np.array(ints, dtype=np.uint64)


def add(a: Vector, b: Vector, bits: int) -> Vector:
    """a + b modulo 2^bits."""
    return _reduce(a + b, bits)


def subtract(a: Vector, b: Vector, bits: int) -> Vector:
    """a − b modulo 2^bits."""
    return _reduce(a - b, bits)


def expand(key: bytes, length: int, bits: int) -> Vector:
    """``length`` uniform residues modulo 2^bits from the 32-byte PRG key ``key``."""
    _check_bits(bits)
    if len(key) != 32:
        raise ValueError(f"a PRG key is 32 bytes, got {len(key)}")
    encryptor = Cipher(algorithms.ChaCha20(key, _ZERO_NONCE), mode=None).encryptor()
    stream = encryptor.update(bytes(8 * length))
    return _reduce(np.frombuffer(stream, dtype="<u8").astype(np.uint64), bits)


def _hkdf(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def agree(private_key: X25519PrivateKey, peer_public: bytes) -> bytes:
    """X25519(private_key, peer_public); ValueError for a key that is not 32 bytes or
    gives the all-zero secret (a low-order point: OpenSSL refuses it)."""
    if len(peer_public) != X25519_KEY_BYTES:
        raise ValueError(f"an X25519 public key is {X25519_KEY_BYTES} bytes")
    return private_key.exchange(X25519PublicKey.from_public_bytes(peer_public))


def mask_sign(own: str, peer: str) -> int:
    """+1 if ``own`` adds the pair's mask (peer sorts after it), −1 if it subtracts it."""
    if own == peer:
        raise ValueError("a holder has no pairwise mask with itself")
    return 1 if peer > own else -1


def pair_seed(shared_secret: bytes, run_id: str, round_: int, a: str, b: str) -> bytes:
    """The pair's 32-byte PRG key: HKDF-SHA256 of the agreed secret, info binding the run,
    the round and the two names in canonical order (the same for both holders)."""
    low, high = sorted((a, b))
    return _hkdf(shared_secret, binding(_PAIR_INFO, run_id, round_, low, high))


def pairwise_mask(
    own_private: X25519PrivateKey,
    peer_public: bytes,
    *,
    run_id: str,
    round_: int,
    own: str,
    peer: str,
    length: int,
    bits: int,
) -> Vector:
    """±PRG(s_uv) as holder ``own`` adds it (sign by mask_sign), modulo 2^bits."""
    key = pair_seed(agree(own_private, peer_public), run_id, round_, own, peer)
    mask = expand(key, length, bits)
    return mask if mask_sign(own, peer) > 0 else subtract(np.zeros_like(mask), mask, bits)


def self_mask_key(seed: bytes, run_id: str, round_: int, name: str) -> bytes:
    """The PRG key of holder ``name``'s self-mask from its 32-byte seed b."""
    if len(seed) != 32:
        raise ValueError(f"a self-mask seed is 32 bytes, got {len(seed)}")
    return _hkdf(seed, binding(_SELF_INFO, run_id, round_, name))


def self_mask(
    seed: bytes, *, run_id: str, round_: int, name: str, length: int, bits: int
) -> Vector:
    """PRG(b) of holder ``name``: ``length`` residues modulo 2^bits."""
    return expand(self_mask_key(seed, run_id, round_, name), length, bits)
