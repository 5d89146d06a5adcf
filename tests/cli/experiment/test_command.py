"""``ldpem experiment``: figures as CSV + PNG, and the real-data preprocessing."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pytest

from ldpem.cli import main
from ldpem.experiment.data import balanced_gmm_dataset, missing_covariates_dataset
from ldpem.experiment.runner import run_experiments

COLUMNS = ["figure", "panel", "series", "x", "mean", "std", "min", "max", "seeds"]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_quick_figure_writes_a_csv_and_a_png_per_trust_model(tmp_path: Path) -> None:
    written = run_experiments(["fig1"], seeds=2, out=tmp_path, quick=True)
    names = sorted(p.name for p in written)
    assert names == ["fig1-central.csv", "fig1-central.png", "fig1-local.csv", "fig1-local.png"]
    for path in written:
        assert path.stat().st_size > 0
    assert (tmp_path / "fig1-local.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = _rows(tmp_path / "fig1-central.csv")
    assert list(rows[0]) == COLUMNS
    series = {row["series"] for row in rows}
    assert {"clipped C=0.1", "clipped C=10", "ours", "EM"} <= series
    for row in rows:
        assert float(row["min"]) <= float(row["mean"]) <= float(row["max"])
        assert row["seeds"] == "2"
    # 3 models x (6 clipping thresholds + ours + EM) x 11 points (t = 0..10)
    assert len(rows) == 3 * 8 * 11


def test_final_error_figures_sweep_epsilon_dimension_and_size(tmp_path: Path) -> None:
    run_experiments(["fig5"], seeds=1, out=tmp_path, quick=True, plot=False)
    rows = _rows(tmp_path / "fig5-gmm-local.csv")
    panels = {row["panel"] for row in rows}
    assert len(panels) == 3
    assert {row["series"] for row in rows} == {"ours", "clipped C=1", "EM"}
    assert not list(tmp_path.glob("*.png"))


def test_robustness_figure_compares_the_three_algorithms(tmp_path: Path) -> None:
    run_experiments(["fig9"], seeds=1, out=tmp_path, quick=True, plot=False)
    rows = _rows(tmp_path / "fig9-robustness.csv")
    assert {row["x"] for row in rows} == {"0", "0.0005", "0.001", "0.002", "0.005"}
    assert len({row["panel"] for row in rows}) == 2


def test_the_command_lists_the_files_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["experiment", "--figure", "fig9", "--quick", "--seeds", "1", "--no-plot"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == [str(tmp_path / "fig9-robustness.csv")]
    assert "fig9: done in" in captured.err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--figure", "fig10"], "figure must be one of fig1, "),
        (["--seeds", "0"], "seeds must be an integer >= 1, got 0"),
    ],
)
def test_bad_arguments_end_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    assert main(["experiment", *arguments, "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 and message in captured.err


def test_balanced_gmm_preprocessing_recovers_the_half_difference_of_means() -> None:
    rng = np.random.default_rng(0)
    centre = np.array([2.0, -1.0, 0.5])
    first = rng.standard_normal((3000, 3)) * 2.0 + 10.0 - centre
    second = rng.standard_normal((1000, 3)) * 2.0 + 10.0 + centre
    features = np.vstack([first, second])
    labels = np.array([0] * 3000 + [1] * 1000)
    dataset, sigma = balanced_gmm_dataset(features, labels, rng)
    assert dataset.records.n == 2000  # the larger class is cut down to the smaller one
    assert dataset.beta_star is not None
    # Columns are standardised, so β* is in units of each column's overall std.
    scale = features.std(axis=0)
    np.testing.assert_allclose(dataset.beta_star * scale, centre, atol=0.15)
    np.testing.assert_allclose(dataset.records.x.mean(axis=0), 0.0, atol=1e-12)
    within = 2.0 / scale  # per-column within-class std after standardising
    assert max(within) * 0.9 <= sigma <= max(within) * 1.1


def test_missing_covariates_preprocessing_whitens_and_fits_least_squares() -> None:
    rng = np.random.default_rng(1)
    mixing = np.array([[1.0, 0.0, 0.0], [0.9, 0.5, 0.0], [0.2, 0.3, 2.0]])
    features = rng.standard_normal((5000, 3)) @ mixing.T + 4.0
    target = features @ np.array([1.0, -2.0, 0.5]) + rng.standard_normal(5000)
    dataset, sigma = missing_covariates_dataset(features, target, 0.2, rng)
    x, y = dataset.records.x, dataset.records.y
    assert y is not None and dataset.beta_star is not None
    assert 0.17 < np.isnan(x).mean() < 0.23
    complete = ~np.isnan(x).any(axis=1)
    np.testing.assert_allclose(np.cov(x[complete], rowvar=False), np.eye(3), atol=0.1)
    np.testing.assert_allclose(y.mean(), 0.0, atol=1e-12)
    fitted = np.linalg.lstsq(x[complete], y[complete], rcond=None)[0]
    np.testing.assert_allclose(fitted, dataset.beta_star, atol=0.05)
    residual = y[complete] - x[complete] @ dataset.beta_star
    assert sigma == pytest.approx(residual.std(), rel=0.05)


@pytest.mark.parametrize(
    ("module", "arguments", "hint"),
    [
        ("matplotlib", ["--figure", "fig9"], "pip install 'ldpem[plot]'"),
        ("sklearn", ["--figure", "fig8", "--no-plot"], "pip install 'ldpem[experiments]'"),
    ],
)
def test_a_missing_optional_package_is_named_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    module: str,
    arguments: list[str],
    hint: str,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    argv = ["experiment", *arguments, "--quick", "--seeds", "1", "--out", str(tmp_path)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 and hint in captured.err
