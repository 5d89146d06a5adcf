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
    ConsistencyCheck,
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
from ldpem.common.secagg.consistency import sign_survivors
from ldpem.common.secagg.messages import sign_advertisement
from ldpem.common.secagg.shamir import SHARE_BYTES, Share, combine_secret
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

    def to_consistency(self) -> ConsistencyCheck:
        """Every holder has sent its masked input; the honest check (all survive)."""
        bundles = self.to_bundles()
        for name, holder in self.holders.items():
            self.aggregator.receive_masked_input(holder.masked_input(bundles[name], [7, 9]))
        return self.aggregator.consistency_check()

    def to_unmasking(self) -> UnmaskRequest:
        """Every holder has signed the honest survivor set; the honest request."""
        check = self.to_consistency()
        for holder in self.holders.values():
            self.aggregator.receive_signature(holder.sign_survivors(check))
        return self.aggregator.unmask_request()

    def request(
        self,
        survivors: tuple[str, ...],
        dropped: tuple[str, ...] = (),
        signers: tuple[str, ...] | None = None,
    ) -> UnmaskRequest:
        """A request over ``survivors`` with valid signatures of ``signers`` (default: every
        survivor), forged here with the holders' own keys: what the holder must check
        beyond the signatures."""
        keys = self.consortium.keys
        names = survivors if signers is None else signers
        order = self.consortium.roster.names
        signatures = tuple(sign_survivors(keys[n], n, RUN, 0, survivors, order) for n in names)
        return UnmaskRequest(RUN, 0, survivors, dropped, signatures)


def check(survivors: tuple[str, ...]) -> ConsistencyCheck:
    return ConsistencyCheck(RUN, 0, survivors)


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
    lie = stage.request(NAMES, ("h02",))
    for name in NAMES:
        refuses(stage.holders[name], "unmask", lie, "asks for both kinds of share of 'h02'")


def test_a_second_request_moving_a_survivor_to_dropped_is_refused() -> None:
    stage = Stage()
    honest = stage.to_unmasking()
    holder = stage.holders["h00"]
    holder.unmask(honest)  # shares of b for every holder, h02 included
    lie = stage.request(("h00", "h01", "h03", "h04"), ("h02",))  # now shares of s_sk of h02
    refuses(holder, "unmask", lie, "a second, different unmasking request")


def test_telling_two_groups_different_stories_cannot_reach_both_seeds() -> None:
    """The lie no single holder can see: h00, h01 (and h04 itself) are told h04 survived,
    h02 and h03 that it dropped. Each group signs its own survivor set, but t_min = 3: the
    second set has two signatures, which its own members refuse, and the first group
    refuses to sign the second set."""
    stage = Stage()
    stage.to_consistency()
    survived, without = check(NAMES), check(NAMES[:4])
    first = [stage.holders[n].sign_survivors(survived) for n in ("h00", "h01", "h04")]
    second = [stage.holders[n].sign_survivors(without) for n in ("h02", "h03")]
    seed_request = UnmaskRequest(RUN, 0, NAMES, (), tuple(first))
    seed_shares = [stage.holders[n].unmask(seed_request) for n in ("h00", "h01", "h04")]
    roster = stage.consortium.roster
    # Three shares of b_04: the self-mask seed is the aggregator's, as it should be.
    seed = [
        Share.from_bytes(roster.index(r.holder), r.self_mask_shares["h04"][:SHARE_BYTES])
        for r in seed_shares
    ]
    assert combine_secret(seed, 3) == stage.holders["h04"]._seed
    # The key of h04 needs a request over NAMES[:4] signed by t_min = 3 of its members.
    key_request = UnmaskRequest(RUN, 0, NAMES[:4], ("h04",), tuple(second))
    for name in ("h02", "h03"):
        refuses(stage.holders[name], "unmask", key_request, "2 survivors' signatures")
    refuses(stage.holders["h00"], "sign_survivors", without, "a second, different consistency")
    assert all("h04" not in r.key_shares for r in seed_shares)


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
    stage.to_consistency()
    lie = check(("h00", "h01"))
    refuses(stage.holders["h00"], "sign_survivors", lie, "has 2 holders, fewer than t_min = 3")


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
    refuses(stage.holders["h00"], "share_keys", lie, f"'h04' advertises K, t_min, bits, c = ({k}")


def test_a_round_whose_t_min_is_below_a_holders_floor_is_refused() -> None:
    consortium = Consortium.of(5)
    with pytest.raises(SecAggRefused, match="t_min − c = 3 − 0 honest noise shares is below"):
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


