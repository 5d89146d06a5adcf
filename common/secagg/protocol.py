"""One secure-aggregation round as two pure state machines: ``Holder`` (here) and
``Aggregator`` (``aggregator.py``).

The protocol is Bonawitz et al. 2017 ("Practical Secure Aggregation for Privacy-Preserving
Machine Learning"), with its signed key advertisements (the roster of ``keys.py``) and
dropouts. Nothing here does I/O: each method takes the message of the previous step and
returns the next one (``messages.py``), so the coordinator's HTTP API only has to carry
them. One ``Holder`` and one ``Aggregator`` serve one round; every round draws fresh keys.

Phases (U1 ⊇ U2 ⊇ U3: holders still present at each step)::

    1 advertise keys  holder: fresh X25519 pairs c (encryption) and s (masking), a fresh
                      32-byte self-mask seed b; KeyAdvertisement(c_pk, s_pk, H(b), run,
                      round, K, t_min, bits, roster digest) signed with its roster key.
                      aggregator: ParticipantList of the advertisements (U1, ≥ t_min).
    2 share keys      holder: checks every advertisement (below); t_min-of-|U1| Shamir
                      shares of b and of s_sk, x = roster position, each signed (dealing.py);
                      each other participant's pair sealed to it (channel.py). A ShareBundle
                      from the aggregator per holder that sent shares (U2, ≥ t_min).
    3 masked input    holder: opens its bundle; y = x + PRG(b) + Σ_{v ∈ U2∖u} ±PRG(s_uv)
                      mod 2^bits. aggregator: UnmaskRequest, survivors U3 (sent y, ≥ t_min)
                      and dropped U2 ∖ U3.
    4 unmasking       holder: shares of b_v for v ∈ U3, of s_sk_v for v ∈ U2 ∖ U3.
                      aggregator: b_v for survivors, s_sk_v for dropped holders (any t_min
                      responses), and Σ_{U3} x = Σ y − Σ PRG(b_v) ∓ the survivors' masks
                      with the dropped holders; the survivors' mutual masks cancel.

A holder refuses (``SecAggRefused``, before sending anything for that step, and then for
the rest of the round) a participant list with a name not on the roster, an advertisement
not signed by the roster key of the holder it names, one of another run or round (a
replay), K, t_min, bits or roster digest other than the holder's own, fewer than t_min or
more than K participants; a bundle with fewer than t_min senders or a ciphertext that does
not open; an unmasking request with fewer than t_min survivors, a holder both surviving
and dropped (both kinds of share of one holder), itself dropped, or names outside the U2
it saw; and a second, different message for a step it already answered (answering twice
could give both kinds of share of one holder, or two masked inputs under the same masks).
The same message again gets the same answer, so the HTTP layer may retry.

What the aggregator can learn, and the honest-majority rule t_min > K/2 that makes a
lying aggregator unable to obtain both seeds of one holder, are in docs/SECAGG.md.

**No neighbour graph (SecAgg+).** Every holder masks with every other holder of U2 and
shares its seeds with all of U1, as in Bonawitz et al. The cost for a holder is O(K)
X25519 agreements, AEAD operations and PRG expansions, and O(K·t_min) field operations for
the Shamir shares; it sends O(K) ciphertexts (160 bytes each) and the aggregator relays
O(K²) of them. benchmarks/bench_secagg.py measures it: at K = 1000 a holder's CPU stays
under one second, within the issue's target, so the simpler protocol was kept. Bell et al.
2020 (SecAgg+) would bring this to O(log K) neighbours per holder, at the price of
guarantees that hold only with high probability over a neighbour graph the aggregator must
not choose (a public random graph from a seed no one controls) and a per-neighbourhood
threshold in place of t_min: worth it when K grows well beyond a thousand holders.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.secagg import channel, dealing, messages
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

__all__ = ["Holder", "check_advertisement", "check_round", "x25519_public"]

T = TypeVar("T")


def _new_x25519_key() -> tuple[X25519PrivateKey, bytes]:
    """A fresh X25519 key from ``secrets`` (any 32 bytes are a private key; X25519 clamps
    them), with its raw bytes: they are the secret that is Shamir-shared."""
    raw = secrets.token_bytes(X25519_KEY_BYTES)
    return X25519PrivateKey.from_private_bytes(raw), raw


def x25519_public(key: X25519PrivateKey) -> bytes:
    """The raw 32-byte public key of an X25519 private key."""
    return key.public_key().public_bytes_raw()


def check_round(kind: str, parameters: messages.RoundParameters, run_id: str, round_: int) -> None:
    """SecAggRefused unless a message named ``kind`` is for this run and round."""
    if not parameters.same_round(run_id, round_):
        raise SecAggRefused(
            f"the {kind} is for run {run_id!r} round {round_}, not for this round "
            f"(run {parameters.run_id!r} round {parameters.round})"
        )


def check_advertisement(
    advertisement: messages.KeyAdvertisement, roster: Roster, parameters: messages.RoundParameters
) -> None:
    """SecAggRefused unless ``advertisement`` is signed by the roster key of the holder it
    names and is for this round, with this round's K, t_min, bits and roster digest."""
    name = advertisement.holder
    if name not in roster:
        raise SecAggRefused(f"participant {name!r} is not on the roster")
    if not roster.verify(name, advertisement.signature, advertisement.signed_bytes()):
        raise SecAggRefused(f"the key advertisement of {name!r} is not signed by its roster key")
    theirs = advertisement.parameters
    if not parameters.same_round(theirs.run_id, theirs.round):
        raise SecAggRefused(
            f"the key advertisement of {name!r} is for run {theirs.run_id!r} round "
            f"{theirs.round}, not this round: a replay"
        )
    if (theirs.k, theirs.t_min, theirs.bits) != (parameters.k, parameters.t_min, parameters.bits):
        raise SecAggRefused(
            f"{name!r} advertises K = {theirs.k}, t_min = {theirs.t_min}, bits = {theirs.bits}; "
            f"this round is bound to K = {parameters.k}, t_min = {parameters.t_min}, "
            f"bits = {parameters.bits}"
        )
    if advertisement.roster_digest != roster.digest:
        raise SecAggRefused(
            f"{name!r} pinned another roster (digest {advertisement.roster_digest[:12]}…, "
            f"this holder's {roster.digest[:12]}…)"
        )


