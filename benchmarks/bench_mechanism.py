"""Throughput of the local mechanism, as a ratio to drawing the same number of Gaussians.

    python benchmarks/bench_mechanism.py [--records 1000000] [--dims 5 10 50] [--repeats 3]

For each d it times, interleaved and repeated (the median is reported):
  floor      rng.standard_normal((n, d)): the noise the mechanism must draw anyway
  mechanism  LocalTruncation.privatize: T(x) on every coordinate + per-record noise
  <model>    gradients at β* + LocalTruncation.privatize, for gmm, mrm, rmc
Ratios are what to compare across machines; the absolute seconds are this run's only.
Targets (issues 2 and 8): mechanism ≤ 5× the floor; gradients + mechanism ≤ 8× for GMM, MRM.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np

from ldpem.common.models import get_model, model_names
from ldpem.common.protocol import make_mechanism


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_dimension(n: int, d: int, repeats: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    mechanism = make_mechanism(
        "local", d=d, records_per_round=n, epsilon=1.0, delta=n**-1.1, tau=1.0 + 9.0 / d
    )
    data = {name: get_model(name).generate(n, d, rng=rng) for name in model_names()}
    gradients = get_model("gmm").gradients(data["gmm"][1], data["gmm"][0], 1.0)

    def model_job(name: str) -> Callable[[], object]:
        model = get_model(name)
        records, beta_star = data[name]
        return lambda: mechanism.privatize(model.gradients(beta_star, records, 1.0), rng)

    jobs: dict[str, Callable[[], object]] = {
        "floor": lambda: rng.standard_normal((n, d)),
        "mechanism": lambda: mechanism.privatize(gradients, rng),
        **{name: model_job(name) for name in model_names()},
    }
    samples: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(repeats):
        for name, job in jobs.items():
            samples[name].append(timed(job))
    return {name: statistics.median(times) for name, times in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dims", type=int, nargs="+", default=[5, 10, 50])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    rows = []
    for d in args.dims:
        times = bench_dimension(args.records, d, args.repeats, args.seed)
        floor = times["floor"]
        row = {"d": d, "floor_seconds": floor}
        for name in ["mechanism", *model_names()]:
            row[f"{name}_seconds"] = times[name]
            row[f"{name}_ratio"] = times[name] / floor
        rows.append(row)
        if not args.json:
            print(
                f"n={args.records} d={d:>3}  floor {floor:6.3f}s  "
                + "  ".join(f"{k} {times[k] / floor:4.2f}x" for k in ["mechanism", *model_names()]),
                flush=True,
            )
    if args.json:
        info = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "records": args.records,
            "repeats": args.repeats,
            "rows": rows,
        }
        json.dump(info, sys.stdout, indent=2)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
