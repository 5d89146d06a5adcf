"""Sources that say what to do and never show a record: the SQLite-file hint, the refused
identifier column, and a value planted in bad cells that no output may contain.

PostgreSQL's versions (the password hint, the planted value) are in
test_sources_postgres.py.
"""

from __future__ import annotations

import logging
import sqlite3
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from ldpem.cli import main
from ldpem.client.columns import ID_CHECK_MIN_ROWS, check_id_columns
from ldpem.client.data import load_records
from ldpem.client.sources import Source
from ldpem.common.core.errors import UserError
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


# --- a suspected identifier column -----------------------------------------------------


def _with_ids(n: int, *, ids: np.ndarray | None = None) -> dict[str, np.ndarray]:
    table = rmc_table(n, missing=0.0)
    person = np.arange(1001, 1001 + n) if ids is None else ids
    rng = np.random.default_rng(5)
    return {
        "person_id": rng.permutation(person),  # not sorted: distinctness, not order, counts
        "x1": table[:, 0],
        "x2": table[:, 1],
        "x3": table[:, 2],
        "y": table[:, 3],
    }


def _parquet(path: Path, columns: dict[str, np.ndarray]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)
    return str(path)


def _sqlite(path: Path, columns: dict[str, np.ndarray]) -> tuple[str, str]:
    names = list(columns)
    db = sqlite3.connect(path)
    db.execute(f"CREATE TABLE t (row INTEGER PRIMARY KEY, {', '.join(names)})")
    rows = zip(*(column.tolist() for column in columns.values()), strict=True)
    db.executemany(
        f"INSERT INTO t ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", rows
    )
    db.commit()
    db.close()
    return f"sqlite:///{path}", f"SELECT {', '.join(names)} FROM t ORDER BY row"


def _sources(tmp_path: Path, columns: dict[str, np.ndarray]) -> list[tuple[str, str | None]]:
    parquet = _parquet(tmp_path / "ids.parquet", columns)
    return [(parquet, None), _sqlite(tmp_path / "ids.db", columns)]


def test_an_identifier_column_is_refused_as_a_covariate(tmp_path: Path) -> None:
    for location, query in _sources(tmp_path, _with_ids(200)):
        with pytest.raises(UserError) as caught:
            Source(location, query=query).load("mrm")
        assert str(caught.value) == (
            f"{location}, column 'person_id': all 200 values are distinct integers, like an "
            "identifier, so it is not taken as a covariate; choose the covariates with "
            "--columns (e.g. --columns x1,x2,x3), naming person_id there if it is one"
        )
        # The suggested --columns reads the three covariates ...
        chosen = Source(location, query=query, columns=("x1", "x2", "x3")).load("mrm")
        assert chosen.d == 3 and chosen.n == 200
        # ... and an operator who names the column in --columns gets it as a covariate.
        named = Source(location, query=query, columns=("person_id", "x1")).load("mrm")
        assert named.d == 2 and sorted(named.x[:, 0]) == list(range(1001, 1201))


def test_an_identifier_column_in_a_csv_or_npy_file_is_refused(tmp_path: Path) -> None:
    columns = _with_ids(200)
    names = list(columns)
    table = np.column_stack([np.asarray(c, dtype=np.float64) for c in columns.values()])
    csv = tmp_path / "ids.csv"
    np.savetxt(csv, table, delimiter=",", header=",".join(names), comments="")
    with pytest.raises(UserError, match=r"column 'person_id': all 200 values are distinct"):
        load_records(csv, "mrm")
    assert load_records(csv, "mrm", columns=("x1", "x2", "x3")).d == 3


def test_integer_covariates_that_repeat_or_few_records_are_not_identifiers(
    tmp_path: Path,
) -> None:
    ages = np.random.default_rng(2).integers(20, 90, size=500)  # repeats: pigeonhole
    assert np.unique(ages).size < ages.size
    for location, query in _sources(tmp_path, _with_ids(500, ids=ages)):
        assert Source(location, query=query).load("mrm").d == 4
    few = tmp_path / "few"
    few.mkdir()
    for location, query in _sources(few, _with_ids(ID_CHECK_MIN_ROWS - 1)):
        assert Source(location, query=query).load("mrm").d == 4


