"""Derived results off the event loop (``ldpem.server.background``): pending while they
compute, stored when ready, failures stored too, cancelled at shutdown; and the forecast of
``run create`` as one of them: the answer does not wait for it, the summary and the page
say "pending" until it is stored."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ldpem.server import runs
from ldpem.server.app import create_app
from ldpem.server.background import Background
from tests.fedkit import admin_headers, run_request, settings, settled


def test_a_result_is_pending_while_it_computes_then_stored() -> None:
    release = threading.Event()
    saved: list[int] = []
    changes: list[str] = []

    async def scenario() -> None:
        background = Background(on_change=lambda: changes.append("changed"))

        def compute() -> int:
            assert release.wait(10)
            return 42

        assert background.submit("r1", "forecast", compute, saved.append)
        # A second submission of the same result while it is pending is ignored.
        assert not background.submit("r1", "forecast", compute, saved.append)
        await asyncio.sleep(0.05)
        assert background.pending("r1") == ["forecast"] and background.pending("r2") == []
        assert saved == [] and changes == []
        release.set()
        await background.wait("r1")
        assert saved == [42] and background.pending("r1") == [] and changes == ["changed"]
        await background.close()

    asyncio.run(scenario())


def test_a_failure_is_handed_to_failed_not_lost() -> None:
    failures: list[str] = []

    async def scenario() -> None:
        background = Background()

        def compute() -> int:
            raise ValueError("simulation diverged")

        background.submit(
            "r1", "confidence", compute, lambda v: None, failed=lambda e: failures.append(str(e))
        )
        await background.wait()
        assert failures == ["simulation diverged"] and background.pending("r1") == []
        await background.close()

    asyncio.run(scenario())


def test_close_cancels_what_is_pending_without_storing_it() -> None:
    release = threading.Event()
    saved: list[int] = []

    async def scenario() -> None:
        background = Background()
        background.submit("r1", "forecast", lambda: release.wait(10) and 1, saved.append)
        await asyncio.sleep(0.05)
        await background.close()
        assert background.pending("r1") == []
        release.set()

    asyncio.run(scenario())
    assert saved == []


#: A small run whose forecast the coordinator computes in the background.
FORECAST_RUN = run_request(records=2000, d=3, rounds=3, forecast=True)


def held_forecasts(
    monkeypatch: pytest.MonkeyPatch, *, seconds: float, required: bool
) -> tuple[threading.Event, Callable[[runs.ForecastJob], object]]:
    """Every forecast waits for the event returned before it computes, at most ``seconds``
    (``required``: failing if the event is not set by then); the real ``compute`` too."""
    release = threading.Event()
    compute = runs.ForecastJob.compute

    def held(job: runs.ForecastJob) -> object:
        released = release.wait(seconds)
        assert released or not required
        return compute(job)

    monkeypatch.setattr(runs.ForecastJob, "compute", held)
    return release, compute


def test_run_create_answers_before_its_forecast_and_the_page_says_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, _ = held_forecasts(monkeypatch, seconds=60, required=True)
    with TestClient(create_app(settings(tmp_path, forecast_seeds=3))) as client:
        created = client.post("/v1/runs", json=FORECAST_RUN, headers=admin_headers()).json()
        assert created["pending"] == ["forecast"] and created["forecast"] is None
        run_id = created["run_id"]
        summary = client.get(f"/v1/runs/{run_id}").json()
        assert summary["pending"] == ["forecast"] and summary["expected_error"] is None
        pending_page = client.get(f"/runs/{run_id}").text
        assert "Forecast pending" in pending_page and 'http-equiv="refresh"' in pending_page
        release.set()
        done = settled(client, run_id)
        assert done["forecast"]["seeds"] == 3 and done["expected_error"] == done["forecast"]["mean"]
        assert "Forecast pending" not in client.get(f"/runs/{run_id}").text


def test_a_forecast_cut_short_by_a_stop_is_computed_when_the_coordinator_starts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, compute = held_forecasts(monkeypatch, seconds=5, required=False)
    with TestClient(create_app(settings(tmp_path, forecast_seeds=2))) as client:
        answer = client.post("/v1/runs", json=FORECAST_RUN, headers=admin_headers())
        run_id = answer.json()["run_id"]
    release.set()
    monkeypatch.setattr(runs.ForecastJob, "compute", compute)
    with TestClient(create_app(settings(tmp_path, forecast_seeds=2))) as client:
        done = settled(client, run_id)
    assert done["forecast"] is not None and done["forecast"]["seeds"] == 2
