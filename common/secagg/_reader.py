"""Reading a secure-aggregation message's JSON-able dictionary (``messages.py``), field by field.

``_Reader`` accepts exactly a message's fields and raises SecAggRefused (one line, naming
the message and the field) for anything else; ``frozen`` and ``encoded`` are the two sides of
a message's name → bytes mappings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ldpem.common.secagg._encoding import b64decode, b64encode, bitmap_members
from ldpem.common.secagg.errors import SecAggRefused
from ldpem.common.secagg.keys import check_holder_name

__all__ = ["MAX_RUN_ID", "Reader", "encoded", "frozen", "refuse"]

MAX_RUN_ID = 256


def refuse(kind: str, problem: str) -> SecAggRefused:
    return SecAggRefused(f"{kind}: {problem}")


class Reader:
    """Typed access to the fields of one message's dictionary, refusing what is not it."""

    def __init__(self, data: object, kind: str, fields: Sequence[str]) -> None:
        self.kind = kind
        if not isinstance(data, dict):
            raise refuse(kind, "expected an object")
        missing = [f for f in fields if f not in data]
        unknown = sorted(str(f) for f in data if f not in fields)
        if missing:
            raise refuse(kind, f"missing field {missing[0]!r}")
        if unknown:
            raise refuse(kind, f"unknown field {unknown[0][:40]!r}")
        self.data: dict[str, Any] = data

    def text(self, field: str) -> str:
        value = self.data[field]
        if not isinstance(value, str) or not value or len(value) > MAX_RUN_ID:
            raise refuse(self.kind, f"field {field!r} must be text of 1 to {MAX_RUN_ID} chars")
        return value

    def integer(self, field: str) -> int:
        value = self.data[field]
        if isinstance(value, bool) or not isinstance(value, int):
            raise refuse(self.kind, f"field {field!r} must be an integer")
        return value

    def name(self, field: str) -> str:
        return self._name(self.data[field], f"field {field!r}")

    def _name(self, value: object, where: str) -> str:
        try:
            return check_holder_name(value)
        except ValueError as error:
            raise refuse(self.kind, f"{where} is {error}") from None

    def blob(self, field: str, length: int | None) -> bytes:
        try:
            return b64decode(self.data[field], f"field {field!r}", length)
        except ValueError as error:
            raise refuse(self.kind, str(error)) from None

    def names(self, field: str) -> tuple[str, ...]:
        value = self.data[field]
        if not isinstance(value, list):
            raise refuse(self.kind, f"field {field!r} must be a list of holder names")
        names = tuple(self._name(v, f"an entry of {field!r}") for v in value)
        if len(set(names)) != len(names):
            raise refuse(self.kind, f"field {field!r} names a holder twice")
        return names

    def blobs(self, field: str, length: int) -> Mapping[str, bytes]:
        value = self.data[field]
        if not isinstance(value, dict):
            raise refuse(self.kind, f"field {field!r} must be an object of holder names")
        out = {}
        for name, text in value.items():
            self._name(name, f"a name in {field!r}")
            try:
                out[name] = b64decode(text, f"the entry {name!r} of {field!r}", length)
            except ValueError as error:
                raise refuse(self.kind, str(error)) from None
        return frozen(out)

    def members(self, field: str, order: tuple[str, ...]) -> tuple[str, ...]:
        """The names of the bitmap in ``field`` over ``order`` (``_encoding.bitmap``)."""
        data = self.blob(field, None)
        try:
            return bitmap_members(data, order, f"field {field!r}")
        except ValueError as error:
            raise refuse(self.kind, str(error)) from None

    def entries(self, field: str, length: int) -> list[tuple[str, bytes, object]]:
        """The entries ``[name, base64]`` or ``[name, base64, extra]`` in ``field``, each
        value ``length`` bytes, with their extra (None when absent; the caller reads it).
        A list, not an object: a JSON object with a repeated name keeps the last silently."""
        out = []
        for entry in self.items(field):
            if not isinstance(entry, list) or len(entry) not in (2, 3):
                raise refuse(self.kind, f"an entry of {field!r} must be [name, base64(, extra)]")
            name = self._name(entry[0], f"a name in {field!r}")
            try:
                value = b64decode(entry[1], f"the entry {name!r} of {field!r}", length)
            except ValueError as error:
                raise refuse(self.kind, str(error)) from None
            out.append((name, value, entry[2] if len(entry) == 3 else None))
        return out

    def items(self, field: str) -> list[Any]:
        value = self.data[field]
        if not isinstance(value, list):
            raise refuse(self.kind, f"field {field!r} must be a list")
        return value


def frozen(mapping: Mapping[str, bytes]) -> Mapping[str, bytes]:
    """A read-only copy in name order (equal messages compare and serialize equal)."""
    return MappingProxyType(dict(sorted(mapping.items())))


def encoded(mapping: Mapping[str, bytes]) -> dict[str, str]:
    return {name: b64encode(value) for name, value in mapping.items()}
