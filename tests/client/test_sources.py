"""Record sources without a server: Parquet, SQLite, --columns/--target, refused sources.

PostgreSQL (a real server) is in test_sources_postgres.py.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from ldpem.cli import main
from ldpem.client.columns import parse_columns
from ldpem.client.data import load_records
from ldpem.client.sources import Source
from ldpem.client.sql import has_top_level_order_by
from ldpem.common.core.errors import UserError
from tests.client.sourcekit import (
    TABLE_QUERY,
    report,
    rmc_table,
    same_bits,
    write_csv,
    write_parquet,
    write_sqlite,
)

pytest.importorskip("pyarrow", reason="pyarrow (ldpem[parquet]) is not installed")


def test_csv_parquet_sqlite_give_bit_identical_records_and_reports(tmp_path: Path) -> None:
    table = rmc_table(5000)
    csv = Source(str(write_csv(tmp_path / "r.csv", table))).load("rmc")
    parquet = Source(str(write_parquet(tmp_path / "r.parquet", table))).load("rmc")
    sqlite = Source(write_sqlite(tmp_path / "r.db", table), query=TABLE_QUERY, chunk_rows=777)
    from_sqlite = sqlite.load("rmc")
    assert csv.n == 5000 and np.isnan(csv.x).any()
    for other in (parquet, from_sqlite):
        assert same_bits(csv.x, other.x)
        assert csv.y is not None and other.y is not None and same_bits(csv.y, other.y)
    first = report(csv)
    assert same_bits(first, report(parquet)) and same_bits(first, report(from_sqlite))
    # A different seed gives a different report: the comparison above can fail.
    assert not same_bits(first, report(csv, seed=8))


def test_columns_and_target_choose_and_order_the_columns(tmp_path: Path) -> None:
    table = rmc_table(50, missing=0.0)
    path = write_csv(tmp_path / "r.csv", table)
    records = load_records(path, "mrm", columns=["x3", "x1"], target="x2")
    np.testing.assert_array_equal(records.x, table[:, [2, 0]])
    np.testing.assert_array_equal(records.y, table[:, 1])
    parquet = Source(
        str(write_parquet(tmp_path / "r.parquet", table)), columns=("x3", "x1"), target="x2"
    ).load("mrm")
    assert same_bits(parquet.x, records.x) and parquet.y is not None
    assert same_bits(parquet.y, np.ascontiguousarray(records.y))
    gmm = Source(str(path), columns=("x2", "y")).load("gmm")
    np.testing.assert_array_equal(gmm.x, table[:, [1, 3]])


@pytest.mark.parametrize(
    ("columns", "target", "model", "message"),
    [
        (("x1", "nope"), None, "mrm", "no column 'nope' (--columns)"),
        (None, "outcome", "mrm", "no column 'outcome' (--target)"),
        (("x1", "y"), None, "mrm", "column 'y' is both --target and in --columns"),
        (None, "y", "gmm", "--target: model gmm has no response"),
    ],
)
def test_bad_column_choices(
    tmp_path: Path, columns: tuple[str, ...] | None, target: str | None, model: str, message: str
) -> None:
    table = rmc_table(20, missing=0.0)
    for location in (
        str(write_csv(tmp_path / "r.csv", table)),
        str(write_parquet(tmp_path / "r.parquet", table)),
        write_sqlite(tmp_path / f"r{model}{target}.db", table),
    ):
        query = TABLE_QUERY if "://" in location else None
        with pytest.raises(UserError) as caught:
            Source(location, query=query, columns=columns, target=target).load(model)
        assert message in str(caught.value)


def test_parquet_nulls_are_missing_only_for_rmc(tmp_path: Path) -> None:
    table = rmc_table(3000)
    path = write_parquet(tmp_path / "r.parquet", table, row_group=500)
    first = int(np.argwhere(np.isnan(table[:, :3]))[0][0])
    column = ["x1", "x2", "x3"][int(np.argwhere(np.isnan(table[first, :3]))[0][0])]
    with pytest.raises(UserError) as caught:
        Source(str(path)).load("mrm")
    assert str(caught.value) == (
        f"{path} row {first + 1}, column {column!r}: missing value (NULL), but model mrm "
        "allows none (only rmc accepts missing covariates)"
    )


def test_parquet_text_column_and_garbage(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x1": [1.0, 2.0], "note": ["a", "b"], "y": [1.0, 2.0]}), path)
    with pytest.raises(UserError, match=r"column 'note': not a number column \(type string\)"):
        Source(str(path)).load("mrm")
    # Not selected, the text column is not read at all.
    assert Source(str(path), columns=("x1",)).load("mrm").d == 1
    garbage = tmp_path / "g.parquet"
    garbage.write_bytes(b"PAR1 not really")
    with pytest.raises(UserError, match="not a readable Parquet file"):
        Source(str(garbage)).load("gmm")


def _sqlite_db(tmp_path: Path, rows: list[tuple[object, ...]]) -> str:
    path = tmp_path / "h.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, x1, x2, y)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    return f"sqlite:///{path}"


@pytest.mark.parametrize(
    ("query", "rows", "model", "message"),
    [
        ("SELEC x1 FROM t ORDER BY id", [], "gmm", 'query failed: near "SELEC": syntax error'),
        ("SELECT nope FROM t ORDER BY id", [], "gmm", "query failed: no such column: nope"),
        (
            "SELECT x1, x2, y FROM t ORDER BY id",
            [(1, 1.0, 2.0, 3.0), (2, 1.0, "abc", 3.0)],
            "mrm",
            "row 2, column 'x2': not a number (type str)",
        ),
        (
            "SELECT x1, x2, y FROM t ORDER BY id",
            [(1, 1.0, None, 3.0)],
            "mrm",
            "row 1, column 'x2': missing value (NULL), but model mrm allows none",
        ),
        (
            "SELECT x1, x2, y FROM t ORDER BY id",
            [(1, 1.0, 2.0, None)],
            "rmc",
            "row 1, column 'y': the response may not be missing (NULL)",
        ),
        ("SELECT x1, x2 FROM t WHERE id < 0 ORDER BY id", [], "gmm", "no records"),
    ],
)
def test_sqlite_errors_are_one_line(
    tmp_path: Path, query: str, rows: list[tuple[object, ...]], model: str, message: str
) -> None:
    url = _sqlite_db(tmp_path, rows)
    with pytest.raises(UserError) as caught:
        Source(url, query=query).load(model)
    assert str(caught.value).startswith(url) and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_sqlite_text_column_left_out_of_columns_is_not_read(tmp_path: Path) -> None:
    url = _sqlite_db(tmp_path, [(1, 1.0, "Jane Q. Patient", 3.0), (2, 4.0, "x", 6.0)])
    query = "SELECT x1, x2, y FROM t ORDER BY id"
    for chunk_rows in (1, 100):
        records = Source(url, query=query, columns=("x1",), chunk_rows=chunk_rows).load("mrm")
        assert records.x.tolist() == [[1.0], [4.0]] and records.y is not None
        assert records.y.tolist() == [3.0, 6.0]
    both = Source(url, query=query, columns=("y", "x1")).load("gmm")
    assert both.x.tolist() == [[3.0, 1.0], [6.0, 4.0]]
    with pytest.raises(UserError) as caught:
        Source(url, query=query).load("mrm")
    assert str(caught.value) == f"{url} row 1, column 'x2': not a number (type str)"


def test_sqlite_query_cannot_write(tmp_path: Path) -> None:
    url = _sqlite_db(tmp_path, [(1, 1.0, 2.0, 3.0)])
    query = "INSERT INTO t (x1) SELECT x1 FROM t ORDER BY id RETURNING x1"
    with pytest.raises(UserError, match="query failed: attempt to write a readonly database"):
        Source(url, query=query).load("gmm")
    db = sqlite3.connect(url.removeprefix("sqlite:///"))
    assert db.execute("SELECT count(*) FROM t").fetchone() == (1,)
    db.close()


@pytest.mark.parametrize(
    ("query", "ordered"),
    [
        ("SELECT a FROM t ORDER BY id", True),
        ("select a from t\norder\n  by id desc", True),
        ("SELECT a FROM (SELECT a FROM t ORDER BY id) s", False),
        ("SELECT a FROM t -- ORDER BY id", False),
        ("SELECT 'ORDER BY' AS a FROM t", False),
        ("SELECT a FROM t /* order by id */", False),
        ("SELECT a, row_number() OVER (ORDER BY id) FROM t", False),
        ("SELECT a FROM t", False),
    ],
)
def test_order_by_must_be_at_the_top_level(query: str, ordered: bool) -> None:
    assert has_top_level_order_by(query) is ordered


@pytest.mark.parametrize(
    ("location", "query", "message"),
    [
        ("sqlite:///h.db", "SELECT x FROM t", "the query has no ORDER BY"),
        ("sqlite:///h.db", None, "a database source needs --query"),
        ("h.csv", "SELECT 1 ORDER BY 1", "--query needs a database URL"),
        ("mysql://h/db", "SELECT 1 ORDER BY 1", "unknown kind of source"),
    ],
)
def test_refused_sources(location: str, query: str | None, message: str) -> None:
    with pytest.raises(UserError, match=message):
        Source(location, query=query)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://alice:s3cr3t-Pw@db.example/cdm",
        "postgres://alice:s3cr3t-Pw@db.example:5432/cdm?sslmode=require",
        "postgresql://alice@db.example/cdm?password=s3cr3t-Pw",
    ],
)
def test_a_url_with_a_password_is_refused_without_showing_it(url: str) -> None:
    with pytest.raises(UserError) as caught:
        Source(url, query="SELECT 1 ORDER BY 1")
    message = str(caught.value)
    assert "s3cr3t-Pw" not in message and "PGPASSWORD" in message and "--password-file" in message
    assert "db.example" in message  # still says which source


def test_parse_columns() -> None:
    assert parse_columns("a, b,c") == ("a", "b", "c")
    assert parse_columns(None) is None
    for bad in ("a,,b", "a,a", ""):
        with pytest.raises(UserError):
            parse_columns(bad)


def test_simulate_reads_sqlite_and_parquet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = rmc_table(3000)
    outcomes = []
    for extra in (
        ["--data", str(write_csv(tmp_path / "r.csv", table))],
        ["--data", str(write_parquet(tmp_path / "r.parquet", table))],
        ["--data", write_sqlite(tmp_path / "r.db", table), "--query", TABLE_QUERY],
    ):
        argv = ["simulate", "--model", "rmc", "--rounds", "3", "--seed", "4", "--json", *extra]
        assert main(argv) == 0
        outcomes.append(capsys.readouterr().out.split('"seconds"')[0])
    assert outcomes[0] == outcomes[1] == outcomes[2]
    assert '"n": 3000' in outcomes[0]


def test_simulate_bad_source_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _sqlite_db(tmp_path, [(1, 1.0, "x", 2.0)])
    argv = ["simulate", "--model", "mrm", "--data", url, "--query", "SELECT x1, x2, y FROM t"]
    assert main(argv) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "the query has no ORDER BY; records must "
            "come in the same order every time they are read (the order decides each record's "
            "round), so end it with ORDER BY a key, e.g. ORDER BY person_id"
        )
    )
    assert main([*argv[:-1], "SELECT x1, x2, y FROM t ORDER BY id"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "row 1, column 'x2': not a number (type str)" in err


def test_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    path = write_csv(tmp_path / "r.csv", rmc_table(10)).with_suffix(".parquet")
    path.write_bytes(b"")
    with pytest.raises(UserError) as caught:
        Source(str(path)).load("rmc")
    assert str(caught.value) == (
        "reading Parquet needs the Python package pyarrow: pip install 'ldpem[parquet]'"
    )
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(UserError, match=r"pip install 'ldpem\[postgres\]'"):
        Source("postgresql:///cdm", query="SELECT 1 ORDER BY 1").load("gmm")


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ("9e999", "row 1, column 'a': infinite value"),
        ("-9e999", "row 1, column 'a': infinite value"),
        ("x'00ff'", "row 1, column 'a': not a number (type bytes)"),
        ("'1.5'", "row 1, column 'a': not a number (type str)"),  # text, even if numeric
        ("'" + "z" * 100 + "'", "row 1, column 'a': not a number (type str)"),
        (
            "NULL",
            "row 1, column 'a': missing value (NULL), but model gmm allows none (only rmc "
            "accepts missing covariates)",
        ),
    ],
)
def test_sqlite_hostile_values(tmp_path: Path, select: str, message: str) -> None:
    url = _sqlite_db(tmp_path, [(1, 1.0, 2.0, 3.0)])
    with pytest.raises(UserError) as caught:
        Source(url, query=f"SELECT {select} AS a ORDER BY 1").load("gmm")
    assert str(caught.value) == f"{url} {message}"  # the row and column, never the value


def test_sqlite_huge_integers_and_zero_rows_edges(tmp_path: Path) -> None:
    url = _sqlite_db(tmp_path, [(1, 1.0, 2.0, 3.0)])
    records = Source(url, query="SELECT 9223372036854775807 AS a, 0 AS b ORDER BY 1").load("gmm")
    assert records.x.tolist() == [[9.223372036854776e18, 0.0]]
    with pytest.raises(UserError, match="no records"):
        Source(url, query="SELECT x1 FROM t WHERE 0 ORDER BY 1").load("gmm")
