"""The agent in a run with a round schedule and an averaged estimate: it partitions by the
schedule, calibrates each round at that round's scale, binds the schedule, and the run
replays exactly; and a run without a schedule is bound byte for byte as before."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ldpem.client.binding import canonical, run_binding
from ldpem.client.ledger import Ledger
from ldpem.client.trust import AgentError, agent_mechanisms, check_public
from ldpem.common.core.accounting import Budget
from ldpem.common.protocol import round_sizes
from ldpem.common.wire import Identity, PublicParameters, RunCreate, public_parameters
from ldpem.server.app import create_app
from tests.client.test_agent import (
    COUNTS,
    D,
    agent,
    assert_replays_exactly,
    create_run,
    run_agents,
)
from tests.fedkit import live_server, run_request, settings, write_gmm_data
from tests.security.test_malicious_coordinator import RUN, Fake, gmm_data, public, write_csv
from tests.security.test_malicious_coordinator import agent as hostile_agent

SCHEDULE, FINAL = "geometric:1.5", "average:2"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with live_server(create_app(settings(tmp_path))) as url:
        yield url


def identity(params: PublicParameters, records: int = 300) -> Identity:
    return Identity(run_id="run-1", hospital="h0", records=records, params=params)


def test_a_run_without_a_schedule_is_bound_as_before() -> None:
    params = public_parameters(RunCreate.model_validate(run_request(rounds=3, records=300)))
    me = identity(params)
    mechanisms = agent_mechanisms(
        params,
        budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
        records=300,
    )
    mechanism, mu = mechanisms[0]
    assert mechanisms == [(mechanism, mu)] * 3
    # The binding an agent stored before schedules existed (client/agent.py, 0.x).
    before = canonical(
        {
            "hospital": me.hospital,
            "records": me.records,
            "params": params.model_dump(mode="json"),
            "agent": {
                "epsilon": params.epsilon,
                "delta": params.delta,
                "accounting": "exact",
                "noise_std": mechanism.noise_std,
                "mu": mu,
                "allow_weaker": False,
                "dataset": "default",
            },
        }
    )
    assert "schedule" not in before
    now = run_binding(
        me,
        mechanisms=mechanisms,
        budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
        allow_weaker=False,
        dataset="default",
    )
    assert now == before


def test_a_schedule_the_records_cannot_fill_or_a_scale_out_of_range_is_refused() -> None:
    params = public_parameters(RunCreate.model_validate(run_request(rounds=5, records=300)))
    tight = params.model_copy(update={"schedule": "geometric:3"})
    with pytest.raises(AgentError, match="the coordinator sent schedule"):
        check_public(identity(tight, records=12))
    check_public(identity(tight, records=300))
    wild = params.model_copy(update={"scale": None, "scales": [1.0, 1.0, 1.0, 1.0, 1e101]})
    with pytest.raises(AgentError, match=r"scales\[4\] = 1e\+101"):
        check_public(identity(wild))


def test_agents_follow_the_schedule_and_the_run_replays_exactly(
    server: str, tmp_path: Path
) -> None:
    paths, _ = write_gmm_data(tmp_path, COUNTS, D)
    created = create_run(server, schedule=SCHEDULE, final=FINAL)
    params = PublicParameters.model_validate(created["params"])
    assert params.scales is not None and len(params.scales) == 3
    results = run_agents([agent(server, tmp_path, i, p) for i, p in enumerate(paths)])
    assert results == [0, 0, 0]
    run_id = created["run_id"]
    rounds = httpx.get(f"{server}/v1/runs/{run_id}/rounds").json()
    assert [r["count"] for r in rounds] == [
        sum(round_sizes(c, 3, SCHEDULE)[t] for c in COUNTS) for t in range(3)
    ]
    assert_replays_exactly(server, run_id, params, paths)
    for i in range(3):
        ledger = Ledger(tmp_path / f"state{i}")
        entries = ledger.entries(run_id)
        noise = [e.noise_std for e in entries]
        assert noise == sorted(noise) and noise[0] < noise[-1]  # s_t grows with m_t
        # Each round is calibrated to the same budget: one μ (up to rounding).
        assert all(math.isclose(e.mu, entries[0].mu, rel_tol=1e-9) for e in entries)
        bound = ledger.binding(run_id)
        assert bound is not None and f'"schedule":"{SCHEDULE}"' in bound.binding
        ledger.close()


def test_a_schedule_changed_after_a_restart_is_refused_before_sending(tmp_path: Path) -> None:
    # Another schedule would deal the records over the rounds anew: a record reported in
    # round 0 could report again. The first contact bound an equal run (no schedule field).
    write_csv(tmp_path, gmm_data())
    coordinator = Fake(public(), betas=[[0.5, -0.5, 0.25]], stop=True)
    with live_server(coordinator.app()) as url:
        first = hostile_agent(tmp_path, coordinator, url, "--seed", "3")
        assert first.code == 2 and [r["round"] for r in first.reports] == [0]
        coordinator.params = public(schedule="geometric:1.5")
        coordinator.betas, coordinator.stop = [[0.5, -0.5, 0.25]] * 2, False
        seen = len(coordinator.requests)
        again = hostile_agent(tmp_path, coordinator, url, "--seed", "3")
    assert again.code == 2
    assert f"run {RUN} changed since this agent first took part: params.schedule was" in again.log
    assert again.reports == [] and coordinator.requests[seen:] == ["me"]
