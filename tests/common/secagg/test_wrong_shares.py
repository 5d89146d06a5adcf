"""A wrong Shamir share is detected and its sender named (issue 29, finding 2): every share
is signed by its dealer (``dealing.py``), the seed b is committed in the signed
advertisement, and the aggregator drops a responder whose share its dealer did not deal
it, rebuilding the secret from the others, or names a dealer whose signed shares do not
give the secret it committed to. On 8e54e94 none of this existed: a wrong share made
``Aggregator.result`` raise "the shares of … do not give a secret" (or return a wrong sum),
naming the victim and never the culprit, and a holder took any share its peer sealed."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import pytest

from ldpem.common.secagg import (
    Aggregator,
    Holder,
    RoundParameters,
    SecAggError,
    SecAggRefused,
    ShareBundle,
    SurvivorSignature,
    UnmaskRequest,
    UnmaskResponse,
    dealing,
)
from ldpem.common.secagg.channel import channel_secret, seal
from ldpem.common.secagg.errors import FaultyDealer, FaultyResponders
from ldpem.common.secagg.messages import sign_advertisement
from ldpem.common.secagg.shamir import PRIME, SHARE_BYTES
from tests.common.secagg.kit import RUN, Consortium, dealing_wrong, random_inputs, wire

K, T_MIN = 5, 3


@pytest.fixture(scope="module")
def consortium() -> Consortium:
    return Consortium.of(K)


@dataclass
class Staged:
    """A round up to the unmasking responses, which the aggregator has not received;
    ``dealt``: what each holder opened from its bundle (its signed shares, by dealer),
    kept before its answer made it forget them."""

    parameters: RoundParameters
    holders: dict[str, Holder]
    aggregator: Aggregator
    inputs: dict[str, list[int]]
    request: UnmaskRequest
    responses: dict[str, UnmaskResponse]
    dealt: dict[str, dict[str, tuple[bytes, bytes]]]
    signatures: list[SurvivorSignature]

    def expected(self) -> list[int]:
        modulus = 2**self.parameters.bits
        survivors = self.request.survivors
        return [sum(self.inputs[n][j] for n in survivors) % modulus for j in range(DIM)]

    def result(self, responses: dict[str, UnmaskResponse]) -> list[int]:
        """The sum a fresh aggregator, fed this round's messages and ``responses``, finds."""
        a = self.aggregator
        fresh = Aggregator(a.roster, self.parameters, dimension=DIM)
        for advertisement in a.advertisements.values():
            fresh.receive_advertisement(advertisement)
        fresh.participants()
        for shares in a.encrypted_shares.values():
            fresh.receive_shares(shares)
        fresh.share_bundles()
        for masked in a.masked_inputs.values():
            fresh.receive_masked_input(masked)
        fresh.consistency_check()
        for signature in self.signatures:
            fresh.receive_signature(signature)
        fresh.unmask_request()
        for response in responses.values():
            fresh.receive_unmask_response(wire(response))
        self.last = fresh
        return [int(v) for v in fresh.result()]


DIM = 4


def stage(
    consortium: Consortium,
    *,
    round_: int = 0,
    dropped: Collection[str] = (),
    wrong_dealer: tuple[str, dealing.Kind] | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
    moved: int = 2,
) -> Staged:
    """The round; ``wrong_dealer`` (name, kind): that holder deals wrong shares of that
    secret (``dealing_wrong``)."""
    parameters = consortium.parameters(round_, t_min=T_MIN)
    holders = consortium.holders(parameters)
    aggregator = Aggregator(consortium.roster, parameters, dimension=DIM)
    inputs = random_inputs(holders, DIM, parameters.bits)
    for h in holders.values():
        aggregator.receive_advertisement(wire(h.advertise()))
    participants = aggregator.participants()
    for name, h in holders.items():
        if wrong_dealer is not None and wrong_dealer[0] == name:
            assert monkeypatch is not None
            with monkeypatch.context() as patch:
                dealing_wrong(patch, h, wrong_dealer[1], moved=moved)
                aggregator.receive_shares(wire(h.share_keys(participants)))
        else:
            aggregator.receive_shares(wire(h.share_keys(participants)))
    bundles = aggregator.share_bundles()
    for name, h in holders.items():
        masked = h.masked_input(bundles[name], inputs[name])
        if name not in dropped:
            aggregator.receive_masked_input(wire(masked))
    check = aggregator.consistency_check()
    signatures = [holders[n].sign_survivors(check) for n in check.survivors]
    for signature in signatures:
        aggregator.receive_signature(wire(signature))
    request = aggregator.unmask_request()
    dealt = {n: dict(h._received) for n, h in holders.items()}
    responses = {n: holders[n].unmask(request) for n in request.survivors}
    return Staged(parameters, holders, aggregator, inputs, request, responses, dealt, signatures)


