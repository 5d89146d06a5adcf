"""The paper's experiments (Section "Experiments", Figures 1–8) and a robustness study,
in the paper's central model and in the local model (``ldpem experiment``).

Every point is the mean (and std, min, max) over seeds 0..S−1 of simulated studies
(``ldpem.common.study.run_study``); each draws its own data, starting point and noise from
its seed. Figures:

* ``fig1``   clipped baseline (Algorithm 1) for C ∈ {0.1, 0.5, 1, 2, 5, 10}, vs iteration;
* ``fig2–4`` error vs iteration for several ε, d and n (GMM, MRM, RMC);
* ``fig5–7`` final error vs ε, d and n (same runs as fig2–4, last iterate);
* ``fig8``   real medical data: breast cancer (GMM), diabetes (RMC), from scikit-learn;
* ``fig9``   robustness: gross outliers (norm ~1e3) in a share of the records.

Each figure is drawn for both trust models: ``central`` (the paper's setting, n = 1000–
10000) and ``local`` (n = 10⁵–10⁶). Ours is Algorithm 2 (``central``/``local``), clipped is
Algorithm 1 with C = 1 (``central-clip``/``local-clip``), EM is non-private (``none``).
"""

from __future__ import annotations

import csv
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from numpy.typing import NDArray

from ldpem.common.errors import UserError
from ldpem.common.models import Records
from ldpem.common.study import Dataset, Study, run_study

__all__ = [
    "CLIPS",
    "FIGURES",
    "FigureResult",
    "Panel",
    "RealSource",
    "Runner",
    "Series",
    "Setting",
    "balanced_gmm_dataset",
    "compute_figure",
    "missing_covariates_dataset",
    "real_sources",
    "run_experiments",
    "settings",
    "write_csv",
]

FloatArray = NDArray[np.float64]

#: Clipping thresholds of Figure 1.
CLIPS: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0)
#: Shares of gross outliers of the robustness figure.
OUTLIER_SHARES: tuple[float, ...] = (0.0, 0.0005, 0.001, 0.002, 0.005)
ROUNDS = 10
MODELS: tuple[str, ...] = ("gmm", "mrm", "rmc")
_STYLE = {"ours": "-", "clipped C=1": "--", "EM": ":"}
#: Panels with at most this many lines show the min–max band over seeds.
_SHADED = 5


@dataclass(frozen=True)
class Setting:
    """One trust model and its parameters: base point (n, d, ε) and the sweeps."""

    name: str
    n: int
    d: int
    epsilon: float
    epsilons: tuple[float, ...]
    dims: tuple[int, ...]
    sizes: tuple[int, ...]
    clip_point: tuple[int, int, float]  # (n, d, ε) of Figure 1
    robustness_n: int

    @property
    def ours(self) -> str:
        return self.name

    @property
    def clipped(self) -> str:
        return f"{self.name}-clip"

    def mechanisms(self) -> dict[str, str]:
        """Label → mechanism of the three algorithms compared."""
        return {"ours": self.ours, "clipped C=1": self.clipped, "EM": "none"}


def settings(quick: bool) -> tuple[Setting, Setting]:
    """(central, local). ``quick``: tiny sizes, to check the pipeline in seconds."""
    if quick:
        return (
            Setting("central", 1000, 5, 0.5, (0.5, 1.0), (5, 10), (500, 1000), (500, 5, 0.5), 4000),
            Setting("local", 4000, 5, 1.0, (1.0, 4.0), (5, 10), (2000, 4000), (2000, 5, 1.0), 4000),
        )
    return (
        Setting(
            "central",
            n=2000,
            d=10,
            epsilon=0.5,
            epsilons=(0.2, 0.5, 1.0, 2.0),
            dims=(5, 10, 20),
            sizes=(1000, 2000, 5000, 10_000),
            clip_point=(1000, 20, 0.2),
            robustness_n=200_000,
        ),
        Setting(
            "local",
            n=200_000,
            d=10,
            epsilon=1.0,
            epsilons=(0.5, 1.0, 2.0, 4.0),
            dims=(5, 10, 20),
            sizes=(100_000, 200_000, 500_000, 1_000_000),
            clip_point=(200_000, 10, 1.0),
            robustness_n=200_000,
        ),
    )


