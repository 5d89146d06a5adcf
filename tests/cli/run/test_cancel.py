"""``ldpem run cancel`` (issue 32, point 4): a running run ends as ``cancelled`` with the
operator's reason; its agents stop with one line and exit 0, their ledgers keep what was
charged and nothing more; the page, ``run status`` and ``/metrics`` say cancelled, not
Degraded; a run that ended already is a one-line 409; a coordinator killed (SIGKILL) after
the cancel still has the run cancelled when it restarts."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ldpem.cli import main
from ldpem.client.agent import Agent
from ldpem.client.config import AgentConfig
from ldpem.client.ledger import Ledger
from ldpem.processes import Processes
from ldpem.server.app import create_app
from tests.fedkit import (
    ADMIN,
    TOKENS,
    admin_headers,
    live_server,
    run_request,
    settings,
    write_gmm_data,
)
from tests.secaggkit import secagg_run

REASON = "wrong delta in the request"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with live_server(create_app(settings(tmp_path))) as url:
        yield url


def lines(capsys: pytest.CaptureFixture[str]) -> tuple[list[str], list[str]]:
    captured = capsys.readouterr()
    return captured.out.strip().splitlines(), captured.err.strip().splitlines()


def metric(text: str, name: str, labels: str) -> float:
    found = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text, flags=re.MULTILINE)
    assert found is not None, f"{name}{{{labels}}} not in /metrics"
    return float(found.group(1))


def _agent(server: str, data: Path, state: Path) -> Agent:
    """Hospital 0's agent on ``data``, with a loose budget; it gives up after 20 s."""
    return Agent(
        AgentConfig(
            coordinator=server,
            token=TOKENS[0],
            data=data,
            state=state,
            epsilon=100.0,
            delta=0.5,
            model="gmm",
            wait=5.0,
            give_up=20.0,
        )
    )


