"""Shared pieces of the secure-aggregation tests: a consortium of holders with their roster
keys, and one round run through the wire format (every message goes through JSON)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpem.common.secagg import (
    Aggregator,
    ConsistencyCheck,
    EncryptedShares,
    Holder,
    MaskedInput,
    ParticipantList,
    Roster,
    RoundParameters,
    ShareBundle,
    SurvivorSignature,
    UnmaskRequest,
    UnmaskResponse,
    dealing,
    generate_signing_key,
    minimum_t_min,
    public_key_bytes,
)
from ldpem.common.secagg.dealing import Kind, masking_key_secret
from ldpem.common.secagg.shamir import PRIME, split_secret

RUN = "run-7f3a"


class Wire(Protocol):
    """A message: ``to_dict()``, and a class method ``from_dict(data)`` or, for a message
    holding a set of holders, ``from_dict(data, order)``."""

    def to_dict(self) -> dict[str, Any]: ...


W = TypeVar("W", bound=Wire)


def wire(message: W) -> W:
    """``message`` after a trip through JSON text, as the HTTP layer will carry it (a
    survivor set read over the public order the message was encoded over)."""
    data = json.loads(json.dumps(message.to_dict()))
    order = getattr(message, "order", None)
    reader: Any = getattr(type(message), "from_dict")  # noqa: B009 (not in Wire: two shapes)
    again: W = reader(data) if order is None else reader(data, order)
    assert again == message
    return again


@dataclass
class Consortium:
    """K holders named h00, h01, … (name order is number order) and their roster."""

    keys: dict[str, Ed25519PrivateKey]
    roster: Roster

    @classmethod
    def of(cls, k: int, *, seed: int | None = None) -> Consortium:
        """Fresh keys from the OS, or, given ``seed``, keys fixed by it: for tests whose
        round graph (drawn from the roster's keys) must be the same on every run."""
        if seed is None:
            keys = {f"h{i:02d}": generate_signing_key() for i in range(k)}
        else:
            keys = {
                name: Ed25519PrivateKey.from_private_bytes(
                    hashlib.sha256(f"{seed}:{name}".encode()).digest()
                )
                for name in (f"h{i:02d}" for i in range(k))
            }
        return cls(keys, Roster({n: public_key_bytes(key) for n, key in keys.items()}))

    @property
    def names(self) -> list[str]:
        return sorted(self.keys)

    def parameters(
        self, round_: int = 0, *, t_min: int | None = None, bits: int = 32, run_id: str = RUN
    ) -> RoundParameters:
        k = len(self.keys)
        return RoundParameters(run_id, round_, k, t_min or minimum_t_min(k), bits)

    def holders(self, parameters: RoundParameters, *, min_honest: int = 1) -> dict[str, Holder]:
        return {
            name: Holder(name, self.roster, key, parameters, min_honest=min_honest)
            for name, key in self.keys.items()
        }


@dataclass
class Round:
    """One round run to its end, with everything that crossed the wire."""

    parameters: RoundParameters
    holders: dict[str, Holder]
    aggregator: Aggregator
    inputs: dict[str, list[int]]
    participants: ParticipantList
    bundles: dict[str, ShareBundle]
    masked: dict[str, MaskedInput]
    check: ConsistencyCheck
    signatures: dict[str, SurvivorSignature]
    request: UnmaskRequest
    responses: dict[str, UnmaskResponse]
    result: list[int]
    late: dict[str, MaskedInput] = field(default_factory=dict)

    def expected(self) -> list[int]:
        """Σ of the survivors' inputs modulo 2^bits, computed with Python integers."""
        modulus = 2**self.parameters.bits
        survivors = self.request.survivors
        return [sum(self.inputs[n][j] for n in survivors) % modulus for j in range(self.dim)]

    @property
    def dim(self) -> int:
        return len(next(iter(self.inputs.values())))


def random_inputs(names: Collection[str], dim: int, bits: int) -> dict[str, list[int]]:
    return {n: [secrets.randbelow(2**bits) for _ in range(dim)] for n in names}


@dataclass
class Shared:
    """A round up to its share bundles: every holder advertised and shared its keys."""

    holders: dict[str, Holder]
    aggregator: Aggregator
    inputs: dict[str, list[int]]
    bundles: dict[str, ShareBundle]


def to_bundles(consortium: Consortium, parameters: RoundParameters, *, dim: int = 2) -> Shared:
    """Every holder advertises and shares its keys honestly; ``dim`` inputs each."""
    holders = consortium.holders(parameters)
    aggregator = Aggregator(consortium.roster, parameters, dimension=dim)
    inputs = random_inputs(holders, dim, parameters.bits)
    for holder in holders.values():
        aggregator.receive_advertisement(holder.advertise())
    lists = aggregator.participant_lists()
    for name, holder in holders.items():
        aggregator.receive_shares(holder.share_keys(lists[name]))
    return Shared(holders, aggregator, inputs, aggregator.share_bundles())


def run_round(
    consortium: Consortium,
    parameters: RoundParameters,
    *,
    dim: int = 4,
    inputs: dict[str, list[int]] | None = None,
    silent: Collection[str] = (),
    no_shares: Collection[str] = (),
    dropped: Collection[str] = (),
    no_sign: Collection[str] = (),
    garbage: Collection[tuple[str, str]] = (),
    no_unmask: Collection[str] = (),
    min_honest: int = 1,
    accuse: Mapping[str, Collection[str]] | None = None,
) -> Round:
    """A round where ``silent`` holders never advertise, ``no_shares`` stop before sharing
    keys, ``dropped`` stop before their masked input reaches the aggregator (it is kept in
    ``Round.late``), ``no_sign`` do not sign the survivor set and ``no_unmask`` do not
    answer the unmasking request; each (sender, recipient) of ``garbage`` seals random bytes
    in place of its shares for that recipient; each holder of ``accuse`` names those peers
    ``excluded`` in its masked input although their shares opened (a false accusation)."""
    holders = consortium.holders(parameters, min_honest=min_honest)
    aggregator = Aggregator(consortium.roster, parameters, dimension=dim)
    inputs = inputs or random_inputs(holders, dim, parameters.bits)
    active = [n for n in sorted(holders) if n not in silent]
    for name in active:
        aggregator.receive_advertisement(wire(holders[name].advertise()))
    participants = wire(aggregator.participants())
    lists = aggregator.participant_lists()  # on the graph, each holder's neighbourhood
    active = [n for n in active if n not in no_shares]
    for name in active:
        shares = holders[name].share_keys(wire(lists[name]))
        spoilt = {
            r: secrets.token_bytes(len(c)) for (n, r), c in _pairs(shares) if (n, r) in garbage
        }
        aggregator.receive_shares(
            wire(replace(shares, ciphertexts={**shares.ciphertexts, **spoilt}))
        )
    bundles = {n: wire(b) for n, b in aggregator.share_bundles().items()}
    masked, late = {}, {}
    for name in active:
        message = wire(holders[name].masked_input(bundles[name], inputs[name]))
        if accuse and name in accuse:
            claimed = tuple(sorted(set(message.excluded) | set(accuse[name])))
            message = wire(replace(message, excluded=claimed))
        if name in dropped:
            late[name] = message
        else:
            masked[name] = message
            aggregator.receive_masked_input(message)
    check = wire(aggregator.consistency_check())
    signatures = {}
    for name in check.survivors:
        if name not in no_sign:
            signatures[name] = wire(holders[name].sign_survivors(check))
            aggregator.receive_signature(signatures[name])
    request = wire(aggregator.unmask_request())
    requests = aggregator.unmask_requests()  # on the graph, each holder's own
    responses = {}
    for name in signatures:
        if name not in no_unmask:
            responses[name] = wire(holders[name].unmask(wire(requests[name])))
            aggregator.receive_unmask_response(responses[name])
    result = [int(v) for v in aggregator.result()]
    return Round(
        parameters,
        holders,
        aggregator,
        inputs,
        participants,
        bundles,
        masked,
        check,
        signatures,
        request,
        responses,
        result,
        late,
    )


def _pairs(shares: EncryptedShares) -> list[tuple[tuple[str, str], bytes]]:
    return [((shares.holder, r), c) for r, c in shares.ciphertexts.items()]


def as_list(vector: np.ndarray[Any, Any]) -> list[int]:
    return [int(v) for v in vector]


def dealing_wrong(
    monkeypatch: pytest.MonkeyPatch, holder: Holder, kind: Kind, *, moved: int = 2
) -> None:
    """Make ``holder`` deal shares of ``kind`` that are not all on one polynomial: the
    values of its shares to the first ``moved`` (1 or 2) holders in name order are moved
    (signed as usual, so no responder can be blamed for them)."""
    honest = split_secret
    secret = holder._seed if kind == "b" else masking_key_secret(holder._masking_raw)

    def split(value: bytes, threshold: int, xs: Any) -> Any:
        shares = honest(value, threshold, xs)
        if value != secret:
            return shares
        # By 1 and 2: at t = 3 the Lagrange weights at 0 of x = 1, 2, 3 are 3, -3, 1, so
        # moving both by 1 would keep f(0).
        shifted = [
            dataclasses.replace(sh, y=(sh.y + i) % PRIME) for i, sh in enumerate(shares[:moved], 1)
        ]
        return [*shifted, *shares[moved:]]

    monkeypatch.setattr(dealing, "split_secret", split)
