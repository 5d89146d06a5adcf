"""The inconsistent-views attack of issue 29 against the real ``ldpem client``, and a peer's
garbage ciphertext. The attack: a fake
coordinator shows the agent h0 a share bundle of only t_min − 1 peers P = {h1, h2}, so that
it masks with them alone, and tells the other holders that P dropped (docs/PRIVACY.md,
threat 9). Before the consistency round the agent answered, exit 0, and the coordinator
unmasked its report. Now the survivor set the agent is asked to unmask for carries the
signature of one holder (its own), not t_min: the agent refuses with one line, sends no
unmasking share, and its ledger charges the round at the fallback ε of its own share.
The garbage (threat 11): one peer's ciphertext to the agent does not open; the agent drops
that peer for the round, names it in its log, and the round's sum comes out.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ldpem.client.ledger import Ledger
from ldpem.common.core.accounting import ratio_for_budget
from ldpem.common.secagg import (
    ConsistencyCheck,
    MaskedInput,
    ShareBundle,
    SurvivorSignature,
    UnmaskRequest,
)
from ldpem.common.secagg.runvalues import grid_of, run_shares_mechanism, to_residues
from ldpem.common.secagg.steps import HOLDER_STEPS
from tests.secaggkit import FAKE_D, FAKE_RUN, attack, refused
from tests.security.test_secagg_coordinator import NAMES, Fake, SecAggRound, mesh_consortium

pytestmark = pytest.mark.slow

PEERS = ("h1", "h2")  # P: all the agent is shown; t_min = 3


def story(name: str) -> tuple[str, ...]:
    """The survivor set the fake tells ``name``: the agent P ∪ {h0}; each v ∈ P that
    P ∖ {v} dropped; the others that P dropped."""
    if name == "h0":
        return ("h0", *PEERS)
    if name in PEERS:
        return tuple(n for n in NAMES if n not in PEERS or n == name)
    return tuple(n for n in NAMES if n not in PEERS)


@dataclass
class ViewsFake(Fake):
    """The issue's coordinator, in round 0; every other step is the honest fake's."""

    signatures: dict[tuple[str, ...], list[SurvivorSignature]] = field(default_factory=dict)
    masked: dict[str, MaskedInput] = field(default_factory=dict)

    def receive(self, r: SecAggRound, step: str, body: dict[str, Any]) -> None:
        if step == "masked":
            self.masked["h0"] = MaskedInput.from_dict(body)
            for name, holder in r.others.items():
                self.masked[name] = holder.masked_input(r.bundles[name], [0] * FAKE_D)
        elif step == "signature":
            self.signatures.setdefault(story("h0"), []).append(SurvivorSignature.from_dict(body))
            for name, holder in r.others.items():
                signed = holder.sign_survivors(ConsistencyCheck(FAKE_RUN, r.t, story(name)))
                self.signatures.setdefault(story(name), []).append(signed)
        elif step == "unmask":
            raise AssertionError("the agent answered the unmasking request")
        else:
            super().receive(r, step, body)

    def answer(self, r: SecAggRound, what: str) -> Any:
        if what == "bundle":
            full = r.bundles["h0"]
            shown = {n: c for n, c in full.ciphertexts.items() if n in PEERS}
            return ShareBundle("h0", FAKE_RUN, r.t, shown)
        if what == "consistency-check":
            return ConsistencyCheck(FAKE_RUN, r.t, story("h0"), self.consortium.roster.names)
        if what == "unmask-request":
            signed = tuple(self.signatures.get(story("h0"), []))
            order = self.consortium.roster.names
            return UnmaskRequest(FAKE_RUN, r.t, story("h0"), (), signed, order)
        return super().answer(r, what)


def test_the_agent_refuses_an_unmasking_of_an_isolated_view(tmp_path: Path) -> None:
    consortium = mesh_consortium()
    fake = ViewsFake(consortium)
    outcome = attack(tmp_path, fake)
    line = refused(outcome, "secure aggregation refused")
    assert "carries 1 survivors' signatures of its survivor set, fewer than t_min = 3" in line
    assert outcome.posts == [(0, "advertise"), (0, "shares"), (0, "masked"), (0, "signature")]
    assert "the round is charged at epsilon" in outcome.log
    # The agent masked with P alone (it saw nothing else) and signed only its own story.
    assert fake.masked["h0"].excluded == ()
    assert [s.holder for s in fake.signatures[story("h0")]] == ["h0"]
    ledger = Ledger(tmp_path / "state")
    try:
        [entry] = ledger.entries(FAKE_RUN)
    finally:
        ledger.close()
    params = consortium.params
    assert entry.status == "refused"
    # Refused after masking: the coordinator may still learn one sum of >= t_min = 3
    # holders with >= t_min - b = 3 honest shares (--max-colluders 0), the run's epsilon;
    # never one share alone (issue 41, finding 4).
    assert entry.fallback_epsilon is not None
    assert entry.fallback_epsilon == pytest.approx(params.epsilon, rel=1e-6)
    assert entry.epsilon == pytest.approx(entry.fallback_epsilon, rel=1e-12)
    assert entry.mu == pytest.approx(
        ratio_for_budget(entry.fallback_epsilon, params.delta, params.accounting)
    )
    assert json.loads(entry.body)["round"] == 0


def _garbage_from_h1(r: SecAggRound, honest: ShareBundle) -> ShareBundle:
    """h1's sealed shares for the agent replaced by random bytes of the same length."""
    spoilt = {
        n: secrets.token_bytes(len(c)) if n == "h1" else c for n, c in honest.ciphertexts.items()
    }
    return ShareBundle(honest.holder, honest.run_id, honest.round, spoilt)


@dataclass
class EveryoneMasks(Fake):
    """The honest fake, but h4 masks too (none drops out): room for one peer left out."""

    def receive(self, r: SecAggRound, step: str, body: dict[str, Any]) -> None:
        super().receive(r, step, body)
        if step == "masked":
            r.aggregator.receive_masked_input(
                r.others["h4"].masked_input(r.bundles["h4"], [0] * FAKE_D)
            )


def test_a_peers_garbage_ciphertext_costs_that_peer_the_round_not_the_agent(
    tmp_path: Path,
) -> None:
    consortium = mesh_consortium()
    fake = EveryoneMasks(consortium, lies={(0, "bundle"): _garbage_from_h1})
    outcome = attack(tmp_path, fake)
    assert outcome.code == 0, outcome.log[-3000:]
    assert "round 0: the shares of h1 did not open: not masked with them" in outcome.log
    steps = list(HOLDER_STEPS)
    assert outcome.posts == [(t, s) for t in range(2) for s in steps]
    first = fake.rounds[0]
    assert first.aggregator.masked_inputs["h0"].excluded == ("h1",)
    check = first.aggregator.consistency_check()
    assert check.survivors == ("h0", "h2", "h3", "h4")  # h1 left out
    # The sum over S is the agent's masked report, unmasked (the others added zeros).
    ledger = Ledger(tmp_path / "state")
    try:
        entry = ledger.entry(FAKE_RUN, 0)
    finally:
        ledger.close()
    assert entry is not None and entry.status == "masked"
    mechanism = run_shares_mechanism(consortium.params)
    bits = consortium.params.modulus_bits
    assert bits is not None
    report = to_residues(json.loads(entry.body)["total"], grid_of(mechanism), bits)
    assert first.result == [int(v) for v in report]
