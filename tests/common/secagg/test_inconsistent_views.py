"""The inconsistent-views attack of issue 29, finding 1, against the library: refused, and
nothing is unmasked (docs/SECAGG.md, "The consistency round"; docs/PRIVACY.md, threat 9).

A lying aggregator shows the victim u a share bundle of only t_min − 1 peers P, so that u
masks with P alone, and then tells every holder a different story: u that P ∪ {u}
survived; each v ∈ P that P ∖ {v} dropped; every holder outside P ∪ {u} that P dropped.
Each story is a valid split of that holder's own view, so before the consistency round
every holder answered, and the aggregator had t_min shares of b_u and of the masking key of
every v ∈ P: x_u itself. ``Colluders`` are holders whose every secret the aggregator has
(their shares of everyone, their keys) and who sign any set; they sit inside P or outside.

Each case checks the harness first: answered as the old holders did (no signatures,
only the view checked), its shares do give x_u exactly. Then with the real holders: some
holder refuses, and the shares the aggregator gathers do not give x_u.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.secagg import (
    Aggregator,
    ConsistencyCheck,
    Holder,
    RoundParameters,
    SecAggRefused,
    ShareBundle,
    SurvivorSignature,
    UnmaskRequest,
    UnmaskResponse,
)
from ldpem.common.secagg.consistency import sign_survivors
from ldpem.common.secagg.dealing import masking_key_from_secret
from ldpem.common.secagg.masks import Vector, pairwise_mask, self_mask, subtract
from ldpem.common.secagg.shamir import SHARE_BYTES, Share, combine_secret
from tests.common.secagg.kit import RUN, Consortium

DIM, BITS = 2, 32


@dataclass
class Attack:
    """One round with a lying aggregator: every honest message it received, the stories it
    told, the refusals it met and the shares it gathered."""

    consortium: Consortium
    parameters: RoundParameters
    victim: str
    peers: tuple[str, ...]  # P: the victim's bundle
    colluders: frozenset[str]
    holders: dict[str, Holder] = field(default_factory=dict)
    inputs: dict[str, list[int]] = field(default_factory=dict)
    masked: dict[str, Vector] = field(default_factory=dict)
    stories: dict[str, tuple[str, ...]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    responses: list[UnmaskResponse] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return self.consortium.names

    @property
    def honest(self) -> list[str]:
        return [n for n in self.names if n not in self.colluders]

    def play_to_masking(self) -> None:
        """Advertise, share and mask honestly but for the victim's bundle (P only)."""
        self.holders = self.consortium.holders(self.parameters)
        aggregator = Aggregator(self.consortium.roster, self.parameters, dimension=DIM)
        for holder in self.holders.values():
            aggregator.receive_advertisement(holder.advertise())
        participants = aggregator.participants()
        for holder in self.holders.values():
            aggregator.receive_shares(holder.share_keys(participants))
        bundles = aggregator.share_bundles()
        full = bundles[self.victim]
        bundles[self.victim] = ShareBundle(
            self.victim,
            RUN,
            0,
            {n: c for n, c in full.ciphertexts.items() if n in self.peers},
        )
        for name, holder in self.holders.items():
            self.inputs[name] = [secrets.randbelow(2**BITS) for _ in range(DIM)]
            self.masked[name] = holder.masked_input(bundles[name], self.inputs[name]).vector()
        p, u = self.peers, self.victim
        everyone = tuple(self.names)
        self.stories = {u: tuple(sorted({*p, u}))}
        for v in p:
            self.stories[v] = tuple(n for n in everyone if n not in p or n == v)
        for w in everyone:
            self.stories.setdefault(w, tuple(n for n in everyone if n not in p))

    def view(self, name: str) -> set[str]:
        return {*self.peers, self.victim} if name == self.victim else set(self.names)

    def old_answers(self) -> None:
        """What the holders answered before the consistency round: each checked only that
        its story split its own view (it does), then sent its shares."""
        for name in self.names:
            holder = self.holders[name]
            survivors = self.stories[name]
            dropped = sorted(self.view(name) - set(survivors))
            received = holder._received
            seeds = {n: received[n][0] for n in survivors if n != name}
            seeds[name] = holder._own_shares["b"]
            keys = {n: received[n][1] for n in dropped}
            self.responses.append(UnmaskResponse(name, RUN, 0, seeds, keys))

    def lie(self) -> None:
        """The consistency round with the lies: each honest holder is shown its story;
        each request carries every signature over that story the aggregator has (honest
        ones, and any colluder's it forges)."""
        signatures: dict[tuple[str, ...], list[SurvivorSignature]] = {}
        for name in self.honest:
            story = self.stories[name]
            try:
                signed = self.holders[name].sign_survivors(ConsistencyCheck(RUN, 0, story))
            except SecAggRefused as refusal:
                self.refused[name] = str(refusal)
                continue
            signatures.setdefault(story, []).append(signed)
        for story in set(self.stories.values()):
            for colluder in sorted(self.colluders & set(story)):
                key = self.consortium.keys[colluder]
                signatures.setdefault(story, []).append(
                    sign_survivors(key, colluder, RUN, 0, story, self.consortium.roster.names)
                )
        for name in self.honest:
            if name in self.refused:
                continue
            story = self.stories[name]
            dropped = tuple(sorted(self.view(name) - set(story)))
            request = UnmaskRequest(RUN, 0, story, dropped, tuple(signatures.get(story, [])))
            try:
                self.responses.append(self.holders[name].unmask(request))
            except SecAggRefused as refusal:
                self.refused[name] = str(refusal)
        for colluder in self.colluders:  # they hand over both kinds of share of everyone
            holder = self.holders[colluder]
            received = holder._received
            seeds = {n: pair[0] for n, pair in received.items()}
            seeds[colluder] = holder._own_shares["b"]
            keys = {n: pair[1] for n, pair in received.items()}
            self.responses.append(UnmaskResponse(colluder, RUN, 0, seeds, keys))

    def secret(self, owner: str, kind: str) -> bytes | None:
        """``owner``'s seed ("b") or masking key ("s") from the gathered shares, if t_min
        of them are there (a colluder's own secrets are the aggregator's)."""
        holder = self.holders[owner]
        if owner in self.colluders:
            return holder._seed if kind == "b" else holder._masking_raw
        roster = self.consortium.roster
        found = {}
        for response in self.responses:
            shares = response.self_mask_shares if kind == "b" else response.key_shares
            if owner in shares:
                found[response.holder] = Share.from_bytes(
                    roster.index(response.holder), shares[owner][:SHARE_BYTES]
                )
        if len(found) < self.parameters.t_min:
            return None
        secret = combine_secret(list(found.values()), self.parameters.t_min)
        return secret if kind == "b" else masking_key_from_secret(secret)

    def unmasked(self) -> list[int] | None:
        """x_u from y_u and the gathered secrets, or None when they do not suffice."""
        u, p = self.victim, self.parameters
        seed = self.secret(u, "b")
        if seed is None:
            return None
        value = subtract(
            self.masked[u],
            self_mask(seed, run_id=RUN, round_=0, name=u, length=DIM, bits=BITS),
            BITS,
        )
        own_key = self.secret(u, "s")
        adverts = {n: h.advertise() for n, h in self.holders.items()}

        def mask(own: str, peer: str, key: bytes) -> Vector:
            """The mask ``own`` adds for the pair with ``peer``, from ``own``'s key."""
            return pairwise_mask(
                X25519PrivateKey.from_private_bytes(key),
                adverts[peer].masking_key,
                run_id=p.run_id,
                round_=0,
                own=own,
                peer=peer,
                length=DIM,
                bits=BITS,
            )

        for v in self.peers:
            if own_key is not None:
                value = subtract(value, mask(u, v, own_key), BITS)
                continue
            their_key = self.secret(v, "s")
            if their_key is None:
                return None
            theirs = mask(v, u, their_key)  # the mask v added for the pair: minus u's
            value = (value + theirs) % (1 << BITS)
        return [int(x) for x in np.asarray(value, dtype=np.uint64)]


