"""``ldpem plan``, the planning code behind it, the run forecast and ``simulate --data``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ldpem.cli import main
from ldpem.common.planning import (
    BEAT_FRACTION,
    Estimate,
    Problem,
    crossover_records,
    final_errors,
    recommendation,
)
from ldpem.common.wire import RunCreate, public_parameters
from ldpem.server.forecast import forecast_error, run_problem
from tests.fedkit import run_request


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["plan", *argv, "--json", "--crossover-limit", "200000"]) == 0
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
    plan = plan_json(capsys, "--hospitals-sizes", "80000,60000,40000,20000")
    assert plan["n"] == 200_000
    assert str(plan["recommendation"]).startswith("use hospital-level DP")
    mechanisms = plan["mechanisms"]
    assert isinstance(mechanisms, dict)
    for name in ("local", "hospital", "central", "local-clip", "none"):
        entry = mechanisms[name]
        assert entry["p10"] <= entry["mean"] <= entry["p90"] or len(entry["errors"]) < 3
        assert len(entry["errors"]) == 3
    assert mechanisms["hospital"]["mean"] < mechanisms["local"]["mean"]


def test_text_output_states_the_verdict_and_the_recommendation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--n", "4000", "--hospitals", "2", "--d", "3", "--seeds", "2"]
    assert main([*argv, "--crossover-limit", "20000"]) == 0
    out = capsys.readouterr().out
    assert "hospital-level DP (same trust boundary)" in out
    assert "trivial estimate β = 0" in out
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


def test_crossover_is_where_the_mean_error_crosses_half_of_beta_zero() -> None:
    problem = Problem(model="gmm", d=10, sizes=(30000, 20000), rounds=10, epsilon=1.0)
    n = crossover_records(problem, "local", seeds=3, max_records=400_000, steps=2)
    assert n is not None
    at = float(np.mean(final_errors(problem.with_records(n), "local", 3)))
    assert at <= BEAT_FRACTION * problem.trivial_error
    # Coarse (a mean of three seeds is noisy): a factor 4 below, it does not beat β = 0.
    assert n >= 1000
    below = float(np.mean(final_errors(problem.with_records(n // 4), "local", 3)))
    assert below > BEAT_FRACTION * problem.trivial_error
    assert crossover_records(problem, "local", seeds=1, max_records=1000) is None


def test_recommendation_rules() -> None:
    problem = Problem(model="gmm", d=2, sizes=(100,), rounds=10)

    def est(name: str, value: float) -> Estimate:
        return Estimate(name, (value, value))

    line = recommendation(problem, [est("local", 0.3), est("hospital", 0.28)], 5000, 10**6)
    assert line.startswith("use local DP")
    line = recommendation(problem, [est("local", 2.0), est("hospital", 0.1)], None, 10**6)
    assert line.startswith("use hospital-level DP") and "even at n = 1,000,000" in line
    line = recommendation(problem, [est("local", 2.9), est("hospital", 2.0)], None, 10**6)
    assert line.startswith("no private mechanism")
    # Secure aggregation only for a clear gain (it assumes an honest majority).
    many = [est("local", 2.0), est("hospital", 0.4), est("secagg", 0.11)]
    line = recommendation(problem, many, None, 10**6)
    assert line.startswith("use secure aggregation (--mechanism secagg")
    close = [est("local", 2.0), est("hospital", 0.1), est("secagg", 0.09)]
    assert recommendation(problem, close, None, 10**6).startswith("use hospital-level DP")


def test_run_forecast_is_the_planning_estimate() -> None:
    request = RunCreate.model_validate(
        run_request(records=3000, rounds=5, d=3, mechanism="hospital", forecast=True)
    )
    params = public_parameters(request)
    problem = run_problem(request, params)
    assert problem.sizes == (3000, 3000, 3000)
    expected = float(np.mean(final_errors(problem, "hospital", 2)))
    assert forecast_error(request, params, seeds=2) == expected


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
