"""The secure-aggregation round end to end: the survivors' sum comes out with dropouts at
every step, masks are fresh each round, retries get the same answer, and the aggregator
refuses out-of-step or inconsistent messages from holders."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpem.common.secagg import (
    Aggregator,
    Holder,
    MaskedInput,
    RoundParameters,
    SecAggError,
    SecAggRefused,
    UnmaskResponse,
    generate_signing_key,
    minimum_t_min,
)
from tests.common.secagg.kit import RUN, Consortium, as_list, random_inputs, run_round, wire


@pytest.mark.parametrize("k", [5, 20])
@pytest.mark.parametrize("dropouts", ["none", "one", "k_minus_t_min"])
def test_the_survivors_sum_comes_out(k: int, dropouts: str) -> None:
    consortium = Consortium.of(k)
    parameters = consortium.parameters()
    count = {"none": 0, "one": 1, "k_minus_t_min": k - parameters.t_min}[dropouts]
    dropped = consortium.names[1 : 1 + count]
    done = run_round(consortium, parameters, dim=6, dropped=dropped)
    assert done.request.dropped == tuple(dropped)
    assert len(done.request.survivors) == k - count >= parameters.t_min
    assert done.result == done.expected()


@settings(max_examples=25, deadline=None)
@given(data=st.data(), k=st.integers(2, 9), bits=st.integers(1, 64))
def test_any_allowed_dropouts_give_the_survivors_sum(
    data: st.DataObject, k: int, bits: int
) -> None:
    consortium = Consortium.of(k)
    t_min = data.draw(st.integers(minimum_t_min(k), k), label="t_min")
    names = consortium.names
    dropped = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=k - t_min))
    dim = data.draw(st.integers(1, 5), label="dim")
    done = run_round(
        consortium, consortium.parameters(t_min=t_min, bits=bits), dim=dim, dropped=dropped
    )
    assert set(done.request.dropped) == set(dropped)
    assert done.result == done.expected()


def test_dropouts_at_every_step() -> None:
    consortium = Consortium.of(10)
    parameters = consortium.parameters(t_min=6)
    names = consortium.names
    done = run_round(
        consortium,
        parameters,
        silent=[names[0]],
        no_shares=[names[3]],
        dropped=[names[9]],
        no_unmask=[names[5]],
    )
    assert len(done.participants.advertisements) == 9
    assert sorted(done.bundles) == [n for n in names if n not in (names[0], names[3])]
    assert done.request.dropped == (names[9],)
    assert len(done.responses) == 6
    assert done.result == done.expected()


@pytest.mark.parametrize("bits", [1, 7, 64])
def test_the_sum_wraps_modulo_2_bits(bits: int) -> None:
    consortium = Consortium.of(5)
    parameters = consortium.parameters(bits=bits)
    top = 2**bits - 1
    inputs = {n: [top, 0, top // 2] for n in consortium.names}
    done = run_round(consortium, parameters, dim=3, inputs=inputs, dropped=[consortium.names[2]])
    assert done.result == done.expected() == [(4 * top) % 2**bits, 0, (4 * (top // 2)) % 2**bits]


def test_numpy_inputs_of_either_integer_kind() -> None:
    consortium = Consortium.of(5)
    parameters = consortium.parameters(bits=64)
    values: dict[str, Any] = {
        "h00": np.array([1, 2], dtype=np.int64),
        "h01": np.array([2**64 - 1, 0], dtype=object),
        "h02": [3, 4],
        "h03": np.array([0, 2**62], dtype=np.int64),
        "h04": np.array([5, 6], dtype=np.uint64),
    }
    inputs = {n: [int(x) for x in v] for n, v in values.items()}
    done = run_round(consortium, parameters, dim=2, inputs=inputs)
    assert done.result == done.expected()


def test_masks_and_keys_are_fresh_every_round() -> None:
    consortium = Consortium.of(5)
    inputs = random_inputs(consortium.names, 4, 32)
    rounds = [run_round(consortium, consortium.parameters(r), inputs=inputs) for r in (0, 1)]
    again = run_round(consortium, consortium.parameters(0), inputs=inputs)  # same round
    for name in consortium.names:
        ys = {r.masked[name].values for r in (*rounds, again)}
        assert len(ys) == 3  # same input, three different masked inputs
        adverts = [r.holders[name].advertise() for r in (*rounds, again)]
        assert len({a.encryption_key for a in adverts} | {a.masking_key for a in adverts}) == 6
        assert as_list(rounds[0].masked[name].vector()) != inputs[name]
    assert rounds[0].result == rounds[1].result == again.result


def test_a_holder_answers_a_retry_with_the_same_message() -> None:
    consortium = Consortium.of(5)
    done = run_round(consortium, consortium.parameters())
    name = "h01"
    holder = done.holders[name]
    assert holder.share_keys(done.participants) is holder.share_keys(wire(done.participants))
    assert holder.masked_input(done.bundles[name], done.inputs[name]) == done.masked[name]
    assert holder.unmask(done.request) == done.responses[name]


def test_a_second_masked_input_under_the_same_masks_is_refused() -> None:
    """Two masked inputs under one set of masks would give x − x' away."""
    consortium = Consortium.of(5)
    done = run_round(consortium, consortium.parameters())
    other = [v ^ 1 for v in done.inputs["h01"]]
    with pytest.raises(SecAggRefused, match="a second, different share bundle"):
        done.holders["h01"].masked_input(done.bundles["h01"], other)


