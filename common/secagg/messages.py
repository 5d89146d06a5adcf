"""The messages of one secure-aggregation round, and their JSON-able dictionaries.

Every message is a frozen dataclass with ``to_dict()`` (JSON types only: text, integers,
lists, objects; bytes as standard base64) and ``from_dict(data)``, which accepts exactly
the fields ``to_dict`` writes and raises SecAggRefused (one line, naming the message and
the field) for anything else. Holder names are checked against the roster's name rule, and
every byte string has its exact length, so a message's size is bounded by K.

In the order of the round (H: a holder, A: the aggregator)::

    H → A  KeyAdvertisement   fresh c_pk, s_pk; a commitment to b; run, round, K, t_min,
                              bits, roster digest; Ed25519 signature by the holder's
                              roster key
    A → H  ParticipantList    the advertisements received (U1), the round's fields once
                              in a header
    H → A  EncryptedShares    for every other participant, its shares of b and s_sk, each
                              signed by the holder (``dealing.py``), sealed
    A → H  ShareBundle        the ciphertexts addressed to one holder (senders: U2)
    H → A  MaskedInput        y = x + PRG(b) + Σ ±PRG(s_uv) mod 2^bits; the peers of its
                              bundle whose shares did not open (not masked with); on the
                              graph its signed masked-with set (``attestation.py``)
    A → H  ConsistencyCheck   the survivor set S, a bitmap over the roster's names
                              (``consistency.py``)
    H → A  SurvivorSignature  Ed25519 signature by the roster key over (run, round, S)
    A → H  UnmaskRequest      survivors S (a bitmap) and dropped (U2 \\ S), ≥ t_min
                              signatures of S (their signers a bitmap)
    H → A  UnmaskResponse     shares of b for survivors, of s_sk for dropped holders, each
                              with its dealer's signature
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpem.common.secagg._encoding import b64encode, binding
from ldpem.common.secagg._reader import Reader, encoded, frozen, refuse
from ldpem.common.secagg.attestation import ATTESTATION_BYTES
from ldpem.common.secagg.channel import NONCE_BYTES, TAG_BYTES
from ldpem.common.secagg.consistency import (
    SIGNATURE_BYTES,
    ConsistencyCheck,
    SurvivorSignature,
    UnmaskRequest,
)
from ldpem.common.secagg.dealing import COMMITMENT_BYTES, SIGNED_SHARE_BYTES
from ldpem.common.secagg.errors import SecAggRefused
from ldpem.common.secagg.masks import X25519_KEY_BYTES, Vector
from ldpem.common.secagg.parameters import (
    DIGEST_FIELD,
    GRAPH_FIELDS,
    PARAMETER_FIELDS,
    RoundParameters,
    minimum_t_min,
    most_colluders,
)

__all__ = [
    "CIPHERTEXT_BYTES",
    "PACKED_ADVERTISEMENT_BYTES",
    "SIGNATURE_BYTES",
    "ConsistencyCheck",
    "EncryptedShares",
    "KeyAdvertisement",
    "MaskedInput",
    "ParticipantList",
    "RoundParameters",
    "ShareBundle",
    "SurvivorSignature",
    "UnmaskRequest",
    "UnmaskResponse",
    "minimum_t_min",
    "most_colluders",
    "sign_advertisement",
]

#: A sealed pair of signed shares (of b and of s_sk): nonce, two share values each with
#: its dealer's signature, Poly1305 tag.
CIPHERTEXT_BYTES = NONCE_BYTES + 2 * SIGNED_SHARE_BYTES + TAG_BYTES
_ADVERTISEMENT = "ldpem secagg key advertisement v2"


@dataclass(frozen=True)
class KeyAdvertisement:
    """A holder's fresh public keys for one round and its commitment to its self-mask
    seed b (``dealing.seed_commitment``), signed with its roster key."""

    holder: str
    parameters: RoundParameters
    roster_digest: str
    encryption_key: bytes
    masking_key: bytes
    seed_commitment: bytes
    signature: bytes

    def signed_bytes(self) -> bytes:
        """What the signature covers: every field but the signature."""
        p = self.parameters
        return binding(
            _ADVERTISEMENT,
            self.holder,
            *(getattr(p, name) for name in p.fields()),
            self.roster_digest,
            self.encryption_key,
            self.masking_key,
            self.seed_commitment,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            **self.parameters.to_dict(),
            "roster_digest": self.roster_digest,
            "encryption_key": b64encode(self.encryption_key),
            "masking_key": b64encode(self.masking_key),
            "seed_commitment": b64encode(self.seed_commitment),
            "signature": b64encode(self.signature),
        }

    @classmethod
    def from_dict(cls, data: object) -> KeyAdvertisement:
        kind = "key advertisement"
        graph = isinstance(data, dict) and "neighbours" in data
        r = Reader(data, kind, _ADVERTISEMENT_FIELDS + _optional_fields(data))
        parameters, digest = _read_round(r, graph=graph)
        return cls(
            holder=r.name("holder"),
            parameters=parameters,
            roster_digest=digest,
            encryption_key=r.blob("encryption_key", X25519_KEY_BYTES),
            masking_key=r.blob("masking_key", X25519_KEY_BYTES),
            seed_commitment=r.blob("seed_commitment", COMMITMENT_BYTES),
            signature=r.blob("signature", SIGNATURE_BYTES),
        )

    def packed(self) -> bytes:
        """The advertisement's own bytes, as a participant list carries them under its
        header: c_pk ‖ s_pk ‖ seed commitment ‖ signature (PACKED_ADVERTISEMENT_BYTES)."""
        return self.encryption_key + self.masking_key + self.seed_commitment + self.signature

    @classmethod
    def unpacked(
        cls, holder: str, parameters: RoundParameters, roster_digest: str, packed: bytes
    ) -> KeyAdvertisement:
        """The advertisement of ``holder`` from its ``packed`` bytes and the round's fields
        (a participant list's header): its signature then covers these fields, so a header
        the aggregator altered fails every advertisement's signature check."""
        if len(packed) != PACKED_ADVERTISEMENT_BYTES:
            raise refuse(
                "participant list", f"an advertisement is {PACKED_ADVERTISEMENT_BYTES} bytes"
            )
        key_bytes, commitment_end = X25519_KEY_BYTES, 2 * X25519_KEY_BYTES + COMMITMENT_BYTES
        return cls(
            holder,
            parameters,
            roster_digest,
            encryption_key=packed[:key_bytes],
            masking_key=packed[key_bytes : 2 * key_bytes],
            seed_commitment=packed[2 * key_bytes : commitment_end],
            signature=packed[commitment_end:],
        )


def _read_round(r: Reader, *, graph: bool) -> tuple[RoundParameters, str]:
    """The round parameters and roster digest among the fields of ``r``."""
    digest = r.text("roster_digest")
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise refuse(r.kind, "field 'roster_digest' must be 64 lowercase hex digits")
    run_id = r.text("run_id")
    fields = PARAMETER_FIELDS[1:] + (GRAPH_FIELDS if graph else ())
    numbers = {name: r.integer(name) for name in fields}
    bound = r.text("run_digest") if "run_digest" in r.data else ""
    try:
        return RoundParameters(run_id, **numbers, run_digest=bound), digest
    except SecAggRefused as error:
        raise refuse(r.kind, str(error)) from None


#: An advertisement in a participant list, under its header: c_pk, s_pk, commitment, signature.
PACKED_ADVERTISEMENT_BYTES = 2 * X25519_KEY_BYTES + COMMITMENT_BYTES + SIGNATURE_BYTES

_ADVERTISEMENT_FIELDS = (
    "holder",
    *PARAMETER_FIELDS,
    "roster_digest",
    "encryption_key",
    "masking_key",
    "seed_commitment",
    "signature",
)


def sign_advertisement(
    signing_key: Ed25519PrivateKey,
    holder: str,
    parameters: RoundParameters,
    roster_digest: str,
    encryption_key: bytes,
    masking_key: bytes,
    *,
    seed_commitment: bytes,
) -> KeyAdvertisement:
    """The advertisement of ``holder``'s round keys and seed commitment, signed with its
    roster key (over ``KeyAdvertisement.signed_bytes``)."""
    keys = (encryption_key, masking_key, seed_commitment)
    unsigned = KeyAdvertisement(holder, parameters, roster_digest, *keys, signature=b"")
    return replace(unsigned, signature=signing_key.sign(unsigned.signed_bytes()))


@dataclass(frozen=True)
class ParticipantList:
    """The key advertisements the aggregator received in a round (U1), in name order.

    On the wire the fields every advertisement of the round repeats (its RoundParameters
    and roster digest) come once, as the list's ``header``, and each advertisement is
    [holder, base64 of ``KeyAdvertisement.packed``]; an advertisement of another round or
    roster (never in an honest list: the aggregator checks each against its round) carries
    its own header as a third element, so that every list stays expressible and the
    holder's checks, not the encoding, refuse it. ``from_dict`` rebuilds each
    advertisement from its header, so its signature is checked over the header's values
    (``checks.check_advertisement``): a header the aggregator altered fails them all."""

    run_id: str
    round: int
    advertisements: tuple[KeyAdvertisement, ...]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"run_id": self.run_id, "round": self.round}
        headers = Counter((a.parameters, a.roster_digest) for a in self.advertisements)
        common = headers.most_common(1)[0][0] if headers else None
        if common is not None:
            out["header"] = _header(*common)
        entries = []
        for a in self.advertisements:
            entry: list[Any] = [a.holder, b64encode(a.packed())]
            if (a.parameters, a.roster_digest) != common:
                entry.append(_header(a.parameters, a.roster_digest))
            entries.append(entry)
        out["advertisements"] = entries
        return out

    @classmethod
    def from_dict(cls, data: object) -> ParticipantList:
        kind = "participant list"
        headed = isinstance(data, dict) and "header" in data
        r = Reader(data, kind, ("run_id", "round", "advertisements", "header")[: 3 + headed])
        entries = r.entries("advertisements", PACKED_ADVERTISEMENT_BYTES)
        if entries and not headed:
            raise refuse(kind, "missing field 'header'")
        if headed and not entries:
            raise refuse(kind, "field 'header' without advertisements")
        adverts = []
        if headed:
            common = _read_header(r.data["header"], f"{kind} header")
            for name, packed, own in entries:
                header = common if own is None else _read_header(own, f"{kind} entry {name!r}")
                adverts.append(KeyAdvertisement.unpacked(name, *header, packed))
        return cls(r.text("run_id"), r.integer("round"), tuple(adverts))


