"""Sweeps on a real Dask distributed cluster (issue 25): a ``LocalCluster`` of 2 worker
processes started here on 127.0.0.1, and ``ldpem experiment --quick`` and ``ldpem plan``
given its address with ``--scheduler``, and the coordinator's forecast given it as its
``forecast_scheduler`` setting. Every task carries its own seed, so the numbers
are those of the local pool, to the bit (the CSV files and the plan's JSON are compared
as text)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import distributed
import pytest
from fastapi.testclient import TestClient

from ldpem.cli import main
from ldpem.server.app import create_app
from tests.cli.clikit import run_ldpem
from tests.fedkit import admin_headers, run_request, settings, settled
from tests.server.opkit import start_run

pytestmark = pytest.mark.slow

#: The quick figure the comparison runs (fig1: clipping against ours, GMM, both models).
FIGURE = "fig1"
PLAN = ["plan", "--n", "20000", "--hospitals", "2", "--seeds", "4"]
PLAN += ["--crossover-limit", "20000", "--json"]


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    cluster = distributed.LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=2,
        processes=True,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address=None,
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def _experiment(out: Path, *extra: str) -> dict[str, str]:
    argv = ["experiment", "--figure", FIGURE, "--quick", "--seeds", "2", "--no-plot"]
    assert main([*argv, "--out", str(out), *extra]) == 0
    return {p.name: p.read_text() for p in sorted(out.glob("*.csv"))}


def test_experiment_gives_the_same_numbers_locally_and_on_the_cluster(
    scheduler: str, tmp_path: Path
) -> None:
    local = _experiment(tmp_path / "local")
    cluster = _experiment(tmp_path / "cluster", "--scheduler", scheduler)
    assert set(local) == {f"{FIGURE}-central.csv", f"{FIGURE}-local.csv"}
    assert local == cluster
    serial = _experiment(tmp_path / "serial", "--workers", "1")
    assert serial == local


def _plan_json(*extra: str) -> object:
    # A process of its own: the plan covers every registered mechanism, and this test
    # session also holds the extension tests' mechanism, which the cluster's workers
    # (fresh processes) do not load.
    return json.loads(run_ldpem([*PLAN, *extra]).stdout)


def test_plan_is_the_same_locally_and_on_the_cluster(scheduler: str) -> None:
    assert _plan_json() == _plan_json("--scheduler", scheduler)


def test_an_unreachable_scheduler_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing listens on port 9 (discard) of this host.
    assert main([*PLAN, "--scheduler", "tcp://127.0.0.1:9"]) != 0
    err = capsys.readouterr().err
    assert "cannot connect" in err and "Traceback" not in err


def _created(state: Path, **extra: object) -> dict[str, Any]:
    state.mkdir(exist_ok=True)
    with TestClient(create_app(settings(state, forecast_seeds=3, **extra))) as client:
        request = run_request(records=2000, d=3, rounds=4, forecast=True)
        created = client.post("/v1/runs", json=request, headers=admin_headers())
        assert created.status_code == 201, created.text
        # The forecast is computed in the background: the run's summary once it is stored.
        return settled(client, created.json()["run_id"])


def test_the_coordinators_forecast_is_the_same_on_the_cluster(
    scheduler: str, tmp_path: Path
) -> None:
    local = _created(tmp_path / "local", forecast_workers=1)
    cluster = _created(tmp_path / "cluster", forecast_scheduler=scheduler)
    assert local["forecast"] is not None and local["warning"] is None
    assert cluster["forecast"] == local["forecast"]
    assert cluster["expected_error"] == local["expected_error"]


def test_an_unreachable_forecast_scheduler_leaves_the_run_without_a_forecast(
    tmp_path: Path,
) -> None:
    created = _created(tmp_path, forecast_scheduler="tcp://127.0.0.1:9")
    assert created["forecast"] is None and created["run_id"]
    warning = str(created["warning"])
    assert warning.startswith("no accuracy forecast: scheduler tcp://127.0.0.1:9: cannot connect")


def test_a_plugin_model_is_planned_on_the_cluster(
    scheduler: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The plugin (linear regression, "lr") is loaded here through LDPEM_PLUGINS; the Dask
    # workers, started without it, import it before each task (common/planning/executor.py).
    monkeypatch.setenv("LDPEM_PLUGINS", "tests.test_extension_model")
    argv = ["plan", "--model", "lr", "--d", "2", "--n", "4000", "--hospitals", "2"]
    argv += ["--seeds", "2", "--crossover-limit", "4000", "--json", "--scheduler", scheduler]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["model"] == "lr" and payload["mechanisms"]["local"]["seeds"] == 2


#: A small study whose confidence region runs 19 bootstrap draws from a fixed seed.
SIMULATE = ["simulate", "--n", "4000", "--d", "3", "--rounds", "4", "--mechanism", "central"]
SIMULATE += ["--draws", "19", "--bootstrap-seed", "3", "--json"]


def _confidence(*extra: str) -> object:
    return json.loads(run_ldpem([*SIMULATE, *extra]).stdout)["confidence"]


def test_the_bootstrap_of_simulate_is_the_same_on_the_cluster(scheduler: str) -> None:
    local = _confidence("--workers", "1")
    assert isinstance(local, dict) and local["draws"] == 19
    assert _confidence("--scheduler", scheduler) == local


def test_the_coordinators_bootstrap_runs_with_the_cluster_as_scheduler(
    scheduler: str, tmp_path: Path
) -> None:
    # The coordinator's confidence region runs where its forecast runs (OS seeds: its
    # numbers are its own, so this checks that it is made there, not their values).
    with TestClient(create_app(settings(tmp_path, forecast_scheduler=scheduler))) as client:
        study = start_run(client, records=2000, rounds=1)
        study.round(0, range(3))
        finished = settled(client, study.run_id)
    region = finished["confidence"]
    assert finished["status"] == "finished" and region is not None
    assert region["draws"] == 19 and len(region["low"]) == 4 and region["radius"] > 0
