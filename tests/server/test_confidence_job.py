"""A finished run's confidence region (issue 31): the coordinator bootstraps it in the
background (``ldpem.server.confidence``), shows it pending then stored in the run's
summary, on its status page, and not for a run still open; a failure is stored, never
pending forever; the study a draw runs is the run's own."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ldpem.common.wire import PublicParameters, RunCreate, public_parameters
from ldpem.server import confidence
from ldpem.server.app import create_app
from ldpem.server.confidence import CONFIDENCE, federated_study, stored_region
from ldpem.server.pages.svgintervals import Interval, interval_chart
from ldpem.server.settings import Settings
from tests.fedkit import run_request, settings
from tests.server.opkit import start_run


def _settled(client: TestClient, run_id: str, timeout: float = 120.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while True:
        summary: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        if not summary["pending"]:
            return summary
        assert time.monotonic() < end, f"still pending: {summary['pending']}"
        time.sleep(0.05)


def test_a_finished_run_gets_its_region_in_the_background(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        study = start_run(client, records=2000, rounds=2)
        study.round(0, range(3))
        running = client.get(f"/v1/runs/{study.run_id}").json()
        assert running["confidence"] is None and CONFIDENCE not in running["pending"]
        study.round(1, range(3))
        finished = _settled(client, study.run_id)
        page = client.get(f"/runs/{study.run_id}").text
    assert finished["status"] == "finished"
    region = finished["confidence"]
    assert region is not None
    assert region["draws"] == 19 and region["level"] == 0.9
    assert region["method"] == "parametric bootstrap (shrinkage-corrected intervals)"
    d = len(finished["beta"])
    assert len(region["low"]) == len(region["high"]) == d
    assert all(lo < hi for lo, hi in zip(region["low"], region["high"], strict=True))
    assert region["radius"] > 0
    chart = page.split('<svg id="confidence"')[1].split("</svg>")[0]
    assert chart.count('<g class="interval">') == d
    assert "β̂₁ = " in chart
    assert "cost no privacy" in page


def test_no_region_when_the_operator_asks_for_none(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path, confidence_draws=0))) as client:
        study = start_run(client, records=200, rounds=1)
        study.round(0, range(3))
        finished = _settled(client, study.run_id)
        page = client.get(f"/runs/{study.run_id}").text
    assert finished["status"] == "finished" and finished["confidence"] is None
    assert "No confidence region: this coordinator makes none (confidence_draws = 0)" in page


def test_too_few_draws_for_the_level_are_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="confidence_draws must be 0 or >= 39"):
        Settings(admin_token="x", confidence_draws=20, confidence_level=0.95)


def _request(**extra: Any) -> tuple[RunCreate, PublicParameters]:
    request = RunCreate.model_validate(run_request(hospitals=3, records=1000, d=4, **extra))
    return request, public_parameters(request)


def test_the_study_of_a_draw_is_the_runs_own() -> None:
    request, params = _request(mechanism="hospital", epsilon=2.0, rounds=4)
    study = federated_study(request, params)
    assert study.sizes == (1000, 1000, 1000) and study.n == 3000
    assert (study.model, study.mechanism, study.d, study.rounds) == ("gmm", "hospital", 4, 4)
    assert (study.epsilon, study.delta, study.tau) == (2.0, params.delta, params.tau)
    assert study.missing == 0.0


def test_a_failed_bootstrap_is_stored_and_shows_no_region(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(confidence, "study_region", fail)
    with TestClient(create_app(settings(tmp_path))) as client:
        study = start_run(client, records=200, rounds=1)
        study.round(0, range(3))
        finished = _settled(client, study.run_id)
        store = client.app.state.coordinator.store  # type: ignore[attr-defined]
        body = store.derived(study.run_id, CONFIDENCE)
        assert stored_region(store, study.run_id) is None
    assert finished["status"] == "finished" and finished["confidence"] is None
    assert json.loads(body) == {"failed": "no confidence region: boom"}


def test_the_interval_chart_draws_unbounded_ends_as_arrows() -> None:
    rows = [
        Interval("β̂₁", 1.0, 0.5, 1.5),
        Interval("β̂₂", -2.0, -math.inf, -1.0),
        Interval("<b>", 0.5, math.nan, math.inf),
    ]
    chart = interval_chart(rows, chart_id="confidence", title="t", label="β_j")
    assert chart.count('<g class="interval">') == 3
    assert "β̂₁ = 1: [0.5, 1.5]" in chart
    assert "β̂₂ = -2: [−∞, -1]" in chart
    assert "&lt;b&gt; = 0.5: [−∞, ∞]" in chart and "<b>" not in chart
    assert chart.count("<path ") == 3  # one arrow per infinite end
    assert "inf" not in chart and "nan" not in chart
