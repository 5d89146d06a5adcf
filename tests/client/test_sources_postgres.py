"""Records from a real PostgreSQL server (tests/client/postgres.py starts one).

The same records as CSV, Parquet, SQLite and PostgreSQL give bit-identical records and
agent reports; an OMOP-style pivot query (the one in docs/FEDERATED.md) reads; every
failing source ends ``ldpem client`` with one line, exit status 2 and an untouched ledger;
a password never shows in a message, a log or the ledger.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from ldpem.cli import main
from ldpem.client.data import load_records
from ldpem.client.sources import Source
from ldpem.common.core.errors import UserError
from ldpem.server.app import create_app
from tests.client.postgres import PASSWORD, USER, Postgres, start_postgres
from tests.client.sourcekit import (
    TABLE_QUERY,
    report,
    rmc_table,
    same_bits,
    write_csv,
    write_parquet,
    write_postgres,
    write_sqlite,
)
from tests.fedkit import TOKENS, admin_headers, live_server, run_request, settings, token_file

pytestmark = pytest.mark.postgres

psycopg = pytest.importorskip("psycopg", reason="psycopg (ldpem[postgres]) is not installed")

N = 4000


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    server = start_postgres()
    if isinstance(server, str):
        pytest.skip(f"no PostgreSQL server: {server}")
    try:
        write_postgres(server.conninfo(), rmc_table(N))
        write_postgres(server.conninfo(), rmc_table(N, missing=0.0), name="complete")
        _omop(server.conninfo())
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test says where the password comes from; nothing leaks in from the shell."""
    for name in ("PGPASSWORD", "PGPASSFILE", "PGSERVICE", "PGSERVICEFILE", "PGUSER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGPASSFILE", "/nonexistent/pgpass")


@pytest.fixture
def password_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", PASSWORD)


def test_four_sources_give_bit_identical_records_and_reports(
    pg: Postgres, tmp_path: Path, password_env: None
) -> None:
    table = rmc_table(N)
    loaded = {
        "csv": Source(str(write_csv(tmp_path / "r.csv", table))).load("rmc"),
        "parquet": Source(str(write_parquet(tmp_path / "r.parquet", table))).load("rmc"),
        "sqlite": Source(write_sqlite(tmp_path / "r.db", table), query=TABLE_QUERY).load("rmc"),
        "postgresql": Source(pg.url(), query=TABLE_QUERY).load("rmc"),
        # Many small fetches from the server-side cursor: the same records.
        "postgresql chunked": Source(pg.url(), query=TABLE_QUERY, chunk_rows=333).load("rmc"),
    }
    csv = loaded["csv"]
    assert csv.n == N and np.isnan(csv.x).any() and csv.y is not None
    expected = report(csv)
    for name, records in loaded.items():
        assert same_bits(records.x, csv.x), name
        assert records.y is not None and same_bits(records.y, csv.y), name
        assert same_bits(report(records), expected), name


def test_password_from_a_file_or_pgpass(
    pg: Postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD + "\n")
    source = Source(pg.url(), query=TABLE_QUERY, password_file=secret)
    assert source.load("rmc").n == N
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"*:*:*:{USER}:{PASSWORD}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert Source(pg.url(), query=TABLE_QUERY).load("rmc").n == N


def test_no_password_says_where_to_give_one(pg: Postgres, tmp_path: Path) -> None:
    # no_ambient_credentials: no PGPASSWORD, and PGPASSFILE names no file.
    with pytest.raises(UserError) as caught:
        Source(pg.url(), query=TABLE_QUERY).load("rmc")
    message = str(caught.value)
    assert message.startswith(f"{pg.url()}: cannot connect: ") and "\n" not in message
    assert "fe_sendauth: no password supplied" in message
    for where in ("PGPASSWORD", "~/.pgpass", "--password-file"):
        assert where in message
    wrong = tmp_path / "wrong"
    wrong.write_text("Wr0ng-Pa55word\n")
    with pytest.raises(UserError) as caught:
        Source(pg.url(), query=TABLE_QUERY, password_file=wrong).load("rmc")
    message = str(caught.value)
    assert "password authentication failed" in message and "check the password" in message
    assert "Wr0ng-Pa55word" not in message


