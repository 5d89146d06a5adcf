"""A lying aggregator: each lie is refused by the holders before anything unmasked is sent.

The aggregator here is the test: it runs an honest ``Aggregator`` to collect real messages
and then hands the holders what a dishonest one could make of them. Refusals are checked
to be one line, and to end the holder's round (a later honest request is refused too), so
nothing is ever released in answer to a lie.
"""

from __future__ import annotations

import dataclasses
import secrets

import pytest

from ldpem.common.secagg import (
    Aggregator,
    Holder,
    KeyAdvertisement,
    ParticipantList,
    Roster,
    RoundParameters,
    SecAggRefused,
    ShareBundle,
    UnmaskRequest,
    generate_signing_key,
    public_key_bytes,
)
from ldpem.common.secagg.messages import sign_advertisement
from ldpem.common.secagg.shamir import SHARE_BYTES, ShamirError, Share, combine, combine_secret
from tests.common.secagg.kit import RUN, Consortium

NAMES = ("h00", "h01", "h02", "h03", "h04")


class Stage:
    """Five holders (t_min = 3) taken honestly up to a step, for the lie to come next."""

    def __init__(self, round_: int = 0, consortium: Consortium | None = None) -> None:
        self.consortium = consortium or Consortium.of(5)
        self.parameters = self.consortium.parameters(round_)
        self.holders = self.consortium.holders(self.parameters)
        self.adverts = {n: h.advertise() for n, h in self.holders.items()}
        self.aggregator = Aggregator(self.consortium.roster, self.parameters, dimension=2)

    def participant_list(self, *adverts: KeyAdvertisement) -> ParticipantList:
        chosen = adverts or tuple(self.adverts.values())
        return ParticipantList(RUN, self.parameters.round, tuple(chosen))

    def to_bundles(self) -> dict[str, ShareBundle]:
        participants = self.participant_list()
        for holder in self.holders.values():
            self.aggregator.receive_advertisement(holder.advertise())
        self.aggregator.participants()
        for holder in self.holders.values():
            self.aggregator.receive_shares(holder.share_keys(participants))
        return self.aggregator.share_bundles()

    def to_unmasking(self) -> UnmaskRequest:
        """Every holder has sent its masked input; the honest request (all survive)."""
        bundles = self.to_bundles()
        for name, holder in self.holders.items():
            self.aggregator.receive_masked_input(holder.masked_input(bundles[name], [7, 9]))
        return self.aggregator.unmask_request()


def request(survivors: tuple[str, ...], dropped: tuple[str, ...] = ()) -> UnmaskRequest:
    return UnmaskRequest(RUN, 0, survivors, dropped)


def refuses(holder: Holder, step: str, argument: object, message: str) -> None:
    """``holder`` refuses ``argument`` at ``step`` with ``message``, and then anything."""
    call = getattr(holder, step)
    args = (argument, [7, 9]) if step == "masked_input" else (argument,)
    with pytest.raises(SecAggRefused) as caught:
        call(*args)
    assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
    with pytest.raises(SecAggRefused, match="this round was refused earlier"):
        holder.advertise()


# It asks for both kinds of seed of one holder.


def test_a_holder_listed_as_survivor_and_dropped_is_refused() -> None:
    stage = Stage()
    stage.to_unmasking()
    lie = request(NAMES, ("h02",))
    for name in NAMES:
        refuses(stage.holders[name], "unmask", lie, "asks for both kinds of share of 'h02'")


def test_a_second_request_moving_a_survivor_to_dropped_is_refused() -> None:
    stage = Stage()
    honest = stage.to_unmasking()
    holder = stage.holders["h00"]
    holder.unmask(honest)  # shares of b for every holder, h02 included
    lie = request(("h00", "h01", "h03", "h04"), ("h02",))  # now shares of s_sk of h02
    refuses(holder, "unmask", lie, "a second, different unmasking request")


