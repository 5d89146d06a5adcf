"""The aggregator's side of a secure-aggregation round (the protocol: ``protocol.py``).

It collects each step's messages, checks them as far as it can (signatures against the
roster, the round, the sets of holders, sizes and ranges), hands out the next step's
messages, and finally reconstructs the survivors' self-mask seeds and the dropped holders'
masking keys from t_min unmasking responses to return Σ_{survivors} x mod 2^bits. It holds
no secret of any holder that the protocol does not give it (docs/SECAGG.md).

A wrong share is caught and its sender named (``dealing.py``): every reconstructed secret is
checked against its holder's commitment, and when it does not match, the signatures of the
shares tell a responder that sent a share its dealer did not deal it (dropped, and the
secret rebuilt from the other responders' shares) from a dealer that dealt wrong shares.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from typing import TypeVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.secagg import consistency, dealing, messages, neighbourhood
from ldpem.common.secagg.attestation import attested_bytes
from ldpem.common.secagg.checks import check_advertisement, check_round
from ldpem.common.secagg.errors import FaultyDealer, FaultyResponders, SecAggError, SecAggRefused
from ldpem.common.secagg.keys import Roster
from ldpem.common.secagg.masks import (
    Vector,
    add,
    agree,
    expand,
    mask_sign,
    pair_seed,
    self_mask,
    subtract,
)
from ldpem.common.secagg.protocol import x25519_public
from ldpem.common.secagg.relay import GraphRelay
from ldpem.common.secagg.shamir import (
    SECRET_BYTES,
    SHARE_BYTES,
    ShamirError,
    Share,
    combine_secret,
    decode,
)
from ldpem.common.secagg.steps import Step

__all__ = ["Aggregator", "disputed"]

T = TypeVar("T")
#: What each kind of dealt secret is, in messages.
_SECRET = {"b": "self-mask seed", "s": "masking key"}


@cache
def _probe() -> X25519PrivateKey:
    """A throwaway X25519 key: an agreement with it fails for a low-order public key."""
    return X25519PrivateKey.generate()


class Aggregator(GraphRelay):
    """The aggregator's side of one round: collects each step's messages, hands out the
    next step's, and finally returns Σ_{survivors} x mod 2^bits (``result()``).

    Steps close on the aggregator's decision (a quorum, a deadline: the caller's policy):
    ``participants()``, ``share_bundles()``, ``consistency_check()``, ``unmask_request()``
    and ``result()`` each close one and open the next. A message for a closed step, from a
    holder outside the step's set, or differing from one the same holder already sent, is
    refused (SecAggRefused); the same message again is accepted and changes nothing. An
    aggregator fed the messages it received, in order, is in the same state again (restart).
    """

    def __init__(
        self, roster: Roster, parameters: messages.RoundParameters, *, dimension: int
    ) -> None:
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise ValueError(f"dimension must be a positive integer, got {dimension!r}")
        self.roster = roster
        self.parameters = parameters
        self.dimension = dimension
        self.graph = neighbourhood.round_graph(roster, parameters, everyone=True)  # None: mesh
        self.step = Step.ADVERTISE
        self.advertisements: dict[str, messages.KeyAdvertisement] = {}
        self.encrypted_shares: dict[str, messages.EncryptedShares] = {}
        self.masked_inputs: dict[str, messages.MaskedInput] = {}
        self.signatures: dict[str, messages.SurvivorSignature] = {}
        self.responses: dict[str, messages.UnmaskResponse] = {}
        self.bundles: dict[str, messages.ShareBundle] = {}
        self._check: messages.ConsistencyCheck | None = None
        self._check_bytes = b""  # what each survivor signs: survivor_set_bytes of the check
        self._request: messages.UnmaskRequest | None = None
        self._result: Vector | None = None
        #: Responders whose revealed share was not dealt to them (``result``): name → why.
        self.faulty: dict[str, str] = {}
        #: Holders left out of S by the disputes of the masked step: name → why.
        self.disputed: dict[str, str] = {}
        #: Dealers whose signed shares were not all on one polynomial, their secret decoded
        #: from the others (``_secret``): name → why.
        self.dealt_wrong: dict[str, str] = {}
        self._peers: dict[str, frozenset[str]] = {}
        self._request_sets: tuple[frozenset[str], frozenset[str]] = frozenset(), frozenset()

    # Helpers

    def _expect(self, step: Step, kind: str, run_id: str, round_: int) -> None:
        if self.step != step:
            raise SecAggRefused(f"a {kind} during the {self.step} step")
        check_round(kind, self.parameters, run_id, round_)

    @staticmethod
    def _store(store: dict[str, T], holder: str, message: T, kind: str) -> None:
        if holder in store and store[holder] != message:
            raise SecAggRefused(f"a second, different {kind} from {holder!r}")
        store[holder] = message

    def _opened(self, message: T | None, what: str) -> T:
        """A closing step's message once the step opened it; SecAggError before."""
        if message is None:
            raise SecAggError(f"no {what} during the {self.step} step")
        return message

    def _enough(self, count: int, what: str, *, whole: bool = False) -> None:
        """SecAggError when ``count`` holders are too few: below t_min or, for a ``whole``
        step's on the expander, below the floor T (holders refuse a smaller S)."""
        if count < self.parameters.t_min:
            raise SecAggError(
                f"only {count} holder{'s' if count != 1 else ''} {what}; t_min = "
                f"{self.parameters.t_min}: the round "
                f"cannot go on"
            )
        if whole and count < self.parameters.survivors:
            raise SecAggError(
                f"only {count} holder{'s' if count != 1 else ''} {what}, fewer than the "
                "survivor floor T = "
                f"{self.parameters.survivors}: the round cannot go on"
            )

    # Step 1

    def receive_advertisement(self, advertisement: messages.KeyAdvertisement) -> None:
        p = advertisement.parameters
        self._expect(Step.ADVERTISE, "key advertisement", p.run_id, p.round)
        check_advertisement(advertisement, self.roster, self.parameters)
        for kind, key in (
            ("encryption", advertisement.encryption_key),
            ("masking", advertisement.masking_key),
        ):
            try:  # a low-order key would make every agreement with it, ours too, fail
                agree(_probe(), key)
            except ValueError:
                raise SecAggRefused(
                    f"the {kind} key of {advertisement.holder!r} is not usable"
                ) from None
        self._store(self.advertisements, advertisement.holder, advertisement, "key advertisement")

    def participants(self) -> messages.ParticipantList:
        """Close step 1: the advertisements received (U1), in name order."""
        if self.step == Step.ADVERTISE:
            self._enough(len(self.advertisements), "advertised keys", whole=True)
            if len(self.advertisements) > self.parameters.k:
                raise SecAggError(
                    f"{len(self.advertisements)} holders advertised keys; K = {self.parameters.k}"
                )
            self.step = Step.SHARES
        p = self.parameters
        adverts = tuple(self.advertisements[n] for n in sorted(self.advertisements))
        return messages.ParticipantList(p.run_id, p.round, adverts)

    # Step 2

    def receive_shares(self, shares: messages.EncryptedShares) -> None:
        self._expect(Step.SHARES, "encrypted shares", shares.run_id, shares.round)
        if shares.holder not in self.advertisements:
            raise SecAggRefused(f"encrypted shares from {shares.holder!r}, not a participant")
        if shares.ciphertexts.keys() != self._others(shares.holder, self.advertisements):
            raise SecAggRefused(
                f"the encrypted shares of {shares.holder!r} are not addressed to exactly the "
                f"other participants"
            )
        self._store(self.encrypted_shares, shares.holder, shares, "encrypted shares")

    def share_bundles(self) -> dict[str, messages.ShareBundle]:
        """Close step 2: for each holder that sent shares (U2), the ciphertexts the other
        holders of U2 sealed to it."""
        if self.step == Step.SHARES:
            self._enough(len(self.encrypted_shares), "shared keys", whole=True)
            self.step = Step.MASKED
        p = self.parameters
        sealed: dict[str, dict[str, bytes]] = {name: {} for name in self.encrypted_shares}
        for sender, message in self.encrypted_shares.items():  # O(K·k), not a scan per recipient
            for recipient, ciphertext in message.ciphertexts.items():
                if recipient in sealed:  # not a holder that advertised but sent no shares
                    sealed[recipient][sender] = ciphertext
        self.bundles = {
            recipient: messages.ShareBundle(recipient, p.run_id, p.round, sealed[recipient])
            for recipient in sorted(self.encrypted_shares)
        }
        return self.bundles

    # Step 3

    def receive_masked_input(self, masked: messages.MaskedInput) -> None:
        self._expect(Step.MASKED, "masked input", masked.run_id, masked.round)
        if masked.holder not in self.encrypted_shares:
            raise SecAggRefused(f"a masked input from {masked.holder!r}, which did not share keys")
        if len(masked.values) != 8 * self.dimension:
            raise SecAggRefused(
                f"the masked input of {masked.holder!r} has {len(masked.values) // 8} values, "
                f"not {self.dimension}"
            )
        if int(masked.vector().max()) >> self.parameters.bits:
            raise SecAggRefused(
                f"the masked input of {masked.holder!r} is not modulo 2^{self.parameters.bits}"
            )
        peers = self._others(masked.holder, self.encrypted_shares)
        if stray := sorted(set(masked.excluded) - peers):
            raise SecAggRefused(
                f"the masked input of {masked.holder!r} excludes {stray[0]!r}, not a peer"
            )
        self._check_attestation(masked, peers)
        self._store(self.masked_inputs, masked.holder, masked, "masked input")

    def _check_attestation(self, masked: messages.MaskedInput, peers: set[str]) -> None:
        """SecAggRefused unless, on the graph, ``masked`` carries its holder's signature of
        the set it masked with as the aggregator computes it (its bundle's senders less the
        ones it excluded): what its neighbours release its seed share against should it not
        sign S (``attestation.py``). On the full mesh it carries none."""
        name = masked.holder
        if self.graph is None:
            if masked.attestation:
                raise SecAggRefused(f"the masked input of {name!r} carries an attestation")
            return
        masked_with = peers.difference(masked.excluded)
        p = self.parameters
        signed = attested_bytes(p.run_id, p.round, name, masked_with)
        if not self.roster.verify(name, masked.attestation, signed):
            raise SecAggRefused(
                f"the masked input of {name!r} does not carry its signature of the set it "
                f"masked with"
            )

    def consistency_check(self) -> messages.ConsistencyCheck:
        """Close step 3: the survivor set S, the holders that sent a masked input less those
        the ``excluded`` claims leave out (``disputed``: the accused of each honoured claim,
        and a holder whose claims exceed what the round can spare), so that every member of
        S masked with every other. A masked input arriving later is refused: its holder
        counts as dropped, and its pairwise key is about to be reconstructed."""
        if self.step == Step.MASKED:
            floor = max(self.parameters.t_min, self.parameters.survivors)
            self.disputed = disputed(self.masked_inputs, floor=floor)
            survivors = tuple(sorted(set(self.masked_inputs) - set(self.disputed)))
            what = "sent a masked input that every other one masked with"
            self._enough(len(survivors), what, whole=True)
            holding = self._holding(survivors)
            for gone in sorted(set(self.encrypted_shares) - set(survivors)):
                # Only a key some survivor masked with must be rebuilt: a dealer whose
                # shares opened for nobody (garbage to all) left no mask to remove.
                if count := len(holding.get(gone, ())):
                    self._enough(count, f"of the survivors hold a share of {gone!r}'s key")
            alive = set(survivors)
            for survivor in survivors if self.graph is not None else ():
                around = len(self._masked_with(survivor) & alive) + 1
                self._enough(around, f"of {survivor!r}'s neighbourhood survived")
            p = self.parameters
            order = self.roster.names
            self._check = messages.ConsistencyCheck(p.run_id, p.round, survivors, order)
            self._check_bytes = consistency.survivor_set_bytes(p.run_id, p.round, survivors, order)
            self.step = Step.SIGNATURE
        return self._opened(self._check, "consistency check")

    # Step 4

    def receive_signature(self, signature: messages.SurvivorSignature) -> None:
        self._expect(Step.SIGNATURE, "survivor signature", signature.run_id, signature.round)
        check = self._opened(self._check, "consistency check")  # opened by the last step
        if signature.holder not in check.survivors:
            raise SecAggRefused(f"a survivor signature from {signature.holder!r}, not a survivor")
        if not self.roster.verify(signature.holder, signature.signature, self._check_bytes):
            raise SecAggRefused(
                f"the survivor signature of {signature.holder!r} does not verify over the "
                f"survivor set"
            )
        self._store(self.signatures, signature.holder, signature, "survivor signature")

    def unmask_request(self) -> messages.UnmaskRequest:
        """Close step 4: survivors S, dropped holders (shared keys, not in S) and the
        survivors' signatures of S (at least t_min). On the graph a survivor that did not
        sign (it crashed, or restarted and lost its secrets) is still summed: its
        neighbours release its seed share against its masked-with attestation
        (``unmask_requests``), so the step closes with whoever signed as long as the
        signers certify S and can rebuild every secret the sum needs (``_answerable``);
        SecAggError otherwise."""
        if self.step == Step.SIGNATURE:
            check = self._opened(self._check, "consistency check")
            self._enough(len(self.signatures), "signed the survivor set")
            if self.graph is not None:
                self._answerable(check.survivors)
            dropped = tuple(sorted(set(self.encrypted_shares) - set(check.survivors)))
            signatures = tuple(self.signatures[n] for n in sorted(self.signatures))
            self._request = messages.UnmaskRequest(
                check.run_id, check.round, check.survivors, dropped, signatures, check.order
            )
            self._request_sets = frozenset(dropped), frozenset(check.survivors)
            self.step = Step.UNMASK
        return self._opened(self._request, "unmasking request")

    def _answerable(self, survivors: tuple[str, ...]) -> None:
        """SecAggError unless, on the graph, the signers of S can complete the round: τ of
        them on the committee (every holder refuses an uncertified S), and for every
        survivor's seed and every dropped holder's masking key at least t_k signers that
        hold a share of it (only signers are asked to answer; ``result`` needs t_k shares
        of each)."""
        graph = self.graph
        assert graph is not None
        signers = sorted(self.signatures, key=self.roster.index)
        members = len(graph.committee.intersection(signers))
        if members < graph.threshold:
            raise SecAggError(
                f"only {members} committee members signed the survivor set; tau = "
                f"{graph.threshold}: the round cannot go on"
            )
        holding = self._holding(signers)
        dropped = set(self.encrypted_shares) - set(survivors)
        t = self.parameters.t_min
        needed = [(n, "self-mask seed") for n in survivors]
        needed += [(n, "masking key") for n in sorted(dropped)]
        for owner, what in needed:
            if (count := len(holding.get(owner, ()))) < t:
                raise SecAggError(
                    f"only {count} signers of the survivor set hold a share of {owner!r}'s "
                    f"{what}; t_min = {t}: the round cannot go on"
                )

    # Step 5

    def receive_unmask_response(self, response: messages.UnmaskResponse) -> None:
        self._expect(Step.UNMASK, "unmasking response", response.run_id, response.round)
        self._opened(self._request, "unmasking request")  # opened by the last step
        if response.holder not in self.signatures:
            raise SecAggRefused(
                f"an unmasking response from {response.holder!r}, which did not sign the "
                f"survivor set"
            )
        holding, masked_with = self._owed(response.holder)
        if response.self_mask_shares.keys() != holding or response.key_shares.keys() != masked_with:
            raise SecAggRefused(
                f"the unmasking response of {response.holder!r} does not answer the request"
            )
        self._store(self.responses, response.holder, response, "unmasking response")

    def result(self) -> Vector:
        """Close step 5: Σ_{survivors} x mod 2^bits, as a uint64 vector.

        Each survivor's seed b and each dropped holder's masking key s_sk comes from t_min
        responders' shares (``_secret``; for s_sk, responders that masked with it), checked
        against its commitment. SecAggError when it cannot: FaultyResponders (naming them)
        when wrong shares leave fewer than t_min verified ones, FaultyDealer when a holder
        dealt wrong shares of a secret the sum needs. Responders dropped for a wrong share
        are named in ``faulty`` either way.
        """
        if self._result is not None:
            return self._result.copy()
        if self.step != Step.UNMASK:
            raise SecAggError(f"no result during the {self.step} step")
        request = self._opened(self._request, "unmasking request")
        if self.graph is None:
            self._enough(len(self.responses), "answered the unmasking request")
        p = self.parameters
        responders = sorted(self.responses, key=self.roster.index)
        holding = self._holding(responders)
        total = np.zeros(self.dimension, dtype=np.uint64)
        for survivor in request.survivors:
            total = add(total, self.masked_inputs[survivor].vector(), p.bits)
            seed = self._secret(survivor, "b", holding.get(survivor, []))
            mask = self_mask(
                seed,
                run_id=p.run_id,
                round_=p.round,
                name=survivor,
                length=self.dimension,
                bits=p.bits,
            )
            total = subtract(total, mask, p.bits)
        for gone in request.dropped:
            if not any(gone in self._masked_with(s) for s in request.survivors):
                continue  # no survivor added a mask with it: nothing to remove
            holders = holding.get(gone, [])
            if len(holders) < p.t_min:
                raise SecAggError(
                    f"only {len(holders)} responder{'s hold' if len(holders) != 1 else ' holds'} "
                    f"a share of {gone!r}'s key; "
                    f"t_min = {p.t_min}"
                )
            private = X25519PrivateKey.from_private_bytes(self._secret(gone, "s", holders))
            total = self._remove_masks_of(gone, private, request.survivors, total)
        self.step = Step.DONE
        self._result = total
        return total.copy()

    def _holding(self, holders: list[str] | tuple[str, ...]) -> dict[str, list[str]]:
        """For every holder, the members of ``holders`` that hold shares of its secrets
        (those that masked with it, and itself if it is one of them), in the order of
        ``holders``: one pass over their neighbourhoods (O(K·k)) rather than a scan of
        ``holders`` per holder (O(K²))."""
        out: dict[str, list[str]] = {}
        for holder in holders:
            for peer in (*self._masked_with(holder), holder):
                out.setdefault(peer, []).append(holder)
        return out

    def _secret(self, owner: str, kind: dealing.Kind, responders: list[str]) -> bytes:
        """``owner``'s secret of ``kind`` from t_min of ``responders``' shares.

        First from the t_min first responders not found faulty, unchecked: a secret that
        matches its commitment is right (t_min shares fix it; one wrong share moves it),
        so an honest round verifies no signature. Otherwise each responder's share is
        checked against ``owner``'s signature until t_min verified ones are found; a
        responder whose share fails is faulty (``faulty``), dropped for the rest of the
        round. Verified shares that still miss the commitment were dealt wrong by
        ``owner``: every responder's share is then verified and the secret decoded from
        them, with up to (n − t)/2 wrong (``shamir.decode``); ``owner`` is named in
        ``dealt_wrong`` and the round completes, or FaultyDealer when too many are wrong.
        """
        t, what = self.parameters.t_min, _SECRET[kind]
        usable = [r for r in responders if r not in self.faulty]
        secret = self._combine(owner, kind, usable[:t])
        if secret is not None:
            return secret
        verified: list[str] = []
        self._verify(owner, kind, usable, verified, up_to=t)
        if len(verified) < t:
            named = sorted(self.faulty, key=self.roster.index)
            raise FaultyResponders(
                f"the {what} of {owner!r} cannot be rebuilt: {len(verified)} verified shares, "
                f"t_min = {t}; wrong shares came from {', '.join(map(repr, named))}",
                culprits=named,
            )
        secret = self._combine(owner, kind, verified)
        if secret is not None:
            return secret
        # t shares the owner signed miss its commitment: it dealt shares not all on one
        # polynomial. With every responder's verified share the committed secret may still
        # be decoded (at most (n − t)/2 of n wrong: ``shamir.decode``); it is named either
        # way, and its round completes when enough correct shares remain.
        self._verify(owner, kind, usable, verified, up_to=None)
        secret = self._decoded(owner, kind, verified)
        if secret is None:
            raise FaultyDealer(
                f"{owner!r} dealt wrong shares: the {len(verified)} shares it signed do not "
                f"give the {what} it committed to, even with up to "
                f"{(len(verified) - t) // 2} of them wrong",
                culprits=(owner,),
            )
        self.dealt_wrong[owner] = (
            f"it dealt shares of its {what} not all on one polynomial; rebuilt from the "
            f"{len(verified)} shares it signed"
        )
        return secret

    def _verify(
        self,
        owner: str,
        kind: dealing.Kind,
        responders: list[str],
        verified: list[str],
        *,
        up_to: int | None,
    ) -> None:
        """Check ``responders``' shares of ``owner``'s secret against its signature, in
        order, until ``verified`` holds ``up_to`` of them (None: every one): a share it
        dealt is appended to ``verified``, a responder whose share it did not deal is
        named in ``faulty``. Responders already verified or faulty are skipped."""
        what = _SECRET[kind]
        checked = set(verified)
        for responder in responders:
            if len(verified) == up_to:
                break
            if responder in checked or responder in self.faulty:
                continue
            if self._dealt(owner, kind, responder):
                verified.append(responder)
                checked.add(responder)
            else:
                self.faulty[responder] = (
                    f"its share of the {what} of {owner!r} is not one {owner!r} dealt it"
                )

    def _revealed(self, owner: str, kind: dealing.Kind, responder: str) -> bytes:
        """The signed share of ``owner``'s secret of ``kind`` that ``responder`` revealed."""
        response = self.responses[responder]
        return (response.self_mask_shares if kind == "b" else response.key_shares)[owner]

    def _dealt(self, owner: str, kind: dealing.Kind, responder: str) -> bool:
        """Whether ``owner`` signed the share ``responder`` revealed, for it, this round."""
        p = self.parameters
        value = dealing.share_value(
            self.roster,
            self._revealed(owner, kind, responder),
            dealing.ShareLabel(
                run_id=p.run_id,
                round_=p.round,
                dealer=owner,
                recipient=responder,
                kind=kind,
                commitment=self.advertisements[owner].seed_commitment,
            ),
        )
        return value is not None

    def _decoded(self, owner: str, kind: dealing.Kind, responders: list[str]) -> bytes | None:
        """``owner``'s secret decoded from ``responders``' shares, some of which may be
        wrong (``shamir.decode``), if it matches its commitment; else None."""
        p = self.parameters
        shares = [
            Share.from_bytes(self.roster.index(r), self._revealed(owner, kind, r)[:SHARE_BYTES])
            for r in responders
        ]
        try:
            value = decode(shares, p.t_min)
        except ShamirError:
            return None
        if value is None:
            return None
        return self._matching(owner, kind, value.to_bytes(SECRET_BYTES, "big"))

    def _combine(self, owner: str, kind: dealing.Kind, responders: list[str]) -> bytes | None:
        """The secret the shares of ``responders`` give if it matches ``owner``'s
        commitment (seed commitment for b, s_pk for s_sk), else None; for s_sk, the
        X25519 private key's bytes (``dealing.masking_key_from_secret``)."""
        p = self.parameters
        try:
            shares = [
                Share.from_bytes(self.roster.index(r), self._revealed(owner, kind, r)[:SHARE_BYTES])
                for r in responders
            ]
            secret = combine_secret(shares, p.t_min)
        except ShamirError:  # too few shares, or a value that is not a field element
            return None
        return self._matching(owner, kind, secret)

    def _matching(self, owner: str, kind: dealing.Kind, secret: bytes) -> bytes | None:
        """``secret`` (for s_sk, as the X25519 private key's bytes) if it matches
        ``owner``'s commitment (seed commitment for b, s_pk for s_sk), else None."""
        p = self.parameters
        advertisement = self.advertisements[owner]
        if kind == "b":
            commitment = dealing.seed_commitment(
                secret, run_id=p.run_id, round_=p.round, holder=owner
            )
            matches = commitment == advertisement.seed_commitment
        else:
            try:
                secret = dealing.masking_key_from_secret(secret)
            except ValueError:  # more than a clamped key's 251 bits: not a dealt key
                return None
            private = X25519PrivateKey.from_private_bytes(secret)
            matches = x25519_public(private) == advertisement.masking_key
        return secret if matches else None

    def _remove_masks_of(
        self, gone: str, private: X25519PrivateKey, survivors: Iterable[str], total: Vector
    ) -> Vector:
        """``total`` without the masks the survivors added for their pairs with ``gone``."""
        p = self.parameters
        for survivor in survivors:
            if gone not in self._masked_with(survivor):
                continue  # not a neighbour, or its shares did not open: no mask added
            public = self.advertisements[survivor].masking_key
            key = pair_seed(agree(private, public), p.run_id, p.round, survivor, gone)
            mask = expand(key, self.dimension, p.bits)
            # The survivor added +mask when gone > survivor, −mask otherwise.
            if mask_sign(survivor, gone) > 0:
                total = subtract(total, mask, p.bits)
            else:
                total = add(total, mask, p.bits)
        return total


