"""The hospital agent against a live coordinator (uvicorn in a thread on 127.0.0.1)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from ldpem.client import agent as agent_module
from ldpem.client.agent import Agent, AgentError
from ldpem.client.config import AgentConfig
from ldpem.client.ledger import Ledger
from ldpem.common.core.accounting import Budget, noise_std_for
from ldpem.common.models import get_model
from ldpem.common.protocol import local_noise_std
from ldpem.common.wire import PublicParameters, ReportIn
from ldpem.server.app import create_app
from tests.fedkit import (
    TOKENS,
    admin_headers,
    live_server,
    replay,
    run_request,
    settings,
    write_gmm_data,
)

D = 3
ROUNDS = 3
COUNTS = [300, 301, 302]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with live_server(create_app(settings(tmp_path))) as url:
        yield url


def create_run(url: str, **change: Any) -> dict[str, Any]:
    hospitals = change.pop("hospitals", None)
    change.setdefault("rounds", ROUNDS)
    request = run_request(d=D, beta0=[1.0, -0.5, 0.25], **change)
    request["hospitals"] = hospitals
    if hospitals is None:
        request["hospitals"] = [
            {"name": f"h{i}", "records": c, "token": TOKENS[i]} for i, c in enumerate(COUNTS)
        ]
    response = httpx.post(f"{url}/v1/runs", json=request, headers=admin_headers())
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def agent(url: str, tmp_path: Path, i: int, data: Path, **change: Any) -> Agent:
    values: dict[str, Any] = {
        "coordinator": url,
        "token": TOKENS[i],
        "data": data,
        "state": tmp_path / f"state{i}",
        "seed": 100 + i,
        # Looser than every run here: the agent calibrates to the run's own budget.
        "epsilon": 100.0,
        "delta": 0.5,
        "model": "gmm",
        "wait": 5.0,
        "give_up": 20.0,
    }
    values.update(change)
    return Agent(AgentConfig(**values))


def crash_after_persisting(
    url: str, tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch, *, round_: int
) -> None:
    """Agent 0 run until it has persisted its report of round ``round_``, then crashed
    before sending it (a KeyboardInterrupt); the fault is undone (``monkeypatch.undo``)."""

    def crash(t: int) -> None:
        if t == round_:
            raise KeyboardInterrupt(f"simulated crash after persisting round {round_}")

    monkeypatch.setattr(agent_module, "_fault_after_persist", crash)
    a = agent(url, tmp_path, 0, data)
    with pytest.raises(KeyboardInterrupt):
        a.run()
    a.close()
    monkeypatch.undo()


def run_agents(agents: list[Agent]) -> list[BaseException | int]:
    results: list[BaseException | int] = [0] * len(agents)

    def follow(k: int) -> None:
        try:
            results[k] = agents[k].run()
        except BaseException as error:  # reported to the test
            results[k] = error

    threads = [threading.Thread(target=follow, args=(k,)) for k in range(len(agents))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for a in agents:
        a.close()
    return results


def assert_replays_exactly(
    url: str, run_id: str, params: PublicParameters, paths: list[Path]
) -> None:
    """The run's β⁰ … β^T are, bit for bit, what the simulator computes from the agents'
    records and seeds (``create_run``'s β⁰, ``agent``'s seeds 100 + i)."""
    betas = httpx.get(f"{url}/v1/runs/{run_id}/trajectory").json()["betas"]
    seeds = [100 + i for i in range(len(paths))]
    expected = replay(
        params, run_id, [1.0, -0.5, 0.25], paths, seeds, epsilon=params.epsilon, delta=params.delta
    )
    assert betas == expected


def test_three_agents_finish_a_run_that_replays_exactly(server: str, tmp_path: Path) -> None:
    paths, _ = write_gmm_data(tmp_path, COUNTS, D)
    created = create_run(server)
    results = run_agents([agent(server, tmp_path, i, p) for i, p in enumerate(paths)])
    assert results == [0, 0, 0]
    run = httpx.get(f"{server}/v1/runs/{created['run_id']}").json()
    assert (run["status"], run["round"]) == ("finished", ROUNDS)
    params = PublicParameters.model_validate(created["params"])
    assert_replays_exactly(server, created["run_id"], params, paths)
    for i in range(3):
        ledger = Ledger(tmp_path / f"state{i}")
        entries = ledger.entries(created["run_id"])
        assert [(e.round, e.status) for e in entries] == [(t, "acknowledged") for t in range(3)]
        spent = ledger.spent_epsilon(entries[0].data, delta=params.delta, accounting="exact")
        assert spent == pytest.approx(params.epsilon, rel=1e-9)
        ledger.close()


def single(server: str, tmp_path: Path, **change: Any) -> tuple[Path, dict[str, Any]]:
    (path,), _ = write_gmm_data(tmp_path, [90], D)
    hospitals = [{"name": "h0", "records": 90, "token": TOKENS[0]}]
    return path, create_run(server, hospitals=hospitals, **change)


@pytest.mark.parametrize("mechanism", ["none", "central"])
def test_a_run_that_is_not_locally_private_is_refused(
    server: str, tmp_path: Path, mechanism: str
) -> None:
    path, created = single(server, tmp_path, mechanism=mechanism)
    a = agent(server, tmp_path, 0, path)
    with pytest.raises(AgentError, match=f"uses mechanism '{mechanism}'.*--allow-weaker"):
        a.run()
    a.close()
    assert (
        httpx.get(f"{server}/v1/runs/{created['run_id']}/participation").json()[0][
            "rounds_reported"
        ]
        == []
    )
    # Explicitly allowed, the agent takes part.
    assert run_agents([agent(server, tmp_path, 0, path, allow_weaker=True)]) == [0]


def test_a_weaker_budget_is_refused_unless_allowed_and_then_own_noise_is_used(
    server: str, tmp_path: Path
) -> None:
    path, created = single(server, tmp_path, epsilon=2.0)
    a = agent(server, tmp_path, 0, path, epsilon=1.0, delta=1e-6)
    with pytest.raises(AgentError, match=r"budget \(epsilon 2, .* is weaker than this agent's"):
        a.run()
    a.close()
    assert run_agents(
        [agent(server, tmp_path, 0, path, epsilon=1.0, delta=1e-6, allow_weaker=True)]
    ) == [0]
    ledger = Ledger(tmp_path / "state0")
    entry = ledger.entries(created["run_id"])[0]
    report = ReportIn.model_validate_json(entry.body)
    params = PublicParameters.model_validate(created["params"])
    assert params.scale is not None
    assert params.smoothing is not None
    own = local_noise_std(
        scale=params.scale, smoothing=params.smoothing, d=D, budget=Budget(1.0, 1e-6)
    )
    assert report.noise_std == own
    assert own > local_noise_std(
        scale=params.scale,
        smoothing=params.smoothing,
        d=D,
        budget=Budget(2.0, params.delta),
    )
    ledger.close()


def test_records_that_do_not_match_enrolment(server: str, tmp_path: Path) -> None:
    (path,), _ = write_gmm_data(tmp_path, [89], D)
    create_run(server, hospitals=[{"name": "h0", "records": 90, "token": TOKENS[0]}])
    a = agent(server, tmp_path, 0, path)
    with pytest.raises(
        AgentError,
        match=r"hospital0.npy: 89 records of dimension 3, but hospital h0 is enrolled .* with 90",
    ):
        a.run()
    a.close()


def test_a_second_run_on_the_same_records_exceeds_the_budget(server: str, tmp_path: Path) -> None:
    path, _ = single(server, tmp_path, delta=1e-5)
    assert run_agents([agent(server, tmp_path, 0, path, epsilon=1.0, delta=1e-5)]) == [0]
    second = create_run(
        server,
        hospitals=[{"name": "h0", "records": 90, "token": TOKENS[1]}],
        epsilon=1.0,
        delta=1e-5,
    )
    # The same records as CSV: the budget follows the records, not the file.
    csv = tmp_path / "same-records.csv"
    np.savetxt(csv, np.load(path), delimiter=",", fmt="%.17g", header="a,b,c", comments="")
    a = agent(server, tmp_path, 1, csv, epsilon=1.0, delta=1e-5, state=tmp_path / "state0")
    with pytest.raises(
        AgentError,
        match=r"round 0 of run .* would spend epsilon 1\.\d+ .*over this agent's budget of 1",
    ):
        a.run()
    a.close()
    ledger = Ledger(tmp_path / "state0")
    assert ledger.entries(second["run_id"]) == []
    ledger.close()


def test_a_crash_after_persisting_resends_the_same_bytes(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path, created = single(server, tmp_path)
    run_id = created["run_id"]
    crash_after_persisting(server, tmp_path, path, monkeypatch, round_=1)
    ledger = Ledger(tmp_path / "state0")
    persisted = ledger.entry(run_id, 1)
    assert persisted is not None and persisted.status == "persisted"
    rounds = httpx.get(f"{server}/v1/runs/{run_id}/rounds").json()
    assert rounds[1]["reporters"] == []

    with caplog.at_level(logging.INFO, logger="ldpem.client"):
        assert run_agents([agent(server, tmp_path, 0, path)]) == [0]
    assert "round 1: resending the report persisted before (not redrawn)" in caplog.text
    again = ledger.entry(run_id, 1)
    assert again is not None
    assert again.body == persisted.body and again.status == "acknowledged"
    assert len(ledger.entries(run_id)) == ROUNDS
    ledger.close()


def test_a_restarted_agents_first_line_names_the_round_it_rejoins(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 43, finding 12: the first line said "(round 0)" whatever the round."""
    path, created = single(server, tmp_path)
    with caplog.at_level(logging.INFO, logger="ldpem.client"):
        crash_after_persisting(server, tmp_path, path, monkeypatch, round_=1)
        caplog.clear()
        assert run_agents([agent(server, tmp_path, 0, path)]) == [0]
    joined = [r.getMessage() for r in caplog.records if "records, " in r.getMessage()]
    assert len(joined) == 1, joined
    assert joined[0].startswith(f"hospital h0 in run {created['run_id']}: 90 records"), joined
    assert joined[0].endswith(f"per record (round 1 of {ROUNDS})"), joined