#: Planted in bad cells (tests/client/test_source_hints.py plants it in Parquet and SQLite).
PLANTED = "987654"
PLANTED_DECIMAL = "987654.321987"


@pytest.mark.parametrize(
    ("query", "model", "where"),
    [
        # Text that is a number: refused by its type, not shown.
        ("SELECT x1, note AS x2 FROM planted ORDER BY id", "gmm", "row 1, column 'x2'"),
        # The server's own message quotes the value: "invalid input syntax for type double
        # precision: "987654.321987x"" (SQLSTATE 22P02), at the first fetch.
        (
            "SELECT x1, bad::float8 AS x2 FROM planted ORDER BY id",
            "gmm",
            "InvalidTextRepresentation, SQLSTATE 22P02",
        ),
        (
            "SELECT x1, (x1 * 1e6)::int4 AS x2 FROM planted ORDER BY id",
            "gmm",
            "NumericValueOutOfRange, SQLSTATE 22003",
        ),
        # The value in the row whose response is missing.
        ("SELECT x1, y FROM planted ORDER BY id", "mrm", "row 2, column 'y'"),
    ],
)
def test_no_output_contains_a_value_planted_in_a_bad_cell(
    pg: Postgres,
    password_env: None,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    query: str,
    model: str,
    where: str,
) -> None:
    with psycopg.connect(pg.conninfo()) as db:
        db.execute("DROP TABLE IF EXISTS planted")
        db.execute("CREATE TABLE planted (id int, x1 float8, note text, bad text, y float8)")
        db.execute(
            "INSERT INTO planted VALUES (1, 1.5, %s, %s, 1.0), (2, %s, 'a', '1', NULL)",
            (PLANTED_DECIMAL, PLANTED_DECIMAL + "x", float(PLANTED_DECIMAL)),
        )
    caplog.set_level(logging.DEBUG)
    with pytest.raises(UserError) as caught:
        Source(pg.url(), query=query).load(model)
    assert where in str(caught.value)  # it failed where the value was planted
    assert main(["simulate", "--model", model, "--data", pg.url(), "--query", query]) == 2
    captured = capsys.readouterr()
    output = captured.out + captured.err + caplog.text
    assert where in output
    assert PLANTED not in str(caught.value) and PLANTED not in output, output


def _omop(conninfo: str) -> None:
    """person + measurement (long format, one row per person and concept), OMOP CDM style."""
    rng = np.random.default_rng(9)
    with psycopg.connect(conninfo) as db:
        db.execute("CREATE SCHEMA cdm")
        db.execute("CREATE TABLE cdm.person (person_id bigint PRIMARY KEY, year_of_birth int)")
        db.execute(
            "CREATE TABLE cdm.measurement (measurement_id bigserial PRIMARY KEY, "
            "person_id bigint REFERENCES cdm.person, measurement_concept_id int, "
            "measurement_date date, value_as_number numeric)"
        )
        with db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO cdm.person VALUES (%s, %s)",
                [(p, 1940 + p % 50) for p in range(1, 301)],
            )
            rows = []
            for p in range(1, 301):
                for concept in (3004410, 3038553, 3027018):  # HbA1c, BMI, heart rate
                    if concept == 3038553 and p % 7 == 0:
                        continue  # no BMI measured: a missing covariate
                    for day in (1, 2):  # two measurements: the query takes the latest
                        value = round(float(rng.normal(50, 10)), 3)
                        rows.append((p, concept, f"2024-01-0{day}", value))
            cursor.executemany(
                "INSERT INTO cdm.measurement (person_id, measurement_concept_id, "
                "measurement_date, value_as_number) VALUES (%s, %s, %s, %s)",
                rows,
            )


