"""The expander's parameters (docs/SECAGG_GRAPH.md, "The expander"):

* ``distinct_law`` is the exact law of a holder's distinct marked neighbours in a union of
  random cycles (against every pair of cyclic orders of a small consortium, in exact
  rational arithmetic), and the implemented ``CycleGraph``'s (chi-square over seeds);
* the two binomial tails of the split event dominate the graph's own probabilities for
  every fixed honest set (against every pair of cyclic orders): the exposure argument;
* the binomial log tails are the exact sums (against rational arithmetic);
* every bound ``expander_parameters`` returns holds its tail and is the least (or largest)
  that does, k is the least even degree that works, h ≥ 99% of T − C, and small consortia
  are refused with one line naming K.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import Counter
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
from scipy.stats import chi2

from ldpem.common.secagg.graph import expander as ep
from ldpem.common.secagg.graph.cycles import CycleGraph
from ldpem.common.secagg.graph.expander import (
    HONEST_SHARE_OF_SURVIVORS,
    ExpanderParameters,
    distinct_law,
    expander_parameters,
    split_bound,
)


@cache
def cyclic_orders(count: int) -> tuple[tuple[int, ...], ...]:
    """Every directed cyclic order of 0 … count − 1, once (0 first)."""
    return tuple((0, *rest) for rest in itertools.permutations(range(1, count)))


def cycle_neighbours(order: tuple[int, ...]) -> dict[int, tuple[int, int]]:
    """holder -> (successor, predecessor) in one cyclic order."""
    count = len(order)
    return {order[i]: (order[(i + 1) % count], order[(i - 1) % count]) for i in range(count)}


@cache
def graphs(count: int, cycles: int) -> tuple[dict[int, frozenset[int]], ...]:
    """Every union of ``cycles`` cyclic orders of ``count`` holders, each equally likely:
    the holder -> distinct neighbours maps."""
    out = []
    for orders in itertools.product(cyclic_orders(count), repeat=cycles):
        found: dict[int, set[int]] = {v: set() for v in range(count)}
        for order in orders:
            for v, pair in cycle_neighbours(order).items():
                found[v].update(pair)
        out.append({v: frozenset(n) for v, n in found.items()})
    return tuple(out)


@pytest.mark.parametrize(
    ("count", "cycles", "marked"), [(5, 1, 2), (5, 2, 2), (6, 2, 3), (4, 3, 1)]
)
def test_distinct_law_is_exact(count: int, cycles: int, marked: int) -> None:
    # Holder 0's distinct neighbours among the marked 1 … marked, over every graph.
    all_graphs = graphs(count, cycles)
    counts = Counter(len(g[0] & set(range(1, marked + 1))) for g in all_graphs)
    law = distinct_law(count - 1, marked, cycles)
    assert law.shape == (2 * cycles + 1,)
    for j in range(2 * cycles + 1):
        exact = Fraction(counts.get(j, 0), len(all_graphs))
        assert law[j] == pytest.approx(float(exact), abs=1e-12), j


def test_distinct_law_refuses_what_it_cannot_compute() -> None:
    for args in [(1, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 0)]:
        with pytest.raises(ValueError, match="distinct_law needs"):
            distinct_law(*args)


def exact_binomial_at_most(trials: int, p: Fraction, most: int) -> Fraction:
    return sum(
        (math.comb(trials, j) * p**j * (1 - p) ** (trials - j) for j in range(most + 1)),
        Fraction(0),
    )


@pytest.mark.parametrize(
    ("trials", "p", "most"),
    [
        (10, Fraction(1, 3), 2),
        (40, Fraction(3, 7), 9),
        (7, Fraction(1, 2), 7),
        (5, Fraction(1, 5), -1),
    ],
)
def test_binomial_log_tails_are_exact(trials: int, p: Fraction, most: int) -> None:
    lower = exact_binomial_at_most(trials, p, most)
    upper = 1 - exact_binomial_at_most(trials, p, most)  # P(X ≥ most + 1)
    got_lower = math.exp(ep._log_at_most(trials, float(p), most))
    got_upper = math.exp(ep._log_at_least(trials, float(p), most + 1))
    assert got_lower == pytest.approx(float(lower), rel=1e-12, abs=1e-300)
    assert got_upper == pytest.approx(float(upper), rel=1e-12, abs=1e-300)


def test_binomial_log_tails_stay_finite_far_below_float_range() -> None:
    # P(Bin(20000, 0.5) ≤ 1000) ≈ e^-10000: a float underflows, the log does not.
    value = ep._log_at_most(20_000, 0.5, 1000)
    assert -12_000 < value < -8_000


# The exposure bounds: for a fixed honest set A, every graph of a small consortium.
COUNT, CYCLES, COLLUDERS = 6, 2, (5,)


def honest_outside(graph: dict[int, frozenset[int]], members: frozenset[int]) -> int:
    honest = set(range(COUNT)) - set(COLLUDERS)
    return len(set().union(*(graph[v] for v in members)) & honest - members)


@pytest.mark.parametrize("members", [frozenset({0}), frozenset({0, 1}), frozenset({1, 3})])
@pytest.mark.parametrize("most", [0, 1, 2])
def test_cut_off_bound_dominates_the_graph(members: frozenset[int], most: int) -> None:
    # P(at most x honest neighbours outside A) ≤ P(Bin(a·k, (H − a − x)/(K − 1)) ≤ x).
    all_graphs = graphs(COUNT, CYCLES)
    hits = sum(honest_outside(g, members) <= most for g in all_graphs)
    exact = Fraction(hits, len(all_graphs))
    a, honest, k = len(members), COUNT - len(COLLUDERS), 2 * CYCLES
    q = Fraction(honest - a - most, COUNT - 1)
    bound = exact_binomial_at_most(a * k, q, most) if q > 0 else Fraction(1)
    assert exact <= bound
    assert math.exp(ep._log_at_most(a * k, float(q), most)) == pytest.approx(float(bound))


@pytest.mark.parametrize(
    ("members", "threshold"),
    [
        (members, threshold)
        for members in [frozenset({0}), frozenset({0, 1}), frozenset({1, 2})]
        for threshold in [2, 3, 4]
        if threshold > len(members)
    ],
)
def test_signer_bound_dominates_the_graph(members: frozenset[int], threshold: int) -> None:
    # P(every member has ≥ t − a corrupt neighbours)
    #   ≤ P(Bin(a·k, C/(K − 2a)) ≥ a·(t − a)).
    colluders = {3, 4, 5}
    all_graphs = graphs(COUNT, CYCLES)
    a, k = len(members), 2 * CYCLES
    need = threshold - a
    hits = sum(all(len(g[v] & colluders) >= need for v in members) for g in all_graphs)
    exact = Fraction(hits, len(all_graphs))
    p = Fraction(len(colluders), COUNT - 2 * a)
    bound = 1 - exact_binomial_at_most(a * k, p, a * need - 1) if p < 1 else Fraction(1)
    assert exact <= bound


def least_above(law: np.ndarray, budget: float) -> int:
    return next(b for b in range(len(law)) if float(np.sum(law[b + 1 :])) <= budget)


def most_below(law: np.ndarray, budget: float) -> int:
    return max((t for t in range(1, len(law)) if float(np.sum(law[:t])) <= budget), default=0)


def fits(p: ExpanderParameters, k: int) -> bool:
    """Whether degree k meets the five events for p's consortium (recomputed): the privacy
    events at a third of ``failure`` each, the liveness ones at half of
    ``liveness_failure``."""
    per_holder = p.threat.failure / 3 / p.threat.holders
    live_per_holder = p.liveness_failure / 2 / p.threat.holders
    corrupt = least_above(
        distinct_law(p.threat.holders - 1, p.threat.colluders, k // 2), per_holder
    )
    threshold = most_below(
        distinct_law(p.threat.holders - 1, p.threat.holders - 1 - p.threat.dropouts, k // 2),
        live_per_holder,
    )
    if threshold < 2 or corrupt > threshold - 1:
        return False
    cut = split_bound(
        p.threat.holders,
        p.threat.colluders,
        p.threat.dropouts,
        k,
        threshold,
        corrupt,
        math.log(p.threat.failure / 3),
    )
    goal = math.ceil(HONEST_SHARE_OF_SURVIVORS * (p.survivors - p.threat.colluders))
    return cut is not None and p.survivors - p.threat.colluders - cut >= goal


@pytest.mark.parametrize("holders", [300, 1000])
def test_every_bound_holds_and_is_tight(holders: int) -> None:
    p = expander_parameters(holders)
    assert (p.threat.colluders, p.threat.dropouts) == (holders // 3, holders // 10)
    assert p.survivors == holders - p.threat.dropouts
    per_holder = p.threat.failure / 3 / holders
    live_per_holder = p.liveness_failure / 2 / holders
    corrupt_law = distinct_law(holders - 1, p.threat.colluders, p.k // 2)
    live_law = distinct_law(holders - 1, holders - 1 - p.threat.dropouts, p.k // 2)
    # c*: the tail above it fits the budget, the tail above c* − 1 does not.
    assert float(np.sum(corrupt_law[p.corrupt_bound + 1 :])) <= per_holder
    assert float(np.sum(corrupt_law[p.corrupt_bound :])) > per_holder
    # t_k: fewer than t_k live neighbours fits, fewer than t_k + 1 does not.
    assert float(np.sum(live_law[: p.threshold])) <= live_per_holder
    assert float(np.sum(live_law[: p.threshold + 1])) > live_per_holder
    assert p.live_bound == p.threshold and p.corrupt_bound <= p.threshold - 1
    # The split bound is the least that fits.
    log_event = math.log(p.threat.failure / 3)
    args = (
        holders,
        p.threat.colluders,
        p.threat.dropouts,
        p.k,
        p.threshold,
        p.corrupt_bound,
        log_event,
    )
    assert split_bound(*args) == p.split_bound
    assert p.honest_shares == p.survivors - p.threat.colluders - p.split_bound
    assert p.honest_shares >= HONEST_SHARE_OF_SURVIVORS * (p.survivors - p.threat.colluders)
    # k is the least even degree that works.
    assert fits(p, p.k)
    assert not fits(p, p.k - 2)
    assert 2 <= p.k < holders - 1 and p.k % 2 == 0 and not p.full_mesh
    # The committee as on the Harary graph: two certified sets share an honest signer.
    assert p.committee.threshold > (p.committee.size + p.committee.corrupt_bound) / 2
    assert p.committee.size - p.committee.dropout_bound >= p.committee.threshold
    assert (p.threat.failure, p.liveness_failure) == (2.0**-40, 2.0**-20)


def test_the_liveness_budget_only_moves_liveness() -> None:
    """A stricter liveness budget lowers t_k (and so raises k); the privacy bounds at a
    given k do not depend on it."""
    loose = expander_parameters(1000)
    strict = expander_parameters(1000, liveness_failure=2.0**-40)
    assert strict.k > loose.k
    law = distinct_law(999, loose.threat.colluders, strict.k // 2)
    assert strict.corrupt_bound == least_above(law, strict.threat.failure / 3 / 1000)


def test_the_split_bound_grows_when_the_budget_shrinks() -> None:
    p = expander_parameters(1000)
    base = (1000, p.threat.colluders, p.threat.dropouts, p.k, p.threshold, p.corrupt_bound)
    loose = split_bound(*base, math.log(1e-3))
    tight = split_bound(*base, math.log(p.threat.failure / 3) - 5.0)
    assert loose is not None and loose <= p.split_bound
    assert tight is None or tight >= p.split_bound


def test_degree_is_logarithmic_and_h_is_the_meshs() -> None:
    small, large = expander_parameters(1000), expander_parameters(10_000)
    assert small.k <= 180 and large.k <= 180
    assert large.honest_shares >= 0.99 * (9000 - 3333)
    assert small.honest_shares >= 0.99 * (900 - 333)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k_holders": 3}, "k_holders must be an integer >= 4, got 3"),
        ({"k_holders": True}, "k_holders must be an integer >= 4, got True"),
        ({"k_holders": 1000, "colluder_fraction": 1.0}, "colluder_fraction must be a number in"),
        ({"k_holders": 1000, "dropout_fraction": -0.1}, "dropout_fraction must be a number in"),
        ({"k_holders": 1000, "failure": 0.0}, "failure must be a number in \\(0, 1\\), got 0.0"),
        ({"k_holders": 1000, "liveness_failure": 1.0}, "liveness_failure must be a number in"),
        ({"k_holders": 1000, "min_honest_shares": 1}, "min_honest_shares must be an integer >= 2"),
        ({"k_holders": 50}, "the expander is not sparser than the full mesh at K = 50"),
        (
            {"k_holders": 1000, "min_honest_shares": 600},
            "min_honest_shares = 600 exceeds T - C = 567",
        ),
    ],
)
def test_refusals_name_the_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expander_parameters(**kwargs)


def test_asking_for_every_honest_survivor_buys_a_larger_degree() -> None:
    default = expander_parameters(1000)
    everyone = expander_parameters(
        1000, min_honest_shares=default.survivors - default.threat.colluders
    )
    assert everyone.split_bound == 0 and everyone.k > default.k


def test_distinct_law_is_the_cycle_graphs() -> None:
    """The law the parameters use is the implemented graph's: over 3000 seeds, the number
    of distinct marked neighbours of one holder in ``CycleGraph`` (K = 30, k = 8, 10
    marked) against ``distinct_law``, chi-square two-sided at 1e-4 over the cells expected
    to hold at least 5 (the rest pooled); a law one cycle short is rejected."""
    names = [f"h{i:02d}" for i in range(30)]
    marked = set(names[1:11])
    draws = 3000
    seen = Counter(
        len(CycleGraph(names, 8, hashlib.sha256(b"law %d" % s).digest()).neighbours("h00") & marked)
        for s in range(draws)
    )

    def statistic(law: np.ndarray) -> tuple[float, int]:
        expected = law * draws
        keep = expected >= 5
        observed = np.array([seen.get(j, 0) for j in range(len(law))], dtype=float)
        cells_o = [*observed[keep], observed[~keep].sum()]
        cells_e = [*expected[keep], expected[~keep].sum()]
        stat = sum((o - e) ** 2 / e for o, e in zip(cells_o, cells_e, strict=True) if e > 0)
        return stat, sum(e > 0 for e in cells_e) - 1

    stat, freedom = statistic(distinct_law(29, 10, 4))
    assert chi2.sf(stat, freedom) > 1e-4 and chi2.cdf(stat, freedom) > 1e-4
    short = np.append(distinct_law(29, 10, 3), [0.0, 0.0])
    stat, freedom = statistic(short)
    assert chi2.sf(stat, freedom) < 1e-12


def test_a_capped_search_finds_the_same_degree_or_refuses() -> None:
    """``max_degree`` only bounds the search: at or above the least k it gives the same
    parameters, below it a one-line refusal naming the cap (what the default topology
    "auto" relies on to skip the degrees it would refuse)."""
    free = expander_parameters(1000)
    assert expander_parameters(1000, max_degree=free.k) == free
    assert expander_parameters(1000, max_degree=500) == free
    with pytest.raises(ValueError, match=f"at K = 1000 with k <= {free.k - 2} "):
        expander_parameters(1000, max_degree=free.k - 2)
    # K = 100: the least degree (84) is above K/2, so a search capped at 50 refuses.
    assert expander_parameters(100).k > 50
    with pytest.raises(ValueError, match="at K = 100 with k <= 50 "):
        expander_parameters(100, max_degree=50)
    for bad in (1, True, 2.0):
        with pytest.raises(ValueError, match="max_degree must be an integer >= 2"):
            expander_parameters(1000, max_degree=bad)
