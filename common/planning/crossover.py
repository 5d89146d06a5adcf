"""The smallest n at which a mechanism beats β = 0, and how sure that is.

One definition: a mechanism beats β = 0 at n when the mean of its prediction
(``ldpem.common.planning.prediction``) at n — the problem with its hospitals scaled in proportion
to n records, δ = n^-1.1 unless fixed — is at most ``threshold`` (the planner's: half of
β = 0's error, ``planning.BEAT_FRACTION``). The crossover is the smallest such n, on a grid
of sizes ``GRID_STEPS`` to a doubling (each ~19% above the last) that passes through the
planned n itself.

The search assumes the error falls as n grows, and trusts that: from the planned n it
gallops a doubling at a time towards the crossing, then bisects the last doubling. So it
simulates a handful of sizes, never a whole grid, and it can never contradict itself: the
planned n is on the grid and its prediction is the one the planner shows, so "at n the
mean beats β = 0" holds exactly when the crossover is at most n. Each size simulates at
its own problem's seeds (``prediction.first_seed``), so every call for the same problem
finds the same n. The planned n's prediction is the planner's own (``known``, with its
``DEFAULT_SEEDS``); the other sizes use ``seeds`` (``SEARCH_SEEDS`` by default: only
their means are compared).

Its uncertainty comes from the same predictions' band: the same search on the 10% quantile
(the size from which the luckiest 10% of runs beat β = 0) and on the 90% quantile (from
which 90% of runs do) brackets it, reported as "n ≈ X (between A and B)".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ldpem.common.planning.executor import Executor, make_executor
from ldpem.common.planning.prediction import SEARCH_SEEDS, Prediction, Problem, predict

__all__ = ["GRID_STEPS", "MIN_RECORDS", "Crossover", "find_crossover", "size_grid"]

#: Grid sizes per doubling of n: the crossover is found to within a factor 2^(1/4) ≈ 1.19.
GRID_STEPS = 4
#: The smallest n the search tries (below that, a study is mostly its rounds' minimum).
MIN_RECORDS = 250


@dataclass(frozen=True)
class Crossover:
    """Where ``mechanism`` starts to beat β = 0 (module docstring), searched up to
    ``limit`` records with ``seeds`` simulations at each size.

    ``n``: the smallest grid size whose mean error is at most ``threshold`` (None: none up
    to ``limit``); ``low`` and ``high``: the same for the band's 10% and 90% quantiles,
    widened if need be to hold ``n`` (None: not up to ``limit``); ``predictions``: every
    size simulated, ascending.
    """

    mechanism: str
    threshold: float
    limit: int
    seeds: int
    n: int | None
    low: int | None
    high: int | None
    predictions: tuple[Prediction, ...]

    def describe(self, label: str, trivial: str = "β = 0") -> str:
        """One line: "<label> beats <trivial> from about n ≈ X (between A and B …)",
        ``trivial`` the name of the trivial estimate (``Problem.trivial_name``)."""
        if self.n is None:
            start = f"; 10% of runs do from n ≈ {self.low:,}" if self.low is not None else ""
            return f"{label} does not beat {trivial} at any n up to {self.limit:,}{start}"
        low = f"{self.low:,}" if self.low is not None else f"{self.n:,}"
        high = f"{self.high:,}" if self.high is not None else f"above {self.limit:,}"
        return (
            f"{label} beats {trivial} from about n ≈ {self.n:,} (between {low} and {high}: "
            f"where 10% and 90% of runs do; {self.seeds} seeds at each size)"
        )

    def as_dict(self) -> dict[str, object]:
        """The JSON-able crossover: the fields ``_REPORTED`` as they are, then ``sizes``
        (each simulated n's mean error)."""
        reported = {name: getattr(self, name) for name in _REPORTED}
        return {**reported, "sizes": {p.problem.n: p.mean for p in self.predictions}}


#: The fields of a ``Crossover`` its JSON carries unchanged, in their order there.
_REPORTED = ("n", "low", "high", "limit", "seeds", "threshold")


def size_grid(planned: int, *, floor: int, limit: int) -> list[int]:
    """Record counts planned·2^(k/GRID_STEPS) for integer k, from the first at or above
    ``floor`` to the last at or below ``limit``, with ``planned`` itself and ``limit`` (if
    above ``planned``) included; ascending, without repeats."""
    sizes = {planned}
    k = 1
    while (size := round(planned * 2 ** (k / GRID_STEPS))) <= limit:
        sizes.add(size)
        k += 1
    if limit > planned:
        sizes.add(limit)
    k = -1
    while (size := round(planned * 2 ** (k / GRID_STEPS))) >= floor:
        sizes.add(size)
        k -= 1
    return sorted(sizes)


def _first_below(
    value: Callable[[int], float], threshold: float, start: int, last: int
) -> int | None:
    """The smallest index i in [0, last] with value(i) ≤ threshold, if ``value`` falls with
    i: from ``start``, a doubling (GRID_STEPS indices) at a time towards the crossing, then
    bisection; None when not even value(last) is at most ``threshold``."""
    if value(start) <= threshold:
        high = start
        while high > 0:
            low = max(high - GRID_STEPS, 0)
            if value(low) > threshold:
                break
            high = low
        else:
            return 0
    else:
        low = start
        while True:
            if low == last:
                return None
            high = min(low + GRID_STEPS, last)
            if value(high) <= threshold:
                break
            low = high
    # value(low) > threshold ≥ value(high): bisect between them.
    while high - low > 1:
        middle = (low + high) // 2
        if value(middle) <= threshold:
            high = middle
        else:
            low = middle
    return high


def find_crossover(
    problem: Problem,
    mechanism: str,
    *,
    threshold: float,
    seeds: int = SEARCH_SEEDS,
    limit: int,
    executor: Executor | None = None,
    known: Sequence[Prediction] = (),
) -> Crossover:
    """The crossover of ``mechanism`` on ``problem`` (module docstring).

    Parameters
    ----------
    problem : Problem
        The planned run; its n is on the grid.
    mechanism : str
        The mechanism searched.
    threshold : float
        The mean error at or below which the mechanism beats β = 0.
    seeds : int
        Simulations at each size.
    limit : int
        The largest n tried (the planned n is tried even above it).
    executor : Executor, optional
        Where the simulations run; default: a pool of this machine's cores, for the whole
        search.
    known : sequence of Prediction
        Predictions already made (the planner's at the planned n, whatever their number
        of seeds): reused, not simulated again.

    Returns
    -------
    Crossover
    """
    if executor is None:
        with make_executor() as own:
            return find_crossover(
                problem,
                mechanism,
                threshold=threshold,
                seeds=seeds,
                limit=limit,
                executor=own,
                known=known,
            )
    floor = min(max(problem.rounds * len(problem.sizes), MIN_RECORDS), problem.n)
    grid = size_grid(problem.n, floor=floor, limit=max(limit, problem.n))
    # Grid size → its prediction (a scaled problem's n may differ from its grid size by
    # the rounding of its hospitals' shares).
    cache: dict[int, Prediction] = {}
    for p in known:
        if p.mechanism == mechanism and p.problem == problem:
            cache[problem.n] = p

    def at(index: int) -> Prediction:
        size = grid[index]
        if size not in cache:
            scaled = problem if size == problem.n else problem.with_records(size)
            cache[size] = predict(scaled, mechanism, seeds=seeds, executor=executor)
        return cache[size]

    start, last = grid.index(problem.n), len(grid) - 1

    def crossing(statistic: Callable[[Prediction], float]) -> int | None:
        index = _first_below(lambda i: statistic(at(i)), threshold, start, last)
        return None if index is None else grid[index]

    middle = crossing(lambda p: p.mean)
    low = crossing(lambda p: p.low)
    high = crossing(lambda p: p.high)
    # The quantile searches bracket the mean's; on a noisy grid, make sure they hold it.
    if middle is not None:
        low = middle if low is None else min(low, middle)
        high = None if high is None else max(high, middle)
    return Crossover(
        mechanism=mechanism,
        threshold=threshold,
        limit=max(limit, problem.n),
        seeds=seeds,
        n=middle,
        low=low,
        high=high,
        predictions=tuple(cache[size] for size in sorted(cache)),
    )