def test_an_aggregator_fed_the_same_messages_gives_the_same_sum() -> None:
    consortium = Consortium.of(6)
    parameters = consortium.parameters()
    done = run_round(consortium, parameters, dropped=["h02"])
    again = Aggregator(consortium.roster, parameters, dimension=4)
    for advert in done.participants.advertisements:
        again.receive_advertisement(advert)
    again.participants()
    for shares in done.aggregator.encrypted_shares.values():
        again.receive_shares(shares)
    again.share_bundles()
    for masked in done.masked.values():
        again.receive_masked_input(masked)
    assert again.consistency_check() == done.check
    for signature in done.signatures.values():
        again.receive_signature(signature)
    assert again.unmask_request() == done.request
    for response in done.responses.values():
        again.receive_unmask_response(response)
    assert as_list(again.result()) == done.result == done.expected()


@pytest.mark.parametrize(
    ("k", "t_min", "bits", "message"),
    [
        (6, 3, 32, r"t_min must be in \[4, K = 6\]"),
        (5, 6, 32, r"t_min must be in \[3, K = 5\]"),
        (5, 3, 0, r"bits must be in \[1, 64\]"),
        (1, 1, 32, "K must be at least 2, got 1"),
        (5, 3, 65, r"bits must be in \[1, 64\]"),
    ],
)
def test_round_parameters_are_checked(k: int, t_min: int, bits: int, message: str) -> None:
    with pytest.raises(SecAggRefused, match=message):
        RoundParameters(RUN, 0, k, t_min, bits)
    assert [minimum_t_min(k) for k in (2, 3, 4, 5, 6)] == [2, 2, 3, 3, 4]


def test_a_holder_needs_its_roster_key_and_its_own_floor() -> None:
    consortium = Consortium.of(5)
    parameters = consortium.parameters()  # t_min = 3
    key = consortium.keys["h00"]
    with pytest.raises(SecAggRefused, match="not on its own roster"):
        Holder("h99", consortium.roster, key, parameters, min_honest=1)
    with pytest.raises(SecAggRefused, match="not the roster's key of 'h00'"):
        Holder("h00", consortium.roster, generate_signing_key(), parameters, min_honest=1)
    with pytest.raises(SecAggRefused, match="t_min − c = 3 − 0 honest noise shares is below"):
        Holder("h00", consortium.roster, key, parameters, min_honest=4)
    with pytest.raises(SecAggRefused, match="t_min − c = 5 − 2 honest noise shares is below"):
        Holder("h00", consortium.roster, key, RoundParameters(RUN, 0, 5, 5, 32, 2), min_honest=4)
    with pytest.raises(SecAggRefused, match="K = 7 holders, but the roster has only 5"):
        Holder("h00", consortium.roster, key, RoundParameters(RUN, 0, 7, 4, 32), min_honest=1)