@dataclass(frozen=True)
class Series:
    """One line of a panel: y[seed, i] at x[i]."""

    label: str
    x: tuple[float, ...]
    runs: FloatArray
    style: str = "-"
    color: int = 0


@dataclass(frozen=True)
class Panel:
    title: str
    xlabel: str
    series: list[Series]
    logx: bool = False


@dataclass(frozen=True)
class FigureResult:
    name: str
    title: str
    panels: list[Panel]


DatasetFactory = Callable[[int], Dataset]


class Runner:
    """Runs a study over seeds 0..S−1, remembering results so that a study shared by
    several figures is run once."""

    def __init__(self, seeds: int) -> None:
        self.seeds = seeds
        self._cache: dict[tuple[Study, str], FloatArray] = {}

    def trajectories(
        self, config: Study, dataset: tuple[str, DatasetFactory] | None = None
    ) -> FloatArray:
        """Errors (seeds, T+1): at β⁰, then after each round."""
        if config.mechanism == "none":  # the budget does not change a non-private run
            config = replace(config, epsilon=1.0, delta=None, clip=1.0)
        key = (config, "" if dataset is None else dataset[0])
        if key not in self._cache:
            rows = []
            for seed in range(self.seeds):
                data = None if dataset is None else dataset[1](seed)
                result = run_study(replace(config, seed=seed), data=data)
                # Every figure's data has a known β*, so every error is there.
                assert result.initial_error is not None and result.errors is not None
                rows.append([result.initial_error, *result.errors])
            self._cache[key] = np.array(rows, dtype=np.float64)
        return self._cache[key]

    def finals(self, configs: list[Study]) -> FloatArray:
        """Final errors (seeds, len(configs))."""
        return np.stack([self.trajectories(c)[:, -1] for c in configs], axis=1)


def _iterations() -> tuple[float, ...]:
    return tuple(float(t) for t in range(ROUNDS + 1))


def _base(setting: Setting, model: str) -> Study:
    return Study(model=model, n=setting.n, d=setting.d, epsilon=setting.epsilon, rounds=ROUNDS)


def figure_clipping(runner: Runner, setting: Setting) -> FigureResult:
    """Figure 1: the clipped baseline across C, with ours and EM for reference."""
    n, d, epsilon = setting.clip_point
    panels = []
    for model in MODELS:
        base = Study(model=model, n=n, d=d, epsilon=epsilon, rounds=ROUNDS)
        series = [
            Series(
                f"clipped C={clip:g}",
                _iterations(),
                runner.trajectories(replace(base, mechanism=setting.clipped, clip=clip)),
                "--",
                i,
            )
            for i, clip in enumerate(CLIPS)
        ]
        series.append(
            Series(
                "ours",
                _iterations(),
                runner.trajectories(replace(base, mechanism=setting.ours)),
                "-",
                7,
            )
        )
        series.append(
            Series(
                "EM", _iterations(), runner.trajectories(replace(base, mechanism="none")), ":", 8
            )
        )
        panels.append(Panel(f"{model.upper()}, n={n}, d={d}, ε={epsilon:g}", "iteration t", series))
    return FigureResult(
        f"fig1-{setting.name}",
        f"Clipped gradient EM (Algorithm 1) vs C, {setting.name} model",
        panels,
    )


def _sweeps(setting: Setting, model: str) -> Iterator[tuple[str, str, list[Study]]]:
    """(variable, panel title, configurations) for the ε, d and n sweeps."""
    base = _base(setting, model)
    yield (
        "ε",
        f"n={setting.n}, d={setting.d}",
        [replace(base, epsilon=e) for e in setting.epsilons],
    )
    yield (
        "d",
        f"n={setting.n}, ε={setting.epsilon:g}",
        [replace(base, d=d) for d in setting.dims],
    )
    yield (
        "n",
        f"d={setting.d}, ε={setting.epsilon:g}",
        [replace(base, n=n) for n in setting.sizes],
    )


def _value(config: Study, variable: str) -> float:
    return float({"ε": config.epsilon, "d": config.d, "n": config.n}[variable])


