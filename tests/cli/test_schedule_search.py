"""The schedule search (``ldpem.common.planning.schedule_search``), ``ldpem plan --search-schedule``
and ``ldpem run create --plan``: small n and 2 seeds, so that each runs in seconds."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from ldpem.cli import main
from ldpem.common.planning.executor import SerialExecutor
from ldpem.common.planning.prediction import Prediction, Problem, predict
from ldpem.common.planning.schedule_search import (
    CLEAR_GAIN_SE,
    DEFAULT_GRID,
    ScheduleSearch,
    Setting,
    make_grid,
    paired_gain,
    search_schedule,
)
from ldpem.common.wire import RunCreate, public_parameters
from ldpem.server.app import create_app
from ldpem.server.forecast import run_problem
from tests.fedkit import ADMIN, live_server, run_request, settings

MECHANISM = "local"


def test_the_default_grid_is_the_eight_measured_settings() -> None:
    assert len(DEFAULT_GRID) == 8
    assert {s.rounds for s in DEFAULT_GRID} == {10, 12}
    assert {s.schedule for s in DEFAULT_GRID} == {"equal", "geometric:1.3"}
    assert {s.final for s in DEFAULT_GRID} == {"last", "average:3"}
    assert DEFAULT_GRID[0] == Setting(10, "equal", "last")


def test_the_best_is_the_lowest_mean_and_each_row_is_the_prediction_of_its_setting() -> None:
    problem = Problem(model="gmm", d=3, sizes=(1500, 1500))
    grid = make_grid(rounds=(4, 6), schedules=("equal",), finals=("last", "average:3"))
    with SerialExecutor() as executor:
        search = search_schedule(problem, MECHANISM, grid=grid, seeds=2, executor=executor)
        assert [s for s, _ in search.table] == list(grid)
        best_setting, best = search.best
        assert best.mean == min(p.mean for _, p in search.table)
        # The same numbers as one prediction of the best setting.
        again = predict(best_setting.applied(problem), MECHANISM, seeds=2, executor=executor)
    assert again.errors == best.errors
    found = search.as_dict()
    assert {k: found["best"][k] for k in ("rounds", "schedule", "final", "mean")} == {  # type: ignore[index]
        **best_setting.as_dict(),
        "mean": best.mean,
    }
    assert found["reference"] == grid[0].as_dict()


def _prediction(errors: list[float], first_seed: int = 10**9) -> Prediction:
    return Prediction("local", Problem(model="gmm", d=3, sizes=(100,)), tuple(errors), first_seed)


def test_the_paired_gain_is_the_mean_and_standard_error_of_the_per_seed_differences() -> None:
    reference = _prediction([1.0, 2.0, 3.0, 4.0])
    setting = _prediction([0.5, 1.9, 2.6, 3.0])  # differences 0.5, 0.1, 0.4, 1.0
    gain = paired_gain(reference, setting)
    assert gain.mean == pytest.approx(0.5)
    # sample variance of the differences: (0 + 0.16 + 0.01 + 0.25) / 3 = 0.14
    assert gain.se == pytest.approx((0.14 / 4) ** 0.5)
    assert gain.clear == (CLEAR_GAIN_SE * (0.14 / 4) ** 0.5 < 0.5)
    # Diverged runs: on the setting's side only a loss, on the reference's only a gain.
    diverged = _prediction([1.0, float("inf"), 3.0, 4.0])
    assert paired_gain(reference, diverged).mean == float("-inf")
    assert not paired_gain(reference, diverged).clear
    assert paired_gain(diverged, reference).clear
    assert not paired_gain(diverged, diverged).clear
    # One seed cannot tell anything apart; different seeds are not a pair.
    assert not paired_gain(_prediction([2.0]), _prediction([1.0])).clear
    with pytest.raises(ValueError, match="same seeds"):
        paired_gain(reference, _prediction([1.0, 2.0, 3.0, 4.0], first_seed=0))


def _search(*rows: list[float]) -> ScheduleSearch:
    grid = make_grid(rounds=(10,), schedules=("equal", "geometric:1.3"), finals=("last",))
    grid += (Setting(12, "geometric:1.3", "last"),)
    problem = Problem(model="gmm", d=3, sizes=(100,))
    table = tuple(zip(grid, (_prediction(r) for r in rows), strict=True))
    return ScheduleSearch(problem, "local", table)


def test_the_recommendation_leaves_the_first_setting_only_for_a_clear_gain() -> None:
    reference = [1.0, 2.0, 1.0, 2.0]
    # The lowest mean, but noisy seed by seed: −0.9, +1.9, −0.9, +1.9 → gain 0.5 ± 0.8.
    noisy = [1.9, 0.1, 1.9, 0.1]
    # A steady gain of 0.2 on every seed, and one of 0.1.
    steady, small = [0.8, 1.8, 0.8, 1.8], [0.9, 1.9, 0.9, 1.9]
    search = _search(reference, noisy, list(reference))
    assert search.best[0] == Setting(10, "geometric:1.3", "last")
    assert search.setting == Setting(10, "equal", "last")  # the noisy one is no clear gain
    assert "not a clear gain" in search.describe()
    search = _search(reference, steady, small)
    assert search.setting == Setting(10, "geometric:1.3", "last") == search.best[0]
    assert "0.2 ± 0 lower than T = 10, equal, last" in search.describe()
    # Of two clear gains, the larger.
    assert _search(reference, small, steady).setting == Setting(12, "geometric:1.3", "last")
    found = json.loads(json.dumps(_search(reference, noisy, steady).as_dict()))
    assert found["recommended"]["schedule"] == "geometric:1.3"
    assert [row["clear_gain"] for row in found["table"]] == [False, False, True]


def test_settings_the_hospitals_cannot_afford_are_left_out() -> None:
    problem = Problem(model="gmm", d=3, sizes=(11, 400), rounds=5)
    grid = make_grid(rounds=(5, 12), schedules=("equal",), finals=("last",))
    with SerialExecutor() as executor:
        search = search_schedule(problem, MECHANISM, grid=grid, seeds=2, executor=executor)
    assert [s.rounds for s, _ in search.table] == [5]
    with pytest.raises(ValueError, match="no setting"):
        search_schedule(problem, MECHANISM, grid=grid[1:], seeds=2)


def test_noise_shares_search_only_equal_rounds_and_the_last_iterate() -> None:
    problem = Problem(model="gmm", d=3, sizes=(400, 400, 400))
    grid = make_grid(rounds=(4,))
    with SerialExecutor() as executor:
        search = search_schedule(problem, "secagg", grid=grid, seeds=1, executor=executor)
    assert [s for s, _ in search.table] == [Setting(4, "equal", "last")]


def test_plan_search_schedule_prints_the_table_and_adds_it_to_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--n", "3000", "--hospitals", "2", "--d", "3", "--seeds", "2"]
    argv += ["--crossover-limit", "20000", "--workers", "1", "--search-schedule"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # The mechanism the plan recommends is searched, and said so.
    assert "schedule search for hospital (the plan's recommendation)" in out
    table = out[out.index("rounds, schedule and reported estimate") :]
    assert table.count("\n   T = 1") + table.count("\n * T = 1") == 8
    assert table.count("\n * T = 1") == 1  # the recommended setting is marked
    assert "recommended schedule: T = " in out and "10–90% of 2 simulated runs" in out
    # Non-private EM at the recommended setting, and what the gain column means.
    assert "for comparison, at the same setting (T = " in out and "non-private EM" in out
    assert "gain: how much lower a setting's error is" in out
    assert main([*argv, "--json", "--search-mechanism", MECHANISM]) == 0
    found = json.loads(capsys.readouterr().out)["schedule_search"]
    assert found["mechanism"] == MECHANISM and found["seeds"] == 2
    compared = found["compared"]
    assert compared["mechanism"] == "none" and compared["seeds"] == 2
    assert len(found["table"]) == 8
    best = min(found["table"], key=lambda row: row["mean"])
    assert found["best"] == best and best["p10"] <= best["mean"] <= best["p90"]
    chosen = found["recommended"]
    assert chosen == found["table"][0] or chosen["clear_gain"]


def test_run_create_plan_sets_the_searched_rounds_schedule_and_final(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    request = run_request(hospitals=2, records=1500, d=3, rounds=5, snr=3.0, epsilon=1.0)
    config = tmp_path / "run.json"
    config.write_text(json.dumps(request))
    monkeypatch.setenv("LDPEM_ADMIN_TOKEN", ADMIN)
    with live_server(create_app(settings(tmp_path))) as url:
        argv = ["run", "create", "--coordinator", url, "--config", str(config)]
        assert main([*argv, "--plan", "--plan-seeds", "2", "--workers", "1"]) == 0
        captured = capsys.readouterr()
        created = json.loads(captured.out)
        params = created["params"]  # as the coordinator published them
        status = httpx.get(f"{url}/v1/runs/{created['run_id']}", timeout=30).json()
    assert status["rounds"] == params["rounds"]
    # The same search on the same problem, by hand: the request's own setting first, the
    # reference the grid's settings must beat clearly (issue 43, finding 14).
    run = RunCreate.model_validate(request)
    own = Setting(5, "equal", "last")
    grid = (own, *(s for s in DEFAULT_GRID if s != own))
    with SerialExecutor() as executor:
        search = search_schedule(
            run_problem(run, public_parameters(run)),
            MECHANISM,
            grid=grid,
            seeds=2,
            executor=executor,
        )
    expected = search.setting
    assert search.reference[0] == own and "T = 5, equal, last" in captured.err
    # Fields at their defaults are left out of the published parameters (common/wire/__init__.py).
    published = (params["rounds"], params.get("schedule", "equal"), params.get("final", "last"))
    assert published == (expected.rounds, expected.schedule, expected.final)
    rounds = (
        f"rounds {expected.rounds}" if expected.rounds == 5 else f"rounds 5 -> {expected.rounds}"
    )
    schedule = f"schedule {'equal -> ' if expected.schedule != 'equal' else ''}{expected.schedule}"
    final = f"final {'last -> ' if expected.final != 'last' else ''}{expected.final}"
    assert f"--plan: {rounds}, {schedule}, {final}" in captured.err
    if expected == own:
        assert "the request's own setting, kept" in captured.err
    else:
        assert "lower than the request's T = 5, equal, last" in captured.err
    # The JSON answer states the setting applied too (issue 32).
    assert created["plan"] == {
        "rounds": expected.rounds,
        "schedule": expected.schedule,
        "final": expected.final,
    }
    assert "recommended schedule:" in captured.err


def test_run_create_plan_refuses_an_invalid_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_request(d=0)))
    monkeypatch.setenv("LDPEM_ADMIN_TOKEN", ADMIN)
    argv = ["run", "create", "--coordinator", "http://127.0.0.1:9", "--config", str(config)]
    assert main([*argv, "--plan", "--plan-seeds", "2", "--workers", "1"]) == 2
    assert "--plan:" in capsys.readouterr().err
