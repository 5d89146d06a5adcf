"""Wall time of ``ldpem experiment`` (one quick figure): serial, the local pool of this
machine's cores, and a Dask LocalCluster of 2 worker processes (issue 25).

Usage: python benchmarks/bench_dask.py [--figure fig1] [--seeds 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from ldpem.cli import main


def _timed(out: Path, *extra: str, figure: str, seeds: int) -> float:
    argv = ["experiment", "--figure", figure, "--quick", "--no-plot", "--seeds", str(seeds)]
    started = time.perf_counter()
    assert main([*argv, "--out", str(out), *extra]) == 0
    return time.perf_counter() - started


def run(figure: str, seeds: int) -> dict[str, object]:
    import distributed

    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        serial = _timed(root / "serial", "--workers", "1", figure=figure, seeds=seeds)
        pool = _timed(root / "pool", figure=figure, seeds=seeds)
        cluster = distributed.LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        )
        try:
            address = cluster.scheduler_address
            dask = _timed(root / "dask", "--scheduler", address, figure=figure, seeds=seeds)
        finally:
            cluster.close()
        same = all(
            (root / "serial" / p.name).read_text() == (root / k / p.name).read_text()
            for p in (root / "serial").glob("*.csv")
            for k in ("pool", "dask")
        )
    return {
        "figure": figure,
        "seeds": seeds,
        "cores": os.cpu_count(),
        "seconds": {"serial": serial, "pool": pool, "dask_2_workers": dask},
        "same_csv": same,
        "machine": {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "loadavg": load},
        "load_after": os.getloadavg(),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--figure", default="fig1")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = run(args.figure, args.seeds)
    print(json.dumps(found) if args.json else json.dumps(found, indent=2))
