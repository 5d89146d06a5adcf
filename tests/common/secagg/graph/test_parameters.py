"""SecAgg+ parameters: each bound holds its exact hypergeometric tail (recomputed here in
exact rational arithmetic, not with scipy), is the least that does, the chosen k is the
least even degree that works, k grows with K, corruption, dropout and a smaller failure,
and small consortia get the full mesh."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cache

import pytest

from ldpem.common.secagg.graph.parameters import (
    DEFAULT_FAILURE,
    GraphParameters,
    graph_parameters,
    tail_bound,
)


@cache
def exact_tails(population: int, successes: int, draws: int) -> tuple[Fraction, ...]:
    """P(X > c) for c = 0 … min(successes, draws), X ~ Hypergeom(population, successes,
    draws), exactly: suffix sums of C(s, j)·C(N − s, n − j) over C(N, n)."""
    total = math.comb(population, draws)
    top = min(successes, draws)
    ways = [
        math.comb(successes, j) * math.comb(population - successes, draws - j)
        for j in range(top + 1)
    ]
    tails, above = [], 0
    for j in range(top, -1, -1):
        tails.append(Fraction(above, total))
        above += ways[j]
    return tuple(reversed(tails))


def exact_tail(population: int, successes: int, draws: int, count: int) -> Fraction:
    return exact_tails(population, successes, draws)[count]


def least_bound(population: int, successes: int, draws: int, budget: Fraction) -> int:
    """The least c with P(X > c) ≤ budget, by a linear scan of exact tails."""
    for count, tail in enumerate(exact_tails(population, successes, draws)):
        if tail <= budget:
            return count
    raise AssertionError("the tail never falls below the budget")


def check(p: GraphParameters, min_honest: int = 2) -> None:
    """Every bound of ``p`` against exact tails, and the conditions of the derivation."""
    budget = Fraction(p.threat.failure) / 4
    others = p.threat.holders - 1
    per_holder = budget / p.threat.holders
    assert p.corrupt_bound == least_bound(others, p.threat.colluders, p.k, per_holder)
    assert p.dropout_bound == least_bound(others, p.threat.dropouts, p.k, per_holder)
    assert p.threshold == p.k - p.dropout_bound  # liveness: surviving neighbours ≥ t_k
    assert p.honest_shares == p.threshold - p.corrupt_bound >= min_honest  # privacy
    m = p.committee.size
    assert p.committee.corrupt_bound == least_bound(p.threat.holders, p.threat.colluders, m, budget)
    assert p.committee.dropout_bound == least_bound(p.threat.holders, p.threat.dropouts, m, budget)
    assert 2 * p.committee.threshold > m + p.committee.corrupt_bound  # one certified S
    assert m - p.committee.dropout_bound >= p.committee.threshold  # a live committee
    # The whole round fails with probability at most the budget (union of the four events).
    total = (
        p.threat.holders * exact_tail(others, p.threat.colluders, p.k, p.corrupt_bound)
        + p.threat.holders * exact_tail(others, p.threat.dropouts, p.k, p.dropout_bound)
        + exact_tail(p.threat.holders, p.threat.colluders, m, p.committee.corrupt_bound)
        + exact_tail(p.threat.holders, p.threat.dropouts, m, p.committee.dropout_bound)
    )
    assert total <= Fraction(p.threat.failure)


def minimal(p: GraphParameters, min_honest: int = 2) -> None:
    """No smaller even degree works, and no smaller committee (exact tails again)."""
    budget = Fraction(p.threat.failure) / 4
    others, per_holder = p.threat.holders - 1, budget / p.threat.holders
    for k in range(2, min(p.k, others), 2):
        corrupt = least_bound(others, p.threat.colluders, k, per_holder)
        dropped = least_bound(others, p.threat.dropouts, k, per_holder)
        assert k - dropped < corrupt + min_honest, k
    for m in range(1, p.committee.size):
        corrupt = least_bound(p.threat.holders, p.threat.colluders, m, budget)
        dropped = least_bound(p.threat.holders, p.threat.dropouts, m, budget)
        assert m - dropped < (m + corrupt) // 2 + 1, m


@pytest.mark.parametrize("holders", [20, 100, 1000])
def test_the_default_parameters_meet_their_exact_tails_and_are_minimal(holders: int) -> None:
    p = graph_parameters(holders)
    assert (p.threat.colluders, p.threat.dropouts) == (holders // 3, holders // 10)
    assert p.threat.failure == DEFAULT_FAILURE == 2.0**-40
    check(p)
    minimal(p)


def test_k_10_000_meets_its_exact_tails() -> None:
    p = graph_parameters(10_000)
    assert not p.full_mesh and p.k < 400  # O(log K): far below K
    check(p)


@pytest.mark.parametrize(
    ("holders", "gamma", "delta", "honest"), [(1000, 0.2, 0.05, 2), (1000, 1 / 3, 0.1, 30)]
)
def test_other_settings_meet_their_exact_tails(
    holders: int, gamma: float, delta: float, honest: int
) -> None:
    p = graph_parameters(
        holders, colluder_fraction=gamma, dropout_fraction=delta, min_honest_shares=honest
    )
    check(p, honest)
    minimal(p, honest)


def test_a_looser_failure_bound_is_checked_exactly_too() -> None:
    p = graph_parameters(300, failure=1e-3)
    check(p)
    minimal(p)


def test_k_grows_with_the_consortium_and_the_threats() -> None:
    ks = [graph_parameters(k).k for k in (100, 1000, 10_000)]
    assert ks == sorted(ks) and ks[-1] < 3 * ks[1]  # logarithmic growth, not linear
    base = graph_parameters(1000)
    assert graph_parameters(1000, colluder_fraction=0.2).k < base.k
    assert graph_parameters(1000, dropout_fraction=0.02).k < base.k
    assert graph_parameters(1000, failure=2.0**-20).k < base.k
    assert graph_parameters(1000, min_honest_shares=50).k > base.k
    assert graph_parameters(1000, colluder_fraction=0.2).committee.size < base.committee.size


def test_no_threat_needs_only_a_small_graph() -> None:
    p = graph_parameters(1000, colluder_fraction=0, dropout_fraction=0)
    assert (p.k, p.threshold, p.corrupt_bound, p.dropout_bound) == (2, 2, 0, 0)
    assert (p.committee.size, p.committee.threshold) == (1, 1)


@pytest.mark.parametrize(("holders", "honest"), [(4, 2), (5, 2), (100, 56)])
def test_small_consortia_get_the_full_mesh(holders: int, honest: int) -> None:
    p = graph_parameters(holders, min_honest_shares=honest)
    assert p.full_mesh and p.k == holders - 1
    # The full mesh's counts are certain: every colluder is every honest holder's neighbour.
    assert (p.corrupt_bound, p.dropout_bound) == (holders // 3, holders // 10)
    check(p, honest)
    minimal(p, honest)


def test_tail_bound_matches_exact_arithmetic() -> None:
    for population, successes, draws in [(99, 33, 44), (999, 333, 130), (50, 0, 10)]:
        for budget in (Fraction(1, 10), Fraction(1, 2**45)):
            assert tail_bound(population, successes, draws, math.log(budget)) == least_bound(
                population, successes, draws, budget
            )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k_holders": 1}, "k_holders must be an integer >= 2, got 1"),
        ({"k_holders": True}, "k_holders must be an integer >= 2, got True"),
        ({"k_holders": 100.0}, "k_holders must be an integer >= 2, got 100.0"),
        ({"colluder_fraction": -0.1}, "colluder_fraction must be a number in [0, 1), got -0.1"),
        ({"colluder_fraction": 1}, "colluder_fraction must be a number in [0, 1), got 1"),
        ({"colluder_fraction": math.nan}, "colluder_fraction must be a number in [0, 1), got nan"),
        ({"dropout_fraction": math.inf}, "dropout_fraction must be a number in [0, 1), got inf"),
        ({"dropout_fraction": "0.1"}, "dropout_fraction must be a number in [0, 1), got '0.1'"),
        ({"failure": 0}, "failure must be a number in (0, 1), got 0"),
        ({"failure": 1.0}, "failure must be a number in (0, 1), got 1.0"),
        ({"failure": math.nan}, "failure must be a number in (0, 1), got nan"),
        ({"min_honest_shares": 1}, "min_honest_shares must be an integer >= 2, got 1"),
    ],
)
def test_bad_parameters_are_refused_by_name(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"k_holders": 100, **kwargs}
    with pytest.raises(ValueError) as refused:
        graph_parameters(**arguments)  # type: ignore[arg-type]
    assert str(refused.value) == message


def test_settings_no_graph_can_meet_are_refused() -> None:
    with pytest.raises(ValueError) as raised:
        graph_parameters(100, colluder_fraction=0.45, dropout_fraction=0.1, min_honest_shares=50)
    assert str(raised.value) == (
        "colluder_fraction = 0.45 and dropout_fraction = 0.1 cannot be met at K = 100 with "
        "min_honest_shares = 50: even the full mesh's threshold K - 1 - 10 = 89 is below "
        "45 colluders + 50"
    )
    with pytest.raises(ValueError) as raised:
        graph_parameters(3)
    assert "cannot be met at K = 3 with min_honest_shares = 2" in str(raised.value)