def _check_participants(
    participants: messages.ParticipantList,
    roster: Roster,
    parameters: messages.RoundParameters,
    own: str,
) -> dict[str, messages.KeyAdvertisement]:
    """The checked participant list of holder ``own`` (U1), by name."""
    check_round("participant list", parameters, participants.run_id, participants.round)
    by_name: dict[str, messages.KeyAdvertisement] = {}
    for advertisement in participants.advertisements:
        check_advertisement(advertisement, roster, parameters)
        if advertisement.holder in by_name:
            raise SecAggRefused(f"the participant list names {advertisement.holder!r} twice")
        by_name[advertisement.holder] = advertisement
    keys = [a.encryption_key for a in by_name.values()] + [a.masking_key for a in by_name.values()]
    if len(set(keys)) != len(keys):
        raise SecAggRefused("two participants advertise the same key")
    if own not in by_name:
        raise SecAggRefused("the participant list leaves out this holder")
    if not parameters.t_min <= len(by_name) <= parameters.k:
        raise SecAggRefused(
            f"the participant list has {len(by_name)} holders; this round needs between "
            f"t_min = {parameters.t_min} and K = {parameters.k}"
        )
    return by_name


class Holder:
    """A data holder's side of one round.

    ``signing_key`` is the holder's Ed25519 roster key; ``parameters`` are the values the
    agent bound for the run (K, t_min, bits) with this round's number, never values taken
    from the coordinator for this round alone; ``min_honest`` is the holder's own floor on
    t_min. The keys c and s and the seed b are drawn here, fresh, from ``secrets``.

    Call ``advertise()``, ``share_keys()``, ``masked_input()``, ``unmask()`` in order. A
    refusal ends the holder's round: every later call is refused too.
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
        if parameters.t_min < min_honest:
            raise SecAggRefused(
                f"t_min = {parameters.t_min} is below this holder's min_honest = {min_honest}"
            )
        self.name = name
        self.roster = roster
        self.parameters = parameters
        self._encryption, _ = _new_x25519_key()
        self._masking, self._masking_raw = _new_x25519_key()
        self._seed = secrets.token_bytes(32)
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

    def unmask(self, request: messages.UnmaskRequest) -> messages.UnmaskResponse:
        """Step 4: shares of b for the survivors, of s_sk for the dropped holders."""
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
        by_name = _check_participants(participants, self.roster, p, self.name)
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

    def _open(self, bundle: messages.ShareBundle) -> dict[str, tuple[bytes, bytes]]:
        """The signed shares of b and s_sk each sender of ``bundle`` sealed to this holder
        (a share its sender did not sign for this holder and round does not open)."""
        p = self.parameters
        received = {}
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
                raise SecAggRefused(f"the shares from {sender!r} do not open") from None
        return received

    def _mask(self, bundle: messages.ShareBundle, vector: Vector) -> messages.MaskedInput:
        p = self.parameters
        check_round("share bundle", p, bundle.run_id, bundle.round)
        if bundle.holder != self.name:
            raise SecAggRefused(f"the share bundle is addressed to {bundle.holder!r}")
        if len(bundle.ciphertexts) + 1 < p.t_min:
            raise SecAggRefused(
                f"only {len(bundle.ciphertexts) + 1} holders shared keys; t_min = {p.t_min}"
            )
        received = self._open(bundle)
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
        self._shared_with = frozenset(received) | {self.name}
        return messages.MaskedInput.from_vector(self.name, p.run_id, p.round, masked)

    # Step 4

    def _check_request(self, request: messages.UnmaskRequest) -> None:
        p = self.parameters
        check_round("unmasking request", p, request.run_id, request.round)
        survivors, dropped = set(request.survivors), set(request.dropped)
        if both := sorted(survivors & dropped):
            # The one request that would hand over b and s_sk of one holder at once.
            raise SecAggRefused(
                f"the unmasking request asks for both kinds of share of {both[0]!r} (listed "
                f"as a survivor and as dropped)"
            )
        if self.name in dropped:
            raise SecAggRefused(
                "the unmasking request lists this holder, which sent its masked input, as dropped"
            )
        if unknown := sorted((survivors | dropped) - self._shared_with):
            raise SecAggRefused(
                f"the unmasking request names {unknown[0]!r}, which did not share keys "
                f"with this holder"
            )
        if missing := sorted(self._shared_with - survivors - dropped):
            raise SecAggRefused(f"the unmasking request leaves out {missing[0]!r}")
        if len(survivors) < p.t_min:
            raise SecAggRefused(
                f"the unmasking request has {len(survivors)} survivors, fewer than "
                f"t_min = {p.t_min}"
            )

    def _unmask(self, request: messages.UnmaskRequest) -> messages.UnmaskResponse:
        self._check_request(request)
        seed_shares = {n: s for n, (s, _) in self._received.items()}
        seed_shares[self.name] = self._own_shares["b"]
        key_shares = {n: s for n, (_, s) in self._received.items()}
        response = messages.UnmaskResponse(
            self.name,
            self.parameters.run_id,
            self.parameters.round,
            {n: seed_shares[n] for n in request.survivors},
            {n: key_shares[n] for n in request.dropped},
        )
        # Nothing else will be asked of this round: forget the secrets it no longer needs
        # (a later compromise of this process then exposes nothing of the round).
        self._received, self._own_shares, self._channels = {}, {}, {}
        return response


#: The step each step must follow (None: the first that takes a message).
_PREVIOUS: dict[str, str | None] = {
    "participant list": None,
    "share bundle": "participant list",
    "unmasking request": "share bundle",
}