def test_an_unreachable_coordinator_gives_up_with_a_clear_message(tmp_path: Path) -> None:
    (path,), _ = write_gmm_data(tmp_path, [90], D)
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    a = Agent(
        AgentConfig(
            coordinator="http://127.0.0.1:9",
            token=TOKENS[0],
            data=path,
            state=tmp_path / "s",
            epsilon=1.0,
            delta=1e-5,
            model="gmm",
            give_up=30.0,
        ),
        sleep=sleep,
        clock=lambda: now[0],
    )
    message = r"coordinator http://127.0.0.1:9 unreachable for 30 s, giving up \(last error: Conn"
    with pytest.raises(AgentError, match=message):
        a.run()
    a.close()
    # Exponential backoff: 0.2 s × 2^k capped at 5 s, with ±25% jitter; the last sleep is
    # cut short by the give-up time.
    assert sum(sleeps) == pytest.approx(30.0)
    assert len(sleeps) >= 7
    for k, slept in enumerate(sleeps[:-1]):
        base = min(0.2 * 2**k, 5.0)
        assert 0.75 * base <= slept < 1.25 * base


def test_an_unknown_token_is_a_clear_error(server: str, tmp_path: Path) -> None:
    (path,), _ = write_gmm_data(tmp_path, [90], D)
    a = agent(server, tmp_path, 0, path, token="no-such-token-0123456789")
    with pytest.raises(AgentError, match="refused the token: HTTP 401 unknown token"):
        a.run()
    a.close()


