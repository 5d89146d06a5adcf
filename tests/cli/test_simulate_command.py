"""``ldpem simulate``: JSON contract, readable output, one-line errors with exit status 2."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from ldpem.cli import main
from ldpem.commands.simulate import progress_reporter
from ldpem.common.planning.study import Study, run_study
from tests.cli.clikit import refused_from_the_shell

SMALL = ["--n", "2000", "--d", "3", "--rounds", "4"]


def test_json_output_has_the_contract_fields(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--model", "mrm", "--mechanism", "central", "--epsilon", "2", *SMALL]
    assert main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    outcome = json.loads(captured.out)
    for field in ("model", "mechanism", "n", "d", "epsilon", "delta", "rounds", "beta"):
        assert field in outcome
    assert (outcome["model"], outcome["mechanism"], outcome["n"], outcome["d"]) == (
        "mrm",
        "central",
        2000,
        3,
    )
    assert outcome["epsilon"] == 2.0 and outcome["rounds"] == 4
    assert outcome["delta"] == pytest.approx(2000**-1.1)
    assert len(outcome["beta"]) == 3 and len(outcome["errors"]) == 4
    assert outcome["error"] == outcome["errors"][-1]
    assert outcome["seconds"] > 0
    assert captured.err == ""


def test_options_reach_the_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--model", "rmc", "--mechanism", "local-clip", "--clip", "2", *SMALL]
    extra = ["--delta", "1e-6", "--hospitals", "3", "--reuse", "--missing", "0.3", "--json"]
    assert main([*argv, *extra, "--accounting", "paper", "--seed", "5"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["delta"] == 1e-6 and outcome["clip"] == 2.0 and outcome["reuse"] is True
    assert len(outcome["hospital_sizes"]) == 3 and outcome["accounting"] == "paper"
    assert outcome["records_per_round"] == 2000 and outcome["seed"] == 5
    assert outcome["split"] == "random"
    assert main([*argv, *extra[:-1]]) == 0
    # The summary says which split it ran: --hospitals alone draws random sizes.
    assert "3 hospitals of " in capsys.readouterr().out
    assert main([*argv, *extra[:-1]]) == 0
    assert "(a random split; --hospitals-sizes fixes the sizes" in capsys.readouterr().out
    sizes = ["--hospitals-sizes", "1000,1000"]
    assert main(["simulate", *SMALL, "--n", "2000", *sizes, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["split"] == "given"


def test_json_is_the_study_of_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--mechanism", "hospital", "--hospitals", "3", "--seed", "4", *SMALL]
    assert main([*argv, "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    result = run_study(Study(mechanism="hospital", n=2000, d=3, rounds=4, hospitals=3, seed=4))
    assert outcome["beta"] == result.beta.tolist()
    assert outcome["errors"] == list(result.errors or ())
    assert outcome["hospital_sizes"] == list(result.hospital_sizes)
    assert outcome["holder_noise_stds"] == [m.noise_std for m in result.holder_mechanisms or ()]


def test_readable_summary_and_a_line_per_round_off_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", *SMALL]) == 0
    captured = capsys.readouterr()
    assert "gmm with mechanism local: n = 2000, d = 3, 4 rounds" in captured.out
    assert "error ‖β − β*‖ = " in captured.out
    assert "hospitals of" not in captured.out
    assert captured.err.splitlines() == [
        line for line in captured.err.splitlines() if line.startswith("round ")
    ]
    assert len(captured.err.splitlines()) == 4


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_redraws_one_line() -> None:
    stream = _Terminal()
    report = progress_reporter(2, stream)
    report(1, np.zeros(3), 0.5)
    report(2, np.zeros(3), 0.25)
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.count("\r") == 2
    assert "round 2/2  error 0.25" in text


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--epsilon", "-1"], "epsilon must be a finite number > 0, got -1.0"),
        (["--delta", "1.5"], "delta must be in (0, 1), got 1.5"),
        (["--delta", "0"], "delta must be in (0, 1), got 0.0"),
        (["--n", "5"], "n must be at least 10"),
        (["--hospitals", "0"], "hospitals must be an integer >= 1, got 0"),
        (["--n", "many"], "argument --n: invalid int value: 'many'"),
        (["--mechanism", "laplace"], "argument --mechanism: invalid choice: 'laplace'"),
        (["--model", "gmm", "--missing", "0.1"], "missing must be 0 for model gmm"),
    ],
)
def test_bad_arguments_end_with_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        raise SystemExit(main(["simulate", *arguments]))
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1
    assert message in captured.err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model", "hmm"], "argument --model: invalid choice: 'hmm'"),
        (["--epsilon", "0"], "ldpem simulate: error: epsilon must be a finite number > 0"),
    ],
)
def test_bad_arguments_from_the_shell(arguments: list[str], message: str) -> None:
    done = refused_from_the_shell(["simulate", *arguments])
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and message in done.stderr


def _write(path: Path, header: list[str], rows: np.ndarray) -> Path:
    lines = [",".join(header)]
    lines += [",".join("" if np.isnan(v) else repr(float(v)) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_data_file_replaces_the_synthetic_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    beta_star = np.array([2.0, -1.0, 1.0])
    y = rng.choice([-1.0, 1.0], 3000)[:, None] * beta_star + rng.standard_normal((3000, 3))
    path = _write(tmp_path / "gmm.csv", ["a", "b", "c"], y)
    argv = ["simulate", "--data", str(path), "--mechanism", "none", "--rounds", "5", "--json"]
    assert main(argv) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert (outcome["n"], outcome["d"]) == (3000, 3)
    assert outcome["errors"] is None and outcome["error"] is None
    # Without β* the run still estimates it (up to sign, as the GMM cannot tell).
    beta = np.array(outcome["beta"])
    assert min(np.linalg.norm(beta - beta_star), np.linalg.norm(beta + beta_star)) < 0.3


def test_data_file_with_missing_covariates_for_rmc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2000, 2))
    y = x @ np.array([1.0, -1.0]) + 0.5 * rng.standard_normal(2000)
    x[rng.random(x.shape) < 0.1] = np.nan
    path = _write(tmp_path / "rmc.csv", ["x1", "x2", "y"], np.column_stack([x, y]))
    assert main(["simulate", "--model", "rmc", "--data", str(path), "--mechanism", "none"]) == 0
    captured = capsys.readouterr()
    assert "rmc with mechanism none: n = 2000, d = 2" in captured.out
    assert "β*" not in captured.out  # no β* known, so no error is shown


#: tests/data/iris.csv, whose last column is the species name (tests/data/README.md).
IRIS = Path(__file__).resolve().parents[1] / "data" / "iris.csv"
IRIS_MEASUREMENTS = "sepal_length,sepal_width,petal_length,petal_width"


def test_iris_loads_with_its_measurements_as_columns(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--model", "gmmk", "--components", "3", "--data", str(IRIS)]
    run = ["--mechanism", "none", "--rounds", "2", "--hospitals", "1", "--draws", "0"]
    assert main([*argv, "--columns", IRIS_MEASUREMENTS, *run, "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert (outcome["n"], outcome["d"]) == (150, 4)
    # Without --columns the species column is read too: one line naming it, not its value.
    assert main([*argv, *run]) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"{IRIS} line 2, column 'species': not a number\n")
    assert err.count("\n") == 1 and "setosa" not in err


@pytest.mark.parametrize(
    ("header", "cell", "message"),
    [
        (["x1", "x2"], "1.5", "'y'"),  # mrm needs a response column
        (["x1", "y"], "abc", "line 3"),  # a non-numeric cell, named by its line
    ],
)
def test_bad_data_files_end_with_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    header: list[str],
    cell: str,
    message: str,
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(f"{','.join(header)}\n1.0,2.0\n{cell},1.0\n")
    assert main(["simulate", "--model", "mrm", "--data", str(path), "--rounds", "1"]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1
    assert str(path) in captured.err and message in captured.err


def test_a_schedule_and_an_averaged_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *SMALL, "--schedule", "geometric:1.5", "--final", "average:2", "--json"]
    assert main(argv) == 0
    outcome = json.loads(capsys.readouterr().out)
    study = Study(n=2000, d=3, rounds=4, schedule="geometric:1.5", final="average:2")
    result = run_study(study)
    assert (outcome["schedule"], outcome["final"]) == ("geometric:1.5", "average:2")
    assert outcome["round_records"] == list(result.round_records) == sorted(result.round_records)
    assert outcome["round_scales"] == sorted(outcome["round_scales"])
    assert len(outcome["final_weights"]) == 2 and outcome["beta"] == result.beta.tolist()
    assert outcome["error"] == result.final_error != outcome["errors"][-1]
    fractions = ["simulate", *SMALL, "--schedule", "0.1,0.2,0.3,0.4", "--json"]
    assert main(fractions) == 0
    assert json.loads(capsys.readouterr().out)["round_records"] == [200, 400, 600, 800]
    assert main(["simulate", *SMALL, "--final", "average:5"]) == 2
    assert "K must be in 1..4" in capsys.readouterr().err