def test_telling_two_groups_different_stories_cannot_reach_both_seeds() -> None:
    """The lie no single holder can see: h00, h01 (and h04 itself) are told h04 survived,
    h02 and h03 that it dropped. Each holder answers, but t_min = 3 > K/2: the second
    group is too small for h04's masking key, and its members refuse to switch sides."""
    stage = Stage()
    stage.to_unmasking()
    survived, dropped = request(NAMES), request(NAMES[:4], ("h04",))
    seed_shares = [stage.holders[n].unmask(survived) for n in ("h00", "h01", "h04")]
    key_shares = [stage.holders[n].unmask(dropped) for n in ("h02", "h03")]
    roster = stage.consortium.roster
    # Three shares of b_04: the self-mask seed is the aggregator's.
    seed = [
        Share.from_bytes(roster.index(r.holder), r.self_mask_shares["h04"][:SHARE_BYTES])
        for r in seed_shares
    ]
    assert combine_secret(seed, 3) == stage.holders["h04"]._seed
    # Two shares of s_sk_04: not enough, and the others will not give one more.
    key = [
        Share.from_bytes(roster.index(r.holder), r.key_shares["h04"][:SHARE_BYTES])
        for r in key_shares
    ]
    with pytest.raises(ShamirError, match="fewer than the threshold"):
        combine_secret(key, 3)
    for name in ("h00", "h01"):
        refuses(stage.holders[name], "unmask", dropped, "a second, different unmasking request")
    # Interpolating the two shares as if t were 2 gives a field element, not h04's key.
    assert combine(key, 2) != int.from_bytes(stage.holders["h04"]._masking_raw, "big")


# It injects a key that is not on the roster (a Sybil attack).


def test_a_participant_not_on_the_roster_is_refused() -> None:
    stage = Stage()
    outsider = generate_signing_key()
    sybil = sign_advertisement(
        outsider,
        "mallory",
        stage.parameters,
        stage.consortium.roster.digest,
        stage.adverts["h04"].encryption_key,
        stage.adverts["h04"].masking_key,
        seed_commitment=stage.adverts["h04"].seed_commitment,
    )
    lie = stage.participant_list(*list(stage.adverts.values())[:4], sybil)
    refuses(stage.holders["h00"], "share_keys", lie, "participant 'mallory' is not on the roster")


def test_a_roster_name_with_the_aggregators_own_keys_is_refused() -> None:
    stage = Stage()
    own = generate_signing_key()
    # The aggregator's own roster, in which "h04" has the aggregator's key.
    forged_roster = Roster({**stage.consortium.roster.keys_by_name, "h04": public_key_bytes(own)})
    impostor = Holder("h04", forged_roster, own, stage.parameters, min_honest=1)
    lie = stage.participant_list(*list(stage.adverts.values())[:4], impostor.advertise())
    refuses(stage.holders["h00"], "share_keys", lie, "of 'h04' is not signed by its roster key")


def test_an_advertisement_with_a_swapped_key_is_refused() -> None:
    stage = Stage()
    mine = secrets.token_bytes(32)  # a masking key whose private key the aggregator holds
    altered = dataclasses.replace(stage.adverts["h04"], masking_key=mine)
    lie = stage.participant_list(*list(stage.adverts.values())[:4], altered)
    refuses(stage.holders["h00"], "share_keys", lie, "of 'h04' is not signed by its roster key")


# It reports fewer than t_min holders.


def test_fewer_than_t_min_participants_are_refused() -> None:
    stage = Stage()
    lie = stage.participant_list(stage.adverts["h00"], stage.adverts["h01"])
    refuses(stage.holders["h00"], "share_keys", lie, "has 2 holders; this round needs between")


def test_fewer_than_t_min_holders_sharing_keys_are_refused() -> None:
    stage = Stage()
    bundle = stage.to_bundles()["h00"]
    lie = ShareBundle("h00", RUN, 0, dict(list(bundle.ciphertexts.items())[:1]))
    refuses(stage.holders["h00"], "masked_input", lie, "only 2 holders shared keys; t_min = 3")


def test_fewer_than_t_min_survivors_are_refused() -> None:
    stage = Stage()
    stage.to_unmasking()
    lie = request(("h00", "h01"), ("h02", "h03", "h04"))
    refuses(stage.holders["h00"], "unmask", lie, "has 2 survivors, fewer than t_min = 3")


# It replays a key advertisement.


def test_an_advertisement_of_a_previous_round_is_refused() -> None:
    consortium = Consortium.of(5)
    before, now = Stage(0, consortium), Stage(1, consortium)
    lie = now.participant_list(*list(now.adverts.values())[:4], before.adverts["h04"])
    refuses(
        now.holders["h00"],
        "share_keys",
        lie,
        "of 'h04' is for run 'run-7f3a' round 0, not this round: a replay",
    )


