"""The messages of one secure-aggregation round, and their JSON-able dictionaries.

Every message is a frozen dataclass with ``to_dict()`` (JSON types only: text, integers,
lists, objects; bytes as standard base64) and ``from_dict(data)``, which accepts exactly
the fields ``to_dict`` writes and raises SecAggRefused (one line, naming the message and
the field) for anything else. Holder names are checked against the roster's name rule, and
every byte string has its exact length, so a message's size is bounded by K.

In the order of the round (H: a holder, A: the aggregator)::

    H → A  KeyAdvertisement   fresh c_pk, s_pk; run, round, K, t_min, bits, roster digest;
                              Ed25519 signature by the holder's roster key
    A → H  ParticipantList    the advertisements received (U1)
    H → A  EncryptedShares    for every other participant, its shares of b and s_sk, sealed
    A → H  ShareBundle        the ciphertexts addressed to one holder (senders: U2)
    H → A  MaskedInput        y = x + PRG(b) + Σ ±PRG(s_uv) mod 2^bits
    A → H  UnmaskRequest      survivors (U3: sent y) and dropped (U2 \\ U3)
    H → A  UnmaskResponse     shares of b for survivors, of s_sk for dropped holders
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpem.common.secagg._encoding import b64decode, b64encode, binding
from ldpem.common.secagg.channel import NONCE_BYTES, TAG_BYTES
from ldpem.common.secagg.errors import SecAggRefused
from ldpem.common.secagg.keys import check_holder_name
from ldpem.common.secagg.masks import MAX_BITS, X25519_KEY_BYTES, Vector
from ldpem.common.secagg.shamir import SHARE_BYTES

__all__ = [
    "CIPHERTEXT_BYTES",
    "SIGNATURE_BYTES",
    "EncryptedShares",
    "KeyAdvertisement",
    "MaskedInput",
    "ParticipantList",
    "RoundParameters",
    "ShareBundle",
    "UnmaskRequest",
    "UnmaskResponse",
    "minimum_t_min",
    "sign_advertisement",
]

SIGNATURE_BYTES = 64
#: A sealed pair of shares (of b and of s_sk): nonce, two share values, Poly1305 tag.
CIPHERTEXT_BYTES = NONCE_BYTES + 2 * SHARE_BYTES + TAG_BYTES
_MAX_RUN_ID = 256
_ADVERTISEMENT = "ldpem secagg key advertisement v1"


def minimum_t_min(k: int) -> int:
    """The smallest t_min secure aggregation accepts for K ≥ 2 holders: ⌊K/2⌋ + 1 (and 2:
    the sum of a single survivor would be its input).

    A holder gives one kind of share per holder, but a lying aggregator can tell one group
    of holders that v survived (and collect shares of b_v) and another that v dropped
    (shares of s_sk_v). Each kind needs t_min shares, so this takes two disjoint groups of
    t_min holders; with t_min > K/2 they do not exist. With c holders colluding with the
    aggregator (their shares of both come for free) it takes 2·(t_min − c) ≤ K − c honest
    ones, so the protection holds for c < 2·t_min − K (docs/SECAGG.md).
    """
    return max(2, k // 2 + 1)


def _refuse(kind: str, problem: str) -> SecAggRefused:
    return SecAggRefused(f"{kind}: {problem}")


class _Reader:
    """Typed access to the fields of one message's dictionary, refusing what is not it."""

    def __init__(self, data: object, kind: str, fields: Sequence[str]) -> None:
        self.kind = kind
        if not isinstance(data, dict):
            raise _refuse(kind, "expected an object")
        missing = [f for f in fields if f not in data]
        unknown = sorted(str(f) for f in data if f not in fields)
        if missing:
            raise _refuse(kind, f"missing field {missing[0]!r}")
        if unknown:
            raise _refuse(kind, f"unknown field {unknown[0][:40]!r}")
        self.data: dict[str, Any] = data

    def text(self, field: str) -> str:
        value = self.data[field]
        if not isinstance(value, str) or not value or len(value) > _MAX_RUN_ID:
            raise _refuse(self.kind, f"field {field!r} must be text of 1 to {_MAX_RUN_ID} chars")
        return value

    def integer(self, field: str) -> int:
        value = self.data[field]
        if isinstance(value, bool) or not isinstance(value, int):
            raise _refuse(self.kind, f"field {field!r} must be an integer")
        return value

    def name(self, field: str) -> str:
        return self._name(self.data[field], f"field {field!r}")

    def _name(self, value: object, where: str) -> str:
        try:
            return check_holder_name(value)
        except ValueError as error:
            raise _refuse(self.kind, f"{where} is {error}") from None

    def blob(self, field: str, length: int | None) -> bytes:
        try:
            return b64decode(self.data[field], f"field {field!r}", length)
        except ValueError as error:
            raise _refuse(self.kind, str(error)) from None

    def names(self, field: str) -> tuple[str, ...]:
        value = self.data[field]
        if not isinstance(value, list):
            raise _refuse(self.kind, f"field {field!r} must be a list of holder names")
        names = tuple(self._name(v, f"an entry of {field!r}") for v in value)
        if len(set(names)) != len(names):
            raise _refuse(self.kind, f"field {field!r} names a holder twice")
        return names

    def blobs(self, field: str, length: int) -> Mapping[str, bytes]:
        value = self.data[field]
        if not isinstance(value, dict):
            raise _refuse(self.kind, f"field {field!r} must be an object of holder names")
        out = {}
        for name, text in value.items():
            self._name(name, f"a name in {field!r}")
            try:
                out[name] = b64decode(text, f"the entry {name!r} of {field!r}", length)
            except ValueError as error:
                raise _refuse(self.kind, str(error)) from None
        return _frozen(out)

    def items(self, field: str) -> list[Any]:
        value = self.data[field]
        if not isinstance(value, list):
            raise _refuse(self.kind, f"field {field!r} must be a list")
        return value