class TestTheAggregatorRefuses:
    """Messages from holders that do not fit the round (the aggregator's own checks)."""

    def setup_method(self) -> None:
        self.consortium = Consortium.of(5)
        self.parameters = self.consortium.parameters()
        self.holders = self.consortium.holders(self.parameters)
        self.aggregator = Aggregator(self.consortium.roster, self.parameters, dimension=3)

    def advertise_all(self) -> None:
        for holder in self.holders.values():
            self.aggregator.receive_advertisement(holder.advertise())

    def test_an_advertisement_of_another_round_or_a_second_one(self) -> None:
        other = Consortium(self.consortium.keys, self.consortium.roster).holders(
            self.consortium.parameters(1)
        )
        with pytest.raises(SecAggRefused, match="for run 'run-7f3a' round 1, not for this round"):
            self.aggregator.receive_advertisement(other["h00"].advertise())
        self.advertise_all()
        self.aggregator.receive_advertisement(self.holders["h00"].advertise())  # a retry
        fresh = self.consortium.holders(self.parameters)["h00"]
        with pytest.raises(SecAggRefused, match="a second, different key advertisement"):
            self.aggregator.receive_advertisement(fresh.advertise())

    def test_messages_out_of_step(self) -> None:
        self.advertise_all()
        participants = self.aggregator.participants()
        shares = {n: h.share_keys(participants) for n, h in self.holders.items()}
        with pytest.raises(SecAggRefused, match="a key advertisement during the shares step"):
            self.aggregator.receive_advertisement(self.holders["h00"].advertise())
        for message in shares.values():
            self.aggregator.receive_shares(message)
        bundles = self.aggregator.share_bundles()
        masked = {n: h.masked_input(bundles[n], [1, 2, 3]) for n, h in self.holders.items()}
        for name in ("h00", "h01", "h02", "h03"):
            self.aggregator.receive_masked_input(masked[name])
        with pytest.raises(SecAggError, match="no result during the masked step"):
            self.aggregator.result()
        check = self.aggregator.consistency_check()
        with pytest.raises(SecAggRefused, match="a masked input during the signature step"):
            self.aggregator.receive_masked_input(masked["h04"])  # late: h04 counts as dropped
        signatures = {n: self.holders[n].sign_survivors(check) for n in check.survivors}
        with pytest.raises(SecAggRefused, match="from 'h04', not a survivor"):
            self.aggregator.receive_signature(dataclasses.replace(signatures["h00"], holder="h04"))
        with pytest.raises(SecAggRefused, match="of 'h01' does not verify over the survivor"):
            self.aggregator.receive_signature(dataclasses.replace(signatures["h00"], holder="h01"))
        for name in ("h00", "h01", "h02"):
            self.aggregator.receive_signature(signatures[name])
        request = self.aggregator.unmask_request()
        with pytest.raises(SecAggRefused, match="a survivor signature during the unmask step"):
            self.aggregator.receive_signature(signatures["h03"])
        response = self.holders["h00"].unmask(request)
        with pytest.raises(SecAggRefused, match="does not answer the request"):
            self.aggregator.receive_unmask_response(
                UnmaskResponse("h00", RUN, 0, response.self_mask_shares, {})
            )
        for name in ("h03", "h04"):  # h03 did not sign in time, h04 is not a survivor
            forged = UnmaskResponse(name, RUN, 0, response.self_mask_shares, response.key_shares)
            with pytest.raises(SecAggRefused, match=f"from '{name}', which did not sign"):
                self.aggregator.receive_unmask_response(forged)

    def test_shares_not_addressed_to_every_other_participant(self) -> None:
        self.advertise_all()
        message = self.holders["h00"].share_keys(self.aggregator.participants())
        partial = type(message)("h00", RUN, 0, dict(list(message.ciphertexts.items())[1:]))
        with pytest.raises(SecAggRefused, match="not addressed to exactly the other participants"):
            self.aggregator.receive_shares(partial)

    def test_a_masked_input_of_the_wrong_size_or_range(self) -> None:
        self.advertise_all()
        participants = self.aggregator.participants()
        for holder in self.holders.values():
            self.aggregator.receive_shares(holder.share_keys(participants))
        self.aggregator.share_bundles()
        with pytest.raises(SecAggRefused, match="has 2 values, not 3"):
            self.aggregator.receive_masked_input(MaskedInput("h00", RUN, 0, bytes(16)))
        with pytest.raises(SecAggRefused, match="is not modulo 2\\^32"):
            self.aggregator.receive_masked_input(MaskedInput("h00", RUN, 0, b"\xff" * 24))
        with pytest.raises(SecAggRefused, match="excludes 'h00', not a peer"):
            self.aggregator.receive_masked_input(MaskedInput("h00", RUN, 0, bytes(24), ("h00",)))

    def test_too_few_holders_to_go_on(self) -> None:
        for name in ("h00", "h01"):
            self.aggregator.receive_advertisement(self.holders[name].advertise())
        with pytest.raises(SecAggError, match="only 2 holders advertised keys; t_min = 3"):
            self.aggregator.participants()


@pytest.mark.parametrize("k", [5, 8])
def test_a_peers_garbage_ciphertext_costs_it_the_round_only(k: int) -> None:
    """h01 seals garbage to h03: h03 does not mask with h01 and names it; the aggregator
    leaves h01 out of the survivor set, and the round gives the sum over the others."""
    consortium = Consortium.of(k)
    done = run_round(consortium, consortium.parameters(), garbage=[("h01", "h03")])
    assert done.masked["h03"].excluded == ("h01",)
    assert all(m.excluded == () for n, m in done.masked.items() if n != "h03")
    assert done.check.survivors == tuple(n for n in consortium.names if n != "h01")
    assert done.request.dropped == ("h01",)
    assert "h01" not in done.responses["h03"].key_shares
    assert done.result == done.expected()


def test_a_left_out_peer_whose_key_too_few_survivors_hold_fails_the_round_early() -> None:
    """h01's shares do not open at h03 and h04 drops: h01 is left out, and only h00 and
    h02 of the survivors hold a share of its key (t_min = 3). The round cannot be unmasked,
    and the aggregator says so before asking anyone to sign."""
    consortium = Consortium.of(5)
    with pytest.raises(SecAggError, match="only 2 holders of the survivors hold a share of 'h01'"):
        run_round(consortium, consortium.parameters(), garbage=[("h01", "h03")], dropped=["h04"])