def test_fewer_than_t_min_opening_ciphertexts_are_refused() -> None:
    """Garbage in place of shares: the holder drops that peer, and refuses once fewer than
    t_min − 1 peers' shares open (a smaller set would isolate it)."""
    stage = Stage()
    bundle = stage.to_bundles()["h00"]
    forged = {n: bytes(160) if n != "h01" else c for n, c in bundle.ciphertexts.items()}
    lie = ShareBundle("h00", RUN, 0, forged)
    refuses(stage.holders["h00"], "masked_input", lie, "only 2 holders' shares open; t_min = 3")


def test_shares_redirected_from_another_holder_do_not_open() -> None:
    stage = Stage()
    bundles = stage.to_bundles()
    redirected = dict(bundles["h00"].ciphertexts)
    redirected["h02"] = bundles["h01"].ciphertexts["h02"]  # h02 → h01, given to h00
    masked = stage.holders["h00"].masked_input(ShareBundle("h00", RUN, 0, redirected), [7, 9])
    assert masked.excluded == ("h02",)
    # h02 is then outside what h00 masked with: it signs no set that holds it.
    refuses(stage.holders["h00"], "sign_survivors", check(NAMES), "names 'h02', which this")


@pytest.mark.parametrize(
    ("lie", "message"),
    [
        (check(NAMES[1:]), "leaves out this holder"),
        (check((*NAMES, "h05")), "names 'h05', which this holder did not mask with"),
        (check(("h00", "h00", "h01")), "the survivor set names a holder twice"),
        (ConsistencyCheck(RUN, 1, NAMES), "consistency check is for run 'run-7f3a' round 1"),
    ],
)
def test_a_survivor_set_that_does_not_fit_the_round_is_refused(
    lie: ConsistencyCheck, message: str
) -> None:
    stage = Stage()
    stage.to_consistency()
    refuses(stage.holders["h00"], "sign_survivors", lie, message)


def test_an_unmasking_request_that_does_not_split_the_view_is_refused() -> None:
    stage = Stage()
    stage.to_consistency()
    stage.holders["h00"].sign_survivors(check(NAMES[:4]))
    refuses(stage.holders["h00"], "unmask", stage.request(NAMES[:4]), "leaves out 'h04'")
    stage = Stage()
    stage.to_consistency()
    stage.holders["h00"].sign_survivors(check(NAMES[:4]))
    lie = stage.request(NAMES[:4], ("h04", "h05"))
    refuses(stage.holders["h00"], "unmask", lie, "names 'h05', which did not share keys")


@pytest.mark.parametrize(
    ("lie", "message"),
    [
        ("other set", "are not the set this holder signed"),
        ("duplicated", "carries two signatures of 'h01'"),
        ("outsider", "carries a signature of 'h04', not a survivor"),
        ("too few", "carries 2 survivors' signatures of its survivor set, fewer than t_min"),
        ("forged", "the signature of 'h02' is not its roster key's over this survivor set"),
        ("other round", "the signature of 'h01' is for another round"),
    ],
)
def test_an_unmasking_request_without_t_min_signatures_of_its_set_is_refused(
    lie: str, message: str
) -> None:
    """Signatures over another set, a signer twice, a signer outside S, fewer than t_min,
    a signature by the wrong key or of another round: refused, nothing unmasked."""
    stage = Stage()
    stage.to_consistency()
    survivors = NAMES[:4]
    holder = stage.holders["h00"]
    holder.sign_survivors(check(survivors))
    keys, order = stage.consortium.keys, stage.consortium.roster.names
    good = {n: sign_survivors(keys[n], n, RUN, 0, survivors, order) for n in survivors}
    signatures = {
        "other set": (sign_survivors(keys["h01"], "h01", RUN, 0, NAMES, order),),
        "duplicated": (good["h00"], good["h01"], good["h01"]),
        "outsider": (
            good["h00"],
            good["h01"],
            sign_survivors(keys["h04"], "h04", RUN, 0, NAMES, order),
        ),
        "too few": (good["h00"], good["h01"]),
        "forged": (good["h00"], good["h01"], dataclasses.replace(good["h03"], holder="h02")),
        "other round": (good["h00"], dataclasses.replace(good["h01"], round=1), good["h02"]),
    }[lie]
    survivors_of_request = NAMES if lie == "other set" else survivors
    dropped = () if lie == "other set" else ("h04",)
    request = UnmaskRequest(RUN, 0, survivors_of_request, dropped, signatures)
    refuses(holder, "unmask", request, message)


def test_an_unmasking_request_before_the_survivor_set_is_refused() -> None:
    stage = Stage()
    stage.to_consistency()
    refuses(stage.holders["h00"], "unmask", stage.request(NAMES), "before the consistency check")
    stage = Stage()
    stage.holders["h00"].share_keys(stage.participant_list())
    refuses(stage.holders["h00"], "sign_survivors", check(NAMES), "before the share bundle step")
