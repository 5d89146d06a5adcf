"""The consistency round of secure aggregation (Bonawitz et al. 2017, active security), its
messages and the checks a holder makes on them (docs/SECAGG.md, "The consistency round").

Between the masked inputs and the unmasking, the aggregator tells every survivor the set S
of holders whose masked inputs it will sum (``ConsistencyCheck``). A survivor signs
(domain tag, run, round, S as a bitmap over the roster's names) with its roster key
(``SurvivorSignature``) only when S lies inside the set it masked with, holds itself and
has at least t_min members; it signs one set per round. The ``UnmaskRequest`` then
carries at least t_min of these signatures, by distinct members of S, all over the
request's own S; a holder answers it only then.

Why it holds. To learn one holder's input x_u the aggregator needs t_min shares of its
self-mask seed b_u (from holders told u survived) and t_min shares of its masking key
(from holders told u dropped): two different survivor sets S ∋ u and S' ∌ u, each with
t_min signatures. With c holders colluding, each set needs t_min − c honest signers and an
honest holder signs one set, so it takes 2(t_min − c) ≤ K − c honest holders: impossible
when c < 2·t_min − K (``RoundParameters``). Without this round each holder checked the
request against its own view only, and views that were never made consistent could be
told different stories (issue 29: a victim shown t_min − 1 peers is unmasked with no
colluder at all).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpem.common.secagg._encoding import b64encode, binding, bitmap, order_digest, positions
from ldpem.common.secagg._reader import Reader, refuse
from ldpem.common.secagg.attestation import ATTESTATION_BYTES, Attestation
from ldpem.common.secagg.errors import SecAggRefused
from ldpem.common.secagg.keys import Roster

__all__ = [
    "ConsistencyCheck",
    "SurvivorSignature",
    "UnmaskRequest",
    "check_floor",
    "check_signatures",
    "check_signed_set",
    "sign_survivors",
    "survivor_bitmap",
    "survivor_set_bytes",
]

SIGNATURE_BYTES = 64
_SURVIVORS = "ldpem secagg survivor set v2"


@lru_cache(maxsize=4)
def _set_bitmap(members: tuple[str, ...], order: tuple[str, ...]) -> bytes:
    """``bitmap``, once per set: on the graph the aggregator encodes one unmasking request
    per holder, each with the same S (O(K) each, O(K²) uncached)."""
    return bitmap(members, order)


def _order(order: Sequence[str], kind: str) -> tuple[str, ...]:
    if not order:
        raise ValueError(
            f"a {kind} is encoded over its public order, the roster's names: none given"
        )
    return tuple(order)


def survivor_bitmap(survivors: Iterable[str], order: Sequence[str]) -> bytes:
    """S as a bitmap over the public ``order`` (the roster's names, ``Roster.names``):
    SecAggRefused for a name outside it or named twice."""
    try:
        return bitmap(survivors, tuple(order))
    except ValueError as error:
        raise SecAggRefused(
            f"the survivor set cannot be a bitmap over the roster: {error}"
        ) from None


def survivor_set_bytes(
    run_id: str, round_: int, survivors: Iterable[str], order: Sequence[str]
) -> bytes:
    """What a survivor signature covers: the domain tag, the run, the round, the digest of
    the public ``order`` and S as a bitmap over it (so one signature can never be replayed
    for another set, run, round or order; K/8 bytes to hash, not S's names)."""
    ordered = tuple(order)
    return binding(
        _SURVIVORS, run_id, round_, order_digest(ordered), survivor_bitmap(survivors, ordered)
    )


@dataclass(frozen=True)
class ConsistencyCheck:
    """The aggregator's survivor set S (sent a masked input, every pair masked with each
    other), as it asks every member of S to sign it.

    On the wire S is a bitmap over ``order``, the roster's names (``Roster.names``), which
    the aggregator sets and ``from_dict`` takes from the holder's own roster; ``order``
    takes no part in equality (it is the public frame, not the message)."""

    run_id: str
    round: int
    survivors: tuple[str, ...]
    order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        order = _order(self.order, "consistency check")
        return {
            "run_id": self.run_id,
            "round": self.round,
            "survivors": b64encode(_set_bitmap(tuple(self.survivors), order)),
        }

    @classmethod
    def from_dict(cls, data: object, order: Sequence[str]) -> ConsistencyCheck:
        """The check in ``data``, its survivors read over ``order`` (the roster's names)."""
        ordered = _order(order, "consistency check")
        r = Reader(data, "consistency check", ("run_id", "round", "survivors"))
        return cls(r.text("run_id"), r.integer("round"), r.members("survivors", ordered), ordered)


@dataclass(frozen=True)
class SurvivorSignature:
    """A survivor's Ed25519 signature, by its roster key, over (run, round, S)
    (``survivor_set_bytes``)."""

    holder: str
    run_id: str
    round: int
    signature: bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "run_id": self.run_id,
            "round": self.round,
            "signature": b64encode(self.signature),
        }

    @classmethod
    def from_dict(cls, data: object) -> SurvivorSignature:
        r = Reader(data, "survivor signature", ("holder", "run_id", "round", "signature"))
        return cls(
            r.name("holder"),
            r.text("run_id"),
            r.integer("round"),
            r.blob("signature", SIGNATURE_BYTES),
        )


def sign_survivors(
    signing_key: Ed25519PrivateKey,
    holder: str,
    run_id: str,
    round_: int,
    survivors: Iterable[str],
    order: Sequence[str],
) -> SurvivorSignature:
    """``holder``'s signature of the survivor set of run ``run_id`` round ``round_``, a
    bitmap over ``order`` (the roster's names)."""
    message = survivor_set_bytes(run_id, round_, survivors, order)
    return SurvivorSignature(holder, run_id, round_, signing_key.sign(message))


@dataclass(frozen=True)
class UnmaskRequest:
    """The aggregator's account of the round: who sent a masked input (survivors, S) and who
    shared keys but is left out (dropped), with at least t_min survivors' signatures of S.

    On the wire S and the signers are bitmaps over ``order`` (the roster's names, as in
    ``ConsistencyCheck``), the signatures 64 bytes each in that order, without the run and
    round each would repeat (a signature is read as the request's run and round: over
    another's bytes it does not verify); the dropped holders, at most k on the graph, by
    name."""

    run_id: str
    round: int
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]
    signatures: tuple[SurvivorSignature, ...] = ()
    order: tuple[str, ...] = field(default=(), compare=False, repr=False)
    #: On the graph, the masked-with attestations of the answering holder's masking
    #: neighbours in S that did not sign S (``attestation.py``); none in an honest round
    #: where every survivor signed, and then not sent.
    attestations: tuple[Attestation, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        order = _order(self.order, "unmasking request")
        if stray := [s.holder for s in self.signatures if (s.run_id, s.round) != self._round]:
            raise ValueError(f"the signature of {stray[0]!r} is for another round")
        where = positions(order)
        ordered = sorted(self.signatures, key=lambda s: where.get(s.holder, -1))
        out = {
            "run_id": self.run_id,
            "round": self.round,
            "survivors": b64encode(_set_bitmap(tuple(self.survivors), order)),
            "dropped": list(self.dropped),
            "signers": b64encode(bitmap((s.holder for s in ordered), order)),
            "signatures": b64encode(b"".join(s.signature for s in ordered)),
        }
        if self.attestations:
            out["attestations"] = [
                [a.holder, b64encode(a.signature), list(a.masked_with)] for a in self.attestations
            ]
        return out

    @property
    def _round(self) -> tuple[str, int]:
        return self.run_id, self.round

    @classmethod
    def from_dict(cls, data: object, order: Sequence[str]) -> UnmaskRequest:
        """The request in ``data``, its sets read over ``order`` (the roster's names)."""
        ordered = _order(order, "unmasking request")
        attested = isinstance(data, dict) and "attestations" in data
        fields = ("run_id", "round", "survivors", "dropped", "signers", "signatures")
        r = Reader(data, "unmasking request", fields + (("attestations",) if attested else ()))
        run_id, round_ = r.text("run_id"), r.integer("round")
        signers = r.members("signers", ordered)
        blob = r.blob("signatures", SIGNATURE_BYTES * len(signers))
        signatures = tuple(
            SurvivorSignature(
                name, run_id, round_, blob[i * SIGNATURE_BYTES : (i + 1) * SIGNATURE_BYTES]
            )
            for i, name in enumerate(signers)
        )
        return cls(
            run_id,
            round_,
            r.members("survivors", ordered),
            r.names("dropped"),
            signatures,
            ordered,
            _attestations(r) if attested else (),
        )


def _attestations(r: Reader) -> tuple[Attestation, ...]:
    """The request's attestations: entries [holder, base64 signature, [P_v's names]], each
    holder once, P_v without repeats, in name order and without the holder itself (one set,
    one encoding)."""
    out: list[Attestation] = []
    for name, signature, extra in r.entries("attestations", ATTESTATION_BYTES):
        peers = Reader({"masked_with": extra}, r.kind, ("masked_with",)).names("masked_with")
        if list(peers) != sorted(peers) or name in peers:
            raise refuse(
                r.kind, f"the attestation of {name!r} must list its peers in name order, once"
            )
        out.append(Attestation(name, peers, signature))
    if len({a.holder for a in out}) != len(out):
        raise refuse(r.kind, "field 'attestations' names a holder twice")
    return tuple(out)


def check_floor(survivors: Collection[str], *, floor: int) -> None:
    """SecAggRefused unless the survivor set holds at least ``floor`` (T) distinct holders:
    the expander's survivor floor (docs/SECAGG_GRAPH.md, "The expander"; 0 elsewhere, no
    floor). A holder checks it on the whole S, not its neighbourhood, before it signs S and
    before it answers for S: the coordinator can then exclude at most K − T holders, too
    few to cut the honest survivors' graph into pieces whose sums it would learn."""
    if len(set(survivors)) < floor:
        raise SecAggRefused(
            f"the survivor set has {len(set(survivors))} holders, fewer than T = {floor}"
        )


def check_signed_set(
    survivors: Collection[str],
    *,
    own: str,
    masked_with: Collection[str],
    t_min: int,
    neighbours: Collection[str] | None = None,
) -> None:
    """SecAggRefused unless holder ``own`` may sign or answer for ``survivors``: a set
    inside the set it masked with (itself included), holding itself, of at least t_min
    holders. A smaller or foreign set is the victim-isolation story of issue 29.

    On the graph (``neighbours``: own's neighbours, at most k) the same checks apply to own's
    neighbourhood only: S ∩ N(own) inside what it masked with, and at least t_min = t_k
    holders of S among them and itself (at least t_k − 1 masking neighbours in S)."""
    if len(set(survivors)) != len(survivors):
        raise SecAggRefused("the survivor set names a holder twice")
    local = set(survivors)
    if neighbours is not None:
        local &= set(neighbours) | {own}
    if outside := sorted(local - set(masked_with)):
        raise SecAggRefused(
            f"the survivor set names {outside[0]!r}, which this holder did not mask with"
        )
    if own not in survivors:
        raise SecAggRefused("the survivor set leaves out this holder, which sent its masked input")
    if len(local) < t_min:
        where = "" if neighbours is None else " in this holder's neighbourhood"
        raise SecAggRefused(
            f"the survivor set has {len(local)} holders{where}, fewer than t_min = {t_min}"
        )


def check_signatures(request: UnmaskRequest, roster: Roster, *, t_min: int) -> None:
    """SecAggRefused unless ``request`` carries at least t_min signatures, by distinct
    members of its survivor set, each valid under the signer's roster key over exactly that
    set (a bitmap over the roster's names), this run and this round. Every signature must
    verify: a request with one bad signature is a lying aggregator's, refused whole."""
    survivors = set(request.survivors)
    message = survivor_set_bytes(request.run_id, request.round, request.survivors, roster.names)
    signers: set[str] = set()
    for signature in request.signatures:
        name = signature.holder
        if name in signers:
            raise SecAggRefused(f"the unmasking request carries two signatures of {name!r}")
        if name not in survivors:
            raise SecAggRefused(
                f"the unmasking request carries a signature of {name!r}, not a survivor"
            )
        if (signature.run_id, signature.round) != (request.run_id, request.round):
            raise refuse("unmasking request", f"the signature of {name!r} is for another round")
        if not roster.verify(name, signature.signature, message):
            raise SecAggRefused(
                f"the signature of {name!r} is not its roster key's over this survivor set"
            )
        signers.add(name)
    if len(signers) < t_min:
        raise SecAggRefused(
            f"the unmasking request carries {len(signers)} survivors' signatures of its "
            f"survivor set, fewer than t_min = {t_min}"
        )
