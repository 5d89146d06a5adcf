"""Runs shared between predictions (``SimulationCache``, ``final_errors_by_rule``) give the
numbers the same predictions give simulated afresh, and are actually shared."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import numpy as np
import pytest

from ldpem.common.models import get_model
from ldpem.common.planning import seed_records
from ldpem.common.planning.executor import SerialExecutor
from ldpem.common.planning.fastsim import final_errors, final_errors_by_rule, shared_final_errors
from ldpem.common.planning.plan import make_plan
from ldpem.common.planning.prediction import Problem, outlooks, predict, predict_many
from ldpem.common.planning.schedule_search import DEFAULT_GRID, search_schedule
from ldpem.common.planning.simulation_cache import SimulationCache

T = TypeVar("T")
R = TypeVar("R")

#: Small enough that every simulation takes milliseconds.
PROBLEM = Problem(model="gmm", d=3, sizes=(300, 500, 700))
FINALS = ("last", "average:3")


class CountingExecutor(SerialExecutor):
    """Serial, counting the runs it simulates (``runs``) and the seeds whose records it
    draws (``draws``); each task is (its cases, their seeds)."""

    def __init__(self) -> None:
        self.runs = 0
        self.draws = 0

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        for task in tasks:
            cases, seeds = cast(tuple[Sequence[object], Sequence[int]], task)
            self.runs += len(cases) * len(seeds)
            self.draws += len(seeds)
        return super().map(fn, tasks)


def test_each_rule_from_one_run_is_the_rule_run_on_its_own() -> None:
    study = PROBLEM.study("local", 0)
    seeds = [11, 12, 13]
    together = final_errors_by_rule(study, seeds, FINALS)
    assert together.shape == (2, 3)
    for row, final in zip(together, FINALS, strict=True):
        np.testing.assert_array_equal(row, final_errors(replace(study, final=final), seeds))
    # The rules differ (else the test could not tell them apart).
    assert not np.array_equal(together[0], together[1])


def test_the_search_on_the_plans_runs_equals_the_search_afresh() -> None:
    cache = SimulationCache(finals=FINALS)
    shared = CountingExecutor()
    plan = make_plan(PROBLEM, seeds=6, crossover_limit=2000, executor=shared, cache=cache)
    after_plan, drawn_by_plan = shared.runs, shared.draws
    reused = search_schedule(PROBLEM, "hospital", seeds=6, executor=shared, cache=cache)
    fresh_executor = CountingExecutor()
    fresh = search_schedule(PROBLEM, "hospital", seeds=6, executor=fresh_executor)
    assert [p for _, p in reused.table] == [p for _, p in fresh.table]
    assert reused.as_dict() == fresh.as_dict()
    # The first setting is the plan's hospital row; the other 7 settings are 3 runs a seed.
    first = {p.mechanism: p for p in plan.predictions}["hospital"]
    assert reused.table[0][1] == first
    assert shared.runs - after_plan == 3 * 6
    # Afresh, the final rules still share their runs: 4 (T, schedule) pairs, all on one
    # draw of each seed's records.
    assert fresh_executor.runs == 4 * 6
    assert fresh_executor.draws == shared.draws - drawn_by_plan == 6
    assert len(DEFAULT_GRID) == 8


def test_a_prediction_from_fewer_seeds_is_the_prefix_of_a_cached_one() -> None:
    cache = SimulationCache()
    long = predict(PROBLEM, "local", seeds=8, executor=SerialExecutor(), cache=cache)
    counting = CountingExecutor()
    short = predict(PROBLEM, "local", seeds=5, executor=counting, cache=cache)
    assert counting.runs == 0
    assert short == predict(PROBLEM, "local", seeds=5, executor=SerialExecutor())
    assert short.errors == long.errors[:5]


def test_cases_that_differ_in_their_rule_or_seeds_simulate_each_seed_once() -> None:
    averaged = replace(PROBLEM, final="average:3")
    cases = [(PROBLEM, "central"), (averaged, "central"), (PROBLEM, "central")]
    counting = CountingExecutor()
    found = predict_many(cases, seeds=[4, 4, 7], executor=counting)
    assert counting.runs == 7
    alone = [
        predict(p, m, seeds=s, executor=SerialExecutor())
        for (p, m), s in zip(cases, [4, 4, 7], strict=True)
    ]
    assert found == alone


def test_mechanisms_and_schedules_on_one_problem_share_each_seeds_records() -> None:
    geometric = replace(PROBLEM, rounds=12, schedule="geometric:1.3")
    cases = [(PROBLEM, "local"), (PROBLEM, "hospital"), (geometric, "none")]
    counting = CountingExecutor()
    found = predict_many(cases, seeds=[5, 3, 5], executor=counting)
    assert (counting.runs, counting.draws) == (13, 5)
    for (p, m), s, prediction in zip(cases, [5, 3, 5], found, strict=True):
        assert prediction == predict(p, m, seeds=s, executor=SerialExecutor())
    # Another SNR is other data, drawn apart.
    other = CountingExecutor()
    predict_many([(PROBLEM, "local"), (PROBLEM.at_snr(6.0), "local")], seeds=2, executor=other)
    assert other.draws == 4


@pytest.mark.parametrize("schedule", ["equal", "geometric:1.3"])
def test_records_drawn_as_read_are_the_kept_ones(
    monkeypatch: pytest.MonkeyPatch, schedule: str
) -> None:
    """Above KEEP_LIMIT a study draws its seed's blocks again as it reads them: the same
    records, hence the same errors (blocks of 21 rows here, so rounds cross blocks)."""
    monkeypatch.setattr(seed_records, "CHUNK", 64)
    study = replace(PROBLEM, schedule=schedule).study("hospital", 0)
    kept = final_errors_by_rule(study, [3, 4], FINALS)
    monkeypatch.setattr(seed_records, "KEEP_LIMIT", 0)
    assert np.array_equal(final_errors_by_rule(study, [3, 4], FINALS), kept)
    drawn = seed_records.SeedRecords(
        get_model("gmm"),
        np.random.default_rng(1).spawn(2),
        (50, 30),
        star=np.ones(3),
        sigma=1.0,
        missing=0.0,
    )
    assert drawn.kept is None and drawn.rows == 21
    reader = drawn.reader()
    assert sum(c.n for c in reader.chunks(0, 0, 45)) == 45
    with pytest.raises(ValueError, match="read in order"):
        list(reader.chunks(0, 0, 5))


def test_an_outlook_without_what_ifs_simulates_only_the_assumed_snr() -> None:
    """``sensitivity_seeds = 0`` (the demo's coordinator): no runs at half and twice the
    SNR, and the prediction at the assumed SNR the same numbers as with them."""
    alone, with_what_ifs = CountingExecutor(), CountingExecutor()
    (outlook,) = outlooks(PROBLEM, ["local"], seeds=4, sensitivity_seeds=0, executor=alone)
    (full,) = outlooks(PROBLEM, ["local"], seeds=4, sensitivity_seeds=2, executor=with_what_ifs)
    assert outlook.sensitivity == () and [p.seeds for p in full.sensitivity] == [2, 2]
    assert outlook.prediction == full.prediction
    assert (alone.runs, with_what_ifs.runs) == (4, 8)
    with pytest.raises(ValueError, match="sensitivity_seeds must be >= 0, got -1"):
        outlooks(PROBLEM, ["local"], seeds=4, sensitivity_seeds=-1, executor=alone)


def test_a_seeds_records_are_kept_only_when_several_studies_read_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One study on a seed (a forecast of one mechanism, a bootstrap draw) draws each block
    as it reads it, still in the cache; several (the plan's mechanisms) keep them."""
    kept: list[bool] = []
    draw = seed_records.SeedRecords.__init__

    def spy(self: seed_records.SeedRecords, *args: Any, **kwargs: Any) -> None:
        draw(self, *args, **kwargs)
        kept.append(self.kept is not None)

    monkeypatch.setattr(seed_records.SeedRecords, "__init__", spy)
    study = PROBLEM.study("local", 0)
    alone = final_errors(study, [3])
    assert np.array_equal(final_errors_by_rule(study, [3], FINALS)[0], alone)
    other = replace(study, mechanism="hospital")
    shared = shared_final_errors([(study, FINALS), (other, FINALS)], [3])
    assert np.array_equal(shared[0][0], alone)
    assert kept == [False, False, True]