def with_share(
    response: UnmaskResponse, owner: str, signed: bytes, *, kind: dealing.Kind = "b"
) -> UnmaskResponse:
    """``response`` revealing ``signed`` as its share of ``owner``'s secret of ``kind``."""
    if kind == "b":
        shares = {**response.self_mask_shares, owner: signed}
        return dataclasses.replace(response, self_mask_shares=shares)
    return dataclasses.replace(response, key_shares={**response.key_shares, owner: signed})


def random_value() -> bytes:
    return secrets.randbelow(PRIME).to_bytes(SHARE_BYTES, "big")


# --- a responder's wrong share ---------------------------------------------------------


def test_a_random_share_is_named_and_the_sum_rebuilt_from_the_others(
    consortium: Consortium,
) -> None:
    """Guards: one responder's random share of a survivor's seed no longer spoils the
    round (8e54e94: SecAggError naming the survivor, not the responder): with 5
    responses and t_min = 3 the sum is exact, and the responder is named."""
    s = stage(consortium)
    honest = s.responses["h01"].self_mask_shares["h00"]
    responses = dict(s.responses)
    responses["h01"] = with_share(s.responses["h01"], "h00", random_value() + honest[SHARE_BYTES:])
    assert s.result(responses) == s.expected()
    assert list(s.last.faulty) == ["h01"]
    assert "'h00'" in s.last.faulty["h01"]
    # The honest responses alone give the same sum, and blame no one.
    assert s.result(s.responses) == s.expected()
    assert s.last.faulty == {}


def test_a_random_share_of_a_dropped_holders_key_is_named_too(consortium: Consortium) -> None:
    """Guards the masking-key side: a wrong share of a dropped holder's s_sk (8e54e94:
    SecAggError naming the dropped holder) is dropped and the sum rebuilt."""
    s = stage(consortium, dropped={"h04"})
    responses = dict(s.responses)
    fake = random_value() + s.responses["h00"].key_shares["h04"][SHARE_BYTES:]
    responses["h00"] = with_share(s.responses["h00"], "h04", fake, kind="s")
    assert s.result(responses) == s.expected()
    assert list(s.last.faulty) == ["h00"]


def test_too_few_verified_shares_fail_cleanly_naming_the_responder(
    consortium: Consortium,
) -> None:
    """Guards the failure path: with exactly t_min responses and one wrong, the round
    cannot finish; the error is a one-line SecAggError that names the responder (a field
    the coordinator reports), never the innocent holder whose seed it is."""
    s = stage(consortium)
    responses = {n: s.responses[n] for n in ("h00", "h01", "h02")}
    honest = responses["h02"].self_mask_shares["h03"]
    responses["h02"] = with_share(responses["h02"], "h03", random_value() + honest[SHARE_BYTES:])
    with pytest.raises(FaultyResponders) as caught:
        s.result(responses)
    assert caught.value.culprits == ("h02",)
    assert isinstance(caught.value, SecAggError)
    assert "'h02'" in str(caught.value) and "\n" not in str(caught.value)