def test_a_cancelled_run_stops_its_agents_and_shows_as_cancelled(
    server: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two hospitals, one agent: round 0 waits for h1 (deadline 600 s) until the cancel.
    request = run_request(hospitals=2, records=60, d=2, rounds=3)
    created = httpx.post(f"{server}/v1/runs", json=request, headers=admin_headers()).json()
    run_id = created["run_id"]
    (path,), _ = write_gmm_data(tmp_path, [60], 2)
    agent = _agent(server, path, tmp_path / "state")
    result: list[int | BaseException] = []

    def follow() -> None:
        try:
            result.append(agent.run())
        except BaseException as error:  # reported to the test
            result.append(error)

    thread = threading.Thread(target=follow)
    with caplog.at_level(logging.INFO, logger="ldpem.client"):
        thread.start()
        deadline = time.monotonic() + 30
        rounds = f"{server}/v1/runs/{run_id}/rounds"
        while not httpx.get(rounds).json()[0]["reporters"]:  # h0 reported round 0
            assert time.monotonic() < deadline and thread.is_alive(), result
            time.sleep(0.05)

        monkeypatch.setenv("LDPEM_ADMIN_TOKEN", ADMIN)
        cancel = ["run", "cancel", "--coordinator", server, run_id, "--reason", REASON]
        capsys.readouterr()
        assert main(cancel) == 0
        out, _ = lines(capsys)
        assert out == [
            f"run {run_id} cancelled after 0 of 3 rounds (cancelled by the operator: {REASON})"
        ]
        thread.join(30)
    agent.close()
    assert result == [0]  # a clean stop
    stopped = [
        r.getMessage()
        for r in caplog.records
        if r.name == "ldpem.client" and "cancelled" in r.getMessage()
    ]
    assert stopped == [
        f"run {run_id} was cancelled (cancelled by the operator: {REASON}); stopping: "
        "nothing more is charged"
    ]
    # The ledger keeps round 0, charged and sent, and nothing more.
    ledger = Ledger(tmp_path / "state")
    assert [(e.round, e.status) for e in ledger.entries(run_id)] == [(0, "acknowledged")]
    ledger.close()

    # run status: the run as JSON, and --wait ends with exit 2 and the reason.
    assert main(["run", "status", "--coordinator", server, run_id]) == 0
    out, _ = lines(capsys)
    assert '"status": "cancelled"' in "\n".join(out)
    assert main(["run", "status", "--coordinator", server, run_id, "--wait"]) == 2
    out, err = lines(capsys)
    assert out == [f"run {run_id}: cancelled after 0 of 3 rounds"]
    assert err[-1] == (
        f"ldpem run: error: run {run_id} cancelled: cancelled by the operator: {REASON}"
    )
    # The page and the metrics: cancelled, not Degraded (h1 never reported round 0).
    page = httpx.get(f"{server}/runs/{run_id}").text
    assert "<strong>Cancelled</strong>: cancelled after 0 of 3 rounds" in page
    assert f"<li>cancelled by the operator: {REASON}</li>" in page and "Degraded" not in page
    index = httpx.get(f"{server}/").text
    assert "1 runs: 0 running, 0 finished, 0 failed, 1 cancelled." in index
    assert '<td class="status-cancelled">cancelled</td>' in index
    scraped = httpx.get(f"{server}/metrics").text
    assert metric(scraped, "ldpem_run_degraded", f'run="{run_id}"') == 0.0
    assert metric(scraped, "ldpem_runs", 'status="cancelled"') == 1.0
    assert metric(scraped, "ldpem_runs", 'status="running"') == 0.0

    # Cancelling it again, or a run that does not exist: one line each.
    assert main(cancel) == 2
    _, err = lines(capsys)
    assert err == [
        f'ldpem run: error: run {run_id} not cancelled: HTTP 409 "run {run_id} is cancelled: '
        'only a running or paused run can be cancelled"'
    ]
    assert main([*cancel[:4], "nosuchrun", "--reason", "x"]) == 2
    _, err = lines(capsys)
    assert len(err) == 1 and "run nosuchrun not cancelled: HTTP 404" in err[0]


def test_only_the_admin_cancels_and_a_finished_run_is_a_409(server: str, tmp_path: Path) -> None:
    created = httpx.post(
        f"{server}/v1/runs",
        json=run_request(hospitals=1, records=60, d=2, rounds=1),
        headers=admin_headers(),
    ).json()
    run_id = created["run_id"]
    url = f"{server}/v1/runs/{run_id}/cancel"
    assert httpx.post(url, json={"reason": "x"}).status_code == 401
    hospital = {"Authorization": f"Bearer {TOKENS[0]}"}
    assert httpx.post(url, json={"reason": "x"}, headers=hospital).status_code == 403
    refused = httpx.post(url, json={"reason": "two\nlines"}, headers=admin_headers())
    assert refused.status_code == 422 and refused.json()["detail"].startswith("reason: ")
    # The one hospital reports the one round: the run finished, and cannot be cancelled.
    (path,), _ = write_gmm_data(tmp_path, [60], 2)
    agent = _agent(server, path, tmp_path / "state")
    assert agent.run() == 0
    agent.close()
    refused = httpx.post(url, json={"reason": "x"}, headers=admin_headers())
    assert (refused.status_code, refused.json()) == (
        409,
        {"detail": f"run {run_id} is finished: only a running or paused run can be cancelled"},
    )
    assert httpx.get(f"{server}/v1/runs/{run_id}").json()["status"] == "finished"


@pytest.mark.slow
def test_a_cancelled_secagg_run_stays_cancelled_after_a_kill(
    procs: Processes, tmp_path: Path
) -> None:
    """Two of three holders in round 0 of a secagg run (the third never comes; the step
    deadline is long): the cancel stops both agents mid-aggregation with exit 0, and a
    coordinator killed right after restarts with the run cancelled."""
    counts = [200, 210, 220]
    paths, _ = write_gmm_data(tmp_path, counts, 2)
    run = secagg_run(procs, tmp_path, counts, d=2, rounds=3, seed=3, round_deadline=120.0)
    agents = run.start_agents(paths[:2])
    deadline = time.monotonic() + 60
    while len({holder for kind, holder, _ in run.stored().get(0, []) if kind == "advertise"}) < 2:
        assert time.monotonic() < deadline, procs.failed()
        time.sleep(0.1)
    cancelled = subprocess.run(
        [
            sys.executable,
            "-m",
            "ldpem",
            "run",
            "cancel",
            "--coordinator",
            run.url,
            run.run_id,
            "--reason",
            REASON,
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LDPEM_ADMIN_TOKEN": ADMIN},
        timeout=60,
        check=False,
    )
    assert cancelled.returncode == 0, cancelled.stderr
    for name, agent in agents.items():
        assert agent.wait(60) == 0, procs.log(agent)[-2000:]
        assert f"run {run.run_id} was cancelled" in procs.log(agent), name
    run.kill_coordinator()
    run.start_coordinator()
    summary = httpx.get(f"{run.url}/v1/runs/{run.run_id}").json()
    assert (summary["status"], summary["reason"]) == (
        "cancelled",
        f"cancelled by the operator: {REASON}",
    )
    page = httpx.get(f"{run.url}/runs/{run.run_id}").text
    assert "<strong>Cancelled</strong>" in page and "Degraded" not in page
