"""The paper's experiments (Section "Experiments", Figures 1–8) and a robustness study,
in the paper's central model and in the local model (``ldpem experiment``).

Every point is the mean (and std, min, max) over seeds 0..S−1 of simulated studies
(``ldpem.common.planning.study.run_study``); each draws its own data, starting point and noise from
its seed. Figures:

* ``fig1``   clipped baseline (Algorithm 1) for C ∈ {0.1, 0.5, 1, 2, 5, 10}, vs iteration;
* ``fig2–4`` error vs iteration for several ε, d and n (GMM, MRM, RMC);
* ``fig5–7`` final error vs ε, d and n (same runs as fig2–4, last iterate);
* ``fig8``   real medical data: breast cancer (GMM), diabetes (RMC), from scikit-learn;
* ``fig9``   robustness: gross outliers (norm ~1e3) in a share of the records.

Each figure is drawn for both trust models: ``central`` (the paper's setting, n = 1000–
10000) and ``local`` (n = 10⁵–10⁶). Ours is Algorithm 2 (``central``/``local``), clipped is
Algorithm 1 with C = 1 (``central-clip``/``local-clip``), EM is non-private (``none``).
This module says which studies make which figure; ``experiment_data`` prepares the real
data sets and ``experiment_figures`` writes a figure as CSV and PNG.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core.errors import UserError
from ldpem.common.mechanisms import get_mechanism
from ldpem.common.planning.executor import Executor, SerialExecutor, make_executor
from ldpem.common.planning.study import Study, run_study
from ldpem.experiment.data import DatasetFactory, real_sources
from ldpem.experiment.figures import (
    FigureResult,
    Panel,
    Series,
    check_plotting,
    write_csv,
    write_png,
)

__all__ = [
    "CLIPS",
    "FIGURES",
    "Runner",
    "Setting",
    "compute_figure",
    "run_experiments",
    "settings",
]

FloatArray = NDArray[np.float64]

#: Clipping thresholds of Figure 1.
CLIPS: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0)
#: Shares of gross outliers of the robustness figure.
OUTLIER_SHARES: tuple[float, ...] = (0.0, 0.0005, 0.001, 0.002, 0.005)
ROUNDS = 10
MODELS: tuple[str, ...] = ("gmm", "mrm", "rmc")
_STYLE = {"ours": "-", "clipped C=1": "--", "EM": ":"}


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
    central = Setting(
        "central",
        n=2000,
        d=10,
        epsilon=0.5,
        epsilons=(0.2, 0.5, 1.0, 2.0),
        dims=(5, 10, 20),
        sizes=(1000, 2000, 5000, 10_000),
        clip_point=(1000, 20, 0.2),
        robustness_n=200_000,
    )
    # The local model is swept at its own sizes and budgets; d, the dimension sweep and
    # the robustness study's n are the central model's.
    local = replace(
        central,
        name="local",
        n=200_000,
        epsilon=1.0,
        epsilons=(0.5, 1.0, 2.0, 4.0),
        sizes=(100_000, 200_000, 500_000, 1_000_000),
        clip_point=(200_000, 10, 1.0),
    )
    return central, local


def _private(mechanism: str) -> bool:
    """Whether ``mechanism`` adds noise, so that its runs depend on the budget."""
    return get_mechanism(mechanism).noise_site != "nowhere"


def _trajectory_row(task: tuple[Study, DatasetFactory | None, int]) -> list[float]:
    """One seed of a study: its errors at β⁰, then after each round. Module level: an
    executor's workers run it; the seed is the task's own, so any executor gives the same."""
    config, factory, seed = task
    data = None if factory is None else factory(seed)
    result = run_study(replace(config, seed=seed), data=data)
    # Every figure's data has a known β*, so every error is there.
    assert result.initial_error is not None and result.errors is not None
    return [result.initial_error, *result.errors]


class Runner:
    """Runs a study over seeds 0..S−1, remembering results so that a study shared by
    several figures is run once. The seeds are independent tasks on ``executor``
    (``ldpem.common.planning.executor``; default: this process), seeded by their own seed."""

    def __init__(self, seeds: int, executor: Executor | None = None) -> None:
        self.seeds = seeds
        self.executor: Executor = SerialExecutor() if executor is None else executor
        self._cache: dict[tuple[Study, str], FloatArray] = {}

    def trajectories(
        self, config: Study, dataset: tuple[str, DatasetFactory] | None = None
    ) -> FloatArray:
        """Errors (seeds, T+1): at β⁰, then after each round."""
        if not _private(config.mechanism):  # the budget does not change a non-private run
            config = replace(config, epsilon=1.0, delta=None, clip=1.0)
        key = (config, "" if dataset is None else dataset[0])
        if key not in self._cache:
            factory = None if dataset is None else dataset[1]
            tasks = [(config, factory, seed) for seed in range(self.seeds)]
            rows = self.executor.map(_trajectory_row, tasks)
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


def _model_figure(
    first: int, model: str, setting: Setting, what: str, panels: list[Panel]
) -> FigureResult:
    """One model's figure of a series numbered from ``first`` (one per model, in MODELS)."""
    number = first + MODELS.index(model)
    return FigureResult(
        f"fig{number}-{model}-{setting.name}",
        f"{model.upper()}: {what}, {setting.name} model",
        panels,
    )


def figure_iterations(runner: Runner, setting: Setting, model: str) -> FigureResult:
    """Figures 2–4: error vs iteration for several ε, d, n; ours, clipped (C=1), EM."""
    panels = []
    for variable, title, configs in _sweeps(setting, model):
        series = []
        for label, mechanism in setting.mechanisms().items():
            for i, config in enumerate(configs):
                runs = runner.trajectories(replace(config, mechanism=mechanism))
                if not _private(mechanism) and variable == "ε":  # EM does not depend on ε
                    series.append(Series("EM", _iterations(), runs, _STYLE[label], 7))
                    break
                value = _value(config, variable)
                series.append(
                    Series(f"{label} {variable}={value:g}", _iterations(), runs, _STYLE[label], i)
                )
        panels.append(Panel(f"{model.upper()}, {title}", "iteration t", series))
    return _model_figure(2, model, setting, "error vs iteration", panels)


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
    return _model_figure(5, model, setting, f"final error (t={ROUNDS}) vs ε, d, n", panels)


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


def run_experiments(
    names: list[str],
    *,
    seeds: int,
    out: Path,
    quick: bool = False,
    plot: bool = True,
    log: TextIO | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
) -> list[Path]:
    """Compute the named figures (``FIGURES``) and write a CSV (and PNG) for each;
    progress goes to ``log`` (default: standard error). The seeds run on
    ``make_executor(scheduler, workers=workers)``: this machine's cores by default, a
    Dask cluster for ``tcp://HOST:PORT``; the numbers are the same on each."""
    stream = sys.stderr if log is None else log
    unknown = [name for name in names if name not in FIGURES]
    if unknown:
        raise UserError(f"figure must be one of {', '.join(FIGURES)} or all, got {unknown[0]!r}")
    if seeds < 1:
        raise UserError(f"seeds must be an integer >= 1, got {seeds}")
    if plot:
        check_plotting()
    out.mkdir(parents=True, exist_ok=True)
    with make_executor(scheduler, workers=workers) as executor:
        runner = Runner(seeds, executor)
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
