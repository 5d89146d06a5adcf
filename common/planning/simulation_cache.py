"""Simulations shared by the predictions of one plan: each seeded run simulated once.

A prediction (``ldpem.common.planning.prediction``) of a problem and a mechanism is the final
errors of the runs at the problem's seeds ``first_seed(problem)``, …, and those seeds do
not depend on the mechanism, nor on the problem's rounds, schedule or reported estimate
(``Problem.seed_key``). So predictions share work in three ways, and ``ldpem plan
--search-schedule`` asks for all three:

* **The same records, another mechanism or schedule.** A seed's records come from the
  seed alone (``fastsim``: shared draws), so every (mechanism, rounds, schedule) of one
  ``seed_key`` runs in the same tasks, on one draw of each seed's records
  (``fastsim.shared_final_errors``): the plan's six mechanisms, the search's settings.
* **The same run, another reported estimate.** The reported estimate (``final``: β^T or
  the average of the last iterates) is computed from the run's iterates and draws
  nothing, so the errors of ``last`` and ``average:3`` come from one simulation of each
  seed: the search's 8 settings are 4 runs per seed.
* **The same prediction asked twice.** The search's first setting (T = 10, equal rounds,
  the last iterate, on the same seeds) is the plan's row for its mechanism, and the
  comparison row at that setting is the plan's row for non-private EM.

``SimulationCache`` keeps, for each (problem without its reported estimate, mechanism),
the errors of the first S seeds under each rule computed so far, and records ``finals``
besides the rule asked for with every new simulation. A prediction taken from it is the
prediction computed afresh number for number (each seed's run depends on the seed alone:
tests/common/test_simulation_cache.py), so sharing changes the plan's cost, never its
figures.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ldpem.common.planning.executor import Executor
from ldpem.common.planning.fastsim import shared_final_errors
from ldpem.common.planning.problem import Problem
from ldpem.common.protocol import LAST, check_final, check_noise_shares

__all__ = ["SimulationCache", "SimulationKey"]

#: Seeds in one task of the executor: fewer, larger tasks cost less to send; more, smaller
#: ones keep every worker busy to the end.
BATCH = 5

#: What a simulated run depends on: the problem (its reported estimate set to ``last``,
#: which does not change the run) and the mechanism.
SimulationKey = tuple[Problem, str]
#: One executor task: the (problem, mechanism, reported estimates) that share their
#: records, and the seeds to run them at.
_Task = tuple[tuple[tuple[Problem, str, tuple[str, ...]], ...], tuple[int, ...]]


def _final_errors(task: _Task) -> list[list[list[float]]]:
    """A batch of simulations: for each (problem, mechanism, rules) of the task, the
    errors of each reported estimate of ``rules`` at each seed (+inf when it diverged);
    each seed's records drawn once for all, each run simulated once for all its rules
    (``fastsim.shared_final_errors``). Module level: a process pool runs it."""
    cases, seeds = task
    studies = [(p.study(m, seeds[0]), finals) for p, m, finals in cases]
    found = shared_final_errors(studies, seeds)
    return [
        [[float(e) if math.isfinite(e) else math.inf for e in row] for row in errors]
        for errors in found
    ]


@dataclass
class SimulationCache:
    """Final errors of simulated runs, by ``SimulationKey`` and reported estimate: the
    errors of seeds ``first_seed(problem)`` … ``+ S − 1`` in that order (module docstring).

    ``finals``: reported estimates recorded with every new simulation besides the one asked
    for, where the run's rules allow them (``ldpem plan --search-schedule``: the grid's).
    """

    finals: tuple[str, ...] = ()
    _errors: dict[SimulationKey, dict[str, tuple[float, ...]]] = field(default_factory=dict)

    @staticmethod
    def key(problem: Problem, mechanism: str) -> SimulationKey:
        """The runs ``problem`` with ``mechanism`` simulates, whatever its ``final``."""
        return (replace(problem, final=LAST), mechanism)

    def lookup(self, problem: Problem, mechanism: str, count: int) -> tuple[float, ...] | None:
        """The errors of the first ``count`` seeds of ``problem`` with ``mechanism`` under
        its reported estimate, or None when fewer have been simulated."""
        known = self._errors.get(self.key(problem, mechanism), {}).get(problem.final)
        if known is None or len(known) < count:
            return None
        return known[:count]

    def finals_for(self, problem: Problem, mechanism: str, asked: Sequence[str]) -> list[str]:
        """The rules a new simulation of ``problem`` records: ``asked``, then ``finals``
        that its rounds allow and ``mechanism`` may report (noise shares: ``last`` only),
        without repeats."""
        extra = []
        for final in self.finals:
            try:
                check_final(final, problem.rounds)
                check_noise_shares(mechanism, problem.schedule, final)
            except ValueError:
                continue
            extra.append(final)
        return list(dict.fromkeys([*asked, *extra]))

    def store(
        self,
        problem: Problem,
        mechanism: str,
        errors: dict[str, tuple[float, ...]],
    ) -> None:
        """Record ``errors`` (rule → the errors of the first S seeds) of ``problem``'s
        runs with ``mechanism``, keeping any rule already known for more seeds."""
        known = self._errors.setdefault(self.key(problem, mechanism), {})
        for final, found in errors.items():
            if len(found) >= len(known.get(final, ())):
                known[final] = found

    def fill(
        self,
        cases: Sequence[tuple[Problem, str, int]],
        seeds: Callable[[Problem, int], Sequence[int]],
        executor: Executor,
    ) -> None:
        """Simulate on ``executor`` what ``lookup`` lacks for each (problem, mechanism,
        count) of ``cases``, at ``seeds(problem, count)``: once per ``SimulationKey`` (the
        most seeds and every rule asked), and the keys of one ``seed_key`` (rounds,
        schedule, rules and mechanisms on the same records) in the same tasks, which draw
        each seed's records once (``fastsim.shared_final_errors``)."""
        wanted: dict[SimulationKey, tuple[Problem, int, list[str]]] = {}
        for p, m, count in cases:
            if self.lookup(p, m, count) is None:
                _, most, asked = wanted.get(self.key(p, m), (p, 0, []))
                wanted[self.key(p, m)] = (p, max(most, count), [*asked, p.final])
        groups = [
            (p, m, count, tuple(self.finals_for(p, m, asked)))
            for (_, m), (p, count, asked) in wanted.items()
        ]
        shared: dict[str, list[int]] = {}
        for i, (p, _, _, _) in enumerate(groups):
            shared.setdefault(p.seed_key, []).append(i)
        tasks: list[_Task] = []
        members: list[tuple[int, ...]] = []
        for indices in shared.values():
            most = max(groups[i][2] for i in indices)
            chosen = list(seeds(groups[indices[0]][0], most))
            ends = sorted({*range(0, most, BATCH), *(groups[i][2] for i in indices), most})
            for low, high in itertools.pairwise(ends):
                running = tuple(i for i in indices if groups[i][2] >= high)
                task = tuple((groups[i][0], groups[i][1], groups[i][3]) for i in running)
                tasks.append((task, tuple(chosen[low:high])))
                members.append(running)
        collected: list[list[list[float]]] = [[[] for _ in g[3]] for g in groups]
        for running, batch in zip(members, executor.map(_final_errors, tasks), strict=True):
            for i, rows in zip(running, batch, strict=True):
                for j, row in enumerate(rows):
                    collected[i][j].extend(row)
        for (p, m, _, finals), rows in zip(groups, collected, strict=True):
            self.store(p, m, {rule: tuple(row) for rule, row in zip(finals, rows, strict=True)})
