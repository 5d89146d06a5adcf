"""The SecAgg+ expander graph (``ldpem.common.secagg.graph.cycles.CycleGraph``): what one agent
pays for its own neighbourhood, and what the coordinator pays for everyone's.

    python benchmarks/bench_cycles.py [--holders 1000 10000] [--k 174] [--repeats 5] [--json]

For each K: ``neighbours_s`` is the wall time of ``CycleGraph(names, k, seed)`` and one
holder's ``neighbours`` on a fresh graph (the agent's case: the L = k/2 keystreams, the
128-bit keys and the search without sorting, nothing cached); ``adjacency_s`` is a fresh
graph's ``adjacency()`` (the coordinator's case: the keystreams, one lexsort per cycle and
every holder's frozenset). Medians of --repeats, each on a new seed (so a different graph);
the largest degree seen and the mean degree are printed as a check (≤ k, slightly below
it: a repeat within a holder's 2L neighbours merges). No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from ldpem.common.secagg.graph.cycles import CycleGraph
from ldpem.common.secagg.graph.harary import graph_seed

DIGEST = "ab" * 32


def measure(count: int, k: int, repeats: int) -> dict[str, float | int]:
    """One row: medians over ``repeats`` seeds for K = ``count`` holders of degree ``k``."""
    names = [f"holder-{i:06d}" for i in range(count)]
    pointwise: list[float] = []
    full: list[float] = []
    degrees: list[int] = []
    for repeat in range(repeats):
        seed = graph_seed("bench-cycles", repeat, DIGEST)
        started = time.perf_counter()
        CycleGraph(names, k, seed).neighbours(names[repeat % count])
        pointwise.append(time.perf_counter() - started)
        started = time.perf_counter()
        adjacency = CycleGraph(names, k, seed).adjacency()
        full.append(time.perf_counter() - started)
        degrees.extend(len(found) for found in adjacency.values())
    return {
        "holders": count,
        "k": k,
        "cycles": k // 2,
        "repeats": repeats,
        "neighbours_s": statistics.median(pointwise),
        "adjacency_s": statistics.median(full),
        "max_degree": max(degrees),
        "mean_degree": statistics.fmean(degrees),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--holders", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--k", type=int, default=174)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [measure(count, args.k, args.repeats) for count in args.holders]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'K':>7} {'k':>5} {'L':>4} {'neighbours_s':>13} {'adjacency_s':>12} degree (max, mean)")
    for row in rows:
        print(
            f"{row['holders']:>7} {row['k']:>5} {row['cycles']:>4} "
            f"{row['neighbours_s']:>13.4f} {row['adjacency_s']:>12.4f} "
            f"{row['max_degree']}, {row['mean_degree']:.2f}"
        )


if __name__ == "__main__":
    main()
