"""Byte encodings shared by the secure-aggregation modules: base64 text and bindings.

A *binding* is the unambiguous byte string that a signature, a key derivation or an AEAD's
associated data is computed over. Each part is prefixed with its length, so that no two
different lists of parts give the same bytes (a run id ``"a|b"`` and round ``1`` cannot be
confused with run id ``"a"`` and round ``"b|1"``, as they could with a separator).
"""

from __future__ import annotations

import base64
import binascii

__all__ = ["b64decode", "b64encode", "binding"]


def b64encode(data: bytes) -> str:
    """Standard base64 with padding, as text."""
    return base64.b64encode(data).decode("ascii")


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
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
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
