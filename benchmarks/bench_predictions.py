"""Predictions in seconds (issue 31): each figure against its floor, measured in one run.

    python benchmarks/bench_predictions.py [--repeats 5] [--demos 3] [--skip plan,demo]
        [--quick] [--json] [--before TREE]

  simulation  one simulated study of 2·10⁵ GMM records (d = 10, local, 4 hospitals, 10
              rounds), CPU time: the fast path (``fastsim.simulate``, what the forecast,
              the plan and the bootstrap run) and ``run_study`` (``ldpem simulate``),
              interleaved with the floor, drawing one Gaussian per value (2·10⁶).
  bootstrap   the confidence region of a 2·10⁵-record run with B = 200 draws (the
              simulation's study; ``study_region``, as ``ldpem simulate --draws 200``),
              wall time on a pool of this machine's cores, started for it; its floor:
              one Gaussian per value of the 200 draws, spread over the same workers.
  create      ``POST /v1/runs`` of the demo's run (3 hospitals, 2·10⁵ records) on a live
              ``ldpem coordinator``, wall time, with the forecast (now computed in the
              background) and without (the floor), alternately; and the time until the
              forecast is stored.
  plan        ``ldpem plan --hospitals-sizes 20000,40000,60000,80000 --search-schedule``,
              wall and CPU; its floor: drawing one Gaussian per value of every simulation it
              ran (counted from its --json), spread over its workers.
  demo        ``ldpem demo --hospitals 3 --records 200000 --rounds 10`` launch to exit (the
              forecast shown), alternately with the floor of the same job
              (``_demo_floor.JOB_FLOOR``: one interpreter that imports numpy and the
              truncation kernel, draws the demo's 2·10⁶ GMM values and runs its 10 rounds
              over its 3 hospitals: each record's gradient, the local mechanism's T at the
              run's s and β_s, its Gaussian noise, the sums and the M-step) and with the
              earlier passes' floor, which clips instead of T (``CLIP_FLOOR``, for
              continuity); each floor also against one Gaussian per value, a ratio of the
              floor that the machine does not change. Beside them, for scale
              and not as the target's floor: that job plus, for every other study whose
              result the demo shows (its in-process baselines, the forecast's simulated
              runs, the confidence region's bootstrap draws), the simulation's floor (one
              Gaussian per value), shared out over this machine's cores. Each also in
              CPU time of all its processes (this benchmark is made the child subreaper, so
              the coordinator's pool workers and its fork server, orphaned when it exits,
              are reaped here and counted). ``--before TREE``: a demo of the package
              installed in TREE (``pip install --no-deps --target TREE`` of an older
              commit, put first on ``PYTHONPATH``) in turn with this one's. This tree's
              ldpem is byte-compiled first, as pip compiles the package it installs.

The machine is shared: the load average (1 min) is recorded before and after; compare the
ratios, measured in the same run. ``--quick``: every part once at 2·10⁴ records (a check
that the benchmark runs, tests/benchmarks/test_quick.py).
"""

from __future__ import annotations

import argparse
import compileall
import ctypes
import importlib.util
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from ldpem.common.planning.confidence import RegionDraws, study_region
from ldpem.common.planning.executor import local_workers, make_executor
from ldpem.common.planning.fastsim import simulate
from ldpem.common.planning.study import Study, run_study
from ldpem.demo.runner import (
    BASELINES,
    DEMO_CONFIDENCE_DRAWS,
    DEMO_FORECAST_SEEDS,
    DEMO_SENSITIVITY_SEEDS,
)
from ldpem.processes import Processes, start_coordinator

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _demo_floor import clip_floor_command, job_floor_command
from _fedkit import machine

D, ROUNDS = 10, 10
#: Records of the figures (--quick: a tenth).
N = 200_000

