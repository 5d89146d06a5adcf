"""The round state machine: M-step, quorum and deadlines, durability, long-poll, forecast."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ldpem.common.core.accounting import noise_std_for
from ldpem.common.core.calibration import truncation_sensitivity
from ldpem.common.planning.plan import BEAT_FRACTION
from ldpem.common.wire import (
    ErrorBand,
    Forecast,
    ReportIn,
    RoundInfo,
    RunCreate,
    expected_round_count,
)
from ldpem.server.app import create_app
from ldpem.server.coordinator import Coordinator
from ldpem.server.forecast import forecast_warning
from ldpem.server.refusals import Conflict
from ldpem.server.store import ReportRow, Store
from tests.fedkit import ADMIN, admin_headers, run_request, settings, settled

RECORDS = 50
ROUNDS = 5


class Clock:
    """Stands still unless moved; with ``step``, each reading is ``step`` seconds later."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.step = 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def make(tmp_path: Path, clock: Clock | None = None) -> Coordinator:
    return Coordinator(Store(tmp_path / "state.sqlite"), admin_token=ADMIN, clock=clock or Clock())


def report(i: int, t: int, total: list[float], **change: Any) -> ReportIn:
    values: dict[str, Any] = {
        "hospital": f"h{i}",
        "round": t,
        "mechanism": "local",
        "count": expected_round_count(RECORDS, ROUNDS, t),
        "total": total,
        "noise_std": 4.0,  # above the floor (the σ_r of the run's budget, 2.39)
    }
    values.update(change)
    return ReportIn.model_validate(values)


def create(coordinator: Coordinator, **change: Any) -> str:
    request = RunCreate.model_validate(
        run_request(records=RECORDS, rounds=ROUNDS, d=2, beta0=[1.0, -1.0], **change)
    )
    return asyncio.run(coordinator.create_run(request)).run_id


def submit(coordinator: Coordinator, run_id: str, i: int, t: int, total: list[float]) -> None:
    hospital = next(h for h in coordinator.store.hospitals(run_id) if h.name == f"h{i}")
    asyncio.run(coordinator.submit_report(run_id, t, hospital, report(i, t, total)))


def test_round_closes_when_all_reported_with_the_m_step(tmp_path: Path) -> None:
    coordinator = make(tmp_path)
    run_id = create(coordinator, eta=0.5)
    totals = [[1.0, 2.0], [3.0, -4.0], [0.5, 0.25]]
    for i, total in enumerate(totals[:2]):
        submit(coordinator, run_id, i, 0, total)
        assert coordinator.summary(run_id).round == 0
    submit(coordinator, run_id, 2, 0, totals[2])
    count = 3 * expected_round_count(RECORDS, ROUNDS, 0)
    expected = np.array([1.0, -1.0]) + 0.5 * np.sum(totals, axis=0) / count
    summary = coordinator.summary(run_id)
    assert summary.round == 1
    np.testing.assert_array_equal(summary.beta, expected)
    rounds = coordinator.rounds(run_id)
    assert [r.status for r in rounds] == ["closed", "open"]
    assert rounds[0].reporters == ["h0", "h1", "h2"] and rounds[0].count == count


def test_run_finishes_after_its_rounds(tmp_path: Path) -> None:
    coordinator = make(tmp_path)
    run_id = create(coordinator)
    for t in range(ROUNDS):
        for i in range(3):
            submit(coordinator, run_id, i, t, [0.0, 0.0])
    summary = coordinator.summary(run_id)
    assert (summary.status, summary.round) == ("finished", ROUNDS)
    trajectory = coordinator.trajectory(run_id)
    assert len(trajectory.betas) == ROUNDS + 1 and trajectory.steps == [0.0] * ROUNDS
    participation = coordinator.participation(run_id)
    assert [p.rounds_reported for p in participation] == [list(range(ROUNDS))] * 3


def test_deadline_with_quorum_closes_over_the_reports_received(tmp_path: Path) -> None:
    clock = Clock()
    coordinator = make(tmp_path, clock)
    run_id = create(coordinator, quorum=2, round_deadline=60.0)
    submit(coordinator, run_id, 0, 0, [2.0, 2.0])
    submit(coordinator, run_id, 1, 0, [0.0, 4.0])
    clock.now += 59.0
    coordinator.tick()
    assert coordinator.summary(run_id).round == 0
    clock.now += 1.0
    coordinator.tick()
    summary = coordinator.summary(run_id)
    assert summary.round == 1
    count = 2 * expected_round_count(RECORDS, ROUNDS, 0)
    np.testing.assert_array_equal(summary.beta, [1.0 + 2.0 / count, -1.0 + 6.0 / count])
    assert coordinator.rounds(run_id)[1].deadline == clock.now + 60.0