def _frozen(mapping: Mapping[str, bytes]) -> Mapping[str, bytes]:
    """A read-only copy in name order (equal messages compare and serialize equal)."""
    return MappingProxyType(dict(sorted(mapping.items())))


def _encoded(mapping: Mapping[str, bytes]) -> dict[str, str]:
    return {name: b64encode(value) for name, value in mapping.items()}


@dataclass(frozen=True)
class RoundParameters:
    """The public parameters of one round, which every holder binds and signs.

    ``k``: the run's number of holders (K); ``t_min``: the Shamir threshold and the fewest
    participants and survivors any holder accepts, more than K/2 (``minimum_t_min``);
    ``bits``: the inputs and the sum are residues modulo 2^bits.
    """

    run_id: str
    round: int
    k: int
    t_min: int
    bits: int

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not 0 < len(self.run_id) <= _MAX_RUN_ID:
            raise _refuse("round parameters", f"the run id must be 1 to {_MAX_RUN_ID} chars")
        for name in ("round", "k", "t_min", "bits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise _refuse("round parameters", f"{name} must be an integer")
        if self.round < 0:
            raise _refuse("round parameters", f"round must be at least 0, got {self.round}")
        if not 1 <= self.bits <= MAX_BITS:
            raise _refuse("round parameters", f"bits must be in [1, {MAX_BITS}], got {self.bits}")
        if self.k < 2:
            raise _refuse("round parameters", f"K must be at least 2, got {self.k}")
        if not minimum_t_min(self.k) <= self.t_min <= self.k:
            raise _refuse(
                "round parameters",
                f"t_min must be in [{minimum_t_min(self.k)}, K = {self.k}] (more than half "
                f"of K, or one aggregator could collect both seeds of a holder), got "
                f"{self.t_min}",
            )

    def same_round(self, run_id: str, round_: int) -> bool:
        return run_id == self.run_id and round_ == self.round


def advertisement_bytes(
    holder: str,
    parameters: RoundParameters,
    roster_digest: str,
    encryption_key: bytes,
    masking_key: bytes,
) -> bytes:
    """What a key advertisement's signature covers: every field but the signature."""
    p = parameters
    return binding(
        _ADVERTISEMENT,
        holder,
        p.run_id,
        p.round,
        p.k,
        p.t_min,
        p.bits,
        roster_digest,
        encryption_key,
        masking_key,
    )


@dataclass(frozen=True)
class KeyAdvertisement:
    """A holder's fresh public keys for one round, signed with its roster key."""

    holder: str
    parameters: RoundParameters
    roster_digest: str
    encryption_key: bytes
    masking_key: bytes
    signature: bytes

    def signed_bytes(self) -> bytes:
        return advertisement_bytes(
            self.holder,
            self.parameters,
            self.roster_digest,
            self.encryption_key,
            self.masking_key,
        )

    def to_dict(self) -> dict[str, Any]:
        p = self.parameters
        return {
            "holder": self.holder,
            "run_id": p.run_id,
            "round": p.round,
            "k": p.k,
            "t_min": p.t_min,
            "bits": p.bits,
            "roster_digest": self.roster_digest,
            "encryption_key": b64encode(self.encryption_key),
            "masking_key": b64encode(self.masking_key),
            "signature": b64encode(self.signature),
        }

    @classmethod
    def from_dict(cls, data: object) -> KeyAdvertisement:
        kind = "key advertisement"
        r = _Reader(data, kind, _ADVERTISEMENT_FIELDS)
        digest = r.text("roster_digest")
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise _refuse(kind, "field 'roster_digest' must be 64 lowercase hex digits")
        run_id = r.text("run_id")
        round_, k, t_min, bits = (r.integer(f) for f in ("round", "k", "t_min", "bits"))
        try:
            parameters = RoundParameters(run_id, round_, k, t_min, bits)
        except SecAggRefused as error:
            raise _refuse(kind, str(error)) from None
        return cls(
            holder=r.name("holder"),
            parameters=parameters,
            roster_digest=digest,
            encryption_key=r.blob("encryption_key", X25519_KEY_BYTES),
            masking_key=r.blob("masking_key", X25519_KEY_BYTES),
            signature=r.blob("signature", SIGNATURE_BYTES),
        )


_ADVERTISEMENT_FIELDS = (
    "holder",
    "run_id",
    "round",
    "k",
    "t_min",
    "bits",
    "roster_digest",
    "encryption_key",
    "masking_key",
    "signature",
)


def sign_advertisement(
    signing_key: Ed25519PrivateKey,
    holder: str,
    parameters: RoundParameters,
    roster_digest: str,
    encryption_key: bytes,
    masking_key: bytes,
) -> KeyAdvertisement:
    """The advertisement of ``holder``'s round keys, signed with its roster key."""
    message = advertisement_bytes(holder, parameters, roster_digest, encryption_key, masking_key)
    return KeyAdvertisement(
        holder, parameters, roster_digest, encryption_key, masking_key, signing_key.sign(message)
    )


@dataclass(frozen=True)
class ParticipantList:
    """The key advertisements the aggregator received in a round (U1), in name order."""

    run_id: str
    round: int
    advertisements: tuple[KeyAdvertisement, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "round": self.round,
            "advertisements": [a.to_dict() for a in self.advertisements],
        }

    @classmethod
    def from_dict(cls, data: object) -> ParticipantList:
        r = _Reader(data, "participant list", ("run_id", "round", "advertisements"))
        adverts = tuple(KeyAdvertisement.from_dict(a) for a in r.items("advertisements"))
        return cls(r.text("run_id"), r.integer("round"), adverts)


@dataclass(frozen=True)
class EncryptedShares:
    """A holder's sealed shares, one ciphertext per other participant (by recipient)."""

    holder: str
    run_id: str
    round: int
    ciphertexts: Mapping[str, bytes]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ciphertexts", _frozen(self.ciphertexts))

    def to_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "run_id": self.run_id,
            "round": self.round,
            "ciphertexts": _encoded(self.ciphertexts),
        }

    @classmethod
    def from_dict(cls, data: object) -> EncryptedShares:
        r = _Reader(data, "encrypted shares", ("holder", "run_id", "round", "ciphertexts"))
        return cls(
            r.name("holder"),
            r.text("run_id"),
            r.integer("round"),
            r.blobs("ciphertexts", CIPHERTEXT_BYTES),
        )


