"""The real ``ldpem client`` of a secagg run against a coordinator that LIES (issue 21,
docs/PRIVACY.md "secagg"). A fake coordinator (FastAPI in a thread) plays the four
secure-aggregation steps with an honest ``Aggregator`` and four in-process ``Holder``s (the
other hospitals of the roster), and hands the agent (h0) what a dishonest coordinator could
make of the real messages. Each lie must end the agent (exit 2, one line) before it sends
anything that would reveal more than the masked sum: no shares after a forged participant
list, no masked input after a forged bundle, no unmask response to a forged request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ldpem.client.ledger import Ledger
from ldpem.common.core.accounting import ratio_for_budget
from ldpem.common.core.secagg_accounting import fallback_epsilon, skellam_epsilon
from ldpem.common.secagg import (
    Aggregator,
    Holder,
    KeyAdvertisement,
    ParticipantList,
    RoundParameters,
    UnmaskRequest,
    generate_signing_key,
)
from ldpem.common.secagg.checks import check_advertisement
from ldpem.common.secagg.messages import sign_advertisement
from ldpem.common.secagg.runvalues import run_digest, run_shares_mechanism
from ldpem.common.secagg.steps import HOLDER_STEPS
from tests.secaggkit import (
    FAKE_D,
    FAKE_ROUNDS,
    FAKE_RUN,
    FakeConsortium,
    attack,
    refused,
    refused_before_anything,
)

pytestmark = pytest.mark.slow

NAMES = ("h0", "h1", "h2", "h3", "h4")
K, T_MIN = 5, 3


class Consortium(FakeConsortium):
    """The fake's consortium on the mesh: K = 5 holders, t_min = 3 (``mesh_consortium``)."""

    def parameters(self, t: int, **change: int) -> RoundParameters:
        p = self.params
        assert p.holders is not None and p.t_min is not None and p.modulus_bits is not None
        values = {"k": p.holders, "t_min": p.t_min, "bits": p.modulus_bits, **change}
        colluders = values.get("colluders", p.colluders or 0)
        return RoundParameters(
            FAKE_RUN,
            t,
            values["k"],
            values["t_min"],
            values["bits"],
            colluders,
            run_digest=run_digest(p),
        )


def mesh_consortium() -> Consortium:
    return Consortium.make(NAMES, t_min=T_MIN)


#: A lie: takes the fake's round state and the honest message, returns the one sent.
Lie = Callable[["SecAggRound", Any], Any]


@dataclass
class SecAggRound:
    """Round t as the fake coordinator plays it: h0 is the agent, h1 … h4 are in-process."""

    consortium: Consortium
    t: int
    others: dict[str, Holder]
    aggregator: Aggregator
    adverts: dict[str, KeyAdvertisement] = field(default_factory=dict)
    participants: ParticipantList | None = None
    bundles: dict[str, Any] = field(default_factory=dict)
    result: list[int] | None = None

    @classmethod
    def open(cls, consortium: Consortium, t: int) -> SecAggRound:
        parameters = consortium.parameters(t)
        aggregator = Aggregator(consortium.roster, parameters, dimension=FAKE_D)
        return cls(consortium, t, consortium.others(parameters), aggregator)