def test_a_share_dealt_for_another_round_recipient_kind_or_dealing_is_rejected(
    consortium: Consortium,
) -> None:
    """Guards the binding of the dealer's signature: a responder (h01) presenting a real
    share of h00, validly signed by h00 but dealt for another kind, recipient, round or
    dealing of this round (an agent restarted mid-round deals anew), or with a tampered
    signature, is named and dropped; the sum is still right (8e54e94 had no signature:
    any of these spoilt the round)."""
    s = stage(consortium)
    again, later = stage(consortium), stage(consortium, round_=1)
    mine = s.dealt["h01"]["h00"][0]
    cases = {
        "another kind": s.dealt["h01"]["h00"][1],
        "another recipient": s.dealt["h02"]["h00"][0],
        "another round": later.responses["h01"].self_mask_shares["h00"],
        "another dealing of this round": again.responses["h01"].self_mask_shares["h00"],
        "a tampered signature": random_value() + mine[SHARE_BYTES:-1] + bytes([mine[-1] ^ 1]),
    }
    assert s.responses["h01"].self_mask_shares["h00"] == mine
    for what, signed in cases.items():
        responses = dict(s.responses)
        responses["h01"] = with_share(s.responses["h01"], "h00", signed)
        assert s.result(responses) == s.expected(), what
        assert list(s.last.faulty) == ["h01"], what


# --- a dealer's wrong shares -------------------------------------------------------------


def test_a_dealer_of_wrong_shares_is_named_when_its_secret_is_needed(
    consortium: Consortium, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the dealer side: h00, a survivor, dealt wrong shares of its seed b (to
    itself and h01, first responders). Every share carries h00's valid signature, yet t_min of
    them miss h00's commitment: FaultyDealer names h00, no responder is blamed (8e54e94:
    "the shares of 'h00' do not give a secret", the same as for a lying responder)."""
    s = stage(consortium, wrong_dealer=("h00", "b"), monkeypatch=monkeypatch)
    with pytest.raises(FaultyDealer) as caught:
        s.result(s.responses)
    assert caught.value.culprits == ("h00",)
    assert s.last.faulty == {}
    assert "'h00' dealt wrong shares" in str(caught.value)
    # The same dealing, h00 dropped: its seed is not needed, its key is (and right).
    d = stage(consortium, dropped={"h00"}, wrong_dealer=("h00", "b"), monkeypatch=monkeypatch)
    assert d.result(d.responses) == d.expected()


def test_a_dealer_whose_wrong_shares_can_be_decoded_around_is_named_and_the_round_completes(
    consortium: Consortium, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41: "a faulty dealing ... names it, and the round completes when enough
    correct shares remain". h00, a survivor, signed one share of its seed off its
    polynomial: t_min = 3 of the shares miss its commitment, but the K = 5 responses leave
    at most (5 − 3)/2 = 1 wrong, which decoding corrects (``shamir.decode``; the same code
    rebuilds a dropped holder's key). The sum is exact, h00 is named in ``dealt_wrong``
    and no responder is blamed. On ff9f02a this was FaultyDealer, and the coordinator
    failed the run."""
    s = stage(consortium, wrong_dealer=("h00", "b"), monkeypatch=monkeypatch, moved=1)
    assert s.result(s.responses) == s.expected()
    assert list(s.last.dealt_wrong) == ["h00"] and s.last.faulty == {}
    assert "not all on one polynomial" in s.last.dealt_wrong["h00"]


