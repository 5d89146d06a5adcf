"""Memory of reading records from each source: CSV, .npy, Parquet, SQLite, PostgreSQL.

    python benchmarks/bench_sources.py [--rows 1000000] [--d 10] [--postgres URL] [--quick]
                                       [--json]

The same n records (d covariates and a response y, model mrm) are written as CSV (repr
floats), .npy, Parquet, a SQLite table and a PostgreSQL table (double precision). Each
source is then read by ``ldpem.client.sources.Source.load`` in a FRESH subprocess, which
prints its peak RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) before the read (after
its imports) and after it, and VmHWM from /proc as a cross-check. Linux carries the peak
of the process that started a child over into the child's ru_maxrss (across fork and
exec), so the records are written by another subprocess and this one stays small.
The records themselves take n·(d+1)·8 bytes; a source that streams in chunks stays within
a small factor of that, whatever n.

PostgreSQL: ``--postgres URL`` (password from the environment, as for the agent), else a
throw-away server started with tests/client/postgres.py (Debian's postgresql package).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.client.postgres
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import machine

CHILD = """
import json, resource, sys, time
from pathlib import Path
kind, location, query = sys.argv[1], sys.argv[2], sys.argv[3] or None
import numpy
from ldpem.client.sources import Source
if kind == "parquet":
    import pyarrow.parquet
if kind == "postgresql":
    import psycopg
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
records = Source(location, query=query).load("mrm")
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines()
              if ":" in line)
print(json.dumps({"n": records.n, "d": records.d, "seconds": seconds,
                  "kib_before": before, "kib_peak": peak,
                  "vmhwm_kib": int(status["VmHWM"].split()[0])}))
"""

QUERY = "SELECT {columns} FROM records ORDER BY id"


def write_all(root: Path, n: int, d: int, postgres: str | None) -> dict[str, tuple[str, str]]:
    """The records in every format: kind -> (location, query)."""
    import sqlite3

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    table = rng.standard_normal((n, d + 1))
    names = [f"x{j}" for j in range(1, d + 1)] + ["y"]
    query = QUERY.format(columns=", ".join(names))
    csv = root / "records.csv"
    with csv.open("w") as out:
        out.write(",".join(names) + "\n")
        block = 50_000
        for start in range(0, n, block):
            out.writelines(
                ",".join(map(repr, row)) + "\n" for row in table[start : start + block].tolist()
            )
    np.save(root / "records.npy", table)
    pq.write_table(
        pa.table([table[:, j] for j in range(d + 1)], names=names),
        root / "records.parquet",
        row_group_size=1 << 16,
    )
    db = sqlite3.connect(root / "records.db")
    columns = ", ".join(f"{name} REAL" for name in names)
    db.execute(f"CREATE TABLE records (id INTEGER PRIMARY KEY, {columns})")
    marks = ", ".join("?" * (d + 2))
    db.executemany(
        f"INSERT INTO records VALUES ({marks})",
        ((i, *row) for i, row in enumerate(table.tolist(), start=1)),
    )
    db.commit()
    db.close()
    sources = {
        "csv": (str(csv), ""),
        "npy": (str(root / "records.npy"), ""),
        "parquet": (str(root / "records.parquet"), ""),
        "sqlite": (f"sqlite:///{root / 'records.db'}", query),
    }
    if postgres is not None:
        import psycopg

        with psycopg.connect(postgres) as conn:
            conn.execute("DROP TABLE IF EXISTS records")
            columns = ", ".join(f"{name} double precision" for name in names)
            conn.execute(f"CREATE TABLE records (id integer PRIMARY KEY, {columns})")
            with conn.cursor().copy(
                f"COPY records (id, {', '.join(names)}) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["int4", *["float8"] * (d + 1)])
                for i, row in enumerate(table.tolist(), start=1):
                    copy.write_row((i, *row))
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE records")
        sources["postgresql"] = (postgres, query)
    return sources


def read(kind: str, location: str, query: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, kind, location, query],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{kind}: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--postgres", help="database URL (default: a throw-away server)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke)")
    parser.add_argument("--write", metavar="DIR", help=argparse.SUPPRESS)  # the writer child
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows = 2000
    if args.write:
        print(json.dumps(write_all(Path(args.write), args.rows, args.d, args.postgres)))
        return 0
    before = machine()
    server = None
    url = args.postgres
    if url is None:
        from tests.client.postgres import PASSWORD, start_postgres

        started = start_postgres()
        if isinstance(started, str):
            print(f"no PostgreSQL: {started}", file=sys.stderr)
        else:
            server = started
            url = server.url()
            os.environ["PGPASSWORD"] = PASSWORD
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="ldpem-bench-sources-") as tmp:
            begun = time.perf_counter()
            writer = [sys.executable, __file__, "--write", tmp, "--rows", str(args.rows)]
            writer += ["--d", str(args.d), *(["--postgres", url] if url else [])]
            written = subprocess.run(writer, capture_output=True, text=True, check=False)
            if written.returncode != 0:
                raise RuntimeError(f"writing the records failed: {written.stderr[-2000:]}")
            sources = json.loads(written.stdout)
            if not args.json:
                print(f"wrote {args.rows} rows in {time.perf_counter() - begun:.0f} s")
            for kind, (location, query) in sources.items():
                results[kind] = read(kind, location, query)
    finally:
        if server is not None:
            server.stop()
    records_mib = args.rows * (args.d + 1) * 8 / 2**20
    csv_peak = results["csv"]["kib_peak"]
    for row in results.values():
        row["ratio_to_csv"] = row["kib_peak"] / csv_peak
    summary = {
        "machine": before,
        "load_after": machine()["loadavg"],
        "rows": args.rows,
        "d": args.d,
        "records_mib": records_mib,
        "sources": results,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{before['when']}, {before['cpu']}, load {before['loadavg']}")
    print(f"{args.rows} rows x {args.d + 1} columns: the records are {records_mib:.0f} MiB")
    for kind, row in results.items():
        print(
            f"{kind:>10}: peak RSS {row['kib_peak'] / 1024:6.0f} MiB "
            f"(after imports {row['kib_before'] / 1024:4.0f} MiB, VmHWM "
            f"{row['vmhwm_kib'] / 1024:4.0f} MiB), "
            f"{row['ratio_to_csv']:.2f}x CSV, read in {row['seconds']:.1f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