def figure_iterations(runner: Runner, setting: Setting, model: str) -> FigureResult:
    """Figures 2–4: error vs iteration for several ε, d, n; ours, clipped (C=1), EM."""
    panels = []
    for variable, title, configs in _sweeps(setting, model):
        series = []
        for label, mechanism in setting.mechanisms().items():
            for i, config in enumerate(configs):
                runs = runner.trajectories(replace(config, mechanism=mechanism))
                if mechanism == "none" and variable == "ε":  # EM does not depend on ε
                    series.append(Series("EM", _iterations(), runs, _STYLE[label], 7))
                    break
                value = _value(config, variable)
                series.append(
                    Series(f"{label} {variable}={value:g}", _iterations(), runs, _STYLE[label], i)
                )
        panels.append(Panel(f"{model.upper()}, {title}", "iteration t", series))
    number = 2 + MODELS.index(model)
    return FigureResult(
        f"fig{number}-{model}-{setting.name}",
        f"{model.upper()}: error vs iteration, {setting.name} model",
        panels,
    )


def figure_finals(runner: Runner, setting: Setting, model: str) -> FigureResult:
    """Figures 5–7: final error vs ε, d and n; ours, clipped (C=1), EM."""
    panels = []
    for variable, title, configs in _sweeps(setting, model):
        x = tuple(_value(c, variable) for c in configs)
        series = [
            Series(
                label,
                x,
                runner.finals([replace(c, mechanism=mechanism) for c in configs]),
                _STYLE[label],
                i,
            )
            for i, (label, mechanism) in enumerate(setting.mechanisms().items())
        ]
        panels.append(Panel(f"{model.upper()}, {title}", variable, series, logx=variable == "n"))
    number = 5 + MODELS.index(model)
    return FigureResult(
        f"fig{number}-{model}-{setting.name}",
        f"{model.upper()}: final error (t={ROUNDS}) vs ε, d, n, {setting.name} model",
        panels,
    )


def balanced_gmm_dataset(
    features: FloatArray, labels: NDArray[Any], rng: np.random.Generator
) -> tuple[Dataset, float]:
    """The paper's preprocessing of a labelled data set for the GMM, returns (data, σ).

    Columns are standardised; the larger class is subsampled to the size of the smaller;
    records are centred at the midpoint of the two class means, so β* is half their
    difference; σ = √(largest eigenvalue of the pooled within-class covariance).
    """
    x = (features - features.mean(axis=0)) / features.std(axis=0)
    classes = np.unique(labels)
    if classes.size != 2:
        raise ValueError(f"labels must have exactly 2 classes, got {classes.size}")
    first, second = (np.flatnonzero(labels == c) for c in classes)
    size = min(first.size, second.size)
    first = rng.choice(first, size, replace=False)
    second = rng.choice(second, size, replace=False)
    mean_first, mean_second = x[first].mean(axis=0), x[second].mean(axis=0)
    midpoint = (mean_first + mean_second) / 2.0
    beta_star = (mean_second - mean_first) / 2.0
    within = np.vstack([x[first] - mean_first, x[second] - mean_second])
    sigma = math.sqrt(float(np.linalg.eigvalsh(np.cov(within, rowvar=False))[-1]))
    records = x[rng.permutation(np.concatenate([first, second]))] - midpoint
    return Dataset(Records(records), beta_star), sigma


def missing_covariates_dataset(
    features: FloatArray, target: FloatArray, missing: float, rng: np.random.Generator
) -> tuple[Dataset, float]:
    """A regression data set for RMC, returns (data, σ).

    The covariates are whitened (ZCA: zero mean, identity covariance, as the model's
    x ~ N(0, I_d); correlated covariates would make the unit gradient step diverge) and the
    response standardised; β* is the least-squares fit on the complete data and σ the
    residual std; then each covariate is removed (NaN) with probability ``missing``.
    """
    centred = features - features.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov(centred, rowvar=False))
    x = centred @ (vectors / np.sqrt(values)) @ vectors.T
    y = (target - target.mean()) / target.std()
    beta_star = np.linalg.lstsq(x, y, rcond=None)[0]
    residual = y - x @ beta_star
    sigma = math.sqrt(float(residual @ residual) / (x.shape[0] - x.shape[1]))
    x[rng.random(x.shape) < missing] = np.nan
    order = rng.permutation(x.shape[0])
    return Dataset(Records(x[order], y[order]), beta_star), sigma


