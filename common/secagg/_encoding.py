"""Byte encodings shared by the secure-aggregation modules: base64 text, bindings and
bitmaps over a public order.

A *binding* is the unambiguous byte string that a signature, a key derivation or an AEAD's
associated data is computed over. Each part is prefixed with its length, so that no two
different lists of parts give the same bytes (a run id ``"a|b"`` and round ``1`` cannot be
confused with run id ``"a"`` and round ``"b|1"``, as they could with a separator).
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Iterable
from functools import lru_cache

import numpy as np

__all__ = [
    "b64decode",
    "b64encode",
    "binding",
    "bitmap",
    "bitmap_members",
    "order_digest",
    "positions",
]


def b64encode(data: bytes) -> str:
    """Standard base64 with padding, as text."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def b64decode(text: object, what: str, length: int | None = None) -> bytes:
    """The bytes of the standard base64 ``text``, or ValueError naming ``what``.

    Strict: characters outside the alphabet, missing padding and non-canonical encodings
    are refused, so one value has exactly one text (signatures and digests depend on it).
    The message never repeats the text: it may be a key pasted in the wrong place.
    """
    size = f"{length} bytes" if length is not None else "bytes"
    if not isinstance(text, str):
        raise ValueError(f"{what} is not base64 text of {size}")
    try:
        # strict_mode: only the alphabet, padding where it belongs; a non-ASCII str is a
        # ValueError. The C decoder alone: these are most of what a coordinator parses.
        data = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not base64 text of {size}") from None
    if b64encode(data) != text or (length is not None and len(data) != length):
        raise ValueError(f"{what} is not base64 text of {size}")
    return data


def _part(value: str | int | bytes) -> bytes:
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, bool):  # a bool is an int: refuse it rather than encode 1
        raise TypeError("a binding part cannot be a bool")
    elif isinstance(value, int):
        data = str(value).encode("ascii")
    else:
        data = value.encode("utf-8")
    return len(data).to_bytes(4, "big") + data


def binding(*parts: str | int | bytes) -> bytes:
    """The length-prefixed concatenation of ``parts`` (text as UTF-8, ints in decimal)."""
    return b"".join(_part(p) for p in parts)


@lru_cache(maxsize=8)
def positions(order: tuple[str, ...]) -> dict[str, int]:
    """Each name's 0-based position in ``order`` (built once per order: an aggregator
    encodes one message per holder over the same order)."""
    return {name: i for i, name in enumerate(order)}


def bitmap(members: Iterable[str], order: tuple[str, ...]) -> bytes:
    """The set ``members`` as ⌈len(order)/8⌉ bytes: bit i (most significant first within
    each byte) is set iff ``order[i]`` is a member; the spare bits of the last byte are 0.

    ValueError for a member outside ``order`` or named twice (a set has no repeats, and a
    bitmap could not say so)."""
    where = positions(order)
    bits = bytearray((len(order) + 7) // 8)
    for name in members:
        i = where.get(name)
        if i is None:
            raise ValueError(f"{name[:40]!r} is not in the order")
        mask = 0x80 >> (i & 7)
        if bits[i >> 3] & mask:
            raise ValueError(f"{name!r} is named twice")
        bits[i >> 3] |= mask
    return bytes(bits)


def bitmap_members(data: bytes, order: tuple[str, ...], what: str) -> tuple[str, ...]:
    """The members of ``bitmap`` ``data`` over ``order``, in that order; ValueError naming
    ``what`` unless it is exactly ⌈len(order)/8⌉ bytes with its spare bits 0 (a bit past
    the order would name nobody: refused rather than ignored, so that one set has exactly
    one bitmap, as signatures over it need)."""
    size = (len(order) + 7) // 8
    if len(data) != size:
        raise ValueError(
            f"{what} must be a bitmap of {size} bytes over {len(order)} names, got {len(data)}"
        )
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    if bits[len(order) :].any():
        raise ValueError(f"{what} sets a bit past the {len(order)} names of its order")
    return tuple(order[i] for i in np.flatnonzero(bits))


@lru_cache(maxsize=8)
def order_digest(order: tuple[str, ...]) -> bytes:
    """SHA-256 of the binding of ``order``: what a signature over a bitmap binds, so that
    the same bits cannot be read over another order."""
    return hashlib.sha256(binding(*order)).digest()