def disputed(masked_inputs: Mapping[str, messages.MaskedInput], *, floor: int) -> dict[str, str]:
    """The holders of ``masked_inputs`` to leave out of S for the ``excluded`` claims among
    them, each with why (naming whoever made the claims): name → reason.

    A holder that excludes a peer says the peer's shares did not open for it: the peer
    dealt garbage, the relay tampered, or the accuser lies, and nobody can tell which, so
    the two did not mask with each other and cannot both be in S. A claim is honoured (the
    accused leaves, the accuser named in its reason) while its maker's claims fit in what
    the round can spare, ``len(masked_inputs) − floor`` (``floor``: the fewest survivors
    the round needs, t_min or T); a holder whose claims exceed that is itself left out,
    named, and its claims are void (issue 41, finding 2: one holder cannot end the round
    by excluding its peers). A garbage dealer, reported by each peer it sent garbage to,
    leaves. Claims about a holder that sent no masked input are moot (it is dropped
    anyway). A function of the messages alone: a restarted coordinator replaying them
    leaves out the same holders.
    """
    senders = set(masked_inputs)
    spare = len(senders) - floor
    claims = {
        accuser: sorted(senders.intersection(message.excluded).difference((accuser,)))
        for accuser, message in masked_inputs.items()
        if message.excluded  # O(claims), not O(K) per holder: most claim nothing
    }
    out: dict[str, str] = {}
    for accuser, accused in sorted(claims.items()):
        if len(accused) > max(spare, 0):
            out[accuser] = (
                f"it excluded {len(accused)} peers, more than the {max(spare, 0)} this round "
                f"can spare: its claims are void"
            )
    by_accused: dict[str, list[str]] = {}
    for accuser, accused in sorted(claims.items()):
        if accuser in out:
            continue
        for name in accused:
            by_accused.setdefault(name, []).append(accuser)
    for name, accusers in sorted(by_accused.items()):
        out.setdefault(name, f"its shares did not open for {', '.join(accusers)}")
    return out