def test_check_id_columns() -> None:
    n = ID_CHECK_MIN_ROWS
    ids = np.arange(n, dtype=np.float64)
    table = np.column_stack([np.linspace(0, 1, n), ids])
    with pytest.raises(UserError, match=r"^f\.csv, column 'id': all 20 values are distinct"):
        check_id_columns("f.csv", ["a", "id"], table, None)
    check_id_columns("f.csv", ["a", "id"], table, ["a", "id"])  # named: taken as it is
    check_id_columns("f.csv", ["a", "id"], table[:-1], None)  # too few records to tell
    with_nan = table.copy()
    with_nan[3, 1] = np.nan
    check_id_columns("f.csv", ["a", "id"], with_nan, None)  # a missing value: no identifier
    halves = table.copy()
    halves[:, 1] += 0.5
    check_id_columns("f.csv", ["a", "id"], halves, None)  # not integers
    with pytest.raises(UserError, match=r"covariates with --columns, naming id there"):
        check_id_columns("f.csv", ["id"], ids[:, None], None)  # nothing else to suggest


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


def _never_shown(
    source: Source,
    data: list[str],
    model: str,
    where: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Loading ``source`` fails where the value was planted, and so does ``ldpem simulate
    --data`` ``data``; neither its error nor any output or log line shows the value."""
    with pytest.raises(UserError) as caught:
        source.load(model)
    assert where in str(caught.value)  # it failed where the value was planted
    output = _run_and_collect(["simulate", "--model", model, "--data", *data], capsys, caplog)
    assert where in output
    assert PLANTED not in str(caught.value) and PLANTED not in output, output


def _files_never_show(
    cases: list[tuple[str, str, str]],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``_never_shown`` for each (file, model, where) of ``cases``, logging everything."""
    caplog.set_level(logging.DEBUG)
    for path, model, where in cases:
        _never_shown(Source(path), [path], model, where, capsys, caplog)


def test_no_output_contains_a_value_planted_in_a_bad_parquet_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    _files_never_show(_parquet_cases(tmp_path), capsys, caplog)


def test_no_output_contains_a_value_planted_in_a_bad_sqlite_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for url, query, model, where in _sqlite_cases(tmp_path):
        _never_shown(
            Source(url, query=query), [url, "--query", query], model, where, capsys, caplog
        )


def _csv_cases(tmp_path: Path) -> list[tuple[str, str, str]]:
    """(file, model, the message's line and column) with the planted value in a bad cell
    or in the bad row of a CSV file, and in the bad row of a .npy file."""
    cases = [
        (
            "x1,x2,y\n1,2,3\n4," + PLANTED_DECIMAL + "x,6\n",
            "mrm",
            "line 3, column 'x2': not a number",
        ),
        ("x1,x2,y\n" + PLANTED_DECIMAL + ",2,\n", "mrm", "line 2, column 'y': the response may"),
        ("x1,x2\n" + PLANTED_DECIMAL + ",1e999\n", "gmm", "line 2, column 'x2': infinite value"),
        ("x1,x2\n1,2\n" + PLANTED_DECIMAL + "\n", "gmm", "line 3: expected 2 fields, got 1"),
    ]
    out = []
    for number, (text, model, where) in enumerate(cases):
        path = tmp_path / f"planted{number}.csv"
        path.write_text(text)
        out.append((str(path), model, where))
    npy = tmp_path / "planted.npy"
    np.save(npy, np.array([[1.0, 2.0], [float(PLANTED_DECIMAL), np.nan]]))
    out.append((str(npy), "gmm", "row 2, column 'x1': missing value"))
    return out


def test_no_output_contains_a_value_planted_in_a_bad_csv_or_npy_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    _files_never_show(_csv_cases(tmp_path), capsys, caplog)
