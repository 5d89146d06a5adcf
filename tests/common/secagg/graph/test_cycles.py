"""The SecAgg+ expander graph (the union of k/2 random Hamiltonian cycles): symmetric, degree
in [2, k], neighbours the predecessor and successor in every cycle, the pointwise answer
equal to the full adjacency, deterministic in names and seed, cycles uniform and
independent (chi-square at fixed seeds), and parameters checked with errors naming them."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from scipy.stats import chi2

from ldpem.common.secagg._encoding import binding
from ldpem.common.secagg.graph.cycles import CycleGraph, _around, _order, cycle_key, cycle_order
from ldpem.common.secagg.graph.harary import graph_seed, permutation

DIGEST = "ab" * 32
NAMES = [f"h{i:03d}" for i in range(40)]


def seed(round_: int = 0, run: str = "run-1") -> bytes:
    return graph_seed(run, round_, DIGEST)


def names_of(count: int) -> list[str]:
    return [f"h{i:03d}" for i in range(count)]


def around(cycle: Sequence[str], name: str) -> set[str]:
    """``name``'s predecessor and successor in the cyclic order ``cycle``."""
    place = cycle.index(name)
    return {cycle[place - 1], cycle[(place + 1) % len(cycle)]}


def rotated(cycle: Sequence[str], first: str) -> tuple[str, ...]:
    """The cyclic order ``cycle`` written from ``first``: one tuple per cyclic order."""
    place = cycle.index(first)
    return tuple(cycle[place:]) + tuple(cycle[:place])


def two_sided(statistic: float, freedom: int) -> bool:
    """Not rejected at 1e-4 on either side: too even a spread (a round robin) fails as well
    as a biased one."""
    return bool(chi2.sf(statistic, freedom) > 1e-4 and chi2.cdf(statistic, freedom) > 1e-4)


def pearson(counts: Counter[object], cells: int, draws: int) -> float:
    """Pearson's statistic of ``counts`` against ``cells`` equally likely cells (cells never
    seen count as 0): asymptotically χ²(cells − 1) under uniformity."""
    expected = draws / cells
    seen = sum((c - expected) ** 2 / expected for c in counts.values())
    return seen + (cells - len(counts)) * expected


@pytest.mark.parametrize(("count", "k"), [(4, 2), (6, 4), (31, 2), (31, 8), (40, 38), (100, 20)])
def test_the_graph_is_symmetric_with_degree_between_2_and_k(count: int, k: int) -> None:
    graph = CycleGraph(names_of(count), k, seed())
    assert len(graph) == count and graph.k == k and not graph.full_mesh
    assert graph.cycle_count == k // 2
    degrees = 0
    for name in graph.names:
        neighbours = graph.neighbours(name)
        assert 2 <= len(neighbours) <= k and name not in neighbours
        assert neighbours <= set(graph.names)
        for other in neighbours:
            assert name in graph.neighbours(other)
        degrees += len(neighbours)
    edges = list(graph.edges())
    assert len(edges) == len(set(edges)) == degrees // 2
    assert all(a < b and b in graph.neighbours(a) for a, b in edges)