@dataclass
class Fake:
    consortium: Consortium
    #: Lies by (round, step): "participants", "bundle", "unmask-request".
    lies: dict[tuple[int, str], Lie] = field(default_factory=dict)
    #: Per-round changes to the RoundInfo's params.
    params_change: dict[int, dict[str, Any]] = field(default_factory=dict)
    posts: list[tuple[int, str]] = field(default_factory=list)
    rounds: dict[int, SecAggRound] = field(default_factory=dict)

    def round(self, t: int) -> SecAggRound:
        if t not in self.rounds:
            self.rounds[t] = SecAggRound.open(self.consortium, t)
        return self.rounds[t]

    def published(self, t: int | None) -> dict[str, Any]:
        params = self.consortium.params.model_dump(mode="json")
        return params if t is None else {**params, **self.params_change.get(t, {})}

    def take(self, t: int, step: str, body: dict[str, Any]) -> None:
        self.receive(self.round(t), step, body)

    def send(self, t: int, what: str) -> Any:
        honest = self.answer(self.round(t), what)
        lie = self.lies.get((t, what))
        return honest if lie is None else lie(self.round(t), honest)

    def receive(self, r: SecAggRound, step: str, body: dict[str, Any]) -> None:
        from ldpem.common.secagg import (
            EncryptedShares,
            MaskedInput,
            SurvivorSignature,
            UnmaskResponse,
        )

        if step == "advertise":
            r.adverts["h0"] = KeyAdvertisement.from_dict(body)
            for name, holder in r.others.items():
                r.adverts[name] = holder.advertise()
            for name in NAMES:
                r.aggregator.receive_advertisement(r.adverts[name])
            r.participants = r.aggregator.participants()
        elif step == "shares":
            assert r.participants is not None
            r.aggregator.receive_shares(EncryptedShares.from_dict(body))
            for holder in r.others.values():
                r.aggregator.receive_shares(holder.share_keys(r.participants))
            r.bundles = r.aggregator.share_bundles()
        elif step == "masked":
            r.aggregator.receive_masked_input(MaskedInput.from_dict(body))
            for name in ("h1", "h2", "h3"):  # h4 drops out before masking
                holder = r.others[name]
                r.aggregator.receive_masked_input(
                    holder.masked_input(r.bundles[name], [0] * FAKE_D)
                )
        elif step == "signature":
            r.aggregator.receive_signature(SurvivorSignature.from_dict(body))
            check = r.aggregator.consistency_check()
            for name in check.survivors:
                if name != "h0":
                    r.aggregator.receive_signature(r.others[name].sign_survivors(check))
        elif step == "unmask":
            r.aggregator.receive_unmask_response(UnmaskResponse.from_dict(body))
            request = r.aggregator.unmask_request()
            for name in [s.holder for s in request.signatures if s.holder != "h0"]:
                r.aggregator.receive_unmask_response(r.others[name].unmask(request))
            r.result = [int(v) for v in r.aggregator.result()]

    def answer(self, r: SecAggRound, what: str) -> Any:
        if what == "participants":
            return r.participants
        if what == "bundle":
            return r.bundles["h0"]
        if what == "consistency-check":
            return r.aggregator.consistency_check()
        return r.aggregator.unmask_request()


@pytest.fixture(scope="module")
def consortium() -> Consortium:
    return mesh_consortium()


def test_an_honest_fake_runs_to_the_end(tmp_path: Path, consortium: Consortium) -> None:
    """The control: the same fake without a lie sees both rounds through, and its sum of
    the survivors (h0's input plus zeros) is h0's masked report, unmasked."""
    fake = Fake(consortium)
    outcome = attack(tmp_path, fake)
    assert outcome.code == 0, outcome.log[-3000:]
    steps = list(HOLDER_STEPS)
    assert outcome.posts == [(t, s) for t in range(FAKE_ROUNDS) for s in steps]
    assert all(fake.rounds[t].result is not None for t in range(FAKE_ROUNDS))
    assert any(v != 0 for v in fake.rounds[0].result or [])


def _both_kinds(r: SecAggRound, honest: UnmaskRequest) -> UnmaskRequest:
    """h1 both among the survivors (shares of its self-mask seed) and the dropped (shares
    of its masking key): the two together unmask h1's input."""
    return dataclasses.replace(honest, dropped=(*honest.dropped, "h1"))


def test_both_kinds_of_seed_for_one_holder(tmp_path: Path, consortium: Consortium) -> None:
    outcome = attack(tmp_path, Fake(consortium, lies={(0, "unmask-request"): _both_kinds}))
    line = refused(outcome, "secure aggregation refused")
    assert "h1" in line
    assert (0, "unmask") not in outcome.posts
    assert outcome.posts == [(0, "advertise"), (0, "shares"), (0, "masked"), (0, "signature")]


def _resign(a: KeyAdvertisement, key: Any) -> KeyAdvertisement:
    return sign_advertisement(
        key,
        a.holder,
        a.parameters,
        a.roster_digest,
        a.encryption_key,
        a.masking_key,
        seed_commitment=a.seed_commitment,
    )


def _foreign_key(r: SecAggRound, honest: ParticipantList) -> ParticipantList:
    """h1's advertisement re-signed with a key that is not h1's roster key."""
    intruder = generate_signing_key()
    adverts = tuple(_resign(a, intruder) if a.holder == "h1" else a for a in honest.advertisements)
    return dataclasses.replace(honest, advertisements=adverts)


