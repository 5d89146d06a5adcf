"""Holders' Ed25519 identity keys and the consortium's roster of them.

Each data holder has one long-lived Ed25519 signing key (``ldpem keys generate``). The
consortium collects the public keys out of band into a *roster*, name → public key, that
every holder pins. In each round a holder signs its fresh secure-aggregation keys with its
roster key, and accepts another participant only with a signature by *that participant's*
roster key. Without the roster, a coordinator could play every other holder itself (a
Sybil attack) and unmask the one real holder's input from the "sum".

The roster is JSON text::

    {"version": 1, "holders": {"hospital-a": "<base64 of 32 bytes>", ...}}

Its digest is the SHA-256 of its canonical JSON (sorted keys, no spaces, ASCII), in hex:
every holder signs the digest it pinned into each key advertisement, and runs can publish
it so that holders compare rosters by one short string. Errors name the entry (by name,
or by position when the name itself is malformed) and never repeat a key.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ldpem.common.secagg._encoding import b64decode, b64encode

__all__ = [
    "HOLDER_NAME_PATTERN",
    "PUBLIC_KEY_BYTES",
    "ROSTER_VERSION",
    "Roster",
    "RosterError",
    "check_holder_name",
    "decode_public_key",
    "encode_public_key",
    "generate_signing_key",
    "public_key_bytes",
    "signing_key_from_pem",
    "signing_key_to_pem",
]

#: A holder's name: the coordinator's hospital names (ldpem.common.wire, checked equal by
#: tests/common/secagg/test_keys.py), so a roster entry can be a run's hospital.
HOLDER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_NAME = re.compile(HOLDER_NAME_PATTERN)
#: Raw Ed25519 public keys are 32 bytes (RFC 8032).
PUBLIC_KEY_BYTES = 32
ROSTER_VERSION = 1


class RosterError(ValueError):
    """A roster that cannot be used; one line, naming the entry, never showing a key."""


def check_holder_name(name: object) -> str:
    """``name`` if it is a holder name, else ValueError (the name is not repeated: a
    malformed "name" may be a key pasted into the wrong field)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            "not a holder name (1 to 64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit)"
        )
    return name


def generate_signing_key() -> Ed25519PrivateKey:
    """A new Ed25519 signing key: its 32-byte seed (RFC 8032) from ``secrets``, the one
    source of randomness of secure aggregation."""
    return Ed25519PrivateKey.from_private_bytes(secrets.token_bytes(32))


def public_key_bytes(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    """The raw 32-byte public key of ``key`` (RFC 8032 encoding)."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def encode_public_key(raw: bytes) -> str:
    """The roster's text of a raw public key: standard base64 (44 characters)."""
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_BYTES} bytes, got {len(raw)}")
    return b64encode(raw)


def decode_public_key(text: object) -> bytes:
    """The raw public key of its roster text, or ValueError (which does not repeat it)."""
    return b64decode(text, "the public key", PUBLIC_KEY_BYTES)