@dataclass(frozen=True)
class ShareBundle:
    """The ciphertexts addressed to ``holder``, by sender: the other holders of U2."""

    holder: str
    run_id: str
    round: int
    ciphertexts: Mapping[str, bytes]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ciphertexts", _frozen(self.ciphertexts))

    def to_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "run_id": self.run_id,
            "round": self.round,
            "ciphertexts": _encoded(self.ciphertexts),
        }

    @classmethod
    def from_dict(cls, data: object) -> ShareBundle:
        r = _Reader(data, "share bundle", ("holder", "run_id", "round", "ciphertexts"))
        return cls(
            r.name("holder"),
            r.text("run_id"),
            r.integer("round"),
            r.blobs("ciphertexts", CIPHERTEXT_BYTES),
        )


@dataclass(frozen=True)
class MaskedInput:
    """A holder's masked vector y, as little-endian 64-bit words (8 bytes per value)."""

    holder: str
    run_id: str
    round: int
    values: bytes

    @classmethod
    def from_vector(cls, holder: str, run_id: str, round_: int, vector: Vector) -> MaskedInput:
        return cls(holder, run_id, round_, vector.astype("<u8").tobytes())

    def vector(self) -> Vector:
        return np.frombuffer(self.values, dtype="<u8").astype(np.uint64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "run_id": self.run_id,
            "round": self.round,
            "values": b64encode(self.values),
        }

    @classmethod
    def from_dict(cls, data: object) -> MaskedInput:
        r = _Reader(data, "masked input", ("holder", "run_id", "round", "values"))
        values = r.blob("values", None)  # its length is the aggregator's to check
        if len(values) % 8:
            raise _refuse("masked input", "field 'values' must hold 8 bytes per value")
        return cls(r.name("holder"), r.text("run_id"), r.integer("round"), values)