@pytest.mark.parametrize(("count", "k"), [(31, 6), (100, 20)])
def test_neighbours_are_the_predecessor_and_successor_in_every_cycle(count: int, k: int) -> None:
    graph = CycleGraph(names_of(count), k, seed(7))
    cycles = [graph.cycle(j) for j in range(k // 2)]
    for cycle in cycles:
        assert tuple(sorted(cycle)) == graph.names
    assert len(set(cycles)) == k // 2
    for name in graph.names:
        assert graph.neighbours(name) == set().union(*(around(c, name) for c in cycles))


@pytest.mark.parametrize(("count", "k"), [(31, 2), (31, 10), (100, 4), (100, 24)])
def test_the_pointwise_neighbours_equal_the_full_adjacency(count: int, k: int) -> None:
    names = names_of(count)
    full = CycleGraph(names, k, seed(3)).adjacency()
    assert set(full) == set(names)
    for name in names:
        # A fresh graph answers its first holder pointwise, without sorting.
        assert CycleGraph(names, k, seed(3)).neighbours(name) == full[name]
    # One graph asked about holder after holder switches to its adjacency on the second:
    # the same answers, asked again in any order.
    graph = CycleGraph(names, k, seed(3))
    asked = [names[5], names[5], names[0], *reversed(names)]
    assert all(graph.neighbours(n) == full[n] for n in asked)
    # A cycle read before and after the adjacency is built is the same.
    fresh = CycleGraph(names, k, seed(3))
    before = [fresh.cycle(j) for j in range(k // 2)]
    fresh.adjacency()
    assert [fresh.cycle(j) for j in range(k // 2)] == before


@pytest.mark.parametrize("count", [4, 5, 9])
def test_the_pointwise_search_breaks_ties_as_the_sort_does(count: int) -> None:
    """Keys drawn from {0, 1, 2⁶⁴ − 1} in both words (ties everywhere, and the extreme
    words the masked minima and maxima fill in): each holder's successor and predecessor
    found without sorting are its neighbours in the stable lexsort, in every row."""
    rng = np.random.default_rng(count)
    words = np.array([0, 1, 2**64 - 1], dtype=np.uint64)
    high, low = words[rng.integers(0, 3, (200, count))], words[rng.integers(0, 3, (200, count))]
    for place in range(count):
        following, preceding = _around(place, high, low)
        for row in range(200):
            order = list(_order(high[row], low[row]))
            at = order.index(place)
            assert following[row] == order[(at + 1) % count]
            assert preceding[row] == order[at - 1]


def test_the_adjacency_cannot_be_changed_by_a_caller() -> None:
    graph = CycleGraph(NAMES, 4, seed())
    with pytest.raises(TypeError):
        graph.adjacency()["h000"] = frozenset()  # type: ignore[index]


def test_the_graph_is_a_function_of_names_and_seed_only() -> None:
    a = CycleGraph(NAMES, 8, seed(3))
    b = CycleGraph(reversed(NAMES), 8, seed(3))
    assert a.names == b.names == tuple(NAMES)
    assert [a.cycle(j) for j in range(4)] == [b.cycle(j) for j in range(4)]
    assert a.adjacency() == b.adjacency()
    assert a.cycle(2) == cycle_order(reversed(NAMES), 2, seed(3))
    # A larger degree adds cycles and keeps the first ones.
    assert CycleGraph(NAMES, 4, seed(3)).cycle(1) == a.cycle(1)


def test_the_cycles_differ_per_seed_and_per_index() -> None:
    seeds = [seed(0), seed(1), seed(0, run="run-2")]
    cycles = {cycle_order(NAMES, j, s) for s in seeds for j in range(6)}
    assert len(cycles) == 18
    # Another derivation than graph.py's permutation of the same seed (not a rotation of it).
    shuffled = permutation(NAMES, seed())
    assert rotated(shuffled, "h000") != rotated(cycle_order(NAMES, 0, seed()), "h000")


def _reference_cycle(names: list[str], index: int, seed_: bytes) -> tuple[str, ...]:
    """Cycle ``index`` as the module docstring specifies it, in plain Python: ChaCha20
    under SHA-256 of the length-prefixed (purpose, index, seed), 16 bytes per holder in
    canonical order read as two little-endian words (high first), sorted by (key, index)."""
    key = hashlib.sha256(binding("ldpem secagg+ expander cycle order v1", index, seed_)).digest()
    encryptor = Cipher(algorithms.ChaCha20(key, bytes(16)), None).encryptor()
    stream = encryptor.update(bytes(16 * len(names)))
    ordered = sorted(names)

    def sort_key(i: int) -> tuple[int, int, int]:
        high = int.from_bytes(stream[16 * i : 16 * i + 8], "little")
        low = int.from_bytes(stream[16 * i + 8 : 16 * i + 16], "little")
        return high, low, i

    return tuple(ordered[i] for i in sorted(range(len(ordered)), key=sort_key))


@pytest.mark.parametrize(("index", "round_"), [(0, 0), (1, 0), (11, 4), (86, 9)])
def test_a_cycle_is_the_specified_sort_of_128_bit_keys(index: int, round_: int) -> None:
    names = names_of(57)
    assert cycle_order(reversed(names), index, seed(round_)) == _reference_cycle(
        names, index, seed(round_)
    )


def test_the_cycle_index_and_the_seed_are_bound_unambiguously() -> None:
    """The key binds (index, seed) length-prefixed: indices whose decimal digits run into
    each other, or into a seed starting with a digit, give different keys."""
    digit_seed = b"1" + bytes(31)
    shifted = b"11" + bytes(30)
    pairs = [(j, s) for j in (0, 1, 2, 11, 12, 111, 112) for s in (seed(), digit_seed, shifted)]
    keys = {cycle_key(j, s) for j, s in pairs}
    assert len(keys) == len(pairs)
    assert (
        cycle_key(1, shifted)
        == hashlib.sha256(binding("ldpem secagg+ expander cycle order v1", 1, shifted)).digest()
    )


FOUR = ["a", "b", "c", "d"]
#: The 6 cyclic orders of four holders, each written from "a" (direction matters).
CYCLIC_ORDERS = 6


def test_each_cycle_of_four_holders_takes_every_cyclic_order_equally_often() -> None:
    """(K − 1)! = 6 cyclic orders, 2400 seeds, cycle 0 and cycle 1 separately: chi-square
    with 5 degrees of freedom."""
    draws = 2400
    for index in (0, 1):
        counts: Counter[object] = Counter(
            rotated(cycle_order(FOUR, index, seed(r)), "a") for r in range(draws)
        )
        assert len(counts) == CYCLIC_ORDERS
        assert two_sided(pearson(counts, CYCLIC_ORDERS, draws), CYCLIC_ORDERS - 1)
    # The check can fail: the same cycle every round is maximally non-uniform.
    fixed: Counter[object] = Counter(
        rotated(cycle_order(FOUR, 0, seed(0)), "a") for _ in range(draws)
    )
    assert chi2.sf(pearson(fixed, CYCLIC_ORDERS, draws), CYCLIC_ORDERS - 1) < 1e-12


def test_cycles_0_and_1_are_independent() -> None:
    """The 36 pairs (cycle 0, cycle 1) of cyclic orders of four holders over 3600 seeds:
    chi-square with 35 degrees of freedom (uniform margins and a uniform joint law)."""
    draws, cells = 3600, CYCLIC_ORDERS**2

    def pairs(second: int) -> Counter[object]:
        return Counter(
            (
                rotated(cycle_order(FOUR, 0, seed(r)), "a"),
                rotated(cycle_order(FOUR, second, seed(r)), "a"),
            )
            for r in range(draws)
        )

    counts = pairs(1)
    assert len(counts) == cells
    assert two_sided(pearson(counts, cells, draws), cells - 1)
    # The check can fail: a cycle paired with itself fills only the 6 diagonal cells.
    assert chi2.sf(pearson(pairs(0), cells, draws), cells - 1) < 1e-12


def test_a_holders_successor_is_uniform_over_the_others() -> None:
    """K = 30: holder 0's successor in cycle 0 over 2900 seeds, each of the 29 others with
    probability 1/29: chi-square with 28 degrees of freedom."""
    names = names_of(30)
    draws = 2900
    counts: Counter[object] = Counter()
    for r in range(draws):
        cycle = cycle_order(names, 0, seed(r))
        counts[cycle[(cycle.index(names[0]) + 1) % 30]] += 1
    assert names[0] not in counts
    assert two_sided(pearson(counts, 29, draws), 28)


@pytest.mark.parametrize(
    ("count", "k", "message"),
    [
        (40, 5, "k must be even in [2, K - 2 = 38], got 5"),
        (40, 39, "k must be even in [2, K - 2 = 38], got 39"),
        (40, 40, "k must be even in [2, K - 2 = 38], got 40"),
        (40, 1000, "k must be even in [2, K - 2 = 38], got 1000"),
        (40, 0, "k must be even in [2, K - 2 = 38], got 0"),
        (40, -2, "k must be even in [2, K - 2 = 38], got -2"),
        (40, True, "k must be even in [2, K - 2 = 38], got True"),
        (40, 2.0, "k must be even in [2, K - 2 = 38], got 2.0"),
        (40, math.nan, "k must be even in [2, K - 2 = 38], got nan"),
        (40, None, "k must be even in [2, K - 2 = 38], got None"),
        (3, 2, "k must be even in [2, K - 2 = 1], got 2"),
    ],
)
def test_a_bad_degree_is_refused_by_name(count: int, k: object, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        CycleGraph(names_of(count), k, seed())  # type: ignore[arg-type]
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ([], "names must hold at least one holder, got none"),
        (["a", "b", "c", "d", "a"], "names must be distinct, got 'a' twice"),
        (["a", "b", "c", ""], "names must be non-empty strings, got ''"),
        (["a", "b", "c", 3], "names must be non-empty strings, got 3"),
    ],
)
def test_bad_names_are_refused(names: list[object], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        CycleGraph(names, 2, seed())  # type: ignore[arg-type]
    assert str(raised.value) == message


def _cycle_of(index: object) -> tuple[str, ...]:
    return CycleGraph(NAMES, 6, seed()).cycle(index)  # type: ignore[arg-type]


BAD_CALLS: list[tuple[Callable[..., object], tuple[object, ...], str]] = [
    (CycleGraph, (NAMES, 2, bytes(31)), "seed must be 32 bytes, got 31"),
    (CycleGraph, (NAMES, 2, bytes(33)), "seed must be 32 bytes, got 33"),
    (CycleGraph, (NAMES, 2, "x" * 32), "seed must be 32 bytes, got str"),
    (cycle_order, (NAMES, 0, b""), "seed must be 32 bytes, got 0"),
    (cycle_order, (NAMES, -1, seed()), "cycle index must be a non-negative integer, got -1"),
    (cycle_key, (True, seed()), "cycle index must be a non-negative integer, got True"),
    (cycle_key, (1.0, seed()), "cycle index must be a non-negative integer, got 1.0"),
    (_cycle_of, (3,), "cycle index must be an integer in [0, L = 3), got 3"),
    (_cycle_of, (-1,), "cycle index must be an integer in [0, L = 3), got -1"),
    (_cycle_of, (False,), "cycle index must be an integer in [0, L = 3), got False"),
    (_cycle_of, (1.5,), "cycle index must be an integer in [0, L = 3), got 1.5"),
]


@pytest.mark.parametrize(("call", "args", "message"), BAD_CALLS)
def test_bad_seeds_and_cycle_indices_are_refused(
    call: Callable[..., object], args: tuple[object, ...], message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        call(*args)
    assert str(raised.value) == message


@pytest.mark.parametrize("asked", [0, 1, 2])
def test_an_unknown_holder_has_no_neighbours(asked: int) -> None:
    """Refused whether the graph answers pointwise (nobody asked yet) or from its adjacency
    (after one or two holders)."""
    graph = CycleGraph(NAMES, 4, seed())
    for name in NAMES[:asked]:
        graph.neighbours(name)
    with pytest.raises(KeyError, match="'zz' is not a holder of this graph"):
        graph.neighbours("zz")