def test_a_dealers_wrong_shares_of_a_secret_not_needed_cost_nothing(
    consortium: Consortium, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The masking key of a survivor is never rebuilt: h00's wrong shares of it leave the
    round and its sum untouched; dropped, h00 is named (8e54e94: "the key shares of
    'h00' do not give its masking key", the same as for a lying responder)."""
    s = stage(consortium, wrong_dealer=("h00", "s"), monkeypatch=monkeypatch)
    assert s.result(s.responses) == s.expected()
    d = stage(consortium, dropped={"h00"}, wrong_dealer=("h00", "s"), monkeypatch=monkeypatch)
    with pytest.raises(FaultyDealer) as caught:
        d.result(d.responses)
    assert caught.value.culprits == ("h00",)


# --- the recipient checks what it opens ---------------------------------------------------


def test_a_holder_refuses_a_share_its_sender_did_not_sign_for_it(
    consortium: Consortium,
) -> None:
    """Guards the recipient's check on opening: a sealed pair whose shares are signed
    for another recipient, kind, round, run or dealing, by another key, or with a
    tampered signature, does not open (8e54e94 took any 66 bytes), so no honest holder
    can be framed for a share its dealer did not give it."""
    parameters = consortium.parameters(0, t_min=T_MIN)

    def forged(holders: dict[str, Holder], **change: Any) -> bytes:
        commitment = holders["h00"].advertise().seed_commitment
        where: dict[str, Any] = {
            "run_id": RUN,
            "round_": 0,
            "dealer": "h00",
            "recipient": "h01",
            "commitment": commitment,
        }
        signer = change.pop("signer", consortium.keys["h00"])
        kinds = change.pop("kinds", dealing.KINDS)
        tamper = change.pop("tamper", False)
        where.update(change)
        pair = b"".join(
            dealing.sign_share(signer, random_value(), dealing.ShareLabel(kind=kind, **where))
            for kind in kinds
        )
        return pair[:-1] + bytes([pair[-1] ^ 1]) if tamper else pair

    cases: dict[str, dict[str, Any]] = {
        "honest": {},
        "another recipient": {"recipient": "h02"},
        "another kind": {"kinds": ("s", "b")},
        "another round": {"round_": 1},
        "another run": {"run_id": RUN + "x"},
        "another dealing": {"commitment": bytes(32)},
        "another key": {"signer": consortium.keys["h02"]},
        "a tampered signature": {"tamper": True},
    }
    for what, change in cases.items():
        holders = consortium.holders(parameters)
        aggregator = Aggregator(consortium.roster, parameters, dimension=DIM)
        for h in holders.values():
            aggregator.receive_advertisement(h.advertise())
        participants = aggregator.participants()
        for h in holders.values():
            aggregator.receive_shares(h.share_keys(participants))
        bundle = aggregator.share_bundles()["h01"]
        secret = channel_secret(
            holders["h00"]._encryption, holders["h01"].advertise().encryption_key
        )
        plaintext = forged(holders, **change)
        sealed = seal(secret, plaintext, run_id=RUN, round_=0, sender="h00", recipient="h01")
        lie = ShareBundle("h01", RUN, 0, {**bundle.ciphertexts, "h00": sealed})
        if what == "honest":  # the forgery kit itself makes shares that open
            holders["h01"].masked_input(lie, [0] * DIM)
            continue
        # It costs h00 the round at h01 (not masked with, named), not h01's round.
        assert holders["h01"].masked_input(lie, [0] * DIM).excluded == ("h00",), what


def test_the_seed_commitment_is_signed(consortium: Consortium) -> None:
    """Guards the seed commitment (absent on 8e54e94): the commitment a dealer is held to
    is its own: a coordinator that swaps it (to blame an honest dealer) breaks the
    advertisement's signature."""
    parameters = consortium.parameters(0, t_min=T_MIN)
    advertisement = consortium.holders(parameters)["h00"].advertise()
    assert len(advertisement.seed_commitment) == dealing.COMMITMENT_BYTES
    swapped = dataclasses.replace(advertisement, seed_commitment=bytes(32))
    fresh = Aggregator(consortium.roster, parameters, dimension=DIM)
    with pytest.raises(SecAggRefused, match="not signed by its roster key"):
        fresh.receive_advertisement(swapped)


@pytest.mark.parametrize("which", ["encryption_key", "masking_key"])
def test_an_unusable_key_is_refused_at_its_advertisement(
    consortium: Consortium, which: str
) -> None:
    """Guards the aggregator against a holder's low-order X25519 key, validly signed by
    that holder: on 8e54e94 the aggregator took it, and once the honest holders refused
    it and dropped while colluders survived, ``result`` raised ValueError (the agreement
    of a dropped holder's key with it), uncaught by the coordinator: a 500, or a deadline
    tick failing on every pass. Now the advertisement is refused (a 422)."""
    parameters = consortium.parameters(0, t_min=T_MIN)
    honest = consortium.holders(parameters)["h02"].advertise()
    keys = {"encryption_key": honest.encryption_key, "masking_key": honest.masking_key}
    keys[which] = bytes(32)  # the identity point: every agreement with it is zero
    bad = sign_advertisement(
        consortium.keys["h02"],
        "h02",
        parameters,
        consortium.roster.digest,
        keys["encryption_key"],
        keys["masking_key"],
        seed_commitment=honest.seed_commitment,
    )
    aggregator = Aggregator(consortium.roster, parameters, dimension=DIM)
    kind = which.split("_")[0]
    with pytest.raises(SecAggRefused, match=f"the {kind} key of 'h02' is not usable"):
        aggregator.receive_advertisement(bad)
    aggregator.receive_advertisement(honest)