def _stranger(r: SecAggRound, honest: ParticipantList) -> ParticipantList:
    """A sixth participant, h9, who is not on the roster at all."""
    intruder = generate_signing_key()
    h1 = next(a for a in honest.advertisements if a.holder == "h1")
    h9 = _resign(dataclasses.replace(h1, holder="h9"), intruder)
    return dataclasses.replace(honest, advertisements=(*honest.advertisements, h9))


@pytest.mark.parametrize("lie", [_foreign_key, _stranger], ids=["resigned", "stranger"])
def test_a_key_not_on_the_roster(tmp_path: Path, consortium: Consortium, lie: Lie) -> None:
    outcome = attack(tmp_path, Fake(consortium, lies={(0, "participants"): lie}))
    refused(outcome, "secure aggregation refused")
    assert outcome.posts == [(0, "advertise")]  # no shares, no masked input


def _too_few(r: SecAggRound, honest: UnmaskRequest) -> UnmaskRequest:
    """Only h0 and h1 survive (t_min is 3): the 'sum' would be h0's input plus h1's."""
    dropped = tuple(n for n in (*honest.survivors, *honest.dropped) if n not in ("h0", "h1"))
    return dataclasses.replace(honest, survivors=("h0", "h1"), dropped=dropped)


def test_fewer_than_t_min_survivors(tmp_path: Path, consortium: Consortium) -> None:
    outcome = attack(tmp_path, Fake(consortium, lies={(0, "unmask-request"): _too_few}))
    refused(outcome, "secure aggregation refused")
    assert (0, "unmask") not in outcome.posts


def _replay(r: SecAggRound, honest: ParticipantList) -> ParticipantList:
    """Round 1's list carrying h1's advertisement of round 0 (whose keys the coordinator
    may have learnt to undo, or whose masks it can already cancel)."""
    fake_round0 = REPLAY_SOURCE["round0"]
    old = fake_round0.adverts["h1"]
    adverts = tuple(old if a.holder == "h1" else a for a in honest.advertisements)
    return dataclasses.replace(honest, advertisements=adverts)


REPLAY_SOURCE: dict[str, SecAggRound] = {}


def test_a_replayed_advertisement(tmp_path: Path, consortium: Consortium) -> None:
    fake = Fake(consortium, lies={(1, "participants"): _replay})
    REPLAY_SOURCE["round0"] = fake.round(0)
    outcome = attack(tmp_path, fake)
    refused(outcome, "secure aggregation refused")
    assert outcome.posts[-1] == (1, "advertise")
    assert (1, "shares") not in outcome.posts


def _changed_t_min(r: SecAggRound, honest: ParticipantList) -> ParticipantList:
    """Round 1's other advertisements made by holders told t_min = 4 (signed by them)."""
    return _others_with(r, honest, t_min=T_MIN + 1)


def _changed_k(r: SecAggRound, honest: ParticipantList) -> ParticipantList:
    return _others_with(r, honest, k=K - 1, t_min=T_MIN)


def _others_with(r: SecAggRound, honest: ParticipantList, **change: int) -> ParticipantList:
    parameters = r.consortium.parameters(r.t, **change)
    adverts = tuple(
        a
        if a.holder == "h0"
        else Holder(
            a.holder, r.consortium.roster, r.consortium.keys[a.holder], parameters, min_honest=1
        ).advertise()
        for a in honest.advertisements
    )
    return dataclasses.replace(honest, advertisements=adverts)


@pytest.mark.parametrize("lie", [_changed_t_min, _changed_k], ids=["t_min", "K"])
def test_k_or_t_min_changed_in_the_advertisements(
    tmp_path: Path, consortium: Consortium, lie: Lie
) -> None:
    outcome = attack(tmp_path, Fake(consortium, lies={(1, "participants"): lie}))
    refused(outcome, "secure aggregation refused")
    assert (1, "shares") not in outcome.posts


@pytest.mark.parametrize(
    "change",
    [{"t_min": T_MIN + 1}, {"holders": K + 1}, {"colluders": 1}],
    ids=["t_min", "K", "c"],
)
def test_k_or_t_min_changed_in_the_run(
    tmp_path: Path, consortium: Consortium, change: dict[str, int]
) -> None:
    outcome = attack(tmp_path, Fake(consortium, params_change={1: change}))
    line = refused(outcome, "changed its parameters")
    assert next(iter(change)) in line
    assert all(t == 0 for t, _ in outcome.posts)  # nothing at all for round 1


