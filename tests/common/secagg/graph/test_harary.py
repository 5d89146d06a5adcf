"""The SecAgg+ neighbour graph: symmetric, k-regular, deterministic in its seed, different
per run and round, the full mesh at k ≥ K − 1, neighbourhoods spread uniformly (chi-square
at fixed seeds), and parameters checked with errors naming them."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable

import pytest
from scipy.stats import chi2

from ldpem.common.secagg.graph.harary import NeighbourGraph, committee, graph_seed, permutation

DIGEST = "ab" * 32
NAMES = [f"h{i:03d}" for i in range(40)]


def seed(round_: int = 0, run: str = "run-1", digest: str = DIGEST) -> bytes:
    return graph_seed(run, round_, digest)


@pytest.mark.parametrize(("count", "k"), [(40, 2), (40, 8), (41, 10), (40, 38), (7, 4)])
def test_the_graph_is_symmetric_and_k_regular(count: int, k: int) -> None:
    graph = NeighbourGraph(NAMES[:count] if count <= 40 else [*NAMES, "z"], k, seed())
    for name in graph.names:
        neighbours = graph.neighbours(name)
        assert len(neighbours) == k and name not in neighbours
        assert neighbours <= set(graph.names)
        for other in neighbours:
            assert name in graph.neighbours(other)
    assert len(list(graph.edges())) == count * k // 2


def test_neighbours_are_the_k_over_2_on_each_side_in_the_permuted_cycle() -> None:
    graph = NeighbourGraph(NAMES, 6, seed())
    order = graph.order
    assert sorted(order) == sorted(NAMES) and list(order) == permutation(NAMES, seed())
    place = order.index("h007")
    expected = {order[(place + d) % 40] for d in (-3, -2, -1, 1, 2, 3)}
    assert graph.neighbours("h007") == expected


def test_the_graph_is_a_function_of_names_and_seed_only() -> None:
    a = NeighbourGraph(NAMES, 8, seed(3))
    b = NeighbourGraph(reversed(NAMES), 8, seed(3))
    assert a.order == b.order
    assert all(a.neighbours(n) == b.neighbours(n) for n in NAMES)
    assert graph_seed("run-1", 3, DIGEST) == graph_seed("run-1", 3, DIGEST)


def test_the_graph_differs_per_round_run_and_roster() -> None:
    seeds = {seed(0), seed(1), seed(0, run="run-2"), seed(0, digest="cd" * 32)}
    assert len(seeds) == 4
    orders = {NeighbourGraph(NAMES, 8, s).order for s in seeds}
    assert len(orders) == 4
    # The seed's parts are length-prefixed: ("a1", 2) and ("a", 12) differ.
    assert graph_seed("a1", 2, DIGEST) != graph_seed("a", 12, DIGEST)


@pytest.mark.parametrize("k", [9, 10, 1000])
def test_k_at_least_k_minus_1_is_the_full_mesh(k: int) -> None:
    names = NAMES[:10]
    graph = NeighbourGraph(names, k, seed())
    assert graph.full_mesh and graph.k == 9
    for name in names:
        assert graph.neighbours(name) == set(names) - {name}


def test_one_and_two_holders() -> None:
    assert NeighbourGraph(["a"], 1, seed()).neighbours("a") == frozenset()
    assert NeighbourGraph(["a", "b"], 2, seed()).neighbours("a") == {"b"}


def _membership_statistic(counts: Counter[str], others: int, k: int, draws: int) -> float:
    """Chi-square of how often each of the ``others`` holders is a neighbour of one holder
    over ``draws`` independent graphs. Each graph's neighbourhood is a uniform k-subset:
    an indicator vector with mean p = k/M and covariance p(1 − p)·M/(M − 1)·(I − 11ᵀ/M),
    M = others, so Σ (O − Np)² / (N p (1 − p) M/(M − 1)) is asymptotically χ²(M − 1)."""
    p = k / others
    scale = draws * p * (1 - p) * others / (others - 1)
    return sum((counts[n] - draws * p) ** 2 for n in counts) / scale


@pytest.mark.parametrize(("count", "k"), [(30, 4), (30, 12), (101, 20)])
def test_neighbourhoods_are_spread_uniformly(count: int, k: int) -> None:
    names = [f"h{i:03d}" for i in range(count)]
    draws = 1500
    counts: Counter[str] = Counter({n: 0 for n in names[1:]})
    for round_ in range(draws):
        counts.update(NeighbourGraph(names, k, seed(round_)).neighbours(names[0]))
    statistic = _membership_statistic(counts, count - 1, k, draws)
    # Two-sided at 1e-4: too even a spread (a round robin) fails as well as a biased one.
    assert chi2.sf(statistic, count - 2) > 1e-4 and chi2.cdf(statistic, count - 2) > 1e-4
    # The check can fail: the same graph every round is maximally non-uniform.
    fixed: Counter[str] = Counter({n: 0 for n in names[1:]})
    for _ in range(draws):
        fixed.update(NeighbourGraph(names, k, seed(0)).neighbours(names[0]))
    assert chi2.sf(_membership_statistic(fixed, count - 1, k, draws), count - 2) < 1e-12


def test_every_permutation_of_four_holders_is_equally_likely() -> None:
    """24 orders, 4800 seeds: chi-square with 23 degrees of freedom (Fisher–Yates with an
    unbiased index draw gives each order probability 1/24)."""
    names = ["a", "b", "c", "d"]
    draws = 4800
    counts = Counter(tuple(permutation(names, seed(r))) for r in range(draws))
    assert set(counts) == set(itertools.permutations(names))
    expected = draws / 24
    statistic = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2.sf(statistic, 23) > 1e-4 and chi2.cdf(statistic, 23) > 1e-4


def test_the_committee_is_a_seeded_subset_independent_of_the_graph() -> None:
    names = [f"h{i:03d}" for i in range(200)]
    members = committee(names, 20, seed(5))
    assert len(members) == 20 and members <= set(names)
    assert members == committee(reversed(names), 20, seed(5))
    assert members != committee(names, 20, seed(6))
    # Not the graph's first 20 in its permuted order (another derived key).
    assert members != set(NeighbourGraph(names, 8, seed(5)).order[:20])
    assert committee(names, 500, seed(5)) == set(names)


def test_committee_membership_is_uniform() -> None:
    names = [f"h{i:02d}" for i in range(30)]
    draws, size = 1500, 6
    counts: Counter[str] = Counter({n: 0 for n in names})
    for round_ in range(draws):
        counts.update(committee(names, size, seed(round_)))
    p = size / 30
    scale = draws * p * (1 - p) * 30 / 29
    statistic = sum((c - draws * p) ** 2 for c in counts.values()) / scale
    assert chi2.sf(statistic, 29) > 1e-4 and chi2.cdf(statistic, 29) > 1e-4


@pytest.mark.parametrize(
    ("k", "message"),
    [
        (0, "k must be a positive integer, got 0"),
        (-4, "k must be a positive integer, got -4"),
        (True, "k must be a positive integer, got True"),
        (2.0, "k must be a positive integer, got 2.0"),
        (5, "k must be even below K - 1 = 39, got 5"),
    ],
)
def test_a_bad_degree_is_refused_by_name(k: object, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        NeighbourGraph(NAMES, k, seed())  # type: ignore[arg-type]
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ([], "names must hold at least one holder, got none"),
        (["a", "b", "a"], "names must be distinct, got 'a' twice"),
        (["a", ""], "names must be non-empty strings, got ''"),
        (["a", 3], "names must be non-empty strings, got 3"),
    ],
)
def test_bad_names_are_refused(names: list[object], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        NeighbourGraph(names, 2, seed())  # type: ignore[arg-type]
    assert str(raised.value) == message


def _neighbours_of(name: str) -> frozenset[str]:
    return NeighbourGraph(NAMES, 2, seed()).neighbours(name)


BAD_CALLS: list[tuple[Callable[..., object], tuple[object, ...], str]] = [
    (NeighbourGraph, (NAMES, 2, bytes(31)), "seed must be 32 bytes, got 31"),
    (NeighbourGraph, (NAMES, 2, "x" * 32), "seed must be 32 bytes, got str"),
    (graph_seed, ("", 0, DIGEST), "run_id must be a non-empty string, got ''"),
    (graph_seed, ("r", -1, DIGEST), "round must be a non-negative integer, got -1"),
    (graph_seed, ("r", True, DIGEST), "round must be a non-negative integer, got True"),
    (graph_seed, ("r", 1.5, DIGEST), "round must be a non-negative integer, got 1.5"),
    (graph_seed, ("r", math.nan, DIGEST), "round must be a non-negative integer, got nan"),
    (graph_seed, ("r", 0, "AB" * 32), "roster_digest must be 64 lower-case hex digits"),
    (graph_seed, ("r", 0, "ab" * 31), "roster_digest must be 64 lower-case hex digits"),
    (graph_seed, ("r", 0, "zz" * 32), "roster_digest must be 64 lower-case hex digits"),
    (graph_seed, ("r", 0, None), "roster_digest must be 64 lower-case hex digits, got 'None'"),
    (committee, (NAMES, 0, seed()), "committee size must be a positive integer, got 0"),
    (committee, (NAMES, -3, seed()), "committee size must be a positive integer, got -3"),
]


@pytest.mark.parametrize(("call", "args", "start"), BAD_CALLS)
def test_bad_seeds_and_seed_parts_are_refused(
    call: Callable[..., object], args: tuple[object, ...], start: str
) -> None:
    with pytest.raises(ValueError) as raised:
        call(*args)
    message = str(raised.value)
    assert message.startswith(start) and "\n" not in message, message


def test_an_unknown_holder_has_no_neighbours() -> None:
    with pytest.raises(KeyError, match="'zz' is not a holder of this graph"):
        _neighbours_of("zz")