#: prctl(2) option: orphaned descendants are re-parented to this process, not to init.
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants (a demo's coordinator's pool) this process's children, so
    that their CPU time counts in ``children_cpu`` once reaped; False where not Linux."""
    try:
        done: int = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        return done == 0
    except (OSError, AttributeError):
        return False


def reap_orphans() -> None:
    """Wait for every child left (the orphans re-parented here), counting their CPU."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def sizes(n: int) -> tuple[int, ...]:
    """The issue's four hospitals (20,000 … 80,000 records at n = 2·10⁵), scaled to n."""
    return tuple(n * k // 10 for k in (1, 2, 3, 4))


def bench_simulation(repeats: int) -> dict[str, Any]:
    study = Study(model="gmm", mechanism="local", n=N, d=D, rounds=ROUNDS, sizes=sizes(N))
    rng = np.random.default_rng(1)
    simulate(replace(study, n=4000, sizes=(1000,) * 4))  # the truncation table, once
    jobs: dict[str, Callable[[int], object]] = {
        "floor": lambda seed: rng.standard_normal((N, D)),
        "fast": lambda seed: simulate(replace(study, seed=seed)),
        "run_study": lambda seed: run_study(replace(study, seed=seed)),
    }
    samples: dict[str, list[float]] = {name: [] for name in jobs}
    for r in range(repeats):
        for name, job in jobs.items():
            started = time.process_time()
            job(r)
            samples[name].append(time.process_time() - started)
    med = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "cpu_s": med,
        "samples": samples,
        "fast_over_floor": med["fast"] / med["floor"],
        "run_study_over_floor": med["run_study"] / med["floor"],
        "run_study_over_fast": med["run_study"] / med["fast"],
    }


#: The bootstrap's draws (issue 31's target: a 2·10⁵-record run's region, B = 200).
BOOTSTRAP_DRAWS = 200


def bench_bootstrap(repeats: int) -> dict[str, Any]:
    study = Study(model="gmm", mechanism="local", n=N, d=D, rounds=ROUNDS, sizes=sizes(N))
    estimate = run_study(study).estimate
    workers = local_workers()
    floor = BOOTSTRAP_DRAWS * gaussian_cpu(N) / workers
    samples = []
    for r in range(repeats):
        started = time.perf_counter()
        with make_executor(workers=workers) as executor:
            asked = RegionDraws(draws=BOOTSTRAP_DRAWS, seed=r)
            study_region(study, estimate, asked, executor=executor)
        samples.append(time.perf_counter() - started)
    wall = statistics.median(samples)
    return {
        "wall_s": wall,
        "samples": samples,
        "workers": workers,
        "floor_s": floor,
        "wall_over_floor": wall / floor,
    }