def signing_key_to_pem(key: Ed25519PrivateKey) -> bytes:
    """The key file's content: unencrypted PKCS#8 PEM (readable by openssl; the file's
    protection is its 0600 mode, as for the coordinator's TLS key)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def signing_key_from_pem(text: str | bytes) -> Ed25519PrivateKey:
    """The Ed25519 key of a key file's content, or ValueError (which shows none of it)."""
    data = text.encode("ascii", "replace") if isinstance(text, str) else text
    try:
        key = serialization.load_pem_private_key(data.strip() + b"\n", password=None)
    except (ValueError, TypeError):
        raise ValueError("not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the private key is not an Ed25519 key")
    return key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members, refusing a repeated name (json keeps the last silently)."""
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            shown = name if _NAME.fullmatch(name) else "(a malformed name)"
            raise RosterError(f"roster: entry {shown!r} appears twice")
        out[name] = value
    return out


@dataclass(frozen=True)
class Roster(Mapping[str, bytes]):
    """The consortium's pinned map of holder name → raw 32-byte Ed25519 public key.

    A read-only mapping. ``names`` is sorted (code-point order); ``index(name)`` is the
    1-based position there, which secure aggregation uses as the holder's Shamir
    x-coordinate, the same for every holder because every holder pins the same roster.
    """

    keys_by_name: Mapping[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checked: dict[str, bytes] = {}
        owners: dict[bytes, str] = {}
        for position, (name, key) in enumerate(sorted(self.keys_by_name.items()), start=1):
            try:
                check_holder_name(name)
            except ValueError as error:
                raise RosterError(f"roster: entry {position}: the name is {error}") from None
            if not isinstance(key, bytes) or len(key) != PUBLIC_KEY_BYTES:
                raise RosterError(
                    f"roster: entry {name!r}: the public key is not {PUBLIC_KEY_BYTES} bytes"
                )
            if key in owners:
                # One key under two names would let one party count as two holders.
                raise RosterError(
                    f"roster: entries {owners[key]!r} and {name!r} have the same public key"
                )
            owners[key] = name
            checked[name] = key
        object.__setattr__(self, "keys_by_name", MappingProxyType(checked))

    # Mapping interface
    def __getitem__(self, name: str) -> bytes:
        return self.keys_by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.keys_by_name)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.keys_by_name))

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names, start=1)}

    def index(self, name: str) -> int:
        """The 1-based position of ``name`` in ``names`` (KeyError if not on the roster)."""
        return self._positions[name]

    @cached_property
    def _public_keys(self) -> dict[str, Ed25519PublicKey]:
        return {n: Ed25519PublicKey.from_public_bytes(k) for n, k in self.keys_by_name.items()}

    def verify(self, name: str, signature: bytes, message: bytes) -> bool:
        """Whether ``signature`` over ``message`` is by the roster key of ``name`` (False
        for a name not on the roster)."""
        key = self._public_keys.get(name)
        if key is None:
            return False
        try:
            key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def with_holder(self, name: str, public_key: bytes) -> Roster:
        """This roster plus ``name``; adding an entry that is already there is a no-op, and
        changing a holder's key is refused (remove the entry by editing the file, so that
        a key change is a deliberate act the consortium sees in the digest)."""
        known = self.keys_by_name.get(name)
        if known == public_key:
            return self
        if known is not None:
            raise RosterError(f"roster: entry {name!r} is already there with another key")
        return Roster({**self.keys_by_name, name: public_key})

    # JSON
    def _document(self) -> dict[str, Any]:
        holders = {name: encode_public_key(self.keys_by_name[name]) for name in self.names}
        return {"version": ROSTER_VERSION, "holders": holders}

    def canonical_json(self) -> bytes:
        """The bytes the digest is taken of: sorted keys, no whitespace, ASCII."""
        text = json.dumps(self._document(), sort_keys=True, separators=(",", ":"))
        return text.encode("ascii")

    @cached_property
    def digest(self) -> str:
        """SHA-256 of ``canonical_json()``, 64 hex digits: what holders compare."""
        return hashlib.sha256(self.canonical_json()).hexdigest()

    def to_json(self) -> str:
        """The roster file's text (indented for people; the digest does not depend on it)."""
        return json.dumps(self._document(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> Roster:
        """Parse a roster file's text; RosterError (one line) when it is not a roster."""
        try:
            document = json.loads(text, object_pairs_hook=_no_duplicates)
        except RosterError:
            raise
        except (ValueError, UnicodeDecodeError) as error:
            where = f" (line {error.lineno})" if isinstance(error, json.JSONDecodeError) else ""
            raise RosterError(f"roster: not JSON{where}") from None
        if not isinstance(document, dict) or set(document) != {"version", "holders"}:
            raise RosterError('roster: expected an object with "version" and "holders"')
        if document["version"] != ROSTER_VERSION or isinstance(document["version"], bool):
            raise RosterError(f"roster: version must be {ROSTER_VERSION}")
        holders = document["holders"]
        if not isinstance(holders, dict) or not holders:
            raise RosterError('roster: "holders" must be a non-empty object')
        keys: dict[str, bytes] = {}
        for position, (name, text_key) in enumerate(holders.items(), start=1):
            try:
                check_holder_name(name)
            except ValueError as error:
                raise RosterError(f"roster: entry {position}: the name is {error}") from None
            try:
                keys[name] = decode_public_key(text_key)
            except ValueError as error:
                raise RosterError(f"roster: entry {name!r}: {error}") from None
        return cls(keys)
