"""Which rounds, schedule and reported estimate to use: a small grid searched by simulation.

For a ``Problem`` and one mechanism, each setting of the grid (T rounds, a round schedule of
``ldpem.common.protocol.schedule``, a final rule of ``ldpem.common.protocol.estimate``) is
predicted with the problem's prediction seeds
(``ldpem.common.planning.prediction.predict_many``, one batch on the executor; every
setting sees the same seeds, hence the same β*, start, split over hospitals, records and
noise stream (``ldpem.common.planning.fastsim``: shared draws), so settings are compared
seed by seed; ``SEARCH_SEEDS`` of them by
default). The recommendation is
the grid's first setting (the simplest: equal rounds and the last iterate) unless another
setting beats it *clearly*: its mean per-seed gain over the first, on the same seeds,
exceeds ``CLEAR_GAIN_SE`` standard errors of that mean; among those that do, the lowest
mean. A setting ahead by less than the seeds can tell apart would be a coin toss
presented as advice. The default grid is the one
docs/RESULTS.md measured: T ∈ {10, 12}, equal or geometric:1.3 rounds, the last iterate or
the average of the last 3. ``ldpem plan --search-schedule`` prints the table;
``ldpem run create --plan`` applies the recommendation to the run request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import product

from ldpem.common.planning.executor import Executor
from ldpem.common.planning.prediction import SEARCH_SEEDS, Prediction, Problem, predict_many
from ldpem.common.planning.simulation_cache import SimulationCache
from ldpem.common.protocol import (
    EQUAL,
    LAST,
    check_final,
    check_noise_shares,
    check_schedule,
    least_records,
)

__all__ = [
    "CLEAR_GAIN_SE",
    "DEFAULT_GRID",
    "Gain",
    "ScheduleSearch",
    "Setting",
    "make_grid",
    "paired_gain",
    "search_schedule",
]

#: Standard errors by which a setting's mean per-seed gain over the grid's first setting
#: must exceed zero for the search to recommend it (one-sided, about 2.3% of ties would
#: pass were the per-seed differences normal).
CLEAR_GAIN_SE = 2.0


@dataclass(frozen=True)
class Setting:
    """One point of the grid: T rounds, the round schedule and the reported estimate."""

    rounds: int
    schedule: str
    final: str

    @property
    def label(self) -> str:
        return f"T = {self.rounds}, {self.schedule}, {self.final}"

    def applied(self, problem: Problem) -> Problem:
        """``problem`` run with this setting."""
        return replace(problem, rounds=self.rounds, schedule=self.schedule, final=self.final)

    def fits(self, problem: Problem, mechanism: str) -> bool:
        """Whether a run of ``mechanism`` may use this setting (noise shares take only
        equal rounds and the last iterate) and every hospital has the records it needs."""
        try:
            check_schedule(self.schedule, self.rounds)
            check_final(self.final, self.rounds)
            check_noise_shares(mechanism, self.schedule, self.final)
        except ValueError:
            return False
        return min(problem.sizes) >= least_records(self.rounds, self.schedule)

    def as_dict(self) -> dict[str, object]:
        return {"rounds": self.rounds, "schedule": self.schedule, "final": self.final}


def make_grid(
    rounds: Sequence[int] = (10, 12),
    schedules: Sequence[str] = (EQUAL, "geometric:1.3"),
    finals: Sequence[str] = (LAST, "average:3"),
) -> tuple[Setting, ...]:
    """Every combination of ``rounds``, ``schedules`` and ``finals``, in that order (the
    first of equal means wins: list the simpler choices first)."""
    return tuple(Setting(t, s, f) for t, s, f in product(rounds, schedules, finals))


#: T ∈ {10, 12} × {equal, geometric:1.3} × {last, average:3}: 8 settings.
DEFAULT_GRID = make_grid()


@dataclass(frozen=True)
class Gain:
    """How much lower a setting's final errors are than a reference's on the same seeds:
    the mean of the per-seed differences (reference − setting; > 0: the setting is better)
    and its standard error (+inf with one seed: nothing to tell)."""

    mean: float
    se: float

    @property
    def clear(self) -> bool:
        """Whether the gain exceeds ``CLEAR_GAIN_SE`` standard errors."""
        return self.mean > 0 and self.mean > CLEAR_GAIN_SE * self.se


def paired_gain(reference: Prediction, setting: Prediction) -> Gain:
    """The ``Gain`` of ``setting`` over ``reference``, both predicted on the same seeds. A
    diverged run (+inf) on one side only makes the gain ±inf with standard error 0.
    ValueError when the two rest on different seeds."""
    if (reference.first_seed, reference.seeds) != (setting.first_seed, setting.seeds):
        raise ValueError(
            f"paired gain needs the same seeds, got {reference.seeds} from "
            f"{reference.first_seed} and {setting.seeds} from {setting.first_seed}"
        )
    ref, other = math.isfinite(reference.mean), math.isfinite(setting.mean)
    if not (ref and other):
        mean = 0.0 if ref == other else (math.inf if other else -math.inf)
        return Gain(mean, 0.0 if ref != other else math.inf)
    diffs = [a - b for a, b in zip(reference.errors, setting.errors, strict=True)]
    mean = math.fsum(diffs) / len(diffs)
    if len(diffs) < 2:
        return Gain(mean, math.inf)
    variance = math.fsum((x - mean) ** 2 for x in diffs) / (len(diffs) - 1)
    return Gain(mean, math.sqrt(variance / len(diffs)))


@dataclass(frozen=True)
class ScheduleSearch:
    """The prediction of ``mechanism`` at each setting that fits the problem, in the grid's
    order; the best of them (lowest mean; the first of equal means) and the recommended
    one (module docstring: the first setting unless another gains clearly over it)."""

    problem: Problem
    mechanism: str
    table: tuple[tuple[Setting, Prediction], ...]

    @property
    def best(self) -> tuple[Setting, Prediction]:
        return min(self.table, key=lambda row: row[1].mean)

    @property
    def reference(self) -> tuple[Setting, Prediction]:
        """The grid's first setting that fits: what the others must beat clearly."""
        return self.table[0]

    def gain(self, prediction: Prediction) -> Gain:
        """The paired gain of ``prediction`` over the reference's."""
        return paired_gain(self.reference[1], prediction)

    @property
    def recommended(self) -> tuple[Setting, Prediction]:
        clear = [row for row in self.table[1:] if self.gain(row[1]).clear]
        return min(clear, key=lambda row: row[1].mean) if clear else self.reference

    @property
    def setting(self) -> Setting:
        """The recommended setting."""
        return self.recommended[0]

    @property
    def prediction(self) -> Prediction:
        """The recommended setting's prediction."""
        return self.recommended[1]

    @property
    def seeds(self) -> int:
        return self.prediction.seeds

    def as_dict(self) -> dict[str, object]:
        def finite(value: float) -> float | None:
            return value if math.isfinite(value) else None

        def row(setting: Setting, prediction: Prediction) -> dict[str, object]:
            gain = self.gain(prediction)
            summary = {**prediction.summary(), "mean": finite(prediction.mean)}
            return {
                **setting.as_dict(),
                **summary,
                "gain": finite(gain.mean),
                "gain_se": finite(gain.se),
                "clear_gain": gain.clear,
            }

        return {
            "mechanism": self.mechanism,
            "seeds": self.seeds,
            "reference": self.reference[0].as_dict(),
            "clear_gain_se": CLEAR_GAIN_SE,
            "table": [row(s, p) for s, p in self.table],
            "best": row(*self.best),
            "recommended": row(*self.recommended),
        }

    def describe(self) -> str:
        """One line: the recommended setting with its mean and band, and why."""
        p = self.prediction
        line = (
            f"{self.setting.label}: expected error {p.mean:.3g}, 10–90% of {p.seeds} "
            f"simulated runs in [{p.low:.3g}, {p.high:.3g}]"
        )
        reference = self.reference[0]
        if self.setting != reference:
            gain = self.gain(p)
            return f"{line}; {gain.mean:.3g} ± {gain.se:.2g} lower than {reference.label}"
        best_setting, best = self.best
        if best_setting == reference:
            return f"{line}; no other setting is lower"
        gain = self.gain(best)
        return (
            f"{line}; the lowest, {best_setting.label}, is {gain.mean:.3g} ± {gain.se:.2g} "
            f"lower, less than {CLEAR_GAIN_SE:g} standard errors: not a clear gain"
        )

    def format(self) -> str:
        """The table, one line per setting (the recommended one marked) with its paired gain
        over the first, and the choice."""
        lines = [
            f"rounds, schedule and reported estimate for {self.mechanism}: mean final error "
            f"[10–90% band] over {self.seeds} simulations, and the per-seed gain over the first"
        ]
        chosen = self.setting
        for setting, p in self.table:
            mark = "*" if setting == chosen else " "
            gain = self.gain(p)
            versus = "" if setting == self.reference[0] else f"  {gain.mean:+.3g} ± {gain.se:.2g}"
            lines.append(
                f" {mark} {setting.label:<36}{p.mean:.3g} [{p.low:.3g}, {p.high:.3g}]{versus}"
            )
        lines.append(f"recommended schedule: {self.describe()}")
        return "\n".join(lines)


