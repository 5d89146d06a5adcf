"""Memory: an agent's round streams its records in chunks; the coordinator never holds records.

    python benchmarks/bench_memory.py [--records 100000 1000000 10000000] [--quick] [--json]

Issue 8, item 5.

agent        For each n, a fresh process runs ``holder_round`` (GMM, d = 10, local mechanism)
             over n records memory-mapped from one .npy file (so the records themselves are
             not allocations) and reports, via tracemalloc (numpy reports its buffers to it),
             the peak of the intermediate arrays, plus the process's VmHWM. The peak must
             follow the chunk size (``--chunks``), not n. Floor: the size of one chunk of
             gradients, chunk × d × 8 bytes.
coordinator  For each total number of enrolled records, a fresh ``ldpem coordinator`` process
             creates a run of 3 hospitals (forecast on, as by default), takes one round of
             reports, and reports VmHWM / VmRSS from /proc: it must not grow with n.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import (
    Processes,
    create_run,
    machine,
    memory_kib,
    start_coordinator,
)

from ldpem.common.wire import PublicParameters
from ldpem.server.coordinator import run_noise_std

CHILD = """
import json, sys, time, tracemalloc
import numpy as np
from ldpem.common.models import get_model
from ldpem.common.protocol import make_mechanism
from ldpem.common.models import Records, get_model
from ldpem.common.protocol.rounds import holder_round

path, n, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x = np.load(path, mmap_mode="r")[:n]
d = x.shape[1]
mechanism = make_mechanism(
    "local", d=d, records_per_round=n, epsilon=1.0, delta=n**-1.1,
    tau=get_model("gmm").default_tau(beta_bound=3.0, sigma=1.0, d=d),
)
rng = np.random.default_rng(0)
beta = np.full(d, 3.0 / d**0.5)
tracemalloc.start()
started = time.perf_counter()
report = holder_round(model=get_model("gmm"), beta=beta, records=Records(x), sigma=1.0,
                      mechanism=mechanism, rng=rng, chunk=chunk)
seconds = time.perf_counter() - started
_, peak = tracemalloc.get_traced_memory()
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines()
              if ":" in line)
print(json.dumps({"n": n, "chunk": chunk, "seconds": seconds, "peak_bytes": peak,
                  "vmhwm_kib": int(status["VmHWM"].split()[0]), "count": report.count}))
"""


def write_records(path: Path, n: int, d: int, seed: int) -> None:
    """GMM records (±β* + N(0, I)) written block by block into a .npy file."""
    rng = np.random.default_rng(seed)
    beta_star = np.full(d, 3.0 / np.sqrt(d))
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, d))
    block = 1 << 20
    for start in range(0, n, block):
        size = min(block, n - start)
        signs = rng.choice([-1.0, 1.0], size=size)
        out[start : start + size] = signs[:, None] * beta_star + rng.standard_normal((size, d))
    out.flush()
    del out


def agent(path: Path, n: int, chunk: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(n), str(chunk)],
        capture_output=True,
        check=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def coordinator(workdir: Path, total: int) -> dict[str, Any]:
    workdir.mkdir(parents=True)
    processes = Processes(workdir / "logs")
    rounds = 10
    sizes = [total // 3, total // 3, total - 2 * (total // 3)]
    try:
        child, url = start_coordinator(processes, workdir / "coordinator.sqlite")
        started = memory_kib(child.pid)
        tokens = [f"bench-memory-{i}-{total}" for i in range(3)]
        request = {
            "model": "gmm",
            "d": 10,
            "sigma": 1.0,
            "rounds": rounds,
            "mechanism": "local",
            "epsilon": 1.0,
            "hospitals": [
                {"name": f"h{i}", "records": size, "token": tokens[i]}
                for i, size in enumerate(sizes)
            ],
        }
        begun = time.perf_counter()
        created = create_run(url, request)
        run_id = created["run_id"]
        create_seconds = time.perf_counter() - begun
        # The run's own σ_r: the coordinator refuses less noise than its budget needs.
        noise_std = run_noise_std(PublicParameters.model_validate(created["params"]))
        for i, size in enumerate(sizes):
            count = size // rounds + (1 if size % rounds else 0)
            body = {
                "hospital": f"h{i}",
                "round": 0,
                "mechanism": "local",
                "count": count,
                "total": [0.0] * 10,
                "noise_std": noise_std,
            }
            response = httpx.post(
                f"{url}/v1/runs/{run_id}/rounds/0/reports",
                json=body,
                headers={"Authorization": f"Bearer {tokens[i]}"},
                timeout=60.0,
            )
            if response.status_code != 200:
                raise RuntimeError(f"report refused: {response.text}")
        after = memory_kib(child.pid)
    finally:
        processes.stop()
    return {
        "records": total,
        "kib_started": started,
        "kib_after": after,
        "create_seconds": create_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--records", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--chunks", type=int, nargs="+", default=[1 << 13, 1 << 15, 1 << 17])
    parser.add_argument(
        "--coordinator-records", type=int, nargs="+", default=[10_000, 1_000_000, 1_000_000_000]
    )
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.chunks = [10_000, 40_000], [1 << 12]
        args.coordinator_records = [3_000]
    before = machine()
    agents, coordinators = [], []
    with tempfile.TemporaryDirectory(prefix="ldpem-bench-mem-") as tmp:
        root = Path(tmp)
        path = root / "records.npy"
        write_records(path, max(args.records), args.d, 0)
        for n in args.records:
            for chunk in args.chunks:
                row = agent(path, n, chunk)
                row["chunk_gradient_bytes"] = chunk * args.d * 8
                row["records_bytes"] = n * args.d * 8
                agents.append(row)
                if not args.json:
                    print(
                        f"agent n={n:>9} chunk={chunk:>6}: peak intermediates "
                        f"{row['peak_bytes'] / 2**20:7.1f} MiB = "
                        f"{row['peak_bytes'] / row['chunk_gradient_bytes']:.1f}x one chunk of "
                        f"gradients; records {row['records_bytes'] / 2**20:7.0f} MiB (mapped); "
                        f"VmHWM {row['vmhwm_kib'] / 1024:6.0f} MiB; {row['seconds']:.2f}s",
                        flush=True,
                    )
        for total in args.coordinator_records:
            row = coordinator(root / f"coord-{total}", total)
            coordinators.append(row)
            if not args.json:
                print(
                    f"coordinator {total:>13} records enrolled: VmHWM "
                    f"{row['kib_after'].get('VmHWM', 0) / 1024:.0f} MiB, VmRSS "
                    f"{row['kib_after'].get('VmRSS', 0) / 1024:.0f} MiB (at start "
                    f"{row['kib_started'].get('VmRSS', 0) / 1024:.0f} MiB)",
                    flush=True,
                )
    result = {
        "machine": before,
        "load_after": machine()["loadavg"],
        "agent": agents,
        "coordinator": coordinators,
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
