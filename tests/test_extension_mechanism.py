"""A mechanism defined in one file only takes every path (docs/EXTENDING.md).

``local-box`` clips each coordinate of a record's gradient to [−C, C] (an L∞ box rather than
the clipped baseline's L2 ball) and adds Gaussian noise to each record's report. It is
registered with one decorator in one file, ``tests/examples/local_box.py`` (docs/EXTENDING.md
shows that file verbatim), and run through ``ldpem simulate``, a real federated run
(a coordinator and two agent processes, which load this module through ``LDPEM_PLUGINS``:
the coordinator checks its reports, the agents build and calibrate it), ``ldpem plan`` and
``ldpem audit``. No product module is edited or monkeypatched.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from ldpem.cli import main
from ldpem.processes import Processes
from tests.cli.clikit import run_ldpem
from tests.examples.local_box import LocalBox
from tests.fedkit import (
    admin_headers,
    agents_to_the_end,
    plugin_env,
    post_run,
    start_ticking_coordinator,
    write_gmm_data,
)
from tests.forecastkit import wait_for_forecast

PLUGIN_ENV = plugin_env("tests.examples.local_box")
D, COUNTS = 3, [1500, 1500]


def test_simulate_plan_and_audit_take_it(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--mechanism", "local-box", "--clip", "2", "--n", "20000"]
    assert main([*argv, "--d", str(D), "--seed", "1", "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["mechanism"] == LocalBox.name and math.isfinite(outcome["error"])
    # --workers 1: in this process, where the mechanism is registered (a pool's fresh
    # worker processes would need LDPEM_PLUGINS, as a deployment's do).
    plan = ["plan", "--d", str(D), "--n", "20000", "--hospitals", "2", "--seeds", "2"]
    plan += ["--workers", "1"]
    assert main(plan) == 0
    assert "local DP, coordinates clipped" in capsys.readouterr().out
    audit = ["audit", "--mechanism", "local-box", "--accounting", "exact", "--d", "2"]
    assert main([*audit, "--draws", "4000", "--holder-draws", "200", "--json"]) == 0
    report: Any = json.loads(capsys.readouterr().out)
    rows = report["results"] if isinstance(report, dict) else report
    assert {row["built_by"] for row in rows} == {"simulator", "agent"}
    assert all(row["passed"] for row in rows), rows


def test_a_federated_run_of_it_with_two_agent_processes(tmp_path: Path) -> None:
    paths, _ = write_gmm_data(tmp_path, COUNTS, D)
    processes = Processes(tmp_path, env=PLUGIN_ENV)
    try:
        url = start_ticking_coordinator(processes, tmp_path, forecast_workers=2)
        created = post_run(
            url, COUNTS, model="gmm", d=D, sigma=1.0, rounds=3, mechanism="local-box", clip=2.0
        )
        run_id = created["run_id"]
        # Simulated by pool workers that imported this module through LDPEM_PLUGINS.
        forecast = wait_for_forecast(url, run_id)["forecast"]
        assert forecast["seeds"] >= 2 and forecast["low"] <= forecast["mean"] <= forecast["high"]
        assert created["params"]["clip"] == 2.0
        run = agents_to_the_end(processes, url, run_id, paths, model="gmm", state=tmp_path)
        rounds = httpx.get(
            f"{url}/v1/runs/{run_id}/rounds", headers=admin_headers(), timeout=30
        ).json()
    finally:
        processes.stop()
    assert run["status"] == "finished", run
    # Every report was checked against this class's bound and noise floor and accepted.
    assert [r["count"] for r in rounds] == [sum(COUNTS) // 3] * 3


def test_the_demo_runs_it_and_forecasts_it(tmp_path: Path) -> None:
    # The demo's choices are the registry's; its coordinator forecasts in a pool of its
    # own worker processes, which import this module through LDPEM_PLUGINS.
    argv = ["demo", "--mechanism", "local-box", "--hospitals", "2", "--records", "6000"]
    argv += ["--rounds", "3", "--d", "2", "--workdir", str(tmp_path / "demo"), "--json"]
    done = run_ldpem(argv, env=PLUGIN_ENV, timeout=240)
    payload = json.loads(done.stdout)
    assert payload["mechanism"] == "local-box" and len(payload["errors"]) == 3
    forecast = payload["forecast"]
    assert forecast is not None, done.stderr
    assert forecast["low"] <= forecast["mean"] <= forecast["high"]
