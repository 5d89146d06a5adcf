"""The status pages' content (in-process) and the pieces they are built from: axis ticks,
and the ε the coordinator infers from the stated σ_r."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ldpem.common.core.accounting import epsilon_for_ratio, ratio_for_budget
from ldpem.common.planning.prediction import SENSITIVITY_SEEDS
from ldpem.common.wire import PublicParameters
from ldpem.server.app import create_app
from ldpem.server.coordinator import implied_epsilon, run_noise_std
from ldpem.server.pages.svg import format_number, linear_ticks, log_ticks
from ldpem.server.settings import Settings
from tests.fedkit import admin_headers, run_request, settings, settled
from tests.publickit import published_params
from tests.server.opkit import Study, start_run


# --- ticks -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("low", "high", "ticks"),
    [
        (0.0, 1.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0.0, 9.0, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]),
        (-1.3, 0.7, [-1.5, -1.0, -0.5, 0.0, 0.5, 1.0]),
        (3.0, 3.0, [2.6, 2.8, 3.0, 3.2, 3.4]),
    ],
)
def test_linear_ticks_are_round_numbers_covering_the_range(
    low: float, high: float, ticks: list[float]
) -> None:
    axis_low, axis_high, found = linear_ticks(low, high)
    assert found == pytest.approx(ticks)
    assert axis_low <= min(low, high) and axis_high >= max(low, high)
    assert (axis_low, axis_high) == (found[0], found[-1])


@pytest.mark.parametrize(
    ("low", "high", "ticks"),
    [
        (0.33, 0.45, [0.2, 0.5]),  # inside one 1-2-5 step: still two labelled ticks
        (0.6, 0.6, [0.5, 1.0]),
        (0.003, 0.025, [0.002, 0.005, 0.01, 0.02, 0.05]),
        (0.003, 2.5, [0.001, 0.01, 0.1, 1, 10]),  # beyond two decades: decades
        (1e-9, 1.0, [1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1e1]),  # decades, every other one
    ],
)
def test_log_ticks(low: float, high: float, ticks: list[float]) -> None:
    axis_low, axis_high, found = log_ticks(low, high)
    assert found == pytest.approx(ticks, rel=1e-9)
    assert axis_low <= low * (1 + 1e-12) and axis_high >= high * (1 - 1e-12)


@pytest.mark.parametrize("bad", [(0.0, 1.0), (-1.0, 1.0), (math.nan, 1.0), (1.0, math.inf)])
def test_log_ticks_refuse_what_has_no_logarithm(bad: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="log axis limits must be finite and > 0"):
        log_ticks(*bad)


def test_linear_ticks_refuse_non_finite_limits() -> None:
    with pytest.raises(ValueError, match="axis limits must be finite"):
        linear_ticks(0.0, math.nan)


@pytest.mark.parametrize(
    ("value", "step", "label"),
    [
        (0.0, None, "0"),
        (0.5, None, "0.5"),
        (1e-5, None, "10⁻⁵"),
        (2e-6, None, "2×10⁻⁶"),
        (12345.0, None, "1.23×10⁴"),
        (0.25, 0.25, "0.25"),
        (1.0, 0.2, "1.0"),
        (-1.5, 0.5, "-1.5"),
        (40.0, 20.0, "40"),
    ],
)
def test_tick_labels_are_readable(value: float, step: float | None, label: str) -> None:
    assert format_number(value, step) == label


# --- privacy inferred from σ_r -----------------------------------------------------------
def _params(mechanism: str = "local", **change: object) -> PublicParameters:
    truncated = mechanism in ("local", "central")
    values = published_params(
        d=4,
        rounds=5,
        mechanism=mechanism,
        delta=1e-6,
        tau=10.0,
        scale=1.5 if truncated else None,
        smoothing=100.0 if truncated else None,
        clip=1.0 if mechanism == "local-clip" else None,
        records_per_round=100,
    )
    values.update(change)
    return PublicParameters.model_validate(values)


@pytest.mark.parametrize("mechanism", ["local", "local-clip"])
@pytest.mark.parametrize("accounting", ["exact", "paper"])
def test_the_run_s_own_noise_spends_at_most_the_run_s_budget(
    mechanism: str, accounting: str
) -> None:
    # The page shows implied_epsilon: tight (exact) accounting of the stated σ_r. The run's
    # own σ_r spends exactly its ε under exact accounting, less under the paper's (more noise).
    params = _params(mechanism, epsilon=0.7, accounting=accounting)
    noise_std = run_noise_std(params)
    spent = implied_epsilon(mechanism, params, noise_std, 100)
    assert spent is not None
    if accounting == "exact":
        assert spent == pytest.approx(0.7, rel=1e-6)
    else:
        assert spent < 0.7
    half = epsilon_for_ratio(ratio_for_budget(0.7, 1e-6, accounting) / 2, 1e-6, "exact")
    if accounting == "exact":
        assert implied_epsilon(mechanism, params, 2 * noise_std, 100) == pytest.approx(
            half, rel=1e-6
        )


def test_non_local_mechanisms_have_no_local_epsilon() -> None:
    assert implied_epsilon("none", _params("none"), 1.0, 100) is None
    assert implied_epsilon("central", _params("central"), 0.0, 100) is None


def test_a_tiny_stated_noise_is_a_huge_epsilon_not_an_error() -> None:
    params = _params()
    huge = implied_epsilon("local", params, run_noise_std(params) * 1e-3, 100)
    assert huge is not None and huge > 100


# --- pages -------------------------------------------------------------------------------
def test_index_lists_runs_newest_first_with_status_progress_and_age(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        first = start_run(client, records=200, rounds=2)
        first.round(0, range(3))
        first.round(1, range(3))
        time.sleep(0.01)
        # Tokens generated by the coordinator: the first run holds the fixed ones.
        request = run_request(rounds=5, hospitals=2)
        request["hospitals"] = [{"name": f"x{i}", "records": 200} for i in range(2)]
        second = client.post("/v1/runs", json=request, headers=admin_headers()).json()
        page = client.get("/")
    assert page.status_code == 200
    rows = re.findall(r'<tr><td><a href="/runs/(\w+)">.*?</tr>', page.text)
    assert rows == [second["run_id"], first.run_id]
    table = page.text.split('<table id="runs">')[1]
    assert 'class="status-finished">finished' in table and 'title="2 of 2 rounds"' in table
    assert 'class="status-running">running' in table and 'title="0 of 5 rounds"' in table
    assert re.search(r"<td>\d+ ms ago</td>", table)
    assert "1 running, 1 finished, 0 failed" in page.text
    assert 'http-equiv="refresh"' in page.text  # a run is open


def test_a_finished_run_stops_refreshing_and_reports_every_hospital(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        study = start_run(client, records=200, rounds=2)
        opened = client.get(f"/runs/{study.run_id}").text
        assert 'http-equiv="refresh"' in opened
        assert "No round closed yet" in opened
        assert "waiting for h0, h1, h2" in opened
        study.round(0, range(3))
        study.round(1, range(3))
        # It reloads while its confidence region is computed in the background, then stops.
        settled(client, study.run_id)
        page = client.get(f"/runs/{study.run_id}").text
    assert 'http-equiv="refresh"' not in page
    assert "Healthy</strong>: finished all 2 rounds" in page
    hospitals = page.split('<table id="hospitals">')[1].split("</table>")[0]
    for name in ("h0", "h1", "h2"):
        assert re.search(
            rf'<td>{name}</td><td class="num">200</td><td class="num">2/2</td>', hospitals
        )
    # Reports at the run's own σ_r spend its ε = 1 exactly (printed to 3 digits).
    assert hospitals.count("1 of 1") == 3
    rounds = page.split('<table id="rounds">')[1].split("</table>")[0]
    assert rounds.count("3/3 (quorum 3)") == 2


def test_the_page_shows_the_forecast_band_its_seeds_and_the_snr_it_rests_on(
    tmp_path: Path,
) -> None:
    with TestClient(create_app(settings(tmp_path, forecast_seeds=5))) as client:
        study = start_run(client, records=2000, rounds=2, forecast=True)
        forecast = client.get(f"/v1/runs/{study.run_id}").json()["forecast"]
        study.round(0, range(3))
        page = client.get(f"/runs/{study.run_id}").text
    accuracy = page.split('<svg id="accuracy"')[1].split("</svg>")[0]
    assert f"forecast: {forecast['mean']:.3g}" in accuracy
    assert f"10–90%: {forecast['low']:.3g}–{forecast['high']:.3g}" in accuracy
    assert '<g class="span">' in accuracy
    note = page.split('<svg id="accuracy"')[1].split("</p>")[0]
    assert "mean final error ‖β̂ − β*‖ of 5 simulated runs" in note
    half, double = forecast["sensitivity"]
    assert f"at ‖β*‖/σ = 1.5, {half['mean']:.3g} (β = 0: 1.5)" in note
    assert f"at ‖β*‖/σ = 6, {double['mean']:.3g} (β = 0: 6)" in note
    steps = page.split('<svg id="steps"')[1].split("</svg>")[0]
    assert "forecast error (mean)" in steps and '<rect class="band"' in steps
    assert "forecast 10–90%" in steps


def test_a_coordinator_told_to_simulate_no_other_snr_forecasts_the_same_band(
    tmp_path: Path,
) -> None:
    """``forecast_sensitivity_seeds = 0`` (``ldpem demo``'s coordinator): no what-ifs at half
    and twice the SNR, the band at the assumed SNR number for number, and a note that
    says so instead of an empty list."""
    forecasts, notes = {}, {}
    for what_ifs in (2, 0):
        extra = {"forecast_seeds": 5, "forecast_sensitivity_seeds": what_ifs}
        (tmp_path / str(what_ifs)).mkdir()
        with TestClient(create_app(settings(tmp_path / str(what_ifs), **extra))) as client:
            run_id = start_run(client, records=2000, rounds=2, forecast=True).run_id
            forecasts[what_ifs] = settled(client, run_id)["forecast"]
            page = client.get(f"/runs/{run_id}").text
        notes[what_ifs] = page.split('<svg id="accuracy"')[1].split("</p>")[0]
    assert [band["snr"] for band in forecasts[2].pop("sensitivity")] == [1.5, 6.0]
    assert forecasts[0].pop("sensitivity") == []
    assert forecasts[0] == forecasts[2] and forecasts[0]["seeds"] == 5
    assert "at ‖β*‖/σ = 1.5" in notes[2] and "simulates no other" not in notes[2]
    assert "this coordinator simulates no other ‖β*‖/σ" in notes[0]
    assert "at ‖β*‖/σ = 1.5" not in notes[0]


def test_the_forecast_what_if_seeds_are_a_count_or_none() -> None:
    assert Settings(forecast_sensitivity_seeds=0).forecast_sensitivity_seeds == 0
    assert Settings().forecast_sensitivity_seeds == SENSITIVITY_SEEDS
    with pytest.raises(ValueError, match="forecast_sensitivity_seeds"):
        Settings(forecast_sensitivity_seeds=-1)


def test_a_hospital_with_a_stricter_delta_shows_the_spend_its_ledger_records(
    tmp_path: Path,
) -> None:
    """Issue 24: an agent with --delta 1e-6 in a run at δ = n^-1.1 ≈ 3.2e-6 (--allow-weaker)
    calibrates for (1, 1e-6), and its ledger counts the budget as spent; the page read only
    "0.9381 of 1" at the run's δ, as if some of it were left."""
    with TestClient(create_app(settings(tmp_path))) as client:
        study = start_run(client, records=200, rounds=2)
        assert study.params.delta > 1e-6
        assert study.report(0, 0, delta=1e-6).status_code == 200
        study.report(1, 0)
        page = client.get(f"/runs/{study.run_id}").text
    hospitals = page.split('<table id="hospitals">')[1].split("</table>")[0]
    row = hospitals.split("<td>h0</td>")[1].split("</tr>")[0]
    at_run_delta = epsilon_for_ratio(ratio_for_budget(1.0, 1e-6), study.params.delta)
    assert at_run_delta < 0.99
    assert f"1 of 1 at δ = 1e-06 ({at_run_delta:.4g} at the run&#x27;s δ)" in row
    assert "1 of 1 at δ" not in hospitals.split("<td>h1</td>")[1].split("</tr>")[0]


def past_round_0(client: TestClient, run_id: str) -> None:
    """Wait (at most 20 s) for round 0 of the run to close at its deadline."""
    deadline = time.monotonic() + 20
    while client.get(f"/v1/runs/{run_id}").json()["round"] == 0:
        assert time.monotonic() < deadline, "round 0 did not close at its deadline"
        time.sleep(0.05)


@pytest.fixture
def without_h2(tmp_path: Path) -> Iterator[tuple[TestClient, Study]]:
    """A coordinator and its run of h0, h1, h2 (200 records each, T = 3, quorum 2, 0.2 s
    deadlines) whose round 0 closed at its deadline with the reports of h0 and h1 only."""
    with TestClient(create_app(settings(tmp_path))) as client:
        study = start_run(client, records=200, rounds=3, quorum=2, round_deadline=0.2)
        study.round(0, [0, 1])
        past_round_0(client, study.run_id)
        yield client, study


def test_a_round_closed_without_a_hospital_shows_it_missing(
    without_h2: tuple[TestClient, Study],
) -> None:
    client, study = without_h2
    page = client.get(f"/runs/{study.run_id}").text
    rounds = page.split('<table id="rounds">')[1].split("</table>")[0]
    assert '<span class="missing">missing: h2</span>' in rounds
    assert "2/3 (quorum 2)" in rounds
    hospitals = page.split('<table id="hospitals">')[1].split("</table>")[0]
    assert re.search(r'<td>h2</td><td class="num">200</td><td class="num">0/3</td>', hospitals)
    assert "0 of 1" in hospitals  # h2 reported nothing: spent nothing


def test_a_run_that_finished_with_missing_rounds_is_degraded_and_names_them(
    without_h2: tuple[TestClient, Study],
) -> None:
    client, study = without_h2
    running = client.get(f"/runs/{study.run_id}").text
    study.round(1, range(3))
    study.round(2, range(3))
    page = client.get(f"/runs/{study.run_id}").text
    assert '<div id="health" class="health degraded"><strong>Degraded</strong>: running' in running
    assert "missed rounds: h2 (t = 0)" in running
    assert (
        '<div id="health" class="health degraded"><strong>Degraded</strong>: finished with '
        "missing rounds: h2 reported 2 of 3</div>"
    ) in page


def test_the_run_list_and_get_runs_carry_each_run_s_health(tmp_path: Path) -> None:
    """Issue 43, finding 5: the run list said "finished" for a degraded run, and
    ``GET /v1/runs`` had ``health`` null, while the run's own page said "Degraded"."""
    with TestClient(create_app(settings(tmp_path))) as client:
        gap = start_run(client, records=200, rounds=2, quorum=2, round_deadline=0.2)
        gap.round(0, [0, 1])
        past_round_0(client, gap.run_id)
        gap.round(1, range(3))
        # A second run, just opened (tokens generated: the first run holds the fixed ones).
        request = run_request(rounds=5, hospitals=2)
        request["hospitals"] = [{"name": f"x{i}", "records": 200} for i in range(2)]
        fresh = client.post("/v1/runs", json=request, headers=admin_headers()).json()["run_id"]
        listed = {r["run_id"]: r for r in client.get("/v1/runs").json()}
        single = {r: client.get(f"/v1/runs/{r}").json() for r in listed}
        page = client.get("/").text
    assert sorted(listed) == sorted([gap.run_id, fresh])
    for run_id, run in listed.items():
        # The list says what the run's own summary says: one assessment for both.
        assert (run["health"], run["health_line"]) == (
            single[run_id]["health"],
            single[run_id]["health_line"],
        )
    assert listed[gap.run_id]["status"] == "finished"
    assert listed[gap.run_id]["health"] == "degraded"
    assert listed[gap.run_id]["health_line"] == "finished with missing rounds: h2 reported 1 of 2"
    assert listed[fresh]["health"] == "healthy"
    table = page.split('<table id="runs">')[1].split("</table>")[0]
    rows = {run_id: row for row in table.split("<tr>") for run_id in listed if run_id in row}
    assert '<td class="health-healthy"><strong>Healthy</strong></td>' in rows[fresh]
    assert (
        '<td class="health-degraded"><strong>Degraded</strong>: finished with missing rounds: '
        "h2 reported 1 of 2</td>"
    ) in rows[gap.run_id]
    assert "2 runs: 1 running, 1 finished, 0 failed; 1 degraded." in page


def test_unknown_run_page_is_404(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        assert client.get("/runs/nope").status_code == 404


@pytest.mark.parametrize(
    ("mechanism", "shown"),
    [("central", "central: the coordinator&#x27;s noise"), ("none", "∞ (no privacy)")],
)
def test_runs_without_local_noise_say_so_instead_of_an_epsilon(
    tmp_path: Path, mechanism: str, shown: str
) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        study = start_run(client, records=200, rounds=2, mechanism=mechanism)
        study.round(0, range(3))
        page = client.get(f"/runs/{study.run_id}")
    assert page.status_code == 200
    hospitals = page.text.split('<table id="hospitals">')[1].split("</table>")[0]
    assert hospitals.count(shown) == 3


def test_a_failed_run_says_why(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        study = start_run(client, records=200, rounds=3, round_deadline=0.1, on_short="fail")
        deadline = time.monotonic() + 20
        while client.get(f"/v1/runs/{study.run_id}").json()["status"] != "failed":
            assert time.monotonic() < deadline, "the run did not fail at its deadline"
            time.sleep(0.05)
        page = client.get(f"/runs/{study.run_id}").text
        index = client.get("/").text
    assert "the run failed: round 0 had 0 reports at its deadline" in page
    assert 'http-equiv="refresh"' not in page and 'http-equiv="refresh"' not in index
    assert 'class="status-failed">failed' in index