@dataclass(frozen=True)
class RealSource:
    """A real data set prepared for a model: a Dataset per seed, with fixed σ and β*."""

    name: str
    model: str
    sigma: float
    beta_star: FloatArray
    n: int
    d: int
    dataset: DatasetFactory


def _same(dataset: Dataset, seed: int) -> Dataset:
    return dataset


def _with_missing(features: FloatArray, target: FloatArray, seed: int) -> Dataset:
    rng = np.random.default_rng([seed, 8])
    return missing_covariates_dataset(features, target, 0.1, rng)[0]


def real_sources() -> list[RealSource]:
    """Breast cancer (GMM, balanced once with seed 0) and diabetes (RMC, a new random 10%
    of covariates removed for each seed), both shipped with scikit-learn."""
    try:
        from sklearn.datasets import load_breast_cancer, load_diabetes
    except ImportError:
        raise UserError(
            "fig8 needs scikit-learn for its data sets: pip install 'ldpem[experiments]'"
        ) from None
    cancer = load_breast_cancer()
    features, labels = np.asarray(cancer.data, float), np.asarray(cancer.target)
    balanced, sigma = balanced_gmm_dataset(features, labels, np.random.default_rng(0))
    assert balanced.beta_star is not None
    diabetes = load_diabetes()
    x, y = np.asarray(diabetes.data, float), np.asarray(diabetes.target, float)
    first, diabetes_sigma = missing_covariates_dataset(x, y, 0.1, np.random.default_rng([0, 8]))
    assert first.beta_star is not None
    return [
        RealSource(
            "breast cancer",
            "gmm",
            sigma,
            balanced.beta_star,
            balanced.records.n,
            balanced.records.d,
            partial(_same, balanced),
        ),
        RealSource(
            "diabetes",
            "rmc",
            diabetes_sigma,
            first.beta_star,
            first.records.n,
            first.records.d,
            partial(_with_missing, x, y),
        ),
    ]


def figure_real(runner: Runner, central: Setting, local: Setting) -> FigureResult:
    """Figure 8: real medical data, error vs iteration, central and local model."""
    panels = []
    for source in real_sources():
        model = source.model
        data = (source.name, source.dataset)
        for setting in (central, local):
            base = Study(
                model=model,
                n=source.n,
                d=source.d,
                sigma=source.sigma,
                beta_bound=float(np.linalg.norm(source.beta_star)),
                rounds=ROUNDS,
            )
            series = [
                Series(
                    f"ours ε={epsilon:g}",
                    _iterations(),
                    runner.trajectories(
                        replace(base, mechanism=setting.ours, epsilon=epsilon), data
                    ),
                    "-",
                    i,
                )
                for i, epsilon in enumerate((0.5, 1.0, 2.0))
            ]
            series.append(
                Series(
                    "clipped C=1 ε=1",
                    _iterations(),
                    runner.trajectories(replace(base, mechanism=setting.clipped), data),
                    "--",
                    3,
                )
            )
            series.append(
                Series(
                    "EM",
                    _iterations(),
                    runner.trajectories(replace(base, mechanism="none"), data),
                    ":",
                    8,
                )
            )
            panels.append(
                Panel(
                    f"{source.name} ({model.upper()}, n={source.n}, d={source.d}), {setting.name}",
                    "iteration t",
                    series,
                )
            )
    return FigureResult(
        "fig8-real", "Real medical data (scikit-learn), central and local model", panels
    )


def figure_robustness(runner: Runner, central: Setting, local: Setting) -> FigureResult:
    """Figure 9: final error (GMM, d=10, ε=1) vs the share of gross outliers (norm ~1e3)."""
    panels = []
    for setting in (central, local):
        base = Study(model="gmm", n=setting.robustness_n, d=10, epsilon=1.0, rounds=ROUNDS)
        series = [
            Series(
                label,
                OUTLIER_SHARES,
                runner.finals(
                    [replace(base, mechanism=mechanism, outliers=s) for s in OUTLIER_SHARES]
                ),
                _STYLE[label],
                i,
            )
            for i, (label, mechanism) in enumerate(setting.mechanisms().items())
        ]
        panels.append(
            Panel(
                f"GMM, n={setting.robustness_n}, d=10, ε=1, {setting.name}",
                "share of records that are gross outliers",
                series,
            )
        )
    return FigureResult("fig9-robustness", "Robustness to gross outliers (norm ~1e3)", panels)


