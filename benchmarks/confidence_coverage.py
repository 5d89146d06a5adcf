"""Coverage of the parametric bootstrap's confidence regions (docs/RESULTS.md, issue 31).

For each case (model, mechanism, n): ``--runs`` independent studies (seeds 10⁴, 10⁴ + 1, …,
synthetic data at a β* of norm 3σ, d = 10, ε = 1, T = 10, on the fast path), each with its
region at ``--level`` from ``--draws`` bootstrap draws, its seeds derived from the run's
index: runs it did not use (``common.planning.coverage.coverage_runs``, as
tests/common/test_confidence_calibration.py). Prints, per case, the share of
runs whose region holds the true β* (the radius: ‖β* − β̂‖ ≤ r; per coordinate: the mean
over coordinates of β*_j ∈ [low_j, high_j]; both up to sign for gmm and mrm), the mean
error, radius and interval width, and the same study's non-private bootstrap width
(mechanism ``none``, ``--nonprivate``) for scale. The hospital mechanism runs 4 hospitals
of 10/20/30/40% of the records.

Usage: python benchmarks/confidence_coverage.py [--n 20000 200000] [--runs 200]
       [--draws 19] [--cases gmm:local gmm:hospital gmm:central] [--nonprivate] [--json]
       [--quick] [--intervals shrinkage|basic]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import machine

from ldpem.common.planning.coverage import REGIONS, coverage_runs
from ldpem.common.planning.executor import make_executor
from ldpem.common.planning.study import Study

#: The first study seed (the bootstrap's seeds are derived from the run's index).
SEED_BASE = 10_000
#: Shares of the records of the hospital mechanism's 4 hospitals.
SHARES = (0.1, 0.2, 0.3, 0.4)


@dataclass(frozen=True)
class Coverage:
    """One case's figures over ``runs`` regions of ``draws`` draws."""

    model: str
    mechanism: str
    n: int
    runs: int
    draws: int
    radius_coverage: float
    coordinate_coverage: float
    mean_error: float
    mean_radius: float
    mean_width: float
    cpu_seconds: float


def case_study(model: str, mechanism: str, n: int, seed: int) -> Study:
    sizes = None
    if mechanism == "hospital":
        sizes = tuple(int(s * n) for s in SHARES)
        sizes = (*sizes[:-1], n - sum(sizes[:-1]))
    return Study(model=model, mechanism=mechanism, n=n, sizes=sizes, seed=seed)


def coverage(
    model: str,
    mechanism: str,
    n: int,
    *,
    runs: int,
    draws: int,
    level: float,
    workers: int,
    intervals: str = "shrinkage",
) -> Coverage:
    started = time.process_time()
    children = _children_cpu()
    study = case_study(model, mechanism, n, SEED_BASE)
    with make_executor(workers=workers) as executor:
        found = coverage_runs(
            study,
            runs=runs,
            seed_base=SEED_BASE,
            draws=draws,
            level=level,
            intervals=intervals,
            executor=executor,
        )
    inside = [run.inside for run in found]
    covered = [run.coordinates for run in found]
    errors = [run.error for run in found]
    radii = [run.radius for run in found]
    widths = [run.width for run in found]
    return Coverage(
        model=model,
        mechanism=mechanism,
        n=n,
        runs=runs,
        draws=draws,
        radius_coverage=float(np.mean(inside)),
        coordinate_coverage=float(np.mean(covered)),
        mean_error=float(np.mean(errors)),
        mean_radius=float(np.mean(radii)),
        mean_width=float(np.mean(widths)),
        cpu_seconds=time.process_time() - started + _children_cpu() - children,
    )


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def table(rows: list[Coverage], nonprivate: dict[tuple[str, int], float]) -> str:
    head = (
        "| model | mechanism | n | runs | B | radius covers | coordinates cover | mean error "
        "| mean radius | mean width | non-private width |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        plain = nonprivate.get((r.model, r.n), math.nan)
        lines.append(
            f"| {r.model} | {r.mechanism} | {r.n:,} | {r.runs} | {r.draws} | "
            f"{r.radius_coverage:.3f} | {r.coordinate_coverage:.3f} | {r.mean_error:.4f} | "
            f"{r.mean_radius:.4f} | {r.mean_width:.4f} | {plain:.4f} |"
        )
    return head + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--n", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--draws", type=int, default=19)
    parser.add_argument("--level", type=float, default=0.9)
    parser.add_argument("--cases", nargs="+", default=["gmm:local", "gmm:hospital", "gmm:central"])
    parser.add_argument("--nonprivate", action="store_true", help="add mechanism none's width")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--intervals", choices=sorted(REGIONS), default="shrinkage", help="how intervals are made"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="n = 2000, 20 runs")
    args = parser.parse_args()
    if args.quick:
        args.n, args.runs = [2000], 20
    rows: list[Coverage] = []
    nonprivate: dict[tuple[str, int], float] = {}
    for n in args.n:
        models = []
        for case in args.cases:
            model, mechanism = case.split(":")
            models.append(model)
            row = coverage(
                model,
                mechanism,
                n,
                runs=args.runs,
                draws=args.draws,
                level=args.level,
                workers=args.workers,
                intervals=args.intervals,
            )
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
        if args.nonprivate:
            for model in dict.fromkeys(models):
                row = coverage(
                    model,
                    "none",
                    n,
                    runs=args.runs,
                    draws=args.draws,
                    level=args.level,
                    workers=args.workers,
                )
                nonprivate[(model, n)] = row.mean_width
                print(row, file=sys.stderr, flush=True)
    if args.json:
        print(
            json.dumps(
                {
                    "machine": machine(),
                    "level": args.level,
                    "rows": [r.__dict__ for r in rows],
                    "nonprivate_width": {f"{m}:{n}": w for (m, n), w in nonprivate.items()},
                }
            )
        )
    else:
        print(json.dumps(machine()))
        print(table(rows, nonprivate))


if __name__ == "__main__":
    main()
