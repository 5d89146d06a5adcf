"""Timing side channel: does a holder's round take longer when some records are unusual?

    python benchmarks/bench_timing.py [--records 100000] [--d 10] [--repeats 21] [--json]

A coordinator chooses β; if the agent's time depended on the values of the gradients, it
could count from the response time how many records lie beyond a threshold. This times
``holder_round`` (GMM, local mechanism, one chunk-sized holder) on the same records in four
versions, interleaved and repeated (the median is reported):

  inliers     records drawn from the model (gradient coordinates |x/s| ≲ 10)
  outliers    the same with 1% of the records scaled so every coordinate has |x/s| ≥ 16
  nonfinite   the same with 1% of the records NaN and ±inf (gradients NaN, ±inf)
  subnormal   the same with 1% of the records subnormal (5e-324 … 1e-310)

and prints, for wall time and for the process's CPU time, each median and the median over
repeats of its ratio to ``inliers`` in the same repeat (paired, so load changes between
repeats cancel). Target: every ratio within 5%. The machine is shared: only the ratios
of one run mean anything, and CPU time is the less disturbed by other processes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import machine

from ldpem.common.mechanisms import Mechanism
from ldpem.common.models import Records, get_model
from ldpem.common.protocol import make_mechanism
from ldpem.common.protocol.rounds import holder_round

CASES = ("inliers", "outliers", "nonfinite", "subnormal")


def datasets(
    n: int, d: int, mechanism: Mechanism, seed: int
) -> tuple[dict[str, Records], NDArray[np.float64]]:
    """The four versions of one holder's records (see module doc) and β*."""
    model = get_model("gmm")
    rng = np.random.default_rng(seed)
    records, beta = model.generate(n, d, rng=rng)
    base = records.x
    # Every 100th record, spread over the chunk as real outliers would be.
    chosen = np.arange(0, n, 100)
    out: dict[str, Records] = {"inliers": Records(base)}
    scale = float(getattr(mechanism, "scale", 1.0))
    large = base.copy()
    large[chosen] = np.sign(large[chosen]) * 1e3 * scale * (1.0 + rng.random((chosen.size, d)))
    out["outliers"] = Records(large)
    bad = base.copy()
    bad[chosen] = rng.choice(np.array([np.nan, np.inf, -np.inf]), size=(chosen.size, d))
    out["nonfinite"] = Records(bad)
    tiny = base.copy()
    tiny[chosen] = rng.uniform(5e-324, 1e-310, (chosen.size, d))
    out["subnormal"] = Records(tiny)
    with np.errstate(all="ignore"):
        gradients = model.gradients(beta, out["outliers"], 1.0)[chosen]
    if not np.all(np.abs(gradients) / scale >= 16.0):
        raise RuntimeError("the outlier records do not all reach |x/s| >= 16")
    return out, beta


def bench(n: int, d: int, repeats: int, seed: int) -> dict[str, object]:
    mechanism = make_mechanism(
        "local", d=d, records_per_round=n, epsilon=1.0, delta=1e-5, tau=1.0 + 9.0 / d
    )
    data, beta = datasets(n, d, mechanism, seed)
    model = get_model("gmm")
    rng = np.random.default_rng(seed + 1)

    def run(records: Records) -> tuple[float, float]:
        """(wall seconds, CPU seconds of this process) of one round."""
        wall, cpu = time.perf_counter(), time.process_time()
        holder_round(
            model=model,
            beta=beta,
            records=records,
            sigma=1.0,
            mechanism=mechanism,
            rng=rng,
        )
        return time.perf_counter() - wall, time.process_time() - cpu

    for records in data.values():  # warm-up: the tables for this β_s are built once
        run(records)
    wall: dict[str, list[float]] = {case: [] for case in CASES}
    cpu: dict[str, list[float]] = {case: [] for case in CASES}
    for repeat in range(repeats):
        # Rotate the order so no case always runs right after the same other one.
        order = CASES[repeat % len(CASES) :] + CASES[: repeat % len(CASES)]
        for case in order:
            seconds = run(data[case])
            wall[case].append(seconds[0])
            cpu[case].append(seconds[1])

    def paired(times: dict[str, list[float]]) -> dict[str, float]:
        # Median over repeats of (case ÷ inliers of the same repeat): a load change between
        # repeats, which the shared machine has all the time, cancels.
        return {
            case: statistics.median(
                t / i for t, i in zip(times[case], times["inliers"], strict=True)
            )
            for case in CASES
        }

    medians = {case: statistics.median(times) for case, times in wall.items()}
    return {
        "records": n,
        "d": d,
        "repeats": repeats,
        "median_seconds": medians,
        "median_cpu_seconds": {case: statistics.median(times) for case, times in cpu.items()},
        "ratio_to_inliers": paired(wall),
        "cpu_ratio_to_inliers": paired(cpu),
        "ns_per_coordinate": {case: 1e9 * medians[case] / (n * d) for case in CASES},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.repeats = 5_000, 3
    before = machine()
    result = bench(args.records, args.d, args.repeats, args.seed)
    payload = {"machine": before, "load_after": machine()["loadavg"], **result}
    if args.json:
        print(json.dumps(payload))
        return 0
    print(
        f"holder_round, GMM, local mechanism, n={args.records}, d={args.d}, "
        f"median of {args.repeats} interleaved repeats ({before['when']}, load "
        f"{before['loadavg'][0]:.1f}):"
    )
    medians, cpu = result["median_seconds"], result["median_cpu_seconds"]
    ratios, cpu_ratios = result["ratio_to_inliers"], result["cpu_ratio_to_inliers"]
    assert isinstance(medians, dict) and isinstance(ratios, dict)
    assert isinstance(cpu, dict) and isinstance(cpu_ratios, dict)
    print("  case        wall (ms)  ÷ inliers   CPU (ms)  ÷ inliers   (ratios: median of pairs)")
    for case in CASES:
        print(
            f"  {case:<10} {1e3 * medians[case]:9.2f}  {ratios[case]:8.3f}x  "
            f"{1e3 * cpu[case]:9.2f}  {cpu_ratios[case]:8.3f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