def search_schedule(
    problem: Problem,
    mechanism: str,
    *,
    grid: Sequence[Setting] = DEFAULT_GRID,
    seeds: int = SEARCH_SEEDS,
    max_records: int | None = None,
    executor: Executor | None = None,
    cache: SimulationCache | None = None,
) -> ScheduleSearch:
    """Predict ``mechanism`` on ``problem`` at every setting of ``grid`` that its hospitals'
    records and rules allow (``Setting.fits``), as one batch of ``seeds`` simulations per setting on
    ``executor`` (default: this machine's cores); ``max_records`` as in ``predict_many``.
    The problem's own rounds, schedule and final rule are replaced by each setting's.
    Settings that differ only in their final rule share their runs, and ``cache`` holds
    runs already simulated (the plan's, whose row is the first setting's): the same
    numbers as simulated afresh (``ldpem.common.planning.simulation_cache``)."""
    fitting = [s for s in grid if s.fits(problem, mechanism)]
    if not fitting:
        raise ValueError(
            f"no setting of the grid fits mechanism {mechanism} with hospitals of "
            f"{min(problem.sizes)} records or more"
        )
    cases = [(s.applied(problem), mechanism) for s in fitting]
    found = predict_many(
        cases, seeds=seeds, max_records=max_records, executor=executor, cache=cache
    )
    return ScheduleSearch(problem, mechanism, tuple(zip(fitting, found, strict=True)))
