"""Which rounds, schedule and reported estimate to use: a small grid searched by simulation.

For a ``Problem`` and one mechanism, each setting of the grid (T rounds, a round schedule of
``ldpem.common.protocol.schedule``, a final rule of ``ldpem.common.protocol.estimate``) is
predicted with the prediction's seeds (``ldpem.common.prediction.predict_many``, one batch
on the executor) and the setting with the lowest mean final error is recommended, with its
band. The default grid is the one docs/RESULTS.md measured: T ∈ {10, 12}, equal or
geometric:1.3 rounds, the last iterate or the average of the last 3 (GMM, n = 2·10⁵, d =
10, ε = 1, local DP: 12 rounds geometric:1.3 average:3 reached 0.255 against 0.378 for 10
equal rounds and the last iterate). ``ldpem plan --search-schedule`` prints the table;
``ldpem run create --plan`` applies the recommendation to the run request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import product

from ldpem.common.executor import Executor
from ldpem.common.prediction import DEFAULT_SEEDS, Prediction, Problem, predict_many
from ldpem.common.protocol import (
    EQUAL,
    LAST,
    check_final,
    check_noise_shares,
    check_schedule,
    least_records,
)

__all__ = [
    "DEFAULT_GRID",
    "ScheduleSearch",
    "Setting",
    "make_grid",
    "search_schedule",
]


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
class ScheduleSearch:
    """The prediction of ``mechanism`` at each setting that fits the problem, in the grid's
    order, and the best of them (lowest mean; the first of equal means)."""

    problem: Problem
    mechanism: str
    table: tuple[tuple[Setting, Prediction], ...]

    @property
    def best(self) -> tuple[Setting, Prediction]:
        return min(self.table, key=lambda row: row[1].mean)

    @property
    def setting(self) -> Setting:
        return self.best[0]

    @property
    def prediction(self) -> Prediction:
        return self.best[1]

    @property
    def seeds(self) -> int:
        return self.prediction.seeds

    def as_dict(self) -> dict[str, object]:
        def row(setting: Setting, prediction: Prediction) -> dict[str, object]:
            mean = prediction.mean
            summary = {**prediction.summary(), "mean": mean if math.isfinite(mean) else None}
            return {**setting.as_dict(), **summary}

        return {
            "mechanism": self.mechanism,
            "seeds": self.seeds,
            "table": [row(s, p) for s, p in self.table],
            "best": row(*self.best),
        }

    def describe(self) -> str:
        """One line: the recommended setting with its mean and band."""
        p = self.prediction
        return (
            f"{self.setting.label}: expected error {p.mean:.3g}, 10–90% of {p.seeds} "
            f"simulated runs in [{p.low:.3g}, {p.high:.3g}]"
        )

    def format(self) -> str:
        """The table, one line per setting (the recommended one marked), and the choice."""
        lines = [
            f"rounds, schedule and reported estimate for {self.mechanism}: mean final error "
            f"[10–90% band] over {self.seeds} simulations"
        ]
        best = self.setting
        for setting, p in self.table:
            mark = "*" if setting == best else " "
            lines.append(f" {mark} {setting.label:<36}{p.mean:.3g} [{p.low:.3g}, {p.high:.3g}]")
        lines.append(f"recommended schedule: {self.describe()}")
        return "\n".join(lines)


def search_schedule(
    problem: Problem,
    mechanism: str,
    *,
    grid: Sequence[Setting] = DEFAULT_GRID,
    seeds: int = DEFAULT_SEEDS,
    max_records: int | None = None,
    executor: Executor | None = None,
) -> ScheduleSearch:
    """Predict ``mechanism`` on ``problem`` at every setting of ``grid`` that its hospitals'
    records and rules allow (``Setting.fits``), as one batch of ``seeds`` simulations per setting on
    ``executor`` (default: this machine's cores); ``max_records`` as in ``predict_many``.
    The problem's own rounds, schedule and final rule are replaced by each setting's."""
    fitting = [s for s in grid if s.fits(problem, mechanism)]
    if not fitting:
        raise ValueError(
            f"no setting of the grid fits mechanism {mechanism} with hospitals of "
            f"{min(problem.sizes)} records or more"
        )
    cases = [(s.applied(problem), mechanism) for s in fitting]
    found = predict_many(cases, seeds=seeds, max_records=max_records, executor=executor)
    return ScheduleSearch(problem, mechanism, tuple(zip(fitting, found, strict=True)))