@dataclass(frozen=True)
class UnmaskRequest:
    """The aggregator's account of the round: who sent a masked input (survivors, U3) and
    who shared keys but did not (dropped, U2 \\ U3)."""

    run_id: str
    round: int
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "round": self.round,
            "survivors": list(self.survivors),
            "dropped": list(self.dropped),
        }

    @classmethod
    def from_dict(cls, data: object) -> UnmaskRequest:
        r = _Reader(data, "unmasking request", ("run_id", "round", "survivors", "dropped"))
        return cls(r.text("run_id"), r.integer("round"), r.names("survivors"), r.names("dropped"))


@dataclass(frozen=True)
class UnmaskResponse:
    """A holder's shares for unmasking: of b for each survivor, of s_sk for each dropped
    holder (values only; the x-coordinate is the sender's roster position)."""

    holder: str
    run_id: str
    round: int
    self_mask_shares: Mapping[str, bytes]
    key_shares: Mapping[str, bytes]

    def __post_init__(self) -> None:
        object.__setattr__(self, "self_mask_shares", _frozen(self.self_mask_shares))
        object.__setattr__(self, "key_shares", _frozen(self.key_shares))

    def to_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "run_id": self.run_id,
            "round": self.round,
            "self_mask_shares": _encoded(self.self_mask_shares),
            "key_shares": _encoded(self.key_shares),
        }

    @classmethod
    def from_dict(cls, data: object) -> UnmaskResponse:
        fields = ("holder", "run_id", "round", "self_mask_shares", "key_shares")
        r = _Reader(data, "unmasking response", fields)
        return cls(
            r.name("holder"),
            r.text("run_id"),
            r.integer("round"),
            r.blobs("self_mask_shares", SHARE_BYTES),
            r.blobs("key_shares", SHARE_BYTES),
        )
