"""Issue 41, finding 1: a private world. The roster names N hospitals; the coordinator shows
one victim a run of K = 3, t_min = 3, c = 0 whose two other "holders" collude with it.
Everything the coordinator says (K, t_min, c) is consistent, so only the agent's own
threat model, anchored in the roster it pinned (``--max-colluders``, default ⌊N/3⌋), can
refuse it: the run hides an input from at most 2·t_min − K − 1 = 2 colluders and promises
t_min − max(c, b) honest shares. Refused before anything is sent, nothing charged, at
N = 20 (the issue's) and N = 100; with the library (``load_secagg``) and the real agent.

And the run digest: every advertisement commits to the SHA-256 of the run's public
parameters, so holders shown different runs (another ε, noise share, modulus) refuse
each other before any masked input leaves."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ldpem.client.secagg import SecAggConfig, assumed_colluders, load_secagg, threat_problem
from ldpem.client.trust import AgentError
from ldpem.common.core.accounting import Budget
from ldpem.common.protocol import holder_mechanism
from ldpem.common.secagg import Holder, ParticipantList, SecAggRefused, signing_key_to_pem
from ldpem.common.secagg.runvalues import round_parameters, run_digest
from tests.secaggkit import FAKE_RUN, attack, refused_before_anything
from tests.security.test_secagg_coordinator import Consortium, Fake

WORLD = ("h0", "h1", "h2")


def private_world(roster_size: int) -> Consortium:
    """The victim h0 and two colluders h1, h2 in a run of K = 3, t_min = 3, c = 0, on a
    roster of ``roster_size`` names."""
    return Consortium.make(WORLD, roster_size=roster_size, t_min=3, colluders=0)


def _config(tmp_path: Path, consortium: Consortium, **flags: int | None) -> SecAggConfig:
    (tmp_path / "roster.json").write_text(consortium.roster.to_json())
    (tmp_path / "h0.key").write_bytes(signing_key_to_pem(consortium.keys["h0"]))
    return SecAggConfig(
        tmp_path / "h0.key",
        tmp_path / "roster.json",
        min_honest=int(flags.get("min_honest") or 3),
        max_colluders=flags.get("max_colluders"),
    )


def _join(tmp_path: Path, consortium: Consortium, **flags: int | None) -> None:
    params = consortium.params
    mechanism = holder_mechanism(
        params,
        records=40,
        budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
    )
    load_secagg(_config(tmp_path, consortium, **flags), params, "h0", mechanism)


@pytest.mark.parametrize("roster_size", [20, 100])
def test_the_private_world_is_refused_by_the_library(tmp_path: Path, roster_size: int) -> None:
    consortium = private_world(roster_size)
    assert (consortium.params.holders, consortium.params.t_min) == (3, 3)
    assert consortium.params.colluders == 0
    with pytest.raises(AgentError) as refusal:
        _join(tmp_path, consortium)
    line = str(refusal.value)
    b = roster_size // 3
    assert (
        f"at most 2·t_min - K - 1 = 2 colluders, fewer than this agent's --max-colluders {b}"
        in line
    )
    assert f"--max-colluders {b} (of the roster's {roster_size})" in line
    assert "refusing the run before sending anything" in line and "\n" not in line


@pytest.mark.parametrize("assumed", [0, 1, 2])
def test_a_smaller_bound_still_keeps_min_honest(tmp_path: Path, assumed: int) -> None:
    """An operator who lowers --max-colluders to what K = 3 can hide from still meets
    --min-honest 3 only at b = 0: with b colluders the sum holds t_min − b honest shares
    ("--min-honest m is beaten by m − 1 colluders" no longer holds: b counts them)."""
    consortium = private_world(20)
    if assumed == 0:
        _join(tmp_path, consortium, max_colluders=0)  # the operator's explicit assumption
        return
    with pytest.raises(AgentError, match=f"= {3 - assumed} honest noise shares under"):
        _join(tmp_path, consortium, max_colluders=assumed)


def test_the_default_bound_is_a_third_of_the_roster(tmp_path: Path) -> None:
    for size, expected in [(3, 1), (5, 1), (20, 6), (100, 33)]:
        consortium = Consortium.make(("h0", "h1"), roster_size=size)
        config = _config(tmp_path, consortium)
        assert assumed_colluders(config, consortium.roster) == expected
    with pytest.raises(AgentError, match=r"--max-colluders must be in \[0, 19\]"):
        assumed_colluders(replace(config, max_colluders=20), private_world(20).roster)


def test_a_graph_run_derived_for_fewer_colluders_is_refused() -> None:
    """The SecAgg+ graph's degree, committee and h are derived for the run's c: they say
    nothing of b > c colluders."""
    consortium = Consortium.make(
        tuple(f"h{i}" for i in range(40)), secagg_topology="graph", colluders=3
    )
    params = consortium.params
    assert params.graph is not None
    assert threat_problem(params, 3) is None
    problem = threat_problem(params, 13)
    assert problem is not None and "derived for c = 3 colluders" in problem


@pytest.mark.parametrize("roster_size", [20, 100])
def test_the_real_agent_refuses_the_private_world_before_anything(
    tmp_path: Path, roster_size: int
) -> None:
    consortium = private_world(roster_size)
    outcome = attack(tmp_path, Fake(consortium), max_colluders=None)
    line = refused_before_anything(tmp_path, outcome, "threat model")
    assert f"--max-colluders {roster_size // 3} (of the roster's {roster_size})" in line
    assert "charged" not in outcome.log


def test_holders_shown_different_runs_refuse_each_other() -> None:
    """h1 was shown the same K, t_min, c and bits but another ε: its advertisement commits
    to another run digest, and h0 refuses the participant list before dealing a share."""
    consortium = Consortium.make(("h0", "h1", "h2", "h3", "h4"), t_min=5)
    params = consortium.params
    other_run = params.model_copy(update={"epsilon": 4.0})
    ours = round_parameters(params, FAKE_RUN, 0)
    theirs = round_parameters(other_run, FAKE_RUN, 0)
    assert ours.run_digest == run_digest(params) != theirs.run_digest
    assert (ours.k, ours.t_min, ours.colluders, ours.bits) == (
        theirs.k,
        theirs.t_min,
        theirs.colluders,
        theirs.bits,
    )
    keys, roster = consortium.keys, consortium.roster
    holders = {
        n: Holder(n, roster, keys[n], theirs if n == "h1" else ours, min_honest=1)
        for n in consortium.enrolled
    }
    adverts = tuple(holders[n].advertise() for n in sorted(holders))
    participants = ParticipantList(FAKE_RUN, 0, adverts)
    # The list survives its wire form (the differing header travels with h1's entry).
    participants = ParticipantList.from_dict(participants.to_dict())
    with pytest.raises(SecAggRefused, match="'h1' committed to other run parameters"):
        holders["h0"].share_keys(participants)
