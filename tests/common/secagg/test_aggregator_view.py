"""Trying to compute one holder's input from everything the aggregator stored.

A normal round of six holders (t_min = 4) in which one holder drops before its masked
input reaches the aggregator, whose late message is handed to the attacker as well. The
attacker holds every message the aggregator received, reconstructs every secret for which
it holds t_min shares, opens every ciphertext it can, removes every mask it can compute,
and still does not get any holder's input: the survivors' inputs stay hidden behind their
pairwise masks with each other, the dropped holder's behind its self-mask.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.secagg import (
    EncryptedShares,
    KeyAdvertisement,
    MaskedInput,
    Roster,
    RoundParameters,
    UnmaskResponse,
)
from ldpem.common.secagg.channel import channel_secret, open_sealed
from ldpem.common.secagg.dealing import masking_key_from_secret
from ldpem.common.secagg.keys import encode_public_key
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
from ldpem.common.secagg.shamir import SHARE_BYTES, ShamirError, Share, combine_secret
from tests.common.secagg.kit import Consortium, Round, as_list, run_round

DIM = 5
DROPPED = "h03"


@pytest.fixture(scope="module")
def done() -> Round:
    consortium = Consortium.of(6)
    return run_round(consortium, consortium.parameters(t_min=4), dim=DIM, dropped=[DROPPED])


class View:
    """Everything the aggregator stored, and every secret that follows from it."""

    def __init__(
        self,
        parameters: RoundParameters,
        roster: Roster,
        adverts: Mapping[str, KeyAdvertisement],
        encrypted: Mapping[str, EncryptedShares],
        masked: Mapping[str, MaskedInput],
        responses: Mapping[str, UnmaskResponse],
    ) -> None:
        self.parameters = parameters
        self.roster = roster
        self.adverts = adverts
        self.encrypted = encrypted
        self.masked = masked
        self.responses = responses
        self.dim = len(next(iter(masked.values())).vector())
        self.seeds: dict[str, bytes] = {}  # reconstructed self-mask seeds b
        self.keys: dict[str, X25519PrivateKey] = {}  # reconstructed masking keys s_sk
        self.shares_held: dict[tuple[str, str], int] = defaultdict(int)
        self._reconstruct()

    @classmethod
    def of(cls, done: Round) -> View:
        aggregator = done.aggregator
        return cls(
            done.parameters,
            aggregator.roster,
            aggregator.advertisements,
            aggregator.encrypted_shares,
            {**aggregator.masked_inputs, **done.late},  # the late one too
            aggregator.responses,
        )

    def _reconstruct(self) -> None:
        found: dict[tuple[str, str], list[Share]] = defaultdict(list)
        for response in self.responses.values():
            x = self.roster.index(response.holder)
            for kind, values in (("b", response.self_mask_shares), ("s", response.key_shares)):
                for owner, value in values.items():
                    found[kind, owner].append(Share.from_bytes(x, value[:SHARE_BYTES]))
        for (kind, owner), shares in found.items():
            self.shares_held[kind, owner] = len(shares)
            try:
                secret = combine_secret(shares, self.parameters.t_min)
            except ShamirError:
                continue
            if kind == "b":
                self.seeds[owner] = secret
            else:
                raw = masking_key_from_secret(secret)  # the 251 bits dealt: a clamped key
                self.keys[owner] = X25519PrivateKey.from_private_bytes(raw)

    def pair_mask(self, target: str, peer: str) -> Vector | None:
        """±PRG(s_uv) as ``target`` added it, if the attacker holds either private key."""
        private = self.keys.get(peer) or self.keys.get(target)
        if private is None:
            return None
        other = target if peer in self.keys else peer
        secret = agree(private, self.adverts[other].masking_key)
        p = self.parameters
        mask = expand(pair_seed(secret, p.run_id, p.round, target, peer), self.dim, p.bits)
        if mask_sign(target, peer) > 0:
            return mask
        return subtract(np.zeros(self.dim, dtype=np.uint64), mask, p.bits)

    def best_guess(self, target: str) -> tuple[list[int], list[str]]:
        """y_target without every mask the attacker can compute, and the masks left on."""
        p = self.parameters
        guess = self.masked[target].vector()
        left = []
        if target in self.seeds:
            mask = self_mask(
                self.seeds[target],
                run_id=p.run_id,
                round_=p.round,
                name=target,
                length=self.dim,
                bits=p.bits,
            )
            guess = subtract(guess, mask, p.bits)
        else:
            left.append("self")
        for peer in self.encrypted:
            if peer == target:
                continue
            pair = self.pair_mask(target, peer)
            if pair is None:
                left.append(peer)
            else:
                guess = subtract(guess, pair, p.bits)
        return as_list(guess), left


def test_no_holders_input_follows_from_the_aggregators_store(done: Round) -> None:
    view = View.of(done)
    assert set(view.seeds) == set(done.request.survivors)  # as the protocol intends
    assert set(view.keys) == {DROPPED}
    for target in view.masked:
        guess, left = view.best_guess(target)
        assert guess != done.inputs[target], target
        assert left, target
    # What stays on: the survivors' masks with each other, the dropped holder's self-mask.
    survivors = done.request.survivors
    assert view.best_guess(survivors[0])[1] == list(survivors[1:])
    assert view.best_guess(DROPPED)[1] == ["self"]


def test_the_aggregator_holds_one_kind_of_share_per_holder(done: Round) -> None:
    view = View.of(done)
    for name in done.holders:
        kinds = {kind for kind in "bs" if view.shares_held[kind, name]}
        assert kinds == ({"s"} if name == DROPPED else {"b"}), name
    # The masking keys of survivors and the seed of the dropped holder: not one share.
    assert all(view.shares_held["s", n] == 0 for n in done.request.survivors)
    assert view.shares_held["b", DROPPED] == 0


def test_no_ciphertext_opens_with_any_key_the_aggregator_can_get(done: Round) -> None:
    view = View.of(done)
    p = view.parameters
    for (sender, message), private in itertools.product(view.encrypted.items(), view.keys.values()):
        for recipient, ciphertext in message.ciphertexts.items():
            for peer in (sender, recipient):
                secret = channel_secret(private, view.adverts[peer].encryption_key)
                with pytest.raises(ValueError):
                    open_sealed(
                        secret,
                        ciphertext,
                        run_id=p.run_id,
                        round_=p.round,
                        sender=sender,
                        recipient=recipient,
                    )


def test_the_store_holds_no_secret_of_any_holder_verbatim(done: Round) -> None:
    messages: list[Any] = [
        *done.aggregator.advertisements.values(),
        *done.aggregator.encrypted_shares.values(),
        *done.aggregator.masked_inputs.values(),
        *done.aggregator.responses.values(),
        *done.late.values(),
    ]
    stored = json.dumps([m.to_dict() for m in messages])
    for holder in done.holders.values():
        for secret in (holder._seed, holder._masking_raw):
            assert encode_public_key(secret)[:16] not in stored
            assert secret.hex()[:16] not in stored


def test_the_store_fits_other_inputs_with_the_same_sum(done: Round) -> None:
    """Two survivors u < w: with x'_u = x_u − δ, x'_w = x_w + δ and their pair mask m
    replaced by m + δ, every masked input is what the aggregator stored. It cannot tell
    m from m + δ without s_uw, i.e. without s_sk_u or s_sk_w, of which it holds no share
    (previous tests): its store fits every split of the sum."""
    view = View.of(done)
    u, w = done.request.survivors[:2]
    bits = view.parameters.bits
    delta = np.array([1, 2, 3, 4, 5], dtype=np.uint64)
    m = true_pair_mask(done, u, w)
    x_u = np.array(done.inputs[u], dtype=np.uint64)
    x_w = np.array(done.inputs[w], dtype=np.uint64)
    rest_u = subtract(done.masked[u].vector(), add(x_u, m, bits), bits)  # all but x_u and m
    rest_w = add(subtract(done.masked[w].vector(), x_w, bits), m, bits)  # w added −m
    x_u2, x_w2, m2 = subtract(x_u, delta, bits), add(x_w, delta, bits), add(m, delta, bits)
    assert as_list(add(add(x_u2, m2, bits), rest_u, bits)) == as_list(done.masked[u].vector())
    assert as_list(subtract(add(x_w2, rest_w, bits), m2, bits)) == as_list(done.masked[w].vector())
    assert as_list(x_u2) != done.inputs[u]


def true_pair_mask(done: Round, u: str, w: str) -> Vector:
    """PRG(s_uw) computed with u's private key: what the aggregator cannot compute."""
    p = done.parameters
    secret = agree(done.holders[u]._masking, done.aggregator.advertisements[w].masking_key)
    return expand(pair_seed(secret, p.run_id, p.round, u, w), DIM, p.bits)
