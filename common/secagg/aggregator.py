"""The aggregator's side of a secure-aggregation round (the protocol: ``protocol.py``).

It collects each step's messages, checks them as far as it can (signatures against the
roster, the round, the sets of holders, sizes and ranges), hands out the next step's
messages, and finally reconstructs the survivors' self-mask seeds and the dropped holders'
masking keys from t_min unmasking responses to return Σ_{survivors} x mod 2^bits. It holds
no secret of any holder that the protocol does not give it (docs/SECAGG.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.secagg import consistency, messages
from ldpem.common.secagg.checks import check_advertisement, check_round
from ldpem.common.secagg.errors import SecAggError, SecAggRefused
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
from ldpem.common.secagg.shamir import ShamirError, Share, combine_secret

__all__ = ["Aggregator"]

T = TypeVar("T")


class Aggregator:
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
        self.step = "advertise"
        self.advertisements: dict[str, messages.KeyAdvertisement] = {}
        self.encrypted_shares: dict[str, messages.EncryptedShares] = {}
        self.masked_inputs: dict[str, messages.MaskedInput] = {}
        self.signatures: dict[str, messages.SurvivorSignature] = {}
        self.responses: dict[str, messages.UnmaskResponse] = {}
        self._check: messages.ConsistencyCheck | None = None
        self._request: messages.UnmaskRequest | None = None
        self._result: Vector | None = None

    # Helpers

    def _expect(self, step: str, kind: str, run_id: str, round_: int) -> None:
        if self.step != step:
            raise SecAggRefused(f"a {kind} during the {self.step} step")
        check_round(kind, self.parameters, run_id, round_)

    @staticmethod
    def _store(store: dict[str, T], holder: str, message: T, kind: str) -> None:
        if holder in store and store[holder] != message:
            raise SecAggRefused(f"a second, different {kind} from {holder!r}")
        store[holder] = message

    def _enough(self, count: int, what: str) -> None:
        if count < self.parameters.t_min:
            raise SecAggError(
                f"only {count} holders {what}; t_min = {self.parameters.t_min}: the round "
                f"cannot go on"
            )

    # Step 1

    def receive_advertisement(self, advertisement: messages.KeyAdvertisement) -> None:
        p = advertisement.parameters
        self._expect("advertise", "key advertisement", p.run_id, p.round)
        check_advertisement(advertisement, self.roster, self.parameters)
        self._store(self.advertisements, advertisement.holder, advertisement, "key advertisement")

    def participants(self) -> messages.ParticipantList:
        """Close step 1: the advertisements received (U1), in name order."""
        if self.step == "advertise":
            self._enough(len(self.advertisements), "advertised keys")
            if len(self.advertisements) > self.parameters.k:
                raise SecAggError(
                    f"{len(self.advertisements)} holders advertised keys; K = {self.parameters.k}"
                )
            self.step = "share"
        p = self.parameters
        adverts = tuple(self.advertisements[n] for n in sorted(self.advertisements))
        return messages.ParticipantList(p.run_id, p.round, adverts)

    # Step 2

    def receive_shares(self, shares: messages.EncryptedShares) -> None:
        self._expect("share", "encrypted shares", shares.run_id, shares.round)
        if shares.holder not in self.advertisements:
            raise SecAggRefused(f"encrypted shares from {shares.holder!r}, not a participant")
        expected = set(self.advertisements) - {shares.holder}
        if set(shares.ciphertexts) != expected:
            raise SecAggRefused(
                f"the encrypted shares of {shares.holder!r} are not addressed to exactly the "
                f"other participants"
            )
        self._store(self.encrypted_shares, shares.holder, shares, "encrypted shares")

    def share_bundles(self) -> dict[str, messages.ShareBundle]:
        """Close step 2: for each holder that sent shares (U2), the ciphertexts the other
        holders of U2 sealed to it."""
        if self.step == "share":
            self._enough(len(self.encrypted_shares), "shared keys")
            self.step = "mask"
        p = self.parameters
        return {
            recipient: messages.ShareBundle(
                recipient,
                p.run_id,
                p.round,
                {
                    sender: message.ciphertexts[recipient]
                    for sender, message in self.encrypted_shares.items()
                    if sender != recipient
                },
            )
            for recipient in sorted(self.encrypted_shares)
        }

    # Step 3

    def receive_masked_input(self, masked: messages.MaskedInput) -> None:
        self._expect("mask", "masked input", masked.run_id, masked.round)
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
        peers = set(self.encrypted_shares) - {masked.holder}
        if stray := sorted(set(masked.excluded) - peers):
            raise SecAggRefused(
                f"the masked input of {masked.holder!r} excludes {stray[0]!r}, not a peer"
            )
        self._store(self.masked_inputs, masked.holder, masked, "masked input")

    def consistency_check(self) -> messages.ConsistencyCheck:
        """Close step 3: the survivor set S, the holders that sent a masked input less every
        holder one of them excluded (its shares did not open there), so that every member
        of S masked with every other. A masked input arriving later is refused: its holder
        counts as dropped, and its pairwise key is about to be reconstructed."""
        if self.step == "mask":
            excluded = {peer for m in self.masked_inputs.values() for peer in m.excluded}
            survivors = tuple(sorted(set(self.masked_inputs) - excluded))
            self._enough(len(survivors), "sent a masked input that every other one masked with")
            for gone in sorted(set(self.encrypted_shares) - set(survivors)):
                holding = [s for s in survivors if gone not in self._excluded_by(s)]
                self._enough(len(holding), f"of the survivors hold a share of {gone!r}'s key")
            p = self.parameters
            self._check = messages.ConsistencyCheck(p.run_id, p.round, survivors)
            self.step = "consistency"
        if self._check is None:
            raise SecAggError(f"no consistency check during the {self.step} step")
        return self._check

    # Step 4

    def receive_signature(self, signature: messages.SurvivorSignature) -> None:
        self._expect("consistency", "survivor signature", signature.run_id, signature.round)
        check = self._check
        assert check is not None  # set when the consistency step opened
        if signature.holder not in check.survivors:
            raise SecAggRefused(f"a survivor signature from {signature.holder!r}, not a survivor")
        message = consistency.survivor_set_bytes(check.run_id, check.round, check.survivors)
        if not self.roster.verify(signature.holder, signature.signature, message):
            raise SecAggRefused(
                f"the survivor signature of {signature.holder!r} does not verify over the "
                f"survivor set"
            )
        self._store(self.signatures, signature.holder, signature, "survivor signature")

    def unmask_request(self) -> messages.UnmaskRequest:
        """Close step 4: survivors S, dropped holders (shared keys, not in S) and the
        survivors' signatures of S (at least t_min)."""
        if self.step == "consistency":
            check = self._check
            assert check is not None
            self._enough(len(self.signatures), "signed the survivor set")
            dropped = tuple(sorted(set(self.encrypted_shares) - set(check.survivors)))
            signatures = tuple(self.signatures[n] for n in sorted(self.signatures))
            self._request = messages.UnmaskRequest(
                check.run_id, check.round, check.survivors, dropped, signatures
            )
            self.step = "unmask"
        if self._request is None:
            raise SecAggError(f"no unmasking request during the {self.step} step")
        return self._request

    # Step 5

    def receive_unmask_response(self, response: messages.UnmaskResponse) -> None:
        self._expect("unmask", "unmasking response", response.run_id, response.round)
        request = self._request
        assert request is not None  # set when the unmask step opened
        if response.holder not in self.signatures:
            raise SecAggRefused(
                f"an unmasking response from {response.holder!r}, which did not sign the "
                f"survivor set"
            )
        masked_with = set(request.dropped) - set(self._excluded_by(response.holder))
        if (
            set(response.self_mask_shares) != set(request.survivors)
            or set(response.key_shares) != masked_with
        ):
            raise SecAggRefused(
                f"the unmasking response of {response.holder!r} does not answer the request"
            )
        self._store(self.responses, response.holder, response, "unmasking response")

    def result(self) -> Vector:
        """Close step 4: Σ_{survivors} x mod 2^bits, as a uint64 vector.

        From the t_min responders first in roster order that hold a share of it: each
        survivor's seed b and each dropped holder's masking key s_sk (checked against its
        advertised s_pk, so a wrong share is caught for the keys; for the seeds, a wrong
        share gives a uniformly random sum, which the coordinator's range check rejects).
        """
        if self._result is not None:
            return self._result.copy()
        if self.step != "unmask":
            raise SecAggError(f"no result during the {self.step} step")
        request = self._request
        assert request is not None
        self._enough(len(self.responses), "answered the unmasking request")
        p = self.parameters
        responders = sorted(self.responses, key=self.roster.index)
        total = np.zeros(self.dimension, dtype=np.uint64)
        for survivor in request.survivors:
            total = add(total, self.masked_inputs[survivor].vector(), p.bits)
            seed = self._reconstruct(survivor, responders, lambda r: r.self_mask_shares)
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
            holding = [r for r in responders if gone not in self._excluded_by(r)]
            raw = self._reconstruct(gone, holding, lambda r: r.key_shares)
            private = X25519PrivateKey.from_private_bytes(raw)
            if x25519_public(private) != self.advertisements[gone].masking_key:
                raise SecAggError(f"the key shares of {gone!r} do not give its masking key")
            total = self._remove_masks_of(gone, private, request.survivors, total)
        self.step = "done"
        self._result = total
        return total.copy()

    def _excluded_by(self, holder: str) -> tuple[str, ...]:
        """The peers ``holder`` did not mask with (their shares did not open there)."""
        return self.masked_inputs[holder].excluded

    def _reconstruct(
        self,
        owner: str,
        responders: list[str],
        shares_of: Callable[[messages.UnmaskResponse], Mapping[str, bytes]],
    ) -> bytes:
        if len(responders) < self.parameters.t_min:
            raise SecAggError(
                f"only {len(responders)} responders hold a share of {owner!r}; t_min = "
                f"{self.parameters.t_min}"
            )
        shares = [
            Share.from_bytes(self.roster.index(r), shares_of(self.responses[r])[owner])
            for r in responders[: self.parameters.t_min]
        ]
        try:
            return combine_secret(shares, self.parameters.t_min)
        except ShamirError:
            raise SecAggError(f"the shares of {owner!r} do not give a secret") from None

    def _remove_masks_of(
        self, gone: str, private: X25519PrivateKey, survivors: Iterable[str], total: Vector
    ) -> Vector:
        """``total`` without the masks the survivors added for their pairs with ``gone``."""
        p = self.parameters
        for survivor in survivors:
            if gone in self._excluded_by(survivor):
                continue  # its shares did not open there: the survivor added no mask
            public = self.advertisements[survivor].masking_key
            key = pair_seed(agree(private, public), p.run_id, p.round, survivor, gone)
            mask = expand(key, self.dimension, p.bits)
            # The survivor added +mask when gone > survivor, −mask otherwise.
            if mask_sign(survivor, gone) > 0:
                total = subtract(total, mask, p.bits)
            else:
                total = add(total, mask, p.bits)
        return total
