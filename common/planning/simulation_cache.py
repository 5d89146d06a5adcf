"""Simulations shared by the predictions of one plan: each seeded run simulated once.

A prediction (``ldpem.common.planning.prediction``) of a problem and a mechanism is the final
errors of the runs at the problem's seeds ``first_seed(problem)``, …, and those seeds do
not depend on the problem's rounds, schedule or reported estimate (``Problem.seed_key``).
So two predictions share runs in two ways, and ``ldpem plan --search-schedule`` asks for
both:

* **The same run, another reported estimate.** The reported estimate (``final``: β^T or
  the average of the last iterates) is computed from the run's iterates and draws
  nothing, so the errors of ``last`` and ``average:3`` come from one simulation of each
  seed (``fastsim.final_errors_by_rule``): the search's 8 settings are 4 runs per seed.
* **The same prediction asked twice.** The search's first setting (T = 10, equal rounds,
  the last iterate, on the same seeds) is the plan's row for its mechanism; its
  comparison row, at the default setting, is the plan's row for non-private EM.

``SimulationCache`` keeps, for each (problem without its reported estimate, mechanism),
the errors of the first S seeds under each rule computed so far, and records ``finals``
besides the rule asked for with every new simulation. A prediction taken from it is the
prediction computed afresh number for number (each seed's run depends on the seed alone:
tests/common/test_simulation_cache.py), so sharing changes the plan's cost, never its
figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ldpem.common.protocol import LAST, check_final, check_noise_shares

if TYPE_CHECKING:
    from ldpem.common.planning.prediction import Problem

__all__ = ["SimulationCache", "SimulationKey"]

#: What a simulated run depends on: the problem (its reported estimate set to ``last``,
#: which does not change the run) and the mechanism.
SimulationKey = tuple["Problem", str]


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
