"""``ldpem plan``, the planning code behind it, the run forecast and ``simulate --data``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import pytest

from ldpem.cli import main
from ldpem.common.mechanisms import Mechanism
from ldpem.common.mechanisms import registry as mechanism_registry
from ldpem.common.mechanisms.base import NoiseSite
from ldpem.common.models import get_model
from ldpem.common.planning.crossover import Crossover, _first_below, find_crossover, size_grid
from ldpem.common.planning.executor import SerialExecutor, make_executor
from ldpem.common.planning.plan import recommendation
from ldpem.common.planning.prediction import Prediction, Problem, first_seed, predict
from ldpem.common.wire import RunCreate, public_parameters
from ldpem.server.forecast import ForecastOptions, run_forecast, run_problem
from tests.fedkit import run_request
from tests.secaggkit import hospitals, keys_and_roster


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["plan", *argv, "--json", "--crossover-limit", "200000", "--seeds", "3"]) == 0
    payload: dict[str, object] = json.loads(capsys.readouterr().out)
    return payload


def test_local_cannot_beat_beta_zero_on_twenty_thousand_rmc_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = plan_json(capsys, "--model", "rmc", "--n", "20000", "--hospitals", "1")
    beats = plan["beats_trivial"]
    assert isinstance(beats, dict)
    assert beats["local"] is False
    assert beats["hospital"] is True and beats["none"] is True
    crossover = plan["local_crossover_n"]
    assert crossover is None or int(str(crossover)) > 20_000


def test_recommends_hospital_level_for_a_four_hospital_gmm_consortium(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = plan_json(capsys, "--hospitals-sizes", "20000,15000,10000,5000")
    assert plan["n"] == 50_000 and plan["seeds"] == 3
    planned = Problem(model="gmm", d=10, sizes=(20000, 15000, 10000, 5000))
    assert plan["first_seed"] == first_seed(planned)
    assert plan["recommended_mechanism"] == "hospital"
    assert str(plan["recommendation"]).startswith("use hospital-level DP")
    mechanisms = plan["mechanisms"]
    assert isinstance(mechanisms, dict)
    for name in ("local", "hospital", "central", "local-clip", "none"):
        entry = mechanisms[name]
        assert entry["p10"] <= entry["p90"] and len(entry["errors"]) == entry["seeds"] == 3
        # The same run at half and twice the assumed ‖β*‖/σ = 3.
        assert [s["snr"] for s in entry["snr_sensitivity"]] == [1.5, 6.0]
        assert [s["trivial_error"] for s in entry["snr_sensitivity"]] == [1.5, 6.0]
    assert mechanisms["hospital"]["mean"] < mechanisms["local"]["mean"]


def test_text_output_states_the_verdict_and_the_recommendation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--n", "4000", "--hospitals", "2", "--d", "3", "--seeds", "2"]
    assert main([*argv, "--crossover-limit", "20000"]) == 0
    out = capsys.readouterr().out
    assert "hospital-level DP (same trust boundary)" in out
    first = first_seed(Problem(model="gmm", d=3, sizes=(2000, 2000)))
    assert f"over 2 simulations (seeds {first}–{first + 1})" in out
    # Which split it simulates, and how simulate runs the same one.
    assert "split: 2 equal hospital(s) of 2,000 records" in out
    assert "ldpem simulate --hospitals-sizes 2000,2000" in out
    # The footer says what the SNR and the assumed SNR mean and how to choose one.
    assert "signal-to-noise ratio" in out and "To choose it for your data" in out
    assert re.search(r"‖β\*‖/σ = +3 \(assumed\) +if 1\.5 +if 6", out), out
    assert "trivial estimate, β = 0" in out
    assert "recommendation: " in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--n", "1000"], "give --hospitals-sizes, or --n and --hospitals"),
        (
            ["--hospitals-sizes", "100,200", "--n", "300", "--hospitals", "2"],
            "give either --hospitals-sizes or --n with --hospitals, not both",
        ),
        (["--hospitals-sizes", "100,x"], "--hospitals-sizes must be comma-separated integers"),
        (["--hospitals-sizes", "100,0"], "--hospitals-sizes must be integers >= 1"),
        (["--hospitals-sizes", "100,5"], "every hospital needs at least rounds = 10 records"),
        (["--n", "1000", "--hospitals", "2", "--epsilon", "-1"], "--epsilon must be > 0"),
        (["--n", "1000", "--hospitals", "2", "--seeds", "0"], "--seeds must be >= 1"),
    ],
)
def test_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and err.count("\n") == 1


def run_plan(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["plan", *argv]) == 0
    return capsys.readouterr().out


#: The issue's example (issue 23): its output once said both "does NOT beat" and "beats
#: from about n = 2,000".
ISSUE_EXAMPLE = ["--model", "gmm", "--d", "10", "--epsilon", "1", "--n", "2000"]
ISSUE_EXAMPLE += ["--hospitals", "5", "--seeds", "10"]


@pytest.mark.slow  # three plans: ~30 s on 2 busy cores
def test_the_crossover_agrees_across_calls_and_with_the_verdict_at_n(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outputs = [run_plan(capsys, *ISSUE_EXAMPLE) for _ in range(3)]
    crossover_lines = [
        next(line for line in out.splitlines() if line.startswith("local DP ")) for out in outputs
    ]
    verdicts = [
        next(line for line in out.splitlines() if line.startswith("at n = ")) for out in outputs
    ]
    assert len(set(crossover_lines)) == 1 and len(set(verdicts)) == 1
    assert outputs[0] == outputs[1] == outputs[2]
    found = re.search(
        r"from about n ≈ ([\d,]+) \(between ([\d,]+) and ([\d,]+):", crossover_lines[0]
    )
    assert found is not None, crossover_lines[0]
    crossover, low, high = (int(group.replace(",", "")) for group in found.groups())
    assert low <= crossover <= high
    # The verdict at n = 2,000 and the crossover come from the same prediction.
    if "does NOT beat" in verdicts[0]:
        assert crossover > 2000
    else:
        assert "does beat" in verdicts[0] and crossover <= 2000
    recommendation = next(line for line in outputs[0].splitlines() if line.startswith("recom"))
    assert f"n ≈ {crossover:,}" in recommendation or "use local DP" in recommendation


def test_the_crossover_is_a_monotone_search_on_the_predicted_mean() -> None:
    problem = Problem(model="gmm", d=10, sizes=(30000, 20000), rounds=10, epsilon=1.0)
    threshold = problem.useful_error
    with make_executor(workers=2) as executor:
        at_n = predict(problem, "local", seeds=4, executor=executor)
        crossover = find_crossover(
            problem,
            "local",
            threshold=threshold,
            seeds=4,
            limit=400_000,
            executor=executor,
            known=[at_n],
        )
    assert crossover.n is not None and crossover.low is not None and crossover.high is not None
    assert crossover.low <= crossover.n <= crossover.high
    # The planned n's prediction was reused, not simulated again.
    assert at_n in crossover.predictions
    assert min(p.problem.n for p in crossover.predictions) >= 250
    # At the crossover the mean beats β = 0; at the grid size below it, it does not.
    grid = size_grid(50_000, floor=250, limit=400_000)
    assert 50_000 in grid
    at = next(p for p in crossover.predictions if p.problem == problem.with_records(crossover.n))
    assert at.mean <= threshold
    below = grid[grid.index(crossover.n) - 1]
    under = next(p for p in crossover.predictions if p.problem == problem.with_records(below))
    assert under.mean > threshold
    nowhere = find_crossover(problem, "local", threshold=0.01, seeds=1, limit=60_000)
    assert nowhere.n is None and "does not beat β = 0 at any n up to 60,000" in nowhere.describe(
        "local DP"
    )


def test_first_below_finds_the_crossing_of_a_falling_sequence() -> None:
    values = [10.0, 8.0, 6.0, 5.0, 4.0, 3.0, 2.5, 2.0, 1.0, 0.5, 0.2, 0.1]
    for start in range(len(values)):
        for threshold in (11.0, 5.5, 2.0, 0.15, 0.05):
            expected = next((i for i, v in enumerate(values) if v <= threshold), None)
            found = _first_below(values.__getitem__, threshold, start, len(values) - 1)
            assert found == expected, (start, threshold)


def test_size_grid_passes_through_the_planned_n_and_the_limit() -> None:
    grid = size_grid(2000, floor=250, limit=10_000)
    assert grid == sorted(set(grid)) and 2000 in grid and grid[-1] == 10_000
    assert grid[0] >= 250 and round(grid[0] / 2 ** (1 / 4)) < 250
    assert 4000 in grid and 1000 in grid  # a doubling is GRID_STEPS steps
    assert size_grid(5000, floor=250, limit=1000)[-1] == 5000  # the planned n, even above


def test_recommendation_rules() -> None:
    problem = Problem(model="gmm", d=2, sizes=(100,), rounds=10)

    def est(name: str, value: float) -> Prediction:
        return Prediction(name, problem, (value, value))

    def crossing(n: int | None) -> Crossover:
        return Crossover("local", problem.useful_error, 10**6, 2, n, n, n, ())

    line = recommendation(problem, [est("local", 0.3), est("hospital", 0.28)], crossing(5000))
    assert line.startswith("use local DP")
    line = recommendation(problem, [est("local", 2.0), est("hospital", 0.1)], crossing(None))
    assert line.startswith("use hospital-level DP") and "even at n = 1,000,000" in line
    line = recommendation(problem, [est("local", 2.9), est("hospital", 2.0)], crossing(None))
    assert line.startswith("no private mechanism")
    # Secure aggregation only for a clear gain (it assumes an honest majority).
    many = [est("local", 2.0), est("hospital", 0.4), est("secagg", 0.11)]
    line = recommendation(problem, many, crossing(None))
    assert line.startswith("use distributed DP (secure aggregation) (--mechanism secagg")
    close = [est("local", 2.0), est("hospital", 0.1), est("secagg", 0.06)]
    assert recommendation(problem, close, crossing(None)).startswith("use hospital-level DP")


@dataclass(frozen=True, kw_only=True)
class _SharperHospital(Mechanism):
    """A registered mechanism the planner has never heard of (only its declarations)."""

    name: ClassVar[str] = "hospital-sharper"
    label: ClassVar[str] = "sharper hospital-level DP"
    noise_site: ClassVar[NoiseSite] = "holder"


@dataclass(frozen=True, kw_only=True)
class _Curator(Mechanism):
    """A registered mechanism whose noise the coordinator adds: it trusts the coordinator."""

    name: ClassVar[str] = "curator-sharp"
    label: ClassVar[str] = "sharp central DP"
    noise_site: ClassVar[NoiseSite] = "aggregator"


def test_the_recommendation_takes_every_registered_mechanism(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Registered for this test only (the registry is restored after it).
    for cls in (_SharperHospital, _Curator):
        monkeypatch.setitem(mechanism_registry._MECHANISMS, cls.name, cls)
    problem = Problem(model="gmm", d=2, sizes=(100,), rounds=10)
    crossing = Crossover("local", problem.useful_error, 10**6, 2, 5000, 5000, 5000, ())

    def est(name: str, value: float) -> Prediction:
        return Prediction(name, problem, (value, value))

    # A clear gain over both built-in ones of the same trust boundary: recommended.
    found = [est("local", 0.3), est("hospital", 0.28), est("hospital-sharper", 0.1)]
    line = recommendation(problem, found, crossing)
    assert line.startswith("use sharper hospital-level DP (--mechanism hospital-sharper)"), line
    # Not a clear gain (more than 0.8 of the best's error): the first registered one stays.
    close = [est("local", 0.3), est("hospital-sharper", 0.27)]
    assert recommendation(problem, close, crossing).startswith("use local DP"), close
    # Noise the coordinator adds is never recommended, however small the error.
    central = [est("local", 0.3), est("curator-sharp", 0.01)]
    assert recommendation(problem, central, crossing).startswith("use local DP")


def test_run_forecast_is_the_planning_prediction() -> None:
    request = RunCreate.model_validate(
        run_request(records=3000, rounds=5, d=3, mechanism="hospital", forecast=True)
    )
    params = public_parameters(request)
    problem = run_problem(request, params)
    assert problem.sizes == (3000, 3000, 3000)
    forecast = run_forecast(request, params, ForecastOptions(seeds=2, workers=1))
    assert forecast is not None
    expected = predict(problem, "hospital", seeds=2, executor=SerialExecutor())
    assert (forecast.mean, forecast.low, forecast.high) == (
        expected.mean,
        expected.low,
        expected.high,
    )
    assert (forecast.seeds, forecast.first_seed, forecast.records) == (
        2,
        first_seed(problem),
        9000,
    )
    # Half and twice the assumed SNR: the same run (τ as published), other data.
    half, double = forecast.sensitivity
    assert (half.snr, double.snr) == (1.5, 6.0) and half.trivial_error == 1.5
    at_half = predict(problem.at_snr(1.5), "hospital", seeds=2, executor=SerialExecutor())
    assert half.mean == at_half.mean and at_half.problem.resolved_tau == problem.resolved_tau


def test_the_forecast_of_a_run_of_noise_shares_simulates_its_published_t_min(
    tmp_path: Path,
) -> None:
    _, _, roster = keys_and_roster(tmp_path, 5)
    request = RunCreate.model_validate(
        {
            "model": "gmm",
            "d": 3,
            "sigma": 1.0,
            "rounds": 4,
            "mechanism": "secagg",
            "hospitals": hospitals([400] * 5),
            "roster": roster,
            "t_min": 4,
        }
    )
    params = public_parameters(request)
    problem = run_problem(request, params)
    assert params.t_min == problem.t_min == 4  # not the default strict majority, 3
    forecast = run_forecast(request, params, ForecastOptions(seeds=2, workers=1))
    assert forecast is not None
    expected = predict(problem, "secagg", seeds=2, executor=SerialExecutor())
    assert forecast.mean == expected.mean
    default = predict(replace(problem, t_min=None), "secagg", seeds=2, executor=SerialExecutor())
    assert default.mean != expected.mean


def test_simulate_on_data_warns_when_beta_zero_is_as_good(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_records = tmp_path / "rmc.csv"
    generate = ["generate", "--model", "rmc", "--d", "10", "--n", "20000", "--seed", "1"]
    assert main([*generate, "--out", str(model_records)]) == 0
    capsys.readouterr()

    def simulate(*argv: str) -> dict[str, object]:
        assert main(["simulate", "--model", "rmc", *argv, "--json"]) == 0
        outcome: dict[str, object] = json.loads(capsys.readouterr().out)
        return outcome

    local = simulate("--data", str(model_records))
    assert local["error"] is None
    assert "probably no better than β = 0" in str(local["warning"])
    hospital = simulate("--data", str(model_records), "--mechanism", "hospital")
    assert hospital["warning"] is None
    synthetic = simulate("--n", "2000")
    assert synthetic["warning"] is None  # β* known: the error itself says it


@pytest.mark.parametrize(("model", "d"), [("gmmk", 3), ("lca", 4)])
def test_plan_of_a_mixture_reads_its_rows_against_its_own_trivial_estimate(
    model: str, d: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model with components (issue 44) is planned with its option: the problem carries
    K, the simulations size β by K·(d + 1), and the rows are read against the mixture's
    trivial estimate (docs/MATH.md §7), not snr·σ."""
    argv = ("--model", model, "--components", "2", "--d", str(d), "--n", "4000")
    plan = plan_json(capsys, *argv, "--hospitals", "2")
    planned = Problem(model=model, d=d, sizes=(2000, 2000), model_options=(("components", 2),))
    assert plan["first_seed"] == first_seed(planned)
    name, error = get_model(model, {"components": 2}).trivial_estimate(d, snr=3.0, sigma=1.0)
    assert plan["trivial_error"] == error != 3.0
    assert plan["beat_threshold"] == 0.5 * error
    mechanisms = plan["mechanisms"]
    assert isinstance(mechanisms, dict)
    # Non-private EM on 4000 records of well-separated components beats it.
    assert mechanisms["none"]["mean"] < 0.5 * error
    assert (
        main(["plan", *argv, "--hospitals", "2", "--seeds", "2", "--crossover-limit", "8000"]) == 0
    )
    out = capsys.readouterr().out
    assert f"{model}, components = 2, d = {d} ({2 * (d + 1)} parameters)" in out
    assert f"trivial estimate, {name}" in out


def test_plan_refuses_an_option_its_model_does_not_declare_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["plan", "--model", "gmm", "--components", "3", "--n", "2000", "--hospitals", "1"])
        == 2
    )
    assert capsys.readouterr().err.strip().splitlines() == [
        "ldpem plan: error: model gmm has no option components (its options: none)"
    ]