def test_short_of_quorum_the_round_is_extended_never_averaged_over_nothing(
    tmp_path: Path,
) -> None:
    clock = Clock()
    coordinator = make(tmp_path, clock)
    run_id = create(coordinator, quorum=2, round_deadline=60.0)
    submit(coordinator, run_id, 0, 0, [1.0, 1.0])
    clock.now += 61.0
    coordinator.tick()
    assert coordinator.summary(run_id).round == 0
    assert coordinator.rounds(run_id)[0].deadline == clock.now + 60.0
    submit(coordinator, run_id, 1, 0, [1.0, 1.0])
    clock.now += 61.0
    coordinator.tick()
    assert coordinator.summary(run_id).round == 1


def test_short_of_quorum_the_run_fails_when_so_configured(tmp_path: Path) -> None:
    clock = Clock()
    coordinator = make(tmp_path, clock)
    run_id = create(coordinator, quorum=2, round_deadline=60.0, on_short="fail")
    clock.now += 61.0
    coordinator.tick()
    summary = coordinator.summary(run_id)
    assert summary.status == "failed"
    assert summary.reason == "round 0 had 0 reports at its deadline, short of the quorum 2"
    info = coordinator.round_info(run_id)
    assert info.status == "failed" and info.beta == [1.0, -1.0]


def test_state_survives_a_restart(tmp_path: Path) -> None:
    coordinator = make(tmp_path)
    run_id = create(coordinator)
    for i in range(3):
        submit(coordinator, run_id, i, 0, [float(i), 1.0])
    submit(coordinator, run_id, 0, 1, [0.5, 0.5])
    before = (
        coordinator.summary(run_id),
        coordinator.rounds(run_id),
        coordinator.trajectory(run_id),
    )
    coordinator.store.close()

    again = make(tmp_path)
    assert (again.summary(run_id), again.rounds(run_id), again.trajectory(run_id)) == before
    # The report accepted before the restart is a duplicate now, not a second report.
    hospital = next(h for h in again.store.hospitals(run_id) if h.name == "h0")
    ack = asyncio.run(again.submit_report(run_id, 1, hospital, report(0, 1, [0.5, 0.5])))
    assert ack.duplicate
    with pytest.raises(Conflict, match="already reported round 1 with different contents"):
        asyncio.run(again.submit_report(run_id, 1, hospital, report(0, 1, [0.5, 0.6])))
    assert again.rounds(run_id)[1].reporters == ["h0"]


def test_tokens_are_stored_hashed(tmp_path: Path) -> None:
    coordinator = make(tmp_path)
    create(coordinator)
    coordinator.store.close()
    raw = (tmp_path / "state.sqlite").read_bytes()
    wal = tmp_path / "state.sqlite-wal"
    raw += wal.read_bytes() if wal.exists() else b""
    request = run_request()
    for hospital in request["hospitals"]:
        assert hospital["token"].encode() not in raw


def test_central_noise_is_added_once_by_the_coordinator_and_persisted(tmp_path: Path) -> None:
    coordinator = make(tmp_path)
    run_id = create(coordinator, mechanism="central")
    params = coordinator.round_info(run_id).params
    assert params.scale is not None and params.smoothing is not None
    for i in range(3):
        hospital = next(h for h in coordinator.store.hospitals(run_id) if h.name == f"h{i}")
        body = report(i, 0, [0.0, 0.0], mechanism="central", noise_std=0.0)
        asyncio.run(coordinator.submit_report(run_id, 0, hospital, body))
    count = 3 * expected_round_count(RECORDS, ROUNDS, 0)
    stored = coordinator.store.get_round(run_id, 0)
    assert stored is not None and stored.noise is not None and stored.beta_next is not None
    # β + noise − β recovers the noise up to one rounding of the addition.
    np.testing.assert_allclose(
        np.subtract(stored.beta_next, [1.0, -1.0]), stored.noise, rtol=0, atol=4e-16
    )
    std = noise_std_for(
        epsilon=params.epsilon,
        delta=params.delta,
        sensitivity=truncation_sensitivity(params.scale, 2, smoothing=params.smoothing) / count,
    )
    # Two draws of N(0, std²): each within 6 std (probability of failure < 1e-8).
    assert all(0 < abs(v) < 6 * std for v in stored.noise)