def _header(parameters: RoundParameters, roster_digest: str) -> dict[str, Any]:
    return {**parameters.to_dict(), "roster_digest": roster_digest}


def _optional_fields(data: object) -> tuple[str, ...]:
    """The optional round fields ``data`` carries: the graph's, and the run digest."""
    if not isinstance(data, dict):
        return ()
    return (GRAPH_FIELDS if "neighbours" in data else ()) + (
        DIGEST_FIELD if "run_digest" in data else ()
    )


def _read_header(data: object, kind: str) -> tuple[RoundParameters, str]:
    graph = isinstance(data, dict) and "neighbours" in data
    fields = (*PARAMETER_FIELDS, "roster_digest", *_optional_fields(data))
    return _read_round(Reader(data, kind, fields), graph=graph)


_HEAD = ("holder", "run_id", "round")


@dataclass(frozen=True)
class _FromHolder:
    """What every message a holder sends starts with: who, and which run and round."""

    holder: str
    run_id: str
    round: int

    def _head(self) -> dict[str, Any]:
        return {"holder": self.holder, "run_id": self.run_id, "round": self.round}

    @staticmethod
    def _read_head(r: Reader) -> tuple[str, str, int]:
        return r.name("holder"), r.text("run_id"), r.integer("round")


@dataclass(frozen=True)
class _Ciphertexts(_FromHolder):
    """Sealed pairs of shares keyed by the other holder of each: ``EncryptedShares`` (by
    recipient) and ``ShareBundle`` (by sender)."""

    _KIND: ClassVar[str]
    ciphertexts: Mapping[str, bytes]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ciphertexts", frozen(self.ciphertexts))

    def to_dict(self) -> dict[str, Any]:
        return {**self._head(), "ciphertexts": encoded(self.ciphertexts)}

    @classmethod
    def from_dict(cls, data: object) -> Self:
        r = Reader(data, cls._KIND, (*_HEAD, "ciphertexts"))
        return cls(*cls._read_head(r), r.blobs("ciphertexts", CIPHERTEXT_BYTES))


