"""``ldpem run status --wait`` outlives a coordinator restart (issue 43, finding 2): it
retries a coordinator it cannot reach for as long as the run's agents do, and when the
coordinator stays away that long it exits with a status of its own (75), not with 2, which
means "the run failed". Real processes: the coordinator is SIGKILLed and restarted on the
same port and state under a watcher."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ldpem.cli import build_parser
from ldpem.client.retry import GIVE_UP
from ldpem.processes import Processes, wait_until
from ldpem.run.watch import UNREACHABLE
from tests.fedkit import run_request, write_gmm_data
from tests.reliability.kit import Cluster

COUNTS = [300, 300]


def _watch(procs: Processes, tmp_path: Path, url: str, *extra: str) -> tuple[Path, object]:
    """``ldpem run status --wait`` on the run created last, its stderr in a file."""
    err = tmp_path / "watch.err"
    with err.open("wb") as sink:
        watcher = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ldpem",
                "run",
                "status",
                "--coordinator",
                url,
                "--wait",
                "--interval",
                "0.2",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=sink,
            env=procs.environment(),
            cwd=tmp_path,
        )
    return err, watcher


def test_the_watcher_waits_as_long_as_the_agents_by_default() -> None:
    status = build_parser().parse_args(["run", "status", "--coordinator", "http://h:1"])
    client = build_parser().parse_args(
        [
            "client",
            "--coordinator",
            "http://h:1",
            "--model",
            "gmm",
            "--data",
            "d",
            "--epsilon",
            "1",
            "--delta",
            "1e-6",
        ]
    )
    assert status.give_up == client.give_up == GIVE_UP
    assert UNREACHABLE not in (0, 1, 2)


def test_a_coordinator_restarted_under_wait_is_waited_for_and_the_run_ends_finished(
    procs: Processes, tmp_path: Path
) -> None:
    paths, _ = write_gmm_data(tmp_path, COUNTS, 3)
    cluster = Cluster(procs, tmp_path)
    cluster.start_coordinator()
    request = run_request(hospitals=2, records=300, d=3, rounds=3, round_deadline=3600)
    cluster.create(request)
    err, watcher = _watch(procs, tmp_path, cluster.url)
    assert isinstance(watcher, subprocess.Popen)
    try:
        wait_until(lambda: "round 0/3" in err.read_text(), timeout=60, what="the watcher")
        cluster.kill_coordinator()
        wait_until(lambda: "retrying" in err.read_text(), timeout=60, what="a retry")
        assert watcher.poll() is None, err.read_text()  # not given up on the first error
        cluster.start_coordinator()
        agents = [cluster.agent(i, path) for i, path in enumerate(paths)]
        out, _ = watcher.communicate(timeout=300)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    text = err.read_text()
    assert watcher.returncode == 0, text
    assert f"cannot reach {cluster.url}" in text and "as the run's agents do" in text, text
    assert f"{cluster.url} answers again" in text, text
    assert "finished after 3 of 3 rounds" in out.decode(), out
    for agent in agents:
        assert agent.wait(120) == 0


def test_a_coordinator_that_stays_away_ends_wait_with_its_own_status(
    procs: Processes, tmp_path: Path
) -> None:
    cluster = Cluster(procs, tmp_path)
    cluster.start_coordinator()
    cluster.create(run_request(hospitals=2, rounds=3, round_deadline=3600))
    err, watcher = _watch(procs, tmp_path, cluster.url, "--give-up", "2")
    assert isinstance(watcher, subprocess.Popen)
    try:
        wait_until(lambda: "round 0/3" in err.read_text(), timeout=60, what="the watcher")
        cluster.kill_coordinator()
        code = watcher.wait(60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    lines = err.read_text().strip().splitlines()
    assert code == UNREACHABLE == 75, lines
    assert lines[-1].startswith(f"ldpem run: coordinator {cluster.url} unreachable for "), lines
    assert "the run's outcome is unknown" in lines[-1], lines
    assert not any("Traceback" in line for line in lines), lines
