"""Sources that say what to do and never show a record: the SQLite-file hint, and a value
planted in bad cells that no output may contain.

PostgreSQL's versions (the password hint, the planted value) are in
test_sources_postgres.py.
"""

from __future__ import annotations

import logging
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from ldpem.cli import main
from ldpem.client.sources import Source
from ldpem.common.errors import UserError
from tests.client.sourcekit import TABLE_QUERY, rmc_table, write_sqlite

pytest.importorskip("pyarrow", reason="pyarrow (ldpem[parquet]) is not installed")

#: Planted in bad cells; no message, output or log line may contain it in any rendering
#: (987654.321987, 987654321987654321, 9.87654321987654e+17 all contain it).
PLANTED = "987654"
PLANTED_DECIMAL = "987654.321987"
#: Beyond 2**53: pyarrow's safe cast to float64 refuses it with a message that quotes it.
PLANTED_INTEGER = 987654321987654321


# --- an SQLite file given as a path ----------------------------------------------------


def test_an_sqlite_file_as_data_says_to_use_a_sqlite_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    write_sqlite(tmp_path / "records.db", rmc_table(30))
    with pytest.raises(UserError) as caught:
        Source("records.db").load("rmc")
    assert str(caught.value) == (
        "records.db: an SQLite database, not a records file; use --data sqlite:///records.db "
        'with --query "SELECT … ORDER BY …"'
    )
    # An absolute path keeps its own slash (sqlite:////abs/…), whatever the file is named.
    (tmp_path / "records.db").rename(tmp_path / "records.csv")
    with pytest.raises(UserError, match=rf"use --data sqlite:///{tmp_path}/records\.csv with"):
        Source(str(tmp_path / "records.csv")).load("rmc")
    # The URL it suggests reads the file.
    assert Source(f"sqlite:///{tmp_path}/records.csv", query=TABLE_QUERY).load("rmc").n == 30
    # The command line says the same, in one line.
    (tmp_path / "records.csv").rename(tmp_path / "records.db")
    assert main(["simulate", "--model", "rmc", "--data", "records.db"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "use --data sqlite:///records.db with --query" in err


def test_a_text_file_is_not_taken_for_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("SQLite format 3,y\n1,2\n")  # the words, but not the 16-byte header
    assert Source(str(path)).load("gmm").x.tolist() == [[1.0, 2.0]]


# --- no record value in any output -----------------------------------------------------


def _run_and_collect(
    argv: list[str], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> str:
    caplog.clear()
    assert main(argv) == 2
    captured = capsys.readouterr()
    return captured.out + captured.err + caplog.text


def _parquet_cases(tmp_path: Path) -> list[tuple[str, str, str]]:
    """(file, model, the message's row and column) with the planted value in the bad cell
    or in the bad row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(name: str, columns: dict[str, pa.Array]) -> str:
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table(columns), path)
        return str(path)

    floats = pa.array([1.0, 2.0, 3.0])
    return [
        (
            write("text", {"x1": floats, "x2": pa.array(["1", PLANTED_DECIMAL, "2"]), "y": floats}),
            "mrm",
            "column 'x2': not a number column (type string)",
        ),
        (
            # The integer beyond 2**53 sits in the row whose response is missing.
            write(
                "integer",
                {
                    "x1": pa.array([1, PLANTED_INTEGER, 3], pa.int64()),
                    "y": pa.array([1.0, None, 3.0]),
                },
            ),
            "mrm",
            "row 2, column 'y': the response may not be missing (NULL)",
        ),
        (
            write(
                "decimal",
                {
                    "x1": pa.array([Decimal("1"), Decimal(PLANTED_DECIMAL)], pa.decimal128(20, 6)),
                    "x2": pa.array([1.0, float("inf")]),
                },
            ),
            "gmm",
            "row 2, column 'x2': infinite value",
        ),
    ]


def _sqlite_cases(tmp_path: Path) -> list[tuple[str, str, str, str]]:
    """(url, query, model, the message's row and column) with the value in a bad cell."""
    path = tmp_path / "planted.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, x1 REAL, x2 REAL, y REAL, note TEXT)")
    db.executemany(
        "INSERT INTO t VALUES (?, ?, ?, ?, ?)",
        [
            (1, 1.0, 2.0, 3.0, PLANTED_DECIMAL),  # a number, stored as text
            (2, 1.0, PLANTED_DECIMAL + "x", 3.0, "a"),  # text REAL affinity cannot convert
            (3, float(PLANTED_DECIMAL), 2.0, 3.0, "b"),
        ],
    )
    db.commit()
    db.close()
    url = f"sqlite:///{path}"
    return [
        (url, "SELECT x1, x2, y FROM t ORDER BY id", "mrm", "row 2, column 'x2': not a number"),
        (
            url,
            "SELECT x1, note AS x2, y FROM t ORDER BY id",
            "mrm",
            "row 1, column 'x2': not a number (type str)",
        ),
        (
            url,
            "SELECT x1, CAST(note AS BLOB) AS x2 FROM t ORDER BY id",
            "gmm",
            "row 1, column 'x2': not a number (type bytes)",
        ),
        (
            url,
            "SELECT x1, CASE WHEN id = 3 THEN NULL ELSE y END AS y FROM t ORDER BY id",
            "mrm",
            "row 3, column 'y': the response may not be missing (NULL)",
        ),
    ]


def test_no_output_contains_a_value_planted_in_a_bad_parquet_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for path, model, where in _parquet_cases(tmp_path):
        with pytest.raises(UserError) as caught:
            Source(path).load(model)
        assert where in str(caught.value)  # it failed where the value was planted
        output = _run_and_collect(["simulate", "--model", model, "--data", path], capsys, caplog)
        assert where in output
        assert PLANTED not in str(caught.value) and PLANTED not in output, output


def test_no_output_contains_a_value_planted_in_a_bad_sqlite_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for url, query, model, where in _sqlite_cases(tmp_path):
        with pytest.raises(UserError) as caught:
            Source(url, query=query).load(model)
        assert where in str(caught.value)
        argv = ["simulate", "--model", model, "--data", url, "--query", query]
        output = _run_and_collect(argv, capsys, caplog)
        assert where in output
        assert PLANTED not in str(caught.value) and PLANTED not in output, output