def test_the_ledger_records_the_fallback_epsilon_beside_the_charge(
    tmp_path: Path, consortium: Consortium
) -> None:
    """Each round charges the run's (ε, δ), the guarantee of the sum under the trust
    assumption, and records beside it the ε a round refused after masking costs (issue 41):
    that of a sum of t_min − max(c, b) = 3 − 0 honest shares (--max-colluders 0), computed
    here from the shares' Skellam mean and the sensitivity; it equals the run's ε up to
    the calibration's tolerance, where one share alone (issue 29's fallback) was 1.8."""
    outcome = attack(tmp_path, Fake(consortium))
    assert outcome.code == 0, outcome.log[-3000:]
    params = consortium.params
    share = run_shares_mechanism(params)
    sensitivity = getattr(share, "integer_sensitivity")(FAKE_D)  # noqa: B009
    mean = float(getattr(share, "share_mean"))  # noqa: B009
    expected = skellam_epsilon(T_MIN * mean, delta=params.delta, sensitivity=sensitivity)
    alone = fallback_epsilon(mean, delta=params.delta, sensitivity=sensitivity)
    assert expected == pytest.approx(params.epsilon, rel=1e-6) and alone > 1.5 * expected
    ledger = Ledger(tmp_path / "state")
    try:
        entries = ledger.entries(FAKE_RUN)
    finally:
        ledger.close()
    assert [e.round for e in entries] == list(range(FAKE_ROUNDS))
    for e in entries:
        assert (e.epsilon, e.delta) == (params.epsilon, params.delta)
        assert e.mu == pytest.approx(ratio_for_budget(params.epsilon, params.delta, "exact"))
        assert e.fallback_epsilon == pytest.approx(expected, rel=1e-12)
    assert "t_min - max(c, b) = 3 - max(0, 0) honest shares (--max-colluders 0" in outcome.log


@pytest.mark.parametrize(
    "budget",
    [("--epsilon", "0.5", "--delta", "1e-5"), ("--epsilon", "100", "--delta", "1e-6")],
    ids=["epsilon", "delta"],
)
def test_a_stricter_budget_is_refused_before_anything_is_sent(
    tmp_path: Path, consortium: Consortium, budget: tuple[str, ...]
) -> None:
    """An agent whose own budget is stricter than the run's (ε = 1, δ = 1e-5) would draw a
    larger share than the run's modulus was sized for, and the sum would be no more
    private: refused with one line, even with --allow-weaker, before any message and
    before any spend."""
    fake = Fake(consortium)
    outcome = attack(tmp_path, fake, budget=(*budget, "--allow-weaker"))
    refused_before_anything(tmp_path, outcome, "--allow-weaker cannot help")


def test_an_agent_restarted_after_masking_never_masks_that_round_again(
    tmp_path: Path, consortium: Consortium
) -> None:
    """Killed (SIGKILL) right after its ledger marked round 0 masked and before the masked
    input left, then restarted: the agent sends nothing more for round 0 but a fresh
    advertisement that tells the coordinator it lost the round's secrets (issue 41: new
    keys, never used; a second masked input under other masks would give the coordinator
    the difference of two inputs), and takes part in round 1."""
    fake = Fake(consortium)
    first: list[Any] = []
    take = fake.take

    def taken(t: int, step: str, body: dict[str, Any]) -> None:
        if (t, step) == (0, "advertise"):
            first.append(body)
            if len(first) > 1:
                return  # the restart's: recorded only (the real coordinator answers 409)
        take(t, step, body)

    fake.take = taken  # type: ignore[method-assign]
    outcome = attack(tmp_path, fake, envs=({"LDPEM_AGENT_FAULT": "kill-after-mask:0"}, {}))
    assert outcome.code == 0, outcome.log[-3000:]
    steps = list(HOLDER_STEPS)
    restart = [(0, "advertise"), (0, "shares"), (0, "advertise")]
    assert outcome.posts == restart + [(1, s) for s in steps]
    assert "not made again" in outcome.log
    again = [KeyAdvertisement.from_dict(body) for body in first]
    assert len(again) == 2 and again[0].masking_key != again[1].masking_key
    for advert in again:  # both its own, for round 0
        check_advertisement(advert, consortium.roster, advert.parameters)
    ledger = Ledger(tmp_path / "state")
    try:
        assert [e.status for e in ledger.entries(FAKE_RUN)] == ["masked", "masked"]
    finally:
        ledger.close()
