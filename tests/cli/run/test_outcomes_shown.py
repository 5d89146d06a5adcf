"""What ``ldpem run create`` and ``ldpem run status`` say on the command line (issue 43):

* a secagg run's t_min, c and topology, as the coordinator published them (docs/SECAGG.md
  names them; the command line showed none);
* a forecast that failed: its warning, in ``run status`` and under ``--wait`` (it was only
  in the JSON, and ``--wait`` never printed it);
* ``run status --help`` describes what it prints (it promised one line per closed round).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import ldpem.server.runs
from ldpem.cli import main
from ldpem.server.app import create_app
from tests.cli.test_help_tree import PARSERS
from tests.fedkit import ADMIN, admin_headers, live_server, run_request, settings
from tests.secaggkit import keys_and_roster


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("LDPEM_ADMIN_TOKEN", ADMIN)
    with live_server(create_app(settings(tmp_path))) as url:
        yield url


def secagg_config(tmp_path: Path, k: int, **extra: Any) -> tuple[Path, Path]:
    keys = tmp_path / "keys"
    keys.mkdir(exist_ok=True)
    _, roster_file, _ = keys_and_roster(keys, k)
    request = run_request(hospitals=0, d=2, rounds=2, mechanism="secagg", delta=1e-6, **extra)
    request["hospitals"] = [  # listed last to first: the output's order is its own
        {"name": f"h{i}", "records": 100, "token": f"shown-token-{k}-{i:02d}-abcdefgh"}
        for i in reversed(range(k))
    ]
    config = tmp_path / f"run{k}.json"
    config.write_text(json.dumps(request))
    return config, roster_file


def test_run_create_states_t_min_c_and_the_topology_it_got(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, roster = secagg_config(tmp_path, 3)
    argv = ["run", "create", "--coordinator", server, "--config", str(config)]
    assert main([*argv, "--roster", str(roster)]) == 0
    captured = capsys.readouterr()
    params = json.loads(captured.out)["params"]  # stdout stays the JSON alone
    line = next(x for x in captured.err.splitlines() if x.startswith("secure aggregation"))
    t_min, c = params["t_min"], params["colluders"]
    assert line.startswith(f"secure aggregation over K = 3 holders: t_min = {t_min} "), line
    assert f", c = {c} " in line and f"t_min - c = {t_min - c} honest" in line, line
    assert line.endswith("topology mesh"), line
    # The SecAgg+ graph, in the summary of --tokens-dir: its degree too.
    config, roster = secagg_config(tmp_path, 16, colluders=2)
    tokens = ["--tokens-dir", str(tmp_path / "tokens"), "--secagg-topology", "graph"]
    assert main([*argv[:-1], str(config), "--roster", str(roster), *tokens]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("secure aggregation"))
    assert "K = 16 holders: t_min = 5 " in line and ", c = 2 " in line, line
    assert line.endswith("topology graph (k = 6 neighbours)"), line
    # The token files in natural order, h2 before h10 (finding 12).
    listed = [x.split()[0] for x in out.splitlines() if x.startswith("  h")]
    assert listed == [f"h{i}" for i in range(16)], listed


def test_a_failed_forecast_is_shown_by_run_status_and_wait(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(*_: Any) -> None:
        raise RuntimeError("the simulation ran out of memory")

    monkeypatch.setattr(ldpem.server.runs, "run_forecast", fails)
    request = run_request(hospitals=2, rounds=2, round_deadline=3600, forecast=True)
    created = httpx.post(f"{server}/v1/runs", json=request, headers=admin_headers(), timeout=30)
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]
    expected = "no accuracy forecast: the simulation failed (the simulation ran out of memory)"
    for _ in range(200):
        run = httpx.get(f"{server}/v1/runs/{run_id}", timeout=30).json()
        if not run["pending"]:
            break
        time.sleep(0.05)
    assert run["warning"] == expected, run
    status = ["run", "status", "--coordinator", server, run_id]
    assert main(status) == 0
    assert f"run {run_id}: warning: {expected}" in capsys.readouterr().err.splitlines()
    # --wait: the run ends (cancelled here), and its warning was said on the way.
    cancel = httpx.post(
        f"{server}/v1/runs/{run_id}/cancel",
        json={"reason": "test"},
        headers=admin_headers(),
        timeout=30,
    )
    assert cancel.status_code == 200, cancel.text
    assert main([*status, "--wait", "--interval", "0.1"]) == 2
    assert f"run {run_id}: warning: {expected}" in capsys.readouterr().err.splitlines()


def test_run_status_help_says_what_it_prints() -> None:
    status = next(p for p in PARSERS if p.prog == "ldpem run status")
    text = " ".join(status.format_help().split())
    assert "one line per closed round" not in text
    assert "each time a poll finds a new round" in text
    assert "its warning" in text and "75: the coordinator could not be reached" in text
