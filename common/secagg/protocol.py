"""One secure-aggregation round as two pure state machines: ``Holder`` (here) and
``Aggregator`` (``aggregator.py``).

The protocol is Bonawitz et al. 2017 ("Practical Secure Aggregation for Privacy-Preserving
Machine Learning"), with its signed key advertisements (the roster of ``keys.py``) and
dropouts. Nothing here does I/O: each method takes the message of the previous step and
returns the next one (``messages.py``), so the coordinator's HTTP API only has to carry
them. One ``Holder`` and one ``Aggregator`` serve one round; every round draws fresh keys.

Phases (U1 ⊇ U2 ⊇ S: holders still present at each step)::

    1 advertise keys  holder: fresh X25519 pairs c (encryption) and s (masking), a fresh
                      self-mask seed b < 2^255 − 19; KeyAdvertisement(c_pk, s_pk, H(b), run,
                      round, K, t_min, bits, roster digest) signed with its roster key.
                      aggregator: ParticipantList of the advertisements (U1, ≥ t_min).
    2 share keys      holder: checks every advertisement (below); t_min-of-|U1| Shamir
                      shares of b and of s_sk, x = roster position, each signed (dealing.py);
                      each other participant's pair sealed to it (channel.py). A ShareBundle
                      from the aggregator per holder that sent shares (U2, ≥ t_min).
    3 masked input    holder: opens its bundle (a peer whose shares do not open is
                      excluded: not masked with, named in the message); y = x + PRG(b)
                      + Σ_{v ∈ U2∖u, not excluded} ±PRG(s_uv) mod 2^bits. aggregator:
                      ConsistencyCheck, survivors S (sent y, none excluded by another
                      member, ≥ t_min).
    4 consistency     holder: signs (run, round, S) when S ⊆ the set it masked with, holds
                      itself, ≥ t_min (consistency.py); one set per round. aggregator:
                      UnmaskRequest, S and dropped U2 ∖ S with ≥ t_min signatures of S.
    5 unmasking       holder: checks the signatures; shares of b_v for v ∈ S, of s_sk_v
                      for dropped v it masked with. aggregator: b_v for survivors, s_sk_v
                      for dropped holders (t_min responses each), and Σ_S x = Σ y
                      − Σ PRG(b_v) ∓ the survivors' masks with the dropped holders; the
                      survivors' mutual masks cancel.

A holder refuses (``SecAggRefused``, before sending anything for that step, and then for
the rest of the round) a participant list with a name not on the roster, an advertisement
not signed by the roster key of the holder it names, one of another run or round (a
replay), K, t_min, bits, c or roster digest other than the holder's own, fewer than t_min
or more than K participants; a bundle with fewer than t_min − 1 senders whose shares open;
a survivor set outside the set it masked with, without itself or with fewer than t_min
holders; an unmasking request over another set than the one it signed, with fewer than
t_min valid signatures of distinct survivors, a holder both surviving and dropped, or a
split that is not exactly its own view of U2; and a second, different message for a step
it already answered (answering twice could give both kinds of share of one holder, two
masked inputs under the same masks, or two signed survivor sets). The same message again
gets the same answer, so the HTTP layer may retry.

What the aggregator can learn, and the rule c < 2·t_min − K that makes a lying aggregator
with c colluding holders unable to obtain both seeds of one holder, are in docs/SECAGG.md.

**SecAgg+ (Bell et al. 2020) when the round's parameters carry a degree k < K − 1**
(``neighbourhood.py``, docs/SECAGG_GRAPH.md): participants, shares, masks and unmasking
answers cover only the holder's k neighbours in a public graph seeded by (run, round,
roster digest), t_min is the neighbourhood threshold t_k, and every check above applies to
the holder's neighbourhood; S is certified by τ signatures of a public committee, and a
neighbour's seed share is released only against that neighbour's own signature of S or,
if it never signed, the masked-with set it signed with its masked input
(``attestation.py``), checked as it would have checked S itself.
On the expander (``RoundParameters.expander``: at most k neighbours each, from k/2 random
cycles) a holder also signs and answers only for an S of at least T holders (the survivor
floor, ``consistency.check_floor``). Otherwise (small K) the full mesh, O(K) per holder.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.secagg import channel, consistency, dealing, messages, neighbourhood
from ldpem.common.secagg.attestation import sign_masked_with
from ldpem.common.secagg.checks import check_participants, check_round
from ldpem.common.secagg.errors import SecAggRefused
from ldpem.common.secagg.keys import Roster, public_key_bytes
from ldpem.common.secagg.masks import (
    X25519_KEY_BYTES,
    Vector,
    add,
    as_residues,
    pairwise_mask,
    self_mask,
)
from ldpem.common.secagg.shamir import ShamirError

__all__ = ["Holder", "x25519_public"]

T = TypeVar("T")


def _new_x25519_key() -> tuple[X25519PrivateKey, bytes]:
    """A fresh X25519 key from ``secrets`` (any 32 bytes are a private key; X25519 clamps
    them), with its raw bytes: they are the secret that is Shamir-shared."""
    raw = secrets.token_bytes(X25519_KEY_BYTES)
    return X25519PrivateKey.from_private_bytes(raw), raw


def x25519_public(key: X25519PrivateKey) -> bytes:
    """The raw 32-byte public key of an X25519 private key."""
    return key.public_key().public_bytes_raw()


class Holder:
    """A data holder's side of one round.

    ``signing_key`` is the holder's Ed25519 roster key; ``parameters`` are the values the
    agent bound for the run (K, t_min, bits, c) with this round's number, never values
    taken from the coordinator for this round alone; ``min_honest`` is the holder's own
    floor on t_min − c, the honest noise shares the run promises. The keys c and s and the
    seed b are drawn here, fresh, from ``secrets``.

    Call ``advertise()``, ``share_keys()``, ``masked_input()``, ``sign_survivors()``,
    ``unmask()`` in order. A refusal ends the holder's round: every later call is refused
    too. ``excluded`` names the peers whose shares did not open (not masked with).
    """

    def __init__(
        self,
        name: str,
        roster: Roster,
        signing_key: Ed25519PrivateKey,
        parameters: messages.RoundParameters,
        *,
        min_honest: int,
    ) -> None:
        if name not in roster:
            raise SecAggRefused(f"holder {name!r} is not on its own roster")
        if public_key_bytes(signing_key) != roster[name]:
            raise SecAggRefused(f"the signing key is not the roster's key of {name!r}")
        if parameters.k > len(roster):
            raise SecAggRefused(
                f"K = {parameters.k} holders, but the roster has only {len(roster)}"
            )
        if isinstance(min_honest, bool) or not isinstance(min_honest, int) or min_honest < 1:
            raise SecAggRefused(f"min_honest must be a positive integer, got {min_honest!r}")
        if parameters.honest_shares < min_honest:
            promised = (
                f"h = {parameters.honest}"
                if parameters.graph
                else f"t_min − c = {parameters.t_min} − {parameters.colluders}"
            )
            raise SecAggRefused(
                f"{promised} honest noise shares is below this holder's min_honest = {min_honest}"
            )
        self.name = name
        self.roster = roster
        self.parameters = parameters
        self.graph = neighbourhood.round_graph(roster, parameters)  # None: the full mesh
        self._neighbours = None if self.graph is None else self.graph.neighbours(name)
        self._encryption, _ = _new_x25519_key()
        self._masking, self._masking_raw = _new_x25519_key()
        self._seed = dealing.new_seed()  # below the field's prime: dealt as it is
        self._signing_key = signing_key  # also signs every share it deals (dealing.py)
        self._advertisement = messages.sign_advertisement(
            signing_key,
            name,
            parameters,
            roster.digest,
            x25519_public(self._encryption),
            x25519_public(self._masking),
            seed_commitment=dealing.seed_commitment(
                self._seed, run_id=parameters.run_id, round_=parameters.round, holder=name
            ),
        )
        self._refused: str | None = None
        self._answers: dict[str, tuple[Any, Any]] = {}
        self._participants: dict[str, messages.KeyAdvertisement] = {}
        self._channels: dict[str, bytes] = {}  # X25519 agreement of c keys, by peer
        self._own_shares: dict[str, bytes] = {}  # "b", "s": its signed shares of its own
        self._received: dict[str, tuple[bytes, bytes]] = {}  # peer → signed (b, s_sk)
        self._shared_with: frozenset[str] = frozenset()  # U2 as this holder saw it
        self._masked_with: frozenset[str] = frozenset()  # U2 minus the excluded peers
        self._signed: tuple[str, ...] = ()  # the survivor set this holder signed
        self._signing_key = signing_key

    # The four steps

    def advertise(self) -> messages.KeyAdvertisement:
        """Step 1: this round's signed key advertisement (the same on every call)."""
        self._not_refused()
        return self._advertisement

    def share_keys(self, participants: messages.ParticipantList) -> messages.EncryptedShares:
        """Step 2: check U1 and seal this holder's shares of b and s_sk to each other
        participant."""
        return self._step("participant list", participants, lambda: self._share(participants))

    def masked_input(
        self, bundle: messages.ShareBundle, values: Iterable[object]
    ) -> messages.MaskedInput:
        """Step 3: open the shares addressed to this holder and mask ``values`` (integers
        in [0, 2^bits); ValueError otherwise, which is not a refusal)."""
        vector = as_residues(values, self.parameters.bits)
        key = (bundle, vector.tobytes())
        return self._step("share bundle", key, lambda: self._mask(bundle, vector))

    @property
    def excluded(self) -> frozenset[str]:
        """The peers of this holder's bundle whose shares did not open (step 3)."""
        return self._shared_with - self._masked_with

    def sign_survivors(self, check: messages.ConsistencyCheck) -> messages.SurvivorSignature:
        """Step 4: sign the survivor set S, if it lies inside the set this holder masked
        with, holds it and has at least t_min members (and T on the expander; one set per
        round)."""
        return self._step("consistency check", check, lambda: self._sign(check))

    def unmask(self, request: messages.UnmaskRequest) -> messages.UnmaskResponse:
        """Step 5: shares of b for the survivors, of s_sk for the dropped holders."""
        return self._step("unmasking request", request, lambda: self._unmask(request))

    # Bookkeeping of the steps

    def _not_refused(self) -> None:
        if self._refused is not None:
            raise SecAggRefused(f"this round was refused earlier: {self._refused}")

    def _step(self, kind: str, key: object, answer: Callable[[], T]) -> T:
        """The answer of the step fed ``key``: computed once, the same again for the same
        input, refused for a different one; any refusal ends the holder's round."""
        self._not_refused()
        try:
            if kind in self._answers:
                seen, answered = self._answers[kind]
                if seen != key:
                    raise SecAggRefused(f"a second, different {kind} for this round")
                result: T = answered
                return result
            previous = _PREVIOUS[kind]
            if previous is not None and previous not in self._answers:
                raise SecAggRefused(f"a {kind} before the {previous} step")
            result = answer()
        except SecAggRefused as refusal:
            self._refused = str(refusal)
            raise
        self._answers[kind] = (key, result)
        return result

    # Step 2

    def _share(self, participants: messages.ParticipantList) -> messages.EncryptedShares:
        p = self.parameters
        by_name = check_participants(
            participants, self.roster, p, self.name, neighbours=self._neighbours
        )
        if by_name[self.name] != self._advertisement:
            raise SecAggRefused("the participant list alters this holder's advertisement")
        names = sorted(by_name)
        signed = dealing.deal(
            self._signing_key,
            self._seed,
            self._masking_raw,
            threshold=p.t_min,
            xs={n: self.roster.index(n) for n in names},
            run_id=p.run_id,
            round_=p.round,
            dealer=self.name,
        )
        ciphertexts = {}
        for peer in names:
            if peer == self.name:
                continue
            try:
                secret = channel.channel_secret(self._encryption, by_name[peer].encryption_key)
            except ValueError:
                raise SecAggRefused(f"the encryption key of {peer!r} is not usable") from None
            self._channels[peer] = secret
            plaintext = signed[peer]
            ciphertexts[peer] = channel.seal(
                secret,
                plaintext,
                run_id=p.run_id,
                round_=p.round,
                sender=self.name,
                recipient=peer,
            )
        self._participants = by_name
        own = signed[self.name]
        size = dealing.SIGNED_SHARE_BYTES
        self._own_shares = {"b": own[:size], "s": own[size:]}
        return messages.EncryptedShares(self.name, p.run_id, p.round, ciphertexts)

    # Step 3

    def _open(self, bundle: messages.ShareBundle) -> dict[str, tuple[bytes, bytes] | None]:
        """The signed shares of b and s_sk each sender of ``bundle`` sealed to this holder;
        None for a sender whose ciphertext does not open or whose shares it did not sign
        for this holder and round (garbage from the peer or the relay: this holder does not
        mask with it, and the round goes on without it)."""
        p = self.parameters
        received: dict[str, tuple[bytes, bytes] | None] = {}
        for sender, ciphertext in bundle.ciphertexts.items():
            if sender == self.name or sender not in self._participants:
                raise SecAggRefused(f"the share bundle holds shares from {sender!r}, not a peer")
            try:
                plaintext = channel.open_sealed(
                    self._channels[sender],
                    ciphertext,
                    run_id=p.run_id,
                    round_=p.round,
                    sender=sender,
                    recipient=self.name,
                )
                received[sender] = dealing.open_pair(
                    self.roster,
                    plaintext,
                    run_id=p.run_id,
                    round_=p.round,
                    dealer=sender,
                    recipient=self.name,
                    commitment=self._participants[sender].seed_commitment,
                )
            except (ValueError, ShamirError):
                received[sender] = None
        return received

    def _mask(self, bundle: messages.ShareBundle, vector: Vector) -> messages.MaskedInput:
        p = self.parameters
        check_round("share bundle", p, bundle.run_id, bundle.round)
        if bundle.holder != self.name:
            raise SecAggRefused(f"the share bundle is addressed to {bundle.holder!r}")
        if len(bundle.ciphertexts) + 1 < p.t_min:
            shared = len(bundle.ciphertexts) + 1
            raise SecAggRefused(
                f"only {shared} holder{'s' if shared != 1 else ''} shared keys; t_min = {p.t_min}"
            )
        opened = self._open(bundle)
        received = {peer: pair for peer, pair in opened.items() if pair is not None}
        if len(received) + 1 < p.t_min:
            opened_of = len(received) + 1
            whose = "holders'" if opened_of != 1 else "holder's"
            raise SecAggRefused(f"only {opened_of} {whose} shares open; t_min = {p.t_min}")
        length = len(vector)
        masked = add(
            vector,
            self_mask(
                self._seed,
                run_id=p.run_id,
                round_=p.round,
                name=self.name,
                length=length,
                bits=p.bits,
            ),
            p.bits,
        )
        for peer in received:
            try:
                mask = pairwise_mask(
                    self._masking,
                    self._participants[peer].masking_key,
                    run_id=p.run_id,
                    round_=p.round,
                    own=self.name,
                    peer=peer,
                    length=length,
                    bits=p.bits,
                )
            except ValueError:
                raise SecAggRefused(f"the masking key of {peer!r} is not usable") from None
            masked = add(masked, mask, p.bits)
        self._received = received
        self._shared_with = frozenset(opened) | {self.name}
        self._masked_with = frozenset(received) | {self.name}
        excluded = tuple(sorted(self.excluded))
        attestation = b""
        if self.graph is not None:  # its neighbours may release b against it (attestation.py)
            attestation = sign_masked_with(
                self._signing_key, self.name, p.run_id, p.round, self._masked_with
            )
        return messages.MaskedInput.from_vector(
            self.name, p.run_id, p.round, masked, excluded, attestation
        )

    # Step 4

    def _sign(self, check: messages.ConsistencyCheck) -> messages.SurvivorSignature:
        p = self.parameters
        check_round("consistency check", p, check.run_id, check.round)
        consistency.check_floor(check.survivors, floor=p.survivors)
        consistency.check_signed_set(
            check.survivors,
            own=self.name,
            masked_with=self._masked_with,
            t_min=p.t_min,
            neighbours=self._neighbours,
        )
        self._signed = tuple(sorted(check.survivors))
        return consistency.sign_survivors(
            self._signing_key, self.name, p.run_id, p.round, check.survivors, self.roster.names
        )

    # Step 5

    def _check_request(self, request: messages.UnmaskRequest) -> None:
        p = self.parameters
        check_round("unmasking request", p, request.run_id, request.round)
        consistency.check_floor(request.survivors, floor=p.survivors)  # first: any S, signed or not
        survivors, dropped = set(request.survivors), set(request.dropped)
        if tuple(sorted(survivors)) != self._signed:
            raise SecAggRefused(
                "the unmasking request's survivors are not the set this holder signed"
            )
        consistency.check_signed_set(
            survivors,
            own=self.name,
            masked_with=self._masked_with,
            t_min=p.t_min,
            neighbours=self._neighbours,
        )
        if self.graph is None:
            consistency.check_signatures(request, self.roster, t_min=p.t_min)
        else:
            consistency.check_signatures(request, self.roster, t_min=0)
            neighbourhood.check_certificate(
                request,
                self.graph,
                own=self.name,
                masked_with=self._masked_with,
                roster=self.roster,
                t_min=p.t_min,
            )
        if self._neighbours is not None:  # only its own neighbourhood is this holder's to split
            survivors &= self._neighbours | {self.name}
            dropped &= self._neighbours
        if both := sorted(survivors & dropped):
            # The one request that would hand over b and s_sk of one holder at once.
            raise SecAggRefused(
                f"the unmasking request asks for both kinds of share of {both[0]!r} (listed "
                f"as a survivor and as dropped)"
            )
        if unknown := sorted((survivors | dropped) - self._shared_with):
            raise SecAggRefused(
                f"the unmasking request names {unknown[0]!r}, which did not share keys "
                f"with this holder"
            )
        if missing := sorted(self._shared_with - survivors - dropped):
            raise SecAggRefused(f"the unmasking request leaves out {missing[0]!r}")

    def _unmask(self, request: messages.UnmaskRequest) -> messages.UnmaskResponse:
        self._check_request(request)
        seed_shares = {n: s for n, (s, _) in self._received.items()}
        seed_shares[self.name] = self._own_shares["b"]
        key_shares = {n: s for n, (_, s) in self._received.items()}
        response = messages.UnmaskResponse(
            self.name,
            self.parameters.run_id,
            self.parameters.round,
            {n: seed_shares[n] for n in request.survivors if n in seed_shares},
            {n: key_shares[n] for n in request.dropped if n in key_shares},
        )
        # Nothing else will be asked of this round: forget the secrets it no longer needs
        # (a later compromise of this process then exposes nothing of the round).
        self._received, self._own_shares, self._channels = {}, {}, {}
        return response


#: The step each step must follow (None: the first that takes a message).
_PREVIOUS: dict[str, str | None] = {
    "participant list": None,
    "share bundle": "participant list",
    "consistency check": "share bundle",
    "unmasking request": "consistency check",
}