@dataclass(frozen=True)
class EncryptedShares(_Ciphertexts):
    """A holder's sealed shares, one ciphertext per other participant (by recipient)."""

    _KIND = "encrypted shares"


@dataclass(frozen=True)
class ShareBundle(_Ciphertexts):
    """The ciphertexts addressed to ``holder``, by sender: the other holders of U2."""

    _KIND = "share bundle"


@dataclass(frozen=True)
class MaskedInput(_FromHolder):
    """A holder's masked vector y, as little-endian 64-bit words (8 bytes per value), and
    ``excluded``: the peers of its share bundle whose shares did not open, which it did not
    mask with (the aggregator leaves them out of the survivor set). On the SecAgg+ graph
    also ``attestation``: the holder's signature of the set it masked with
    (``attestation.py``; empty on the full mesh, where the field is not sent)."""

    values: bytes
    excluded: tuple[str, ...] = ()
    attestation: bytes = b""

    @classmethod
    def from_vector(
        cls,
        holder: str,
        run_id: str,
        round_: int,
        vector: Vector,
        excluded: tuple[str, ...] = (),
        attestation: bytes = b"",
    ) -> MaskedInput:
        return cls(holder, run_id, round_, vector.astype("<u8").tobytes(), excluded, attestation)

    def vector(self) -> Vector:
        return np.frombuffer(self.values, dtype="<u8").astype(np.uint64)

    def to_dict(self) -> dict[str, Any]:
        out = {**self._head(), "values": b64encode(self.values), "excluded": list(self.excluded)}
        if self.attestation:  # the graph's only: a mesh input is what it always was
            out["attestation"] = b64encode(self.attestation)
        return out

    @classmethod
    def from_dict(cls, data: object) -> MaskedInput:
        attested = isinstance(data, dict) and "attestation" in data
        fields = (*_HEAD, "values", "excluded", *(("attestation",) if attested else ()))
        r = Reader(data, "masked input", fields)
        values = r.blob("values", None)  # its length is the aggregator's to check
        if len(values) % 8:
            raise refuse("masked input", "field 'values' must hold 8 bytes per value")
        attestation = r.blob("attestation", ATTESTATION_BYTES) if attested else b""
        return cls(*cls._read_head(r), values, r.names("excluded"), attestation)


@dataclass(frozen=True)
class UnmaskResponse(_FromHolder):
    """A holder's shares for unmasking: of b for each survivor, of s_sk for each dropped
    holder, each as it was dealt: the value and its dealer's signature
    (``dealing.SIGNED_SHARE_BYTES``; the x-coordinate is the sender's roster position)."""

    self_mask_shares: Mapping[str, bytes]
    key_shares: Mapping[str, bytes]

    def __post_init__(self) -> None:
        object.__setattr__(self, "self_mask_shares", frozen(self.self_mask_shares))
        object.__setattr__(self, "key_shares", frozen(self.key_shares))

    def to_dict(self) -> dict[str, Any]:
        return {
            **self._head(),
            "self_mask_shares": encoded(self.self_mask_shares),
            "key_shares": encoded(self.key_shares),
        }

    @classmethod
    def from_dict(cls, data: object) -> UnmaskResponse:
        r = Reader(data, "unmasking response", (*_HEAD, "self_mask_shares", "key_shares"))
        return cls(
            *cls._read_head(r),
            r.blobs("self_mask_shares", SIGNED_SHARE_BYTES),
            r.blobs("key_shares", SIGNED_SHARE_BYTES),
        )