def attack(k: int, t_min: int, colluders: int, *, inside: bool) -> Attack:
    """The victim is h00 (an honest holder); the c colluders are the first holders after
    it; P holds t_min − 1 peers, the colluders first (``inside``) or last (as few of them
    as the honest holders leave room for)."""
    consortium = Consortium.of(k)
    parameters = RoundParameters(RUN, 0, k, t_min, BITS, colluders)
    names = consortium.names
    others = names[1:]
    crew = others[:colluders]
    honest_others = others[colluders:]
    pool = [*crew, *honest_others] if inside else [*honest_others, *crew]
    peers = tuple(sorted(pool[: t_min - 1]))
    return Attack(consortium, parameters, names[0], peers, frozenset(crew))


ALONE = [(5, 3), (7, 4), (8, 5), (20, 11), (100, 51)]
CASES = [(k, t, 0, True) for k, t in ALONE] + [
    (k, t, c, inside) for k, t, c in [(20, 16, 10), (100, 90, 74)] for inside in (True, False)
]


@pytest.mark.parametrize(("k", "t_min", "colluders", "inside"), CASES)
def test_the_inconsistent_views_attack_is_refused_and_unmasks_nothing(
    k: int, t_min: int, colluders: int, inside: bool
) -> None:
    before = attack(k, t_min, colluders, inside=inside)
    before.play_to_masking()
    before.old_answers()
    victim = before.victim
    assert before.unmasked() == before.inputs[victim]  # what the old holders gave away

    now = attack(k, t_min, colluders, inside=inside)
    now.play_to_masking()
    now.lie()
    assert now.refused, "no honest holder refused the lies"
    assert all("\n" not in reason for reason in now.refused.values())
    assert now.unmasked() is None
    assert now.secret(victim, "b") is None or all(
        now.secret(v, "s") is None for v in now.peers if v not in now.colluders
    )


@pytest.mark.parametrize(("k", "t_min", "colluders"), [(5, 3, 1), (20, 11, 2), (100, 51, 2)])
def test_more_colluders_than_the_bound_allows_are_refused_at_validation(
    k: int, t_min: int, colluders: int
) -> None:
    """c ≥ 2·t_min − K: a coordinator with c holders could unmask one input; the run's
    parameters are refused before any key is drawn (and so is the run, docs/SECAGG.md)."""
    with pytest.raises(SecAggRefused, match="colluders must be in"):
        RoundParameters(RUN, 0, k, t_min, BITS, colluders)