def test_long_poll_returns_at_once_waits_and_wakes_up(tmp_path: Path) -> None:
    """No real waiting: the wait ends by the coordinator's injected clock; the 30 s guard
    only turns a long-poll that never returns into a failure."""
    clock = Clock()
    coordinator = make(tmp_path, clock)
    run_id = create(coordinator)

    async def poll(after: int, wait: float) -> RoundInfo:
        return await asyncio.wait_for(coordinator.wait_round(run_id, after, wait), timeout=30)

    async def scenario() -> None:
        # Round 0 is later than -1: the answer comes at once, however long the wait.
        assert (await poll(-1, 3600.0)).round == 0
        # Each reading of the clock is an hour later: the hour is over at the first check.
        clock.step = 3600.0
        info = await poll(0, 3600.0)
        clock.step = 0.0
        assert (info.round, info.status) == (0, "running")

        async def close_round() -> None:
            await asyncio.sleep(0)  # the long-poll is waiting by now
            for i in range(3):
                hospital = next(h for h in coordinator.store.hospitals(run_id) if h.name == f"h{i}")
                await coordinator.submit_report(run_id, 0, hospital, report(i, 0, [0.0, 0.0]))

        waited, _ = await asyncio.gather(poll(0, 3600.0), close_round())
        assert waited.round == 1

    asyncio.run(scenario())