def bench_create(repeats: int, root: Path) -> dict[str, Any]:
    admin = secrets.token_urlsafe(24)
    processes = Processes(root / "logs")
    (root / "logs").mkdir(parents=True, exist_ok=True)
    try:
        _, url = start_coordinator(
            processes, state=root / "coordinator.sqlite", env={"LDPEM_ADMIN_TOKEN": admin}
        )
        headers = {"Authorization": f"Bearer {admin}"}
        samples: dict[str, list[float]] = {"forecast": [], "floor": [], "forecast_ready": []}
        with httpx.Client(base_url=url, headers=headers, timeout=600) as client:
            for r in range(repeats):
                for forecast in (True, False):
                    request = {
                        "model": "gmm",
                        "d": D,
                        "sigma": 1.0,
                        "rounds": ROUNDS,
                        "forecast": forecast,
                        "seed": r,
                        "hospitals": [
                            {"name": f"r{r}{forecast:d}h{k}", "records": size}
                            for k, size in enumerate((N * 8 // 20, N * 7 // 20, N * 5 // 20))
                        ],
                    }
                    started = time.perf_counter()
                    created = client.post("/v1/runs", json=request)
                    samples["forecast" if forecast else "floor"].append(
                        time.perf_counter() - started
                    )
                    assert created.status_code == 201, created.text
                    run_id = created.json()["run_id"]
                    while forecast and client.get(f"/v1/runs/{run_id}").json()["pending"]:
                        time.sleep(0.02)
                    if forecast:
                        samples["forecast_ready"].append(time.perf_counter() - started)
    finally:
        processes.stop()
    med = {name: statistics.median(values) for name, values in samples.items()}
    return {"wall_s": med, "samples": samples}


def values_simulated(plan: dict[str, Any]) -> int:
    """Gaussian-sized values (records × d) of every simulation in ``ldpem plan --json``."""
    d = plan["d"]
    total = 0
    for entry in plan["mechanisms"].values():
        total += entry["seeds"] * entry["n"]
        total += sum(s["seeds"] * s["n"] for s in entry["snr_sensitivity"])
    crossover = plan["local_crossover"]
    total += sum(crossover["seeds"] * int(n) for n in crossover["sizes"] if int(n) != plan["n"])
    search = plan.get("schedule_search", {})
    total += sum(row["seeds"] * row["n"] for row in search.get("table", []))
    if "compared" in search:
        total += search["compared"]["seeds"] * search["compared"]["n"]
    return int(total * d)


def bench_plan() -> dict[str, Any]:
    command = [sys.executable, "-m", "ldpem", "plan", "--hospitals-sizes"]
    command += [",".join(map(str, sizes(N))), "--d", str(D), "--search-schedule", "--json"]
    cpu = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    used = children_cpu() - cpu
    values = values_simulated(json.loads(done.stdout))
    rng = np.random.default_rng(2)
    began = time.process_time()
    rng.standard_normal((N, D))
    per_value = (time.process_time() - began) / (N * D)
    workers = os.cpu_count() or 1
    floor = values * per_value / workers
    return {
        "wall_s": wall,
        "cpu_s": used,
        "values": values,
        "floor_s": floor,
        "wall_over_floor": wall / floor,
    }


def shown_studies() -> int:
    """Studies whose results ``ldpem demo`` shows: the federated run, its in-process
    baselines, the forecast's simulated runs (at the assumed SNR, and at half and twice it
    when its coordinator simulates those) and the confidence region's bootstrap draws."""
    forecast = DEMO_FORECAST_SEEDS + 2 * min(DEMO_FORECAST_SEEDS, DEMO_SENSITIVITY_SEEDS)
    return 1 + len(BASELINES) + forecast + DEMO_CONFIDENCE_DRAWS


def run_demo(command: list[str], env: dict[str, str] | None) -> tuple[float, float]:
    """One ``ldpem demo`` launch to exit: wall and CPU of all its processes (seconds)."""
    cpu = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    wall = time.perf_counter() - started
    reap_orphans()
    assert json.loads(done.stdout)["forecast"] is not None, "the demo showed no forecast"
    return wall, children_cpu() - cpu


#: The packages of ldpem's import root (``pyproject.toml``'s package-dir maps each to its
#: own folder of the source tree).
PACKAGES = ("ldpem", "ldpem.common", "ldpem.server", "ldpem.client")


def byte_compiled() -> None:
    """Byte-compile this tree's ldpem, as ``pip install`` does the package it installs (the
    --before TREE): in a source tree run with PYTHONDONTWRITEBYTECODE=1 every process of a
    demo would otherwise compile again each module it imports that has no current .pyc
    (~130 modules, ~0.13 s of CPU in the demo's own process alone)."""
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(folder, quiet=1)


def gaussian_cpu(n: int, repeats: int = 5) -> float:
    """CPU seconds of drawing one Gaussian per value of n records (n × D), the least of
    ``repeats`` (the simulation's floor)."""
    rng = np.random.default_rng(0)
    spent = []
    for _ in range(repeats):
        started = time.process_time()
        rng.standard_normal((n, D))
        spent.append(time.process_time() - started)
    return min(spent)


def bench_demo(repeats: int, root: Path, before: Path | None) -> dict[str, Any]:
    byte_compiled()
    samples: dict[str, list[float]] = {"demo": [], "floor": [], "floor_clip": [], "floor_shown": []}
    cpu: dict[str, list[float]] = {"demo": [], "floor": [], "floor_clip": []}
    env_before = None
    if before is not None:
        samples["before"], cpu["before"] = [], []
        env_before = {**os.environ, "PYTHONPATH": str(before.resolve())}
    studies, workers = shown_studies(), os.cpu_count() or 1
    subreaper = become_subreaper()
    for r in range(repeats):
        for name, floor in [("floor", job_floor_command(N)), ("floor_clip", clip_floor_command(N))]:
            used = children_cpu()
            started = time.perf_counter()
            subprocess.run(floor, check=True)
            samples[name].append(time.perf_counter() - started)
            cpu[name].append(children_cpu() - used)
        started = time.perf_counter()
        subprocess.run(job_floor_command(N, studies, workers), check=True)
        samples["floor_shown"].append(time.perf_counter() - started)
        for name, env in [("demo", None), ("before", env_before)][: 2 if before else 1]:
            workdir = root / f"{name}-{r}"
            command = [sys.executable, "-m", "ldpem", "demo", "--hospitals", "3", "--records"]
            command += [str(N), "--d", str(D), "--rounds", str(ROUNDS), "--workdir", str(workdir)]
            wall, spent = run_demo([*command, "--json"], env)
            samples[name].append(wall)
            cpu[name].append(spent)
    med = {name: statistics.median(values) for name, values in samples.items()}
    med_cpu = {name: statistics.median(values) for name, values in cpu.items()}
    gaussians = gaussian_cpu(N)
    return {
        "wall_s": med,
        "samples": samples,
        "cpu_s": med_cpu,
        "cpu_samples": cpu,
        "cpu_of_orphans_counted": subreaper,
        "studies_shown": studies,
        "demo_over_floor": med["demo"] / med["floor"],
        "demo_over_floor_clip": med["demo"] / med["floor_clip"],
        "demo_over_floor_shown": med["demo"] / med["floor_shown"],
        # The floors against one Gaussian per value (the simulation's floor), a ratio that
        # does not depend on the machine: issue 31 measured its demo floor at 0.69 s and
        # one Gaussian per value at 0.027 s (25.6x) on its own machine.
        "gaussian_s": gaussians,
        "floor_over_gaussian": med["floor"] / gaussians,
        "floor_clip_over_gaussian": med["floor_clip"] / gaussians,
        **({"before_over_floor": med["before"] / med["floor"]} if before else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--demos", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma-separated parts to skip")
    parser.add_argument("--quick", action="store_true", help="once each, at 2·10⁴ records")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--before", type=Path, help="a tree with an older ldpem, its demo run in turns"
    )
    args = parser.parse_args()
    skip = set(args.skip.split(",")) - {""}
    if args.quick:
        global N
        N, args.repeats, args.demos = N // 10, 1, 1
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "n": N,
        "load_before": os.getloadavg()[0],
    }
    with tempfile.TemporaryDirectory(prefix="ldpem-bench-") as tmp:
        root = Path(tmp)
        if "simulation" not in skip:
            result["simulation"] = bench_simulation(args.repeats)
        if "bootstrap" not in skip:
            result["bootstrap"] = bench_bootstrap(args.repeats)
        if "create" not in skip:
            result["create"] = bench_create(args.repeats, root / "create")
        if "plan" not in skip:
            result["plan"] = bench_plan()
        if "demo" not in skip:
            result["demo"] = bench_demo(args.demos, root, args.before)
    result["load_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['date']}, load {result['load_before']:.1f} → {result['load_after']:.1f}")
    if "simulation" in result:
        s = result["simulation"]
        cpu = s["cpu_s"]
        print(
            f"simulation n = {N:.0e}: fast {cpu['fast']:.4f} s CPU "
            f"({s['fast_over_floor']:.2f}x the "
            f"floor {cpu['floor']:.4f} s), run_study {cpu['run_study']:.4f} s "
            f"({s['run_study_over_floor']:.2f}x; {s['run_study_over_fast']:.2f}x the fast path)"
        )
    if "bootstrap" in result:
        b = result["bootstrap"]
        print(
            f"bootstrap, B = {BOOTSTRAP_DRAWS}: {b['wall_s']:.2f} s wall on {b['workers']} "
            f"workers; floor {b['floor_s']:.2f} s: {b['wall_over_floor']:.1f}x"
        )
    if "create" in result:
        c = result["create"]["wall_s"]
        print(
            f"run create: {c['forecast']:.3f} s with the forecast, {c['floor']:.3f} s without; "
            f"forecast stored {c['forecast_ready']:.2f} s after the request"
        )
    if "plan" in result:
        p = result["plan"]
        print(
            f"plan --search-schedule: {p['wall_s']:.1f} s wall, {p['cpu_s']:.1f} s CPU; floor "
            f"{p['floor_s']:.2f} s ({p['values']:.3g} values): {p['wall_over_floor']:.1f}x"
        )
    if "demo" in result:
        d = result["demo"]
        wall, cpu = d["wall_s"], d["cpu_s"]
        print(
            f"demo: {wall['demo']:.2f} s launch to exit ({cpu['demo']:.2f} s CPU of all its "
            f"processes), floor {wall['floor']:.2f} s ({cpu['floor']:.2f} s CPU, "
            f"{d['floor_over_gaussian']:.1f}x one Gaussian per value): "
            f"{d['demo_over_floor']:.1f}x; the earlier clip floor {wall['floor_clip']:.2f} s "
            f"({d['floor_clip_over_gaussian']:.1f}x): {d['demo_over_floor_clip']:.1f}x; "
            f"the floor's study for each of the "
            f"{d['studies_shown']} studies shown: {wall['floor_shown']:.2f} s "
            f"({d['demo_over_floor_shown']:.1f}x)"
        )
        if "before" in wall:
            print(
                f"before: {wall['before']:.2f} s ({cpu['before']:.2f} s CPU): "
                f"{d['before_over_floor']:.1f}x the same floor"
            )
        for name, values in d["samples"].items():
            spent = d["cpu_samples"].get(name)
            shown = ", ".join(f"{v:.2f}" for v in values)
            print(
                f"  {name}: wall {shown}"
                + (f"; CPU {', '.join(f'{c:.2f}' for c in spent)}" if spent else "")
            )


if __name__ == "__main__":
    main()