def test_an_advertisement_of_another_run_is_refused() -> None:
    consortium = Consortium.of(5)
    other = Holder(
        "h04",
        consortium.roster,
        consortium.keys["h04"],
        consortium.parameters(run_id="another-run"),
        min_honest=1,
    )
    stage = Stage(0, consortium)
    lie = stage.participant_list(*list(stage.adverts.values())[:4], other.advertise())
    refuses(stage.holders["h00"], "share_keys", lie, "is for run 'another-run' round 0")


def test_a_share_bundle_of_another_round_is_refused() -> None:
    stage = Stage()
    bundle = stage.to_bundles()["h00"]
    lie = dataclasses.replace(bundle, round=1)
    refuses(stage.holders["h00"], "masked_input", lie, "share bundle is for run 'run-7f3a' round 1")


# It changes K or t_min.


@pytest.mark.parametrize(("k", "t_min"), [(5, 4), (4, 3), (5, 5)])
def test_a_holder_told_another_k_or_t_min_is_refused_by_the_others(k: int, t_min: int) -> None:
    """The coordinator tells h04 other values than the run's: h04 signs them, and every
    other holder refuses a round with it."""
    stage = Stage()
    misled = Holder(
        "h04",
        stage.consortium.roster,
        stage.consortium.keys["h04"],
        RoundParameters(RUN, 0, k, t_min, 32),
        min_honest=1,
    )
    lie = stage.participant_list(*list(stage.adverts.values())[:4], misled.advertise())
    refuses(stage.holders["h00"], "share_keys", lie, f"'h04' advertises K = {k}, t_min = {t_min}")


def test_a_round_whose_t_min_is_below_a_holders_floor_is_refused() -> None:
    consortium = Consortium.of(5)
    with pytest.raises(SecAggRefused, match="t_min = 3 is below this holder's min_honest = 4"):
        consortium.holders(consortium.parameters(1), min_honest=4)
    with pytest.raises(SecAggRefused, match="more than half of K"):
        RoundParameters(RUN, 1, 5, 2, 32)


# Other lies about the round.


def test_a_participant_list_without_this_holder_or_altering_it_is_refused() -> None:
    stage = Stage()
    lie = stage.participant_list(*[a for n, a in stage.adverts.items() if n != "h00"])
    refuses(stage.holders["h00"], "share_keys", lie, "leaves out this holder")
    stage = Stage()
    twice = stage.participant_list(*stage.adverts.values(), stage.adverts["h01"])
    refuses(stage.holders["h00"], "share_keys", twice, "names 'h01' twice")


def test_a_forged_ciphertext_is_refused() -> None:
    stage = Stage()
    bundle = stage.to_bundles()["h00"]
    forged = {n: bytes(160) if n == "h01" else c for n, c in bundle.ciphertexts.items()}
    lie = ShareBundle("h00", RUN, 0, forged)
    refuses(stage.holders["h00"], "masked_input", lie, "the shares from 'h01' do not open")


def test_shares_redirected_from_another_holder_are_refused() -> None:
    stage = Stage()
    bundles = stage.to_bundles()
    redirected = dict(bundles["h00"].ciphertexts)
    redirected["h02"] = bundles["h01"].ciphertexts["h02"]  # h02 → h01, given to h00
    lie = ShareBundle("h00", RUN, 0, redirected)
    refuses(stage.holders["h00"], "masked_input", lie, "the shares from 'h02' do not open")


@pytest.mark.parametrize(
    ("lie", "message"),
    [
        (request(NAMES[1:], ("h00",)), "lists this holder, which sent its masked input, as"),
        (request((*NAMES, "h05")), "names 'h05', which did not share keys with this holder"),
        (request(NAMES[:4]), "leaves out 'h04'"),
        (UnmaskRequest(RUN, 1, NAMES, ()), "unmasking request is for run 'run-7f3a' round 1"),
    ],
)
def test_an_unmasking_request_that_does_not_fit_the_round_is_refused(
    lie: UnmaskRequest, message: str
) -> None:
    stage = Stage()
    stage.to_unmasking()
    refuses(stage.holders["h00"], "unmask", lie, message)


def test_an_unmasking_request_before_the_masked_input_is_refused() -> None:
    stage = Stage()
    stage.holders["h00"].share_keys(stage.participant_list())
    refuses(stage.holders["h00"], "unmask", request(NAMES), "before the share bundle step")