def test_forecast_and_warning_when_no_better_than_zero(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with TestClient(create_app(settings(tmp_path, forecast_seeds=5))) as client:
        created = client.post(
            "/v1/runs",
            json=run_request(records=20_000, d=5, rounds=5, forecast=True),
            headers=admin_headers(),
        ).json()
        # run create answers at once: the forecast is computed in the background.
        assert created["pending"] == ["forecast"] and created["forecast"] is None
        good = settled(client, created["run_id"])
        # Forecast at ε = 1 with 60k records, d = 5: well below ‖β*‖ = 3.
        assert good["trivial_error"] == 3.0 and good["pending"] == []
        assert 0 < good["expected_error"] < 1.5 and good["warning"] is None
        forecast = good["forecast"]
        assert forecast["mean"] == good["expected_error"]
        assert forecast["low"] <= forecast["high"] and forecast["seeds"] == 5
        assert (forecast["records"], forecast["snr"]) == (60_000, 3)
        assert [b["snr"] for b in forecast["sensitivity"]] == [1.5, 6.0]
        # 120 records: s (∝ m^¼) is tiny, so β barely leaves its random start of norm σ,
        # nearly orthogonal to β* in d = 50: error ≈ √(σ² + ‖β*‖²) = √10 > 3; at half the
        # assumed SNR, √(1 + 1.5²) ≈ 1.8 > 1.5.
        request = run_request(records=40, d=50, rounds=2, forecast=True, epsilon=0.1)
        request["hospitals"] = [{"name": f"x{i}", "records": 40} for i in range(3)]
        with caplog.at_level(logging.WARNING, logger="ldpem.server"):
            run_id = client.post("/v1/runs", json=request, headers=admin_headers()).json()["run_id"]
            bad = settled(client, run_id)
        assert bad["expected_error"] >= 3.0
        assert "no better than the trivial estimate;" in bad["warning"]
        assert "rests on the assumed snr 3: at snr 1.5 the expected error" in bad["warning"]
        assert bad["warning"] in caplog.text
        page = client.get(f"/runs/{bad['run_id']}").text
        assert "no better than the trivial estimate" in page


def test_a_forecast_fine_at_the_assumed_snr_warns_when_half_of_it_is_worse_than_zero() -> None:
    def band(snr: float, mean: float | None) -> ErrorBand:
        return ErrorBand(snr=snr, trivial_error=snr, mean=mean, low=mean, high=mean)

    def forecast(half: float | None) -> Forecast:
        return Forecast(
            **band(3.0, 1.04).model_dump(),
            seeds=20,
            first_seed=10**9,
            records=60_000,
            sensitivity=[band(1.5, half), band(6.0, 0.5)],
        )

    assert forecast_warning(forecast(1.2), BEAT_FRACTION) is None
    warning = forecast_warning(forecast(1.9), BEAT_FRACTION)
    assert warning is not None and "expected error 1.04" not in warning
    assert "at snr 1.5 the expected error is 1.9, worse than the trivial estimate (1.5)" in warning
    diverging = str(forecast_warning(forecast(None), BEAT_FRACTION))
    assert "diverges, worse than the trivial estimate" in diverging
    assert "diverges" in str(forecast_warning(None, BEAT_FRACTION))


def test_a_state_file_from_before_forecast_bands_opens(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE runs (id TEXT PRIMARY KEY, request TEXT NOT NULL, params TEXT NOT NULL, "
        "status TEXT NOT NULL, current_round INTEGER NOT NULL, beta TEXT NOT NULL, "
        "quorum INTEGER NOT NULL, seed INTEGER NOT NULL, created_at REAL NOT NULL, "
        "expected_error REAL, trivial_error REAL NOT NULL, warning TEXT, reason TEXT);"
        "INSERT INTO runs VALUES ('r1', '{}', '{}', 'finished', 5, '[0.0]', 1, 0, 1.0, 0.4, "
        "3.0, NULL, NULL);"
    )
    old.commit()
    old.close()
    store = Store(path)
    try:
        run = store.get_run("r1")
        assert run is not None and run.expected_error == 0.4 and run.forecast is None
    finally:
        store.close()


def test_status_page_openapi_and_health(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        run_id = client.post("/v1/runs", json=run_request(), headers=admin_headers()).json()[
            "run_id"
        ]
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200 and "No round closed yet" in page.text
        paths = client.get("/openapi.json").json()["paths"]
        assert "/v1/runs/{run_id}/rounds/{t}/reports" in paths
        assert "/v1/runs/{run_id}/round" in paths
        assert run_id in client.get("/").text
        assert client.get("/runs/nope").status_code == 404


def test_status_page_shows_progress_and_a_convergence_plot(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        request = run_request(records=RECORDS, rounds=ROUNDS, d=2, beta0=[1.0, -1.0])
        run_id = client.post("/v1/runs", json=request, headers=admin_headers()).json()["run_id"]
        for t in range(2):
            for i in range(3):
                body = report(i, t, [float(t + 1), 0.5]).model_dump()
                headers = {"Authorization": f"Bearer {request['hospitals'][i]['token']}"}
                response = client.post(
                    f"/v1/runs/{run_id}/rounds/{t}/reports", json=body, headers=headers
                )
                assert response.status_code == 200
        page = client.get(f"/runs/{run_id}").text
        assert 'title="2 of 5 rounds"' in page
        steps = page.split('<svg id="steps"')[1].split("</svg>")[0]
        points = steps.split('class="series"')[1].split('points="')[1].split('"')[0].split()
        assert len(points) == 2  # one step per closed round
        assert '<td>h0</td><td class="num">50</td><td class="num">2/5</td>' in page


def test_no_acknowledgement_without_a_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(settings(tmp_path))
    with TestClient(app, raise_server_exceptions=False) as client:
        request = run_request(records=RECORDS, rounds=ROUNDS, d=2, beta0=[1.0, -1.0])
        run_id = client.post("/v1/runs", json=request, headers=admin_headers()).json()["run_id"]
        coordinator: Coordinator = app.state.coordinator

        def disk_full(*args: object, **kwargs: object) -> None:
            raise sqlite3.OperationalError("database or disk is full")

        # The failure strikes inside the transaction, after the report row was written.
        insert = coordinator.store.insert_report

        def insert_then_fail(row: ReportRow) -> None:
            insert(row)
            disk_full()

        monkeypatch.setattr(coordinator.store, "insert_report", insert_then_fail)
        headers = {"Authorization": f"Bearer {request['hospitals'][0]['token']}"}
        body = report(0, 0, [0.5, 0.5]).model_dump()
        response = client.post(f"/v1/runs/{run_id}/rounds/0/reports", json=body, headers=headers)
        assert response.status_code == 500
        assert coordinator.store.reports(run_id) == []  # rolled back: nothing half-written
        monkeypatch.undo()
        response = client.post(f"/v1/runs/{run_id}/rounds/0/reports", json=body, headers=headers)
        assert response.status_code == 200 and response.json()["duplicate"] is False