def docs_query() -> str:
    """The example query of docs/FEDERATED.md ("Where the records come from")."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "FEDERATED.md").read_text()
    section = text.split("## Where the records come from", 1)[1]
    match = re.search(r"```sql\n(.*?)```", section, re.DOTALL)
    assert match is not None, "no ```sql block in the section"
    return match.group(1)


def test_omop_pivot_query(pg: Postgres, password_env: None) -> None:
    source = Source(
        pg.url(), query=docs_query(), columns=("age", "bmi", "heart_rate"), target="hba1c"
    )
    records = source.load("rmc")
    assert records.n == 300 and records.d == 3
    # Person 7 has no BMI: missing for rmc, refused for mrm with the row and column named.
    assert np.isnan(records.x[6, 1]) and not np.isnan(records.x[5]).any()
    np.testing.assert_array_equal(records.x[:3, 0], [2024 - 1941, 2024 - 1942, 2024 - 1943])
    with psycopg.connect(pg.conninfo()) as db:
        latest = db.execute(
            "SELECT value_as_number FROM cdm.measurement WHERE person_id = 1 AND "
            "measurement_concept_id = 3004410 ORDER BY measurement_date DESC LIMIT 1"
        ).fetchone()
    assert latest is not None and records.y is not None and records.y[0] == float(latest[0])
    with pytest.raises(UserError) as caught:
        source.load("mrm")
    assert "row 7, column 'bmi': missing value (NULL), but model mrm allows none" in str(
        caught.value
    )


# --- the agent: every failing source ends with one line, exit 2, and an untouched ledger --

#: A query whose server connection dies at row 70 000 (the backend terminates itself, as
#: an administrator or a server restart would), after two chunks were read.
DYING_QUERY = (
    "SELECT g::float8 AS x1, CASE WHEN g = 70000 THEN pg_terminate_backend(pg_backend_pid())"
    "::int ELSE 0 END AS k FROM generate_series(1, 100000) g ORDER BY g"
)


def _ledger_rows(state: Path) -> int:
    path = state / "ledger.sqlite"
    if not path.exists():
        return 0
    db = sqlite3.connect(path)
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        # The ledger's schema version is written when it is opened; anything else is a spend,
        # a binding or a seed.
        return sum(
            db.execute(
                f"SELECT count(*) FROM {table}"
                + (" WHERE key != 'schema'" if table == "meta" else "")
            ).fetchone()[0]
            for table in tables
        )
    finally:
        db.close()


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[str]:
    with live_server(create_app(settings(tmp_path))) as url:
        request = run_request(hospitals=1, records=N, d=3, rounds=2)
        created = httpx.post(f"{url}/v1/runs", json=request, headers=admin_headers(), timeout=30)
        assert created.status_code == 201, created.text
        yield url


def _cases(pg: Postgres, tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    wrong = tmp_path / "wrong-password"
    wrong.write_text("Wr0ng-Pa55word\n")
    url = pg.url()
    return {
        "bad sql": (
            ["--data", url, "--query", "SELEC x1 FROM records ORDER BY id"],
            f'{url}: query failed: syntax error at or near "SELEC"',
        ),
        "sql column missing": (
            ["--data", url, "--query", "SELECT nope FROM records ORDER BY id"],
            f'{url}: query failed: column "nope" does not exist',
        ),
        "--columns missing": (
            ["--data", url, "--query", TABLE_QUERY, "--columns", "x1,nope"],
            f"{url}: no column 'nope' (--columns); the columns are ['x1', 'x2', 'x3', 'y']",
        ),
        "non-numeric": (
            [
                "--data",
                url,
                "--query",
                "SELECT x1, 'n/a'::text AS x2, x3 FROM complete ORDER BY id",
            ],
            f"{url} row 1, column 'x2': not a number (type str)",
        ),
        "null for gmm": (
            ["--data", url, "--query", TABLE_QUERY, "--columns", "x1,x2,x3,y"],
            "missing value (NULL), but model gmm allows none",
        ),
        "refused connection": (
            [
                "--data",
                f"postgresql://{USER}@/postgres?host={tmp_path}&port=5433",
                "--query",
                TABLE_QUERY,
            ],
            f"postgresql://{USER}@/postgres?host={tmp_path}&port=5433: cannot connect: ",
        ),
        "wrong password": (
            ["--data", url, "--query", TABLE_QUERY, "--password-file", str(wrong)],
            f"{url}: cannot connect: connection failed: ",
        ),
        "server gone mid-read": (
            ["--data", url, "--query", DYING_QUERY, "--columns", "x1"],
            f"{url}: reading failed after row 65536: terminating connection due to "
            "administrator command",
        ),
        "password in url": (
            [
                "--data",
                f"postgresql://{USER}:{PASSWORD}@/postgres?host={pg.socket_dir}",
                "--query",
                TABLE_QUERY,
            ],
            "the URL carries a password",
        ),
        "no order by": (
            ["--data", url, "--query", "SELECT x1, x2, x3 FROM complete"],
            "the query has no ORDER BY",
        ),
    }


CASES = [
    "bad sql",
    "sql column missing",
    "--columns missing",
    "non-numeric",
    "null for gmm",
    "refused connection",
    "wrong password",
    "server gone mid-read",
    "password in url",
    "no order by",
]


@pytest.mark.parametrize("case", CASES)
def test_agent_with_a_failing_source_spends_nothing(
    pg: Postgres,
    coordinator: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    password_env: None,
    case: str,
) -> None:
    arguments, message = _cases(pg, tmp_path)[case]
    state = tmp_path / "agent"
    caplog.set_level(logging.DEBUG)
    argv = ["client", "--coordinator", coordinator, "--state", str(state)]
    argv += ["--token-file", str(token_file(tmp_path, TOKENS[0]))]
    argv += ["--epsilon", "1", "--delta", "1e-3"]  # at least the run's own budget
    argv += ["--model", "gmm"]
    assert main([*argv, *arguments, "--give-up", "20"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ldpem client: error: "), err
    assert message in err, err
    assert "Traceback" not in err
    for secret in (PASSWORD, "Wr0ng-Pa55word"):
        assert secret not in err and secret not in caplog.text
    assert _ledger_rows(state) == 0


def test_agent_runs_from_postgresql_without_the_password_anywhere(
    pg: Postgres,
    coordinator: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD)
    state = tmp_path / "agent"
    caplog.set_level(logging.DEBUG)
    argv = [
        "client",
        "--coordinator",
        coordinator,
        "--token-file",
        str(token_file(tmp_path, TOKENS[0])),
        "--state",
        str(state),
        "--model",
        "gmm",
        "--data",
        pg.url(),
        "--query",
        "SELECT x1, x2, x3 FROM complete ORDER BY id",
        "--password-file",
        str(secret),
        "--seed",
        "3",
        "--epsilon",
        "1",
        "--delta",
        "1e-3",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert _ledger_rows(state) > 0
    ledger = (state / "ledger.sqlite").read_bytes()
    for text in (captured.out, captured.err, caplog.text):
        assert PASSWORD not in text
    assert PASSWORD.encode() not in ledger
    run = httpx.get(f"{coordinator}/v1/runs", timeout=10).text
    page = httpx.get(f"{coordinator}/", timeout=10).text
    assert PASSWORD not in run and PASSWORD not in page


def test_compose_warehouse_init_and_query(
    pg: Postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy/warehouse/init.sql (run with psql, as the postgres image does) and the query
    of docker-compose.yml's hospital-d give the records `ldpem generate` wrote."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    csv = tmp_path / "records.csv"
    argv = ["generate", "--model", "mrm", "--d", "3", "--n", "700", "--seed", "5"]
    assert main([*argv, "--out", str(csv)]) == 0
    with psycopg.connect(pg.conninfo(), autocommit=True) as db:
        db.execute("CREATE DATABASE cdm")
    script = tmp_path / "init.sql"
    init = (root / "deploy" / "warehouse" / "init.sql").read_text()
    script.write_text(init.replace("/seed/records.csv", str(csv)))
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    done = subprocess.run(
        [str(pg.bin / "psql"), "-X", "-q", "-d", pg.url("cdm"), "-f", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    command = yaml.safe_load((root / "docker-compose.yml").read_text())["services"]["hospital-d"][
        "command"
    ]
    option = dict(zip(command[1::2], command[2::2], strict=True))
    monkeypatch.setenv("PGPASSWORD", "demo-warehouse-reader-NOT-SECRET")
    source = Source(
        pg.url("cdm", user="ldpem_reader"),
        query=option["--query"],
        columns=tuple(option["--columns"].split(",")),
        target=option["--target"],
    )
    records = source.load("mrm")
    expected = load_records(csv, "mrm")
    assert same_bits(records.x, expected.x)
    assert records.y is not None and expected.y is not None and same_bits(records.y, expected.y)
    # The agent's transaction is read-only, whatever the role may do (here: the superuser).
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    deleting = "WITH gone AS (DELETE FROM cdm.person RETURNING person_id) SELECT * FROM gone"
    with pytest.raises(UserError, match="DECLARE CURSOR must not contain data-modifying"):
        Source(pg.url("cdm"), query=f"{deleting} ORDER BY 1").load("gmm")
    sequence = "SELECT nextval('cdm.measurement_measurement_id_seq') AS x ORDER BY 1"
    with pytest.raises(UserError, match=r"cannot execute nextval\(\) in a read-only transaction"):
        Source(pg.url("cdm"), query=sequence).load("gmm")
    with psycopg.connect(pg.url("cdm")) as db:
        assert db.execute("SELECT count(*) FROM cdm.person").fetchone() == (700,)


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ("'Infinity'::float8", "row 1, column 'a': infinite value"),
        ("1e400::numeric", "row 1, column 'a': infinite value"),
        (
            "'NaN'::numeric",
            "row 1, column 'a': missing value (NULL), but model gmm allows none (only rmc "
            "accepts missing covariates)",
        ),
        ("true", "row 1, column 'a': not a number (type bool)"),
        ("DATE '2024-01-01'", "row 1, column 'a': not a number (type date)"),
        ("'{1,2}'::float8[]", "row 1, column 'a': not a number (type list)"),
    ],
)
def test_postgres_hostile_values(
    pg: Postgres, password_env: None, select: str, message: str
) -> None:
    with pytest.raises(UserError) as caught:
        Source(pg.url(), query=f"SELECT {select} AS a ORDER BY 1").load("gmm")
    assert str(caught.value) == f"{pg.url()} {message}"  # the row and column, never the value


def test_postgres_text_column_left_out_of_columns_is_not_read(
    pg: Postgres, password_env: None
) -> None:
    query = "SELECT 1.5::float8 AS a, 'Jane Q. Patient'::text AS name, 2 AS y ORDER BY 1"
    records = Source(pg.url(), query=query, columns=("a",)).load("mrm")
    assert records.x.tolist() == [[1.5]] and records.y is not None
    assert records.y.tolist() == [2.0]
    with pytest.raises(UserError) as caught:
        Source(pg.url(), query=query).load("mrm")
    assert str(caught.value) == f"{pg.url()} row 1, column 'name': not a number (type str)"


def test_postgres_integers_and_numeric_convert_exactly_where_float_can(
    pg: Postgres, password_env: None
) -> None:
    query = "SELECT 3::int2 AS a, -7::int8 AS b, 0.1::numeric AS c, 2.5::float4 AS d ORDER BY 1"
    records = Source(pg.url(), query=query).load("gmm")
    assert records.x.tolist() == [[3.0, -7.0, 0.1, 2.5]]
