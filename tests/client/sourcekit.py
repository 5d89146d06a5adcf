"""The same records written as CSV, .npy, Parquet, SQLite and PostgreSQL (for source tests)."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpem.common.models import Records, get_model
from ldpem.common.protocol import make_mechanism
from ldpem.common.protocol.rounds import holder_round

COLUMNS = ["x1", "x2", "x3", "y"]
#: Selects the records in their written order (``id`` is the row number, from 1).
TABLE_QUERY = "SELECT x1, x2, x3, y FROM records ORDER BY id"


def rmc_table(n: int, *, seed: int = 3, missing: float = 0.1) -> NDArray[np.float64]:
    """(n, 4): covariates x1..x3 with ~``missing`` NaN, then a response y; full-precision
    doubles (a decimal rendering that drops a digit would change them)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)) * np.array([1.0, 1e-7, 3e5])
    y = x @ np.array([1.0, -2.0, 0.5e-5]) + rng.standard_normal(n)
    x[rng.random(x.shape) < missing] = np.nan
    return np.column_stack([x, y])


def cell(value: float) -> Any:
    return None if math.isnan(value) else float(value)


def write_csv(path: Path, table: NDArray[np.float64]) -> Path:
    lines = [",".join(COLUMNS)]
    lines += [",".join("" if math.isnan(v) else repr(float(v)) for v in row) for row in table]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_parquet(path: Path, table: NDArray[np.float64], *, row_group: int = 997) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = [pa.array(table[:, j], mask=np.isnan(table[:, j])) for j in range(table.shape[1])]
    pq.write_table(pa.table(arrays, names=COLUMNS), path, row_group_size=row_group)
    return path


def write_sqlite(path: Path, table: NDArray[np.float64]) -> str:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, x1 REAL, x2 REAL, x3 REAL, y REAL)")
    db.executemany(
        "INSERT INTO records VALUES (?, ?, ?, ?, ?)",
        [(i + 1, *map(cell, row)) for i, row in enumerate(table)],
    )
    db.commit()
    db.close()
    return f"sqlite:///{path}"  # an absolute path: sqlite:////tmp/…


def write_postgres(conninfo: str, table: NDArray[np.float64], *, name: str = "records") -> None:
    import psycopg

    with psycopg.connect(conninfo) as db:
        db.execute(f"DROP TABLE IF EXISTS {name}")
        db.execute(
            f"CREATE TABLE {name} (id integer PRIMARY KEY, x1 double precision, "
            "x2 double precision, x3 double precision, y double precision)"
        )
        with db.cursor().copy(
            f"COPY {name} (id, x1, x2, x3, y) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int4", "float8", "float8", "float8", "float8"])
            for i, row in enumerate(table):
                copy.write_row((i + 1, *map(cell, row)))


def report(records: Records, *, model: str = "rmc", seed: int = 7) -> NDArray[np.float64]:
    """One agent round (local mechanism) on ``records`` with a fixed seed: (d,) total."""
    d = records.d
    mechanism = make_mechanism(
        "local",
        d=d,
        records_per_round=records.n,
        epsilon=1.0,
        delta=1e-6,
        tau=get_model(model).default_tau(beta_bound=3.0, sigma=1.0, d=d),
    )
    result = holder_round(
        model=get_model(model),
        beta=np.linspace(-1.0, 1.0, d),
        records=records,
        sigma=1.0,
        mechanism=mechanism,
        rng=np.random.default_rng(seed),
    )
    return np.asarray(result.total, dtype=np.float64)


def same_bits(a: NDArray[np.float64], b: NDArray[np.float64]) -> bool:
    """Bit-identical arrays (NaN included)."""
    return a.shape == b.shape and a.tobytes() == b.tobytes()
