"""Round schedules: how many of its records a holder reports in each round.

A run's schedule is public and fixed before any record is read. It is one of

* ``"equal"`` (the default): the sizes ``numpy.array_split`` gives, ⌊n/T⌋ or ⌈n/T⌉ records
  per round, the first n mod T rounds one more;
* ``"geometric:g"`` (g > 0): round t gets a share proportional to g^t, so with g > 1 the
  later rounds, near convergence, average more records and are less noisy;
* T fractions (each > 0, summing to 1 within ``FRACTION_TOLERANCE``): round t's share.

A share schedule deals n records by the largest remainder: round t gets ⌊n·w_t⌋ and the
n − Σ⌊n·w_t⌋ records left go one each to the rounds with the largest remainders n·w_t −
⌊n·w_t⌋ (ties: the earlier round). Every round must get at least one record. The weights
are computed with IEEE operations that are correctly rounded (products, one division, a
correctly rounded sum), never ``pow``, so the coordinator and an agent on any machine get
the same counts. Each record still reports in exactly one round.

The scale rule of Algorithm 2 is applied with each round's m_t (``round_records``): for
``equal`` every round keeps today's m = ⌊n/T⌋, so a run without a schedule is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from ldpem.common.core._validation import check_count

__all__ = [
    "EQUAL",
    "FRACTION_TOLERANCE",
    "Schedule",
    "check_schedule",
    "is_equal",
    "least_records",
    "round_index",
    "round_records",
    "round_size",
    "round_sizes",
    "schedule_key",
    "schedule_weights",
]

#: The default schedule: equal rounds, as ``numpy.array_split`` deals them.
EQUAL = "equal"
#: How far from 1 the sum of a schedule's fractions may be.
FRACTION_TOLERANCE = 1e-6
_GEOMETRIC = "geometric:"

#: A named rule (``"equal"``, ``"geometric:1.3"``) or T fractions.
Schedule = str | Sequence[float]


def schedule_key(schedule: Schedule) -> str | tuple[float, ...]:
    """``schedule`` in a hashable form (a tuple of fractions, or the rule's name)."""
    return schedule if isinstance(schedule, str) else tuple(float(f) for f in schedule)


def is_equal(schedule: Schedule) -> bool:
    """Whether ``schedule`` is the default, equal rounds."""
    return isinstance(schedule, str) and schedule == EQUAL


def _growth(rule: str) -> float:
    """g of ``"geometric:g"``; ValueError for any other rule."""
    if not rule.startswith(_GEOMETRIC):
        raise ValueError(f"schedule must be {EQUAL!r}, 'geometric:G' or a list of fractions")
    try:
        growth = float(rule[len(_GEOMETRIC) :])
    except ValueError:
        raise ValueError(f"schedule {rule[:40]!r}: G of geometric:G must be a number") from None
    if not (math.isfinite(growth) and growth > 0):
        raise ValueError(f"schedule {rule[:40]!r}: G of geometric:G must be finite and > 0")
    return growth


@lru_cache(maxsize=256)
def _weights(key: str | tuple[float, ...], rounds: int) -> tuple[float, ...]:
    if isinstance(key, str):
        if is_equal(key):
            raw = [1.0] * rounds
        else:
            growth, raw = _growth(key), [1.0]
            for _ in range(rounds - 1):  # repeated products, not pow: correctly rounded
                raw.append(raw[-1] * growth)
    else:
        if len(key) != rounds:
            raise ValueError(f"schedule lists {len(key)} fractions for {rounds} rounds")
        if not all(math.isfinite(f) and f > 0 for f in key):
            raise ValueError("schedule fractions must be finite and > 0")
        if abs(math.fsum(key) - 1.0) > FRACTION_TOLERANCE:
            raise ValueError(f"schedule fractions must sum to 1, got {math.fsum(key)!r}")
        raw = list(key)
    total = math.fsum(raw)
    weights = tuple(w / total for w in raw)
    if not (math.isfinite(total) and all(w > 0 for w in weights)):
        raise ValueError(f"schedule {key!r} over {rounds} rounds gives a round no share")
    return weights


def schedule_weights(schedule: Schedule, rounds: int) -> tuple[float, ...]:
    """The share w_t of each round (T floats > 0 summing to 1 up to rounding).

    Parameters
    ----------
    schedule : str or sequence of float
        ``"equal"``, ``"geometric:g"`` or T fractions.
    rounds : int
        T (≥ 1).

    Returns
    -------
    tuple of T float
    """
    return _weights(schedule_key(schedule), check_count("rounds", rounds))


def check_schedule(schedule: Schedule, rounds: int) -> None:
    """ValueError (one line) unless ``schedule`` is valid for ``rounds`` rounds."""
    schedule_weights(schedule, rounds)


@lru_cache(maxsize=4096)
def _sizes(records: int, rounds: int, key: str | tuple[float, ...]) -> tuple[int, ...]:
    if records < rounds:
        raise ValueError(f"{records} records cannot be split over {rounds} rounds")
    if isinstance(key, str) and is_equal(key):
        return tuple(records // rounds + (1 if t < records % rounds else 0) for t in range(rounds))
    quotas = [records * w for w in _weights(key, rounds)]
    sizes = [math.floor(q) for q in quotas]
    left = records - sum(sizes)
    # Largest remainder first; the earlier round first among equal remainders.
    order = sorted(range(rounds), key=lambda t: (-(quotas[t] - sizes[t]), t))
    for t in order[:left]:
        sizes[t] += 1
    if min(sizes) < 1:
        empty = sizes.index(min(sizes))
        raise ValueError(
            f"{records} records are too few for the schedule over {rounds} rounds: "
            f"round {empty} would hold no record"
        )
    return tuple(sizes)


def round_sizes(records: int, rounds: int, schedule: Schedule = EQUAL) -> tuple[int, ...]:
    """The records a holder with ``records`` records reports in each round (module
    docstring: how they are dealt). ValueError when a round would get none.

    Parameters
    ----------
    records : int
        n, the holder's records (≥ ``rounds``).
    rounds : int
        T (≥ 1).
    schedule : str or sequence of float
        The run's schedule.

    Returns
    -------
    tuple of T int
        Each ≥ 1, summing to n.
    """
    records = check_count("records", records)
    return _sizes(records, check_count("rounds", rounds), schedule_key(schedule))


def round_size(records: int, rounds: int, t: int, schedule: Schedule = EQUAL) -> int:
    """Records a holder with ``records`` records reports in round ``t`` of ``rounds``."""
    if not 0 <= t < rounds:
        raise ValueError(f"round must be in 0..{rounds - 1}, got {t}")
    return round_sizes(records, rounds, schedule)[t]


def round_records(
    records: int, rounds: int, schedule: Schedule = EQUAL, *, reuse: bool = False
) -> tuple[int, ...]:
    """m_t, the records per round that set Algorithm 2's scale in each round, for
    ``records`` records (all of a study's, or one holder's): ⌊records/rounds⌋ (at least 1)
    in every round for ``equal`` (the rule without a schedule), all records with
    ``reuse``, otherwise the round's own size (``round_sizes``).

    Returns
    -------
    tuple of T int
        Each ≥ 1.
    """
    records = check_count("records", records)
    rounds = check_count("rounds", rounds)
    if reuse:
        return (records,) * rounds
    if is_equal(schedule):
        return (max(1, records // rounds),) * rounds
    return round_sizes(records, rounds, schedule)


def round_index(schedule: Schedule, rounds: int, t: int | None) -> int:
    """The round whose per-round value to take: ``t``, which may be omitted (None, then 0)
    only when every round has the same value (``equal``). ValueError otherwise."""
    if t is None:
        if not is_equal(schedule):
            raise ValueError("the run's rounds differ (its schedule): give the round t")
        return 0
    if not 0 <= t < rounds:
        raise ValueError(f"round must be in 0..{rounds - 1}, got {t}")
    return t


def least_records(rounds: int, schedule: Schedule = EQUAL) -> int:
    """A number of records enough for every round of ``schedule`` to get one: T for equal
    rounds; otherwise the least n ≥ T with n·w_t ≥ 1 for every round (then ⌊n·w_t⌋ ≥ 1),
    and any larger n is enough too. Fewer records may still fit (``round_sizes`` says)."""
    rounds = check_count("rounds", rounds)
    if is_equal(schedule):
        return rounds
    smallest = min(schedule_weights(schedule, rounds))
    n = max(rounds, math.floor(1.0 / smallest))
    while n * smallest < 1.0:
        n += 1
    return n
