"""Two versions of ldpem side by side, in CPU time: is the newer one within 10 %?

    python benchmarks/bench_versions.py --before DIR --after DIR [--runs 3] [--quick] [--json]

DIR is a checkout of each version with its own virtualenv (``make .venv/.installed``
there). Each run starts one probe process per version, in turns (before/after, then
after/before, ...), so a change in the machine's load falls on both alike. A probe imports
only what both versions have kept — ``make_mechanism``, ``get_model``, its own
``benchmarks/bench_scaling.py`` (``agent_job``, ``CoordinatorRounds``) — and times, in
``time.process_time`` (this process's CPU, which other processes' load hardly moves):

  floor        rng.standard_normal((10⁶, 10)): the noise any mechanism must draw
  mechanism    LocalTruncation.privatize of 10⁶ GMM gradients, d = 10
  agent round  ``holder_round`` (GMM, local), n = 10⁵, d = 10: one hospital's round
  coordinator  one round of the real ``Coordinator`` (3 reports, SQLite WAL + FULL, the
               M-step, the next round opened), in-process, no HTTP: blocks of 100 rounds
  simulate     ``ldpem simulate --model gmm --n 200000 --d 10 --epsilon 1 --seed 0 --json``
               as a child process: its user + system CPU, start-up included (with
               ``--draws 0`` where simulate bootstraps a confidence region: the same work)

Each figure is the median over the probe's repeats; the ratio is after ÷ before of the
medians over runs (mechanism and agent round also ÷ their own floor). Prints one line per
figure, or one JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import machine

#: What each probe process runs, with the version's checkout as argv[1] and "quick" or
#: "full" as argv[2] (quick: tiny sizes, a smoke test of the script).
PROBE = r"""
import json, statistics, sys, tempfile, time
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(sys.argv[1]) / "benchmarks"))
quick = sys.argv[2] == "quick"
import bench_scaling
from ldpem.common.models import get_model
from ldpem.common.protocol import make_mechanism

def cpu(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)

rng = np.random.default_rng(2026)
n, d, agent_n, reps = (20_000, 10, 5_000, 2) if quick else (1_000_000, 10, 100_000, 5)
mechanism = make_mechanism("local", d=d, records_per_round=n, epsilon=1.0, delta=n**-1.1, tau=1.9)
records, beta_star = get_model("gmm").generate(n, d, rng=rng)
gradients = get_model("gmm").gradients(beta_star, records, 1.0)
agent = bench_scaling.agent_job(agent_n, d, rng)
out = {}
out["floor_s"] = cpu(lambda: rng.standard_normal((n, d)), reps)
out["mechanism_s"] = cpu(lambda: mechanism.privatize(gradients, rng), reps)
out["agent_floor_s"] = cpu(lambda: rng.standard_normal((agent_n, d)), 3 * reps)
out["agent_round_s"] = cpu(agent, 3 * reps)
# A round is a few ms and varies with SQLite's work: time blocks of rounds, per round.
block = 5 if quick else 100
with tempfile.TemporaryDirectory() as tmp:
    rounds = bench_scaling.CoordinatorRounds(Path(tmp), 3000, d, 1 + 3 * block)
    rounds()  # the first round opens the connection's caches
    def rounds_block():
        for _ in range(block):
            rounds()
    out["coordinator_round_s"] = cpu(rounds_block, 3) / block
    rounds.close()
print(json.dumps(out))
"""

SIMULATE = ["simulate", "--model", "gmm", "--d", "10", "--epsilon", "1", "--seed", "0", "--json"]


def same_work(python: Path, checkout: Path) -> list[str]:
    """Options that keep ``ldpem simulate`` to the same work in every version: a version
    whose simulate also bootstraps a confidence region (``--draws``, 99 by default) is
    asked for none, as a version without it computes none."""
    shown = subprocess.run(
        [str(python), "-m", "ldpem", "simulate", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=checkout,
    )
    return ["--draws", "0"] if "--draws" in shown.stdout else []


def probe(checkout: Path, python: Path | None = None, *, quick: bool = False) -> dict[str, float]:
    """One probe of the version at ``checkout`` with its interpreter (default: its
    .venv's), and one ``ldpem simulate`` of it."""
    python = python if python is not None else checkout / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{checkout}: no {python} (run `make .venv/.installed` there)")
    done = subprocess.run(
        [str(python), "-c", PROBE, str(checkout), "quick" if quick else "full"],
        capture_output=True,
        text=True,
        check=False,
        cwd=checkout,
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: the probe failed:\n{done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout)
    extra = same_work(python, checkout)  # before the clock: its child's CPU is not the run's
    before = os.times()
    simulate = subprocess.run(
        [
            str(python),
            "-m",
            "ldpem",
            *SIMULATE,
            *extra,
            "--n",
            "2000" if quick else "200000",
        ],
        capture_output=True,
        check=False,
        cwd=checkout,
    )
    after = os.times()
    if simulate.returncode != 0:
        raise SystemExit(f"{checkout}: ldpem simulate failed")
    children = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    figures["simulate_cpu_s"] = children
    return figures


def ratios(before: list[dict[str, float]], after: list[dict[str, float]]) -> dict[str, float]:
    def median(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(run[key] for run in runs)

    def per_floor(runs: list[dict[str, float]], key: str, floor: str) -> float:
        return statistics.median(run[key] / run[floor] for run in runs)

    return {
        "mechanism_per_floor": per_floor(after, "mechanism_s", "floor_s")
        / per_floor(before, "mechanism_s", "floor_s"),
        "agent_round_per_floor": per_floor(after, "agent_round_s", "agent_floor_s")
        / per_floor(before, "agent_round_s", "agent_floor_s"),
        "agent_round_cpu": median(after, "agent_round_s") / median(before, "agent_round_s"),
        "coordinator_round_cpu": median(after, "coordinator_round_s")
        / median(before, "coordinator_round_s"),
        "simulate_cpu": median(after, "simulate_cpu_s") / median(before, "simulate_cpu_s"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--before", type=Path, required=True, help="the older checkout")
    parser.add_argument("--after", type=Path, required=True, help="the newer checkout")
    for side in ("before", "after"):
        parser.add_argument(
            f"--{side}-python",
            type=Path,
            metavar="PYTHON",
            help=f"the interpreter of the {side} checkout (default: its .venv/bin/python)",
        )
    parser.add_argument("--runs", type=int, default=3, help="probes per version (default: 3)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(args.runs):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for which in order:
            checkout, python = getattr(args, which), getattr(args, f"{which}_python")
            runs[which].append(probe(checkout.resolve(), python, quick=args.quick))
            print(f"run {i + 1}/{args.runs}: {which} done", file=sys.stderr)
    found = ratios(runs["before"], runs["after"])
    result: dict[str, Any] = {
        "machine": machine(),
        "before": str(args.before),
        "after": str(args.after),
        "runs": runs,
        "ratio": found,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for name, value in found.items():
            mark = "within 10 %" if 0.9 <= value <= 1.1 else "OUTSIDE 10 %"
            print(f"{name:<24} after/before = {value:.3f}  ({mark})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