def compute_figure(
    name: str, runner: Runner, central: Setting, local: Setting
) -> list[FigureResult]:
    """The figure(s) called ``name`` (one of ``FIGURES``), for both trust models."""
    number = int(name.removeprefix("fig"))
    if number == 1:
        return [figure_clipping(runner, s) for s in (central, local)]
    if 2 <= number <= 4:
        return [figure_iterations(runner, s, MODELS[number - 2]) for s in (central, local)]
    if 5 <= number <= 7:
        return [figure_finals(runner, s, MODELS[number - 5]) for s in (central, local)]
    if number == 8:
        return [figure_real(runner, central, local)]
    return [figure_robustness(runner, central, local)]


FIGURES: tuple[str, ...] = tuple(f"fig{i}" for i in range(1, 10))


def write_csv(figure: FigureResult, path: Path) -> None:
    """One row per point: figure, panel, series, x, mean, std, min, max, seeds."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["figure", "panel", "series", "x", "mean", "std", "min", "max", "seeds"])
        for panel in figure.panels:
            for series in panel.series:
                runs = series.runs
                for j, x in enumerate(series.x):
                    column = runs[:, j]
                    writer.writerow(
                        [
                            figure.name,
                            panel.title,
                            series.label,
                            f"{x:g}",
                            f"{column.mean():.6g}",
                            f"{column.std():.6g}",
                            f"{column.min():.6g}",
                            f"{column.max():.6g}",
                            runs.shape[0],
                        ]
                    )


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UserError(
            "the PNG figures need matplotlib: pip install 'ldpem[plot]' (or use --no-plot)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_png(figure: FigureResult, path: Path) -> None:
    """The figure's panels: mean over seeds on a log scale; in panels of at most
    ``_SHADED`` lines the band from the smallest to the largest error over seeds."""
    plt = _pyplot()
    colors = plt.get_cmap("tab10").colors
    count = len(figure.panels)
    columns = 2 if count == 4 else min(count, 3)
    rows = math.ceil(count / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.0 * columns, 4.8 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, figure.panels, strict=False):
        shaded = len(panel.series) <= _SHADED
        for series in panel.series:
            color = colors[series.color % len(colors)]
            mean = series.runs.mean(axis=0)
            ax.plot(series.x, mean, series.style, color=color, marker=".", label=series.label)
            if shaded:
                low, high = series.runs.min(axis=0), series.runs.max(axis=0)
                ax.fill_between(series.x, low, high, color=color, alpha=0.12)
        ax.set_yscale("log")
        if panel.logx:
            ax.set_xscale("log")
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel("‖β − β*‖₂")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2 if len(panel.series) > 6 else 1)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    fig.suptitle(figure.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_experiments(
    names: list[str],
    *,
    seeds: int,
    out: Path,
    quick: bool = False,
    plot: bool = True,
    log: TextIO | None = None,
) -> list[Path]:
    """Compute the named figures (``FIGURES``) and write a CSV (and PNG) for each;
    progress goes to ``log`` (default: standard error)."""
    stream = sys.stderr if log is None else log
    unknown = [name for name in names if name not in FIGURES]
    if unknown:
        raise UserError(f"figure must be one of {', '.join(FIGURES)} or all, got {unknown[0]!r}")
    if seeds < 1:
        raise UserError(f"seeds must be an integer >= 1, got {seeds}")
    if plot:
        _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(seeds)
    central, local = settings(quick)
    written = []
    for name in names:
        started = time.perf_counter()
        for figure in compute_figure(name, runner, central, local):
            write_csv(figure, out / f"{figure.name}.csv")
            written.append(out / f"{figure.name}.csv")
            if plot:
                write_png(figure, out / f"{figure.name}.png")
                written.append(out / f"{figure.name}.png")
        stream.write(f"{name}: done in {time.perf_counter() - started:.1f} s\n")
        stream.flush()
    return written