def test_a_run_stricter_than_the_agent_gets_the_stricter_budget(
    server: str, tmp_path: Path
) -> None:
    path, created = single(server, tmp_path, epsilon=0.5, delta=1e-6)
    assert run_agents([agent(server, tmp_path, 0, path, epsilon=1.0, delta=1e-5)]) == [0]
    ledger = Ledger(tmp_path / "state0")
    entry = ledger.entries(created["run_id"])[0]
    assert (entry.epsilon, entry.delta) == (0.5, 1e-6)
    ledger.close()


def test_local_clip_runs_with_the_agents_own_noise(server: str, tmp_path: Path) -> None:
    path, created = single(server, tmp_path, mechanism="local-clip", clip=2.0, delta=1e-5)
    assert run_agents([agent(server, tmp_path, 0, path)]) == [0]
    ledger = Ledger(tmp_path / "state0")
    report = ReportIn.model_validate_json(ledger.entries(created["run_id"])[0].body)
    assert report.mechanism == "local-clip"
    assert report.noise_std == noise_std_for(epsilon=1.0, delta=1e-5, sensitivity=4.0)
    ledger.close()


def test_a_report_that_arrives_after_the_round_closed_is_marked_late(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, _ = write_gmm_data(tmp_path, [90, 90], D)
    hospitals = [{"name": f"h{i}", "records": 90, "token": TOKENS[i]} for i in range(2)]
    # The deadline must outlast the agent's start-up, or (on a loaded machine) round 0 closes
    # before the agent has seen it open and there is no late report to test.
    created = create_run(
        server, hospitals=hospitals, rounds=2, quorum=1, round_deadline=5.0, delta=1e-5
    )
    run_id = created["run_id"]
    counts = [45, 45]
    body = {
        "hospital": "h1",
        "round": 0,
        "mechanism": "local",
        "count": counts[0],
        "total": [0.0, 0.0, 0.0],
        "noise_std": 5.0,  # at least the run's σ_r (4.19), or the coordinator refuses it
    }
    headers = {"Authorization": f"Bearer {TOKENS[1]}"}
    response = httpx.post(f"{server}/v1/runs/{run_id}/rounds/0/reports", json=body, headers=headers)
    assert response.status_code == 200

    def slow(t: int) -> None:
        if t == 0:  # persisted, but held back until round 0 closed at its deadline
            while httpx.get(f"{server}/v1/runs/{run_id}").json()["round"] == 0:
                time.sleep(0.05)

    monkeypatch.setattr(agent_module, "_fault_after_persist", slow)
    assert run_agents([agent(server, tmp_path, 0, paths[0])]) == [0]
    ledger = Ledger(tmp_path / "state0")
    assert [(e.round, e.status) for e in ledger.entries(run_id)] == [
        (0, "late"),
        (1, "acknowledged"),
    ]
    ledger.close()
    rounds = httpx.get(f"{server}/v1/runs/{run_id}/rounds").json()
    assert [r["reporters"] for r in rounds] == [["h1"], ["h0"]]


def test_a_restart_must_keep_the_records_and_the_seed_of_the_run(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, created = single(server, tmp_path)
    crash_after_persisting(server, tmp_path, path, monkeypatch, round_=0)
    other_seed = agent(server, tmp_path, 0, path, seed=7)
    with pytest.raises(AgentError, match=r"started with --seed 100, not 7"):
        other_seed.run()
    other_seed.close()
    (tmp_path / "x").mkdir()
    (other,), _ = write_gmm_data(tmp_path / "x", [90], D, seed=9)
    other_records = agent(server, tmp_path, 0, other)
    with pytest.raises(AgentError, match=f"run {created['run_id']} was started with other records"):
        other_records.run()
    other_records.close()
    assert run_agents([agent(server, tmp_path, 0, path)]) == [0]


@pytest.mark.parametrize(("model", "missing"), [("mrm", 0.0), ("rmc", 0.2)])
def test_regression_models_from_csv_with_missing_covariates(
    server: str, tmp_path: Path, model: str, missing: float
) -> None:
    records, _ = get_model(model).generate(
        400, D, snr=3.0, sigma=1.0, missing=missing, rng=np.random.default_rng(3)
    )
    assert records.y is not None
    paths = []
    for i in range(2):
        rows = slice(200 * i, 200 * (i + 1))
        lines = ["x0,x1,y,x2"]
        for x, y in zip(records.x[rows], records.y[rows], strict=True):
            cells = ["" if np.isnan(v) else repr(float(v)) for v in x]
            lines.append(",".join([cells[0], cells[1], repr(float(y)), cells[2]]))
        path = tmp_path / f"hospital{i}.csv"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    hospitals = [{"name": f"h{i}", "records": 200, "token": TOKENS[i]} for i in range(2)]
    created = create_run(server, hospitals=hospitals, model=model, delta=1e-5)
    agents = [agent(server, tmp_path, i, p, model=model) for i, p in enumerate(paths)]
    assert run_agents(agents) == [0, 0]
    params = PublicParameters.model_validate(created["params"])
    betas = httpx.get(f"{server}/v1/runs/{created['run_id']}/trajectory").json()["betas"]
    assert len(betas) == ROUNDS + 1
    expected = replay(
        params,
        created["run_id"],
        betas[0],
        paths,
        [100, 101],
        epsilon=params.epsilon,
        delta=params.delta,
    )
    assert betas == expected


def test_two_runs_fit_in_a_larger_lifetime_budget(server: str, tmp_path: Path) -> None:
    # Two runs at ε = 1 compose (GDP) to μ = √2·μ(1) < μ(2.5) at δ = 1e-5: both fit in 2.5.
    path, first = single(server, tmp_path, delta=1e-5)
    limit = {"epsilon": 2.5, "delta": 1e-5, "allow_weaker": False}
    assert run_agents([agent(server, tmp_path, 0, path, **limit)]) == [0]
    second = create_run(
        server,
        hospitals=[{"name": "h0", "records": 90, "token": TOKENS[1]}],
        delta=1e-5,
    )
    again = agent(server, tmp_path, 1, path, state=tmp_path / "state0", **limit)
    assert run_agents([again]) == [0]
    ledger = Ledger(tmp_path / "state0")
    data = ledger.entries(first["run_id"])[0].data
    spent = ledger.spent_epsilon(data, delta=1e-5, accounting="exact")
    assert 1.0 < spent < 2.0
    assert len(ledger.entries(second["run_id"])) == ROUNDS
    ledger.close()


@pytest.mark.parametrize(
    ("mechanism", "where"), [("local", "per record"), ("hospital", "once on the holder's sum")]
)
def test_the_agent_says_where_its_noise_is_drawn(
    server: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, mechanism: str, where: str
) -> None:
    """Issue 43, finding 17: a hospital-level agent logged "noise std … per record", while
    its noise is one draw on its sum."""
    path, _ = single(server, tmp_path, mechanism=mechanism)
    with caplog.at_level(logging.INFO, logger="ldpem.client"):
        assert run_agents([agent(server, tmp_path, 0, path)]) == [0]
    (line,) = [r.getMessage() for r in caplog.records if "noise std" in r.getMessage()]
    assert f"{mechanism} mechanism" in line and line.endswith(f" {where} (round 0 of 3)")
