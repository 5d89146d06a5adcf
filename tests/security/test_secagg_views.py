"""The inconsistent-views attack of issue 29 against the real ``ldpem client``: a fake
coordinator shows the agent h0 a share bundle of only t_min − 1 peers P = {h1, h2}, so that
it masks with them alone, and tells the other holders that P dropped (docs/PRIVACY.md,
threat 9). Before the consistency round the agent answered, exit 0, and the coordinator
unmasked its report. Now the survivor set the agent is asked to unmask for carries the
signature of one holder (its own), not t_min: the agent refuses with one line, sends no
unmasking share, and its ledger charges the round at the fallback ε of its own share.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ldpem.client.ledger import Ledger
from ldpem.common.accounting import ratio_for_budget
from ldpem.common.secagg import (
    ConsistencyCheck,
    MaskedInput,
    ShareBundle,
    SurvivorSignature,
    UnmaskRequest,
)
from tests.security.test_secagg_coordinator import (
    NAMES,
    RUN,
    Consortium,
    D,
    Fake,
    SecAggRound,
    attack,
    refused,
)

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
                self.masked[name] = holder.masked_input(r.bundles[name], [0] * D)
        elif step == "signature":
            self.signatures.setdefault(story("h0"), []).append(SurvivorSignature.from_dict(body))
            for name, holder in r.others.items():
                signed = holder.sign_survivors(ConsistencyCheck(RUN, r.t, story(name)))
                self.signatures.setdefault(story(name), []).append(signed)
        elif step == "unmask":
            raise AssertionError("the agent answered the unmasking request")
        else:
            super().receive(r, step, body)

    def answer(self, r: SecAggRound, what: str) -> Any:
        if what == "bundle":
            full = r.bundles["h0"]
            shown = {n: c for n, c in full.ciphertexts.items() if n in PEERS}
            return ShareBundle("h0", RUN, r.t, shown)
        if what == "consistency-check":
            return ConsistencyCheck(RUN, r.t, story("h0"))
        if what == "unmask-request":
            signed = tuple(self.signatures.get(story("h0"), []))
            return UnmaskRequest(RUN, r.t, story("h0"), (), signed)
        return super().answer(r, what)


def test_the_agent_refuses_an_unmasking_of_an_isolated_view(tmp_path: Path) -> None:
    consortium = Consortium.make()
    fake = ViewsFake(consortium)
    outcome = attack(tmp_path, fake)
    line = refused(outcome, "secure aggregation refused")
    assert "carries 1 survivors' signatures of its survivor set, fewer than t_min = 3" in line
    assert outcome.posts == [(0, "advertise"), (0, "shares"), (0, "masked"), (0, "signature")]
    assert "charged at the fallback epsilon" in outcome.log
    # The agent masked with P alone (it saw nothing else) and signed only its own story.
    assert fake.masked["h0"].excluded == ()
    assert [s.holder for s in fake.signatures[story("h0")]] == ["h0"]
    ledger = Ledger(tmp_path / "state")
    try:
        [entry] = ledger.entries(RUN)
    finally:
        ledger.close()
    params = consortium.params
    assert entry.status == "refused"
    assert entry.fallback_epsilon is not None and entry.fallback_epsilon > params.epsilon
    assert entry.epsilon == pytest.approx(entry.fallback_epsilon, rel=1e-12)
    assert entry.mu == pytest.approx(
        ratio_for_budget(entry.fallback_epsilon, params.delta, params.accounting)
    )
    assert json.loads(entry.body)["round"] == 0
