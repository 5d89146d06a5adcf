"""Where a hospital's records come from: a file (CSV, .npy, Parquet) or a SQL query.

    --data records.csv | records.npy | records.parquet
    --data sqlite:///relative/path.db  --query "SELECT … ORDER BY …"   (sqlite:////abs.db)
    --data postgresql://user@host:5432/db --query "SELECT … ORDER BY …"

``--columns a,b,c`` picks the covariates (GMM: the coordinates) and ``--target y`` the
response (default: the column named ``y``; every other column is a covariate). A SQL NULL,
a Parquet null or a NaN is a missing covariate: only model rmc accepts one.

Parquet (pyarrow, extra ``ldpem[parquet]``) is read row group by row group, in batches;
SQL results are fetched ``CHUNK_ROWS`` rows at a time (PostgreSQL: a server-side cursor,
psycopg 3, extra ``ldpem[postgres]``; SQLite: the standard library, read-only). Each chunk
is checked and appended to growing float64 arrays, so besides the records themselves the
memory used is one chunk, not n rows. Nothing is returned (and so nothing is spent) before
every record has been read and validated.

The order of the records decides which round each reports in, so reading again must give
the same order: a query without a top-level ORDER BY is refused.

No message names a value read from a record, only its row and column: messages end up in
logs and tickets that leave the hospital. Errors of the PostgreSQL server that may quote a
value (SQLSTATE class 22, data exceptions) are shown by their condition name only.

Credentials never come from the command line: PostgreSQL takes its password from the
environment (PGPASSWORD), the password file (~/.pgpass, PGPASSFILE), a libpq service
(PGSERVICE, ``?service=``) or ``--password-file``. A URL carrying a password is refused;
messages show the URL without it.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import numpy as np
from numpy.typing import NDArray

from ldpem.client.columns import check_id_columns
from ldpem.client.data import RESPONSE_COLUMN, load_records
from ldpem.common.errors import UserError
from ldpem.common.models import Records, get_model

__all__ = [
    "CHUNK_ROWS",
    "Source",
    "has_top_level_order_by",
    "parse_columns",
    "resolve_columns",
]

#: Rows fetched and checked at a time from Parquet and SQL sources.
CHUNK_ROWS = 1 << 15
_SQL_SCHEMES = ("postgresql", "postgres", "sqlite")
#: Python types a numeric SQL value arrives as (psycopg: numeric is Decimal; bool is refused).
_NUMBER_TYPES = frozenset({int, float, Decimal, type(None)})
#: libpq's URL query parameters that carry a secret.
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
#: The first bytes of every SQLite 3 database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: Where libpq looks for a password (PGSERVICE too, but it names more than a password).
_PASSWORD_HINT = "give it in PGPASSWORD, ~/.pgpass (or PGPASSFILE) or --password-file FILE"

Block = NDArray[np.float64]


def parse_columns(text: str | None) -> tuple[str, ...] | None:
    """``--columns a,b,c`` as a tuple of names (None when not given)."""
    if text is None:
        return None
    names = tuple(name.strip() for name in text.split(","))
    if not names or any(not name for name in names):
        raise UserError(f"--columns must be comma-separated column names, got {text!r}")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UserError(f"--columns names {duplicates[0]!r} twice")
    return names


def resolve_columns(
    label: str,
    available: Sequence[str],
    *,
    model: str,
    columns: Sequence[str] | None,
    target: str | None,
) -> tuple[list[int], int | None]:
    """Indices into ``available`` of the covariates and of the response (None for GMM).

    Defaults: the response is the column named ``y``; the covariates are all other columns.
    """
    spec = get_model(model)
    duplicates = sorted({name for name in available if list(available).count(name) > 1})
    if duplicates:
        raise UserError(f"{label}: duplicate column name {duplicates[0]!r}")

    def index(name: str, option: str) -> int:
        if name not in available:
            raise UserError(
                f"{label}: no column {name!r} ({option}); the columns are {list(available)}"
            )
        return list(available).index(name)

    response: int | None = None
    if spec.has_response:
        name = target if target is not None else RESPONSE_COLUMN
        if name not in available and target is None:
            raise UserError(
                f"{label}: model {model} needs a response column named {RESPONSE_COLUMN!r} "
                f"(or --target NAME), found columns {list(available)}"
            )
        response = index(name, "--target")
    elif target is not None:
        raise UserError(f"--target: model {model} has no response, got {target!r}")
    if columns is not None:
        covariates = [index(name, "--columns") for name in columns]
        if response is not None and response in covariates:
            raise UserError(
                f"{label}: column {available[response]!r} is both --target and in --columns"
            )
    else:
        covariates = [j for j in range(len(available)) if j != response]
    if not covariates:
        raise UserError(f"{label}: model {model} needs at least one covariate column")
    return covariates, response


def has_top_level_order_by(query: str) -> bool:
    """Whether ``query`` has ORDER BY outside parentheses, string literals and comments."""
    depth = 0
    flat: list[str] = []
    i = 0
    while i < len(query):
        char = query[i]
        if char in "'\"":
            end = query.find(char, i + 1)
            i = len(query) if end < 0 else end + 1
            flat.append(" ")
            continue
        if query.startswith("--", i):
            end = query.find("\n", i)
            i = len(query) if end < 0 else end
            continue
        if query.startswith("/*", i):
            end = query.find("*/", i + 2)
            i = len(query) if end < 0 else end + 2
            flat.append(" ")
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0:
            flat.append(char)
        i += 1
    return re.search(r"\border\s+by\b", "".join(flat), re.IGNORECASE) is not None


def _redacted_url(url: str) -> str:
    """``url`` without any password (user info or query parameter), for messages."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = "&".join(
        f"{key}={'***' if key.lower() in _SECRET_PARAMETERS else value}"
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
    )
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def _first_line(error: BaseException, secret: str | None) -> str:
    """The first line of a library's error message, ``secret`` masked. A PostgreSQL data
    exception (SQLSTATE class 22: "invalid input syntax for type double precision: "…"",
    "value "…" is out of range") quotes the offending value, which is a record's: only its
    condition name and SQLSTATE are shown."""
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate.startswith("22"):
        return (
            f"a value the query computed is invalid ({type(error).__name__}, SQLSTATE "
            f"{sqlstate}; the server's message is not shown, as it may quote a record)"
        )
    text = str(error).strip().splitlines()
    line = text[0].strip() if text else type(error).__name__
    if secret:
        line = line.replace(secret, "***")
    return line


@dataclass(frozen=True)
class Source:
    """A data source: ``location`` is a file path or a database URL (with ``query``)."""

    location: str
    query: str | None = None
    columns: tuple[str, ...] | None = None
    target: str | None = None
    password_file: Path | None = None
    chunk_rows: int = CHUNK_ROWS

    def __post_init__(self) -> None:
        # Checked here, before the agent contacts anyone: a bad source spends nothing.
        scheme = self.scheme
        if scheme is None:
            if self.query is not None:
                raise UserError(
                    f"--query needs a database URL in --data (postgresql://… or sqlite:///…), "
                    f"got {self.location!r}"
                )
            if self.password_file is not None:
                raise UserError("--password-file is for a postgresql:// --data only")
            return
        parts = urlsplit(self.location)
        secret_parameter = any(
            key.lower() in _SECRET_PARAMETERS for key, _ in parse_qsl(parts.query)
        )
        if parts.password is not None or secret_parameter:
            raise UserError(
                f"{_redacted_url(self.location)}: the URL carries a password, which would "
                "show in process lists, shell history and logs; remove it and use PGPASSWORD, "
                "a password file (~/.pgpass or PGPASSFILE), a libpq service (PGSERVICE) or "
                "--password-file FILE"
            )
        if self.query is None or not self.query.strip():
            raise UserError(f'{self.label}: a database source needs --query "SELECT … ORDER BY …"')
        if not has_top_level_order_by(self.query):
            raise UserError(
                f"{self.label}: the query has no ORDER BY; records must come in the same order "
                "every time they are read (the order decides each record's round), so end it "
                "with ORDER BY a key, e.g. ORDER BY person_id"
            )
        if scheme == "sqlite" and self.password_file is not None:
            raise UserError("--password-file is for a postgresql:// --data only")
        if self.chunk_rows < 1:
            raise UserError(f"chunk_rows must be >= 1, got {self.chunk_rows}")

    @property
    def scheme(self) -> str | None:
        """ "postgresql", "sqlite", or None for a file."""
        match = re.match(r"^([a-z][a-z0-9+.-]*)://", self.location, re.IGNORECASE)
        if match is None:
            return None
        scheme = match.group(1).lower()
        if scheme not in _SQL_SCHEMES:
            raise UserError(
                f"--data {self.location.split('://', 1)[0]}://…: unknown kind of source; "
                "use a file (.csv, .npy, .parquet), postgresql://… or sqlite:///…"
            )
        return "postgresql" if scheme == "postgres" else scheme

    @property
    def label(self) -> str:
        """How messages name this source: the path, or the URL without any password."""
        return self.location if self.scheme is None else _redacted_url(self.location)

    @property
    def name(self) -> str:
        """A short name without "//" (it may become a Path): the file, or "postgresql
        database DB on HOST" / "sqlite database PATH"."""
        scheme = self.scheme
        if scheme is None:
            return self.location
        parts = urlsplit(self.location)
        if scheme == "sqlite":
            return f"sqlite database {unquote(parts.path)[1:]}"
        params = dict(parse_qsl(parts.query))
        host = parts.hostname or params.get("host") or params.get("service") or "localhost"
        database = parts.path.lstrip("/") or params.get("dbname") or "(default)"
        return f"postgresql database {unquote(database)} on {host}"

    def load(self, model: str) -> Records:
        """The validated records for ``model``; UserError (one line) on any problem."""
        scheme = self.scheme
        if scheme is None:
            path = Path(self.location)
            _refuse_sqlite_file(path)
            if path.suffix.lower() == ".parquet":
                if not path.is_file():
                    raise UserError(f"{path}: no such file")
                names, blocks = _parquet(path, self, model=model)
                return _collect(self.label, names, blocks, self, model=model)
            return load_records(path, model, columns=self.columns, target=self.target)
        if scheme == "sqlite":
            names, blocks = _sqlite(self)
        else:
            names, blocks = _postgres(self)
        return _collect(self.label, names, blocks, self, model=model)

    def loader(self, _path: Path, model: str) -> Records:
        """``load`` with the agent's loader signature (the path is this source's)."""
        return self.load(model)


def _refuse_sqlite_file(path: Path) -> None:
    """UserError when the file given as --data is an SQLite database: read as CSV it would
    only be "not a UTF-8 text file", which does not say what to do instead."""
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError:
        return  # missing or unreadable: the loader says so
    if head == _SQLITE_MAGIC:
        # sqlite:/// + a relative path, sqlite://// + an absolute one (its own leading /).
        raise UserError(
            f"{path}: an SQLite database, not a records file; use --data sqlite:///{path} "
            'with --query "SELECT … ORDER BY …"'
        )


def _collect(
    label: str,
    names: list[str],
    blocks: Iterator[Block],
    source: Source,
    *,
    model: str,
) -> Records:
    """Check each block and append it to growing x (n × d) and y (n) arrays.

    ``ndarray.resize`` reallocates in place where it can (glibc: mremap for large arrays),
    so growing costs no second copy of the records.
    """
    spec = get_model(model)
    try:
        covariates, response = resolve_columns(
            label, names, model=model, columns=source.columns, target=source.target
        )
        d = len(covariates)
        capacity = source.chunk_rows
        x = np.empty((capacity, d), dtype=np.float64)
        y = np.empty(capacity if response is not None else 0, dtype=np.float64)
        n = 0
        for block in blocks:
            rows = block.shape[0]
            infinite = np.isinf(block)
            if infinite.any():
                row, column = np.argwhere(infinite)[0]
                raise UserError(
                    f"{label} row {n + row + 1}, column {names[column]!r}: infinite value"
                )
            if response is not None:
                missing_y = np.isnan(block[:, response])
                if missing_y.any():
                    row = int(np.argmax(missing_y))
                    raise UserError(
                        f"{label} row {n + row + 1}, column {names[response]!r}: the response "
                        "may not be missing (NULL)"
                    )
            block_x = block[:, covariates]
            if not spec.allows_missing:
                missing_x = np.isnan(block_x)
                if missing_x.any():
                    row, column = np.argwhere(missing_x)[0]
                    raise UserError(
                        f"{label} row {n + row + 1}, column {names[covariates[column]]!r}: "
                        f"missing value (NULL), but model {model} allows none "
                        "(only rmc accepts missing covariates)"
                    )
            if n + rows > capacity:
                capacity = max(2 * capacity, n + rows)
                x.resize((capacity, d), refcheck=False)
                if response is not None:
                    y.resize(capacity, refcheck=False)
            x[n : n + rows] = block_x
            if response is not None:
                y[n : n + rows] = block[:, response]
            n += rows
    finally:
        close = getattr(blocks, "close", None)
        if close is not None:
            close()
    if n == 0:
        raise UserError(f"{label}: no records (the query or file gave no rows)")
    x.resize((n, d), refcheck=False)
    check_id_columns(label, [names[j] for j in covariates], x, source.columns)
    if response is None:
        return Records(x, None)
    y.resize(n, refcheck=False)
    return Records(x, y)


def _to_block(label: str, names: list[str], rows: list[tuple[Any, ...]], first: int) -> Block:
    """SQL rows (tuples of int/float/Decimal/None) as a float64 block, NULL as NaN."""
    kinds = set(map(type, itertools.chain.from_iterable(rows)))
    if not kinds <= _NUMBER_TYPES:
        for number, row in enumerate(rows, start=first):
            for name, value in zip(names, row, strict=True):
                if type(value) not in _NUMBER_TYPES:
                    # The type only: the value is a record's (it may even be the number
                    # stored as text).
                    raise UserError(
                        f"{label} row {number}, column {name!r}: not a number "
                        f"(type {type(value).__name__})"
                    )
    try:
        return np.array(rows, dtype=np.float64).reshape(len(rows), len(names))
    except OverflowError:
        for number, row in enumerate(rows, start=first):
            for name, value in zip(names, row, strict=True):
                try:
                    float(value) if value is not None else None
                except OverflowError:
                    raise UserError(
                        f"{label} row {number}, column {name!r}: too large for a float"
                    ) from None
        raise


def _column_names(label: str, description: Any) -> list[str]:
    if not description:
        raise UserError(f"{label}: the query returns no columns")
    return [str(column[0]) for column in description]


def _sqlite(source: Source) -> tuple[list[str], Iterator[Block]]:
    label = source.label
    raw = source.location.split("://", 1)[1]
    if not raw.startswith("/"):
        raise UserError(f"{label}: expected sqlite:///relative/path.db or sqlite:////abs/path.db")
    path = Path(unquote(urlsplit(source.location).path)[1:] or ".")
    if not path.is_file():
        raise UserError(f"{label}: no such file {str(path)!r}")
    try:
        # Read-only: a query cannot change the hospital's database.
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise UserError(f"{label}: cannot open: {_first_line(error, None)}") from None
    try:
        cursor = db.execute(source.query or "")
    except sqlite3.Error as error:
        db.close()
        raise UserError(f"{label}: query failed: {_first_line(error, None)}") from None
    names = _column_names(label, cursor.description)

    return names, _row_blocks(
        label,
        names,
        lambda: cursor.fetchmany(source.chunk_rows),
        failure=sqlite3.Error,
        secret=None,
        close=db.close,
    )


def _row_blocks(
    label: str,
    names: list[str],
    fetch: Callable[[], list[tuple[Any, ...]]],
    *,
    failure: type[Exception],
    secret: str | None,
    close: Callable[[], None],
) -> Iterator[Block]:
    """The blocks of a SQL cursor: ``fetch()`` until it returns no row, each chunk checked
    by ``_to_block``; a ``failure`` while fetching is one line naming the last row read
    (``secret`` masked); ``close`` runs at the end, however the reading ends."""
    first = 1
    try:
        while True:
            try:
                rows = fetch()
            except failure as error:
                raise UserError(
                    f"{label}: reading failed after row {first - 1}: {_first_line(error, secret)}"
                ) from None
            if not rows:
                return
            yield _to_block(label, names, rows, first)
            first += len(rows)
    finally:
        close()


def _missing_extra(what: str, module: str, extra: str) -> UserError:
    return UserError(f"{what} needs the Python package {module}: pip install 'ldpem[{extra}]'")


def _postgres(source: Source) -> tuple[list[str], Iterator[Block]]:
    try:
        import psycopg
    except ImportError:
        raise _missing_extra("reading PostgreSQL", "psycopg", "postgres") from None
    label = source.label
    secret: str | None = None
    extra: dict[str, Any] = {}
    if source.password_file is not None:
        try:
            secret = source.password_file.read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(
                f"--password-file {source.password_file}: cannot read it ({type(error).__name__})"
            ) from None
        if not secret:
            raise UserError(f"--password-file {source.password_file}: the file is empty")
        extra["password"] = secret
    url = source.location
    if url.lower().startswith("postgres://"):
        url = "postgresql://" + url.split("://", 1)[1]
    try:
        connection = psycopg.connect(url, autocommit=False, **extra)
    except psycopg.Error as error:
        line = _first_line(error, secret)
        if "no password supplied" in line:
            line += f"; the server asks for a password: {_PASSWORD_HINT}"
        elif "password authentication failed" in line:
            line += f"; check the password ({_PASSWORD_HINT})"
        raise UserError(f"{label}: cannot connect: {line}") from None
    try:
        connection.read_only = True
        cursor = connection.cursor(name="ldpem_records", binary=True)
        cursor.itersize = source.chunk_rows
        cursor.execute(source.query or "")
        names = _column_names(label, cursor.description)
    except psycopg.Error as error:
        connection.close()
        raise UserError(f"{label}: query failed: {_first_line(error, secret)}") from None

    def close() -> None:
        # A server that went away leaves nothing to release.
        with contextlib.suppress(psycopg.Error):
            connection.close()

    return names, _row_blocks(
        label,
        names,
        lambda: cursor.fetchmany(source.chunk_rows),
        failure=psycopg.Error,
        secret=secret,
        close=close,
    )


def _parquet(path: Path, source: Source, *, model: str) -> tuple[list[str], Iterator[Block]]:
    """The chosen columns' names (covariates, then the response) and their batches."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise _missing_extra("reading Parquet", "pyarrow", "parquet") from None
    label = str(path)
    try:
        reader = pq.ParquetFile(path)
        schema = reader.schema_arrow
    except (pa.ArrowException, OSError) as error:
        raise UserError(
            f"{label}: not a readable Parquet file ({_first_line(error, None)})"
        ) from None
    covariates, response = resolve_columns(
        label, schema.names, model=model, columns=source.columns, target=source.target
    )
    names = [schema.names[j] for j in covariates] + (
        [] if response is None else [schema.names[response]]
    )
    for name in names:
        field = schema.field(name)
        kind = field.type
        if not (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
        ):
            raise UserError(f"{label}, column {field.name!r}: not a number column (type {kind})")

    def blocks() -> Iterator[Block]:
        first = 1
        try:
            for batch in reader.iter_batches(batch_size=source.chunk_rows, columns=names):
                block = np.empty((batch.num_rows, len(names)), dtype=np.float64)
                for j, column in enumerate(batch.columns):
                    # Nulls become NaN: a missing value, as an empty CSV cell.
                    # safe=False: an integer beyond 2**53 rounds to the nearest double,
                    # as it does from CSV and SQL; the safe cast's error would quote it.
                    floats = pc.cast(column, pa.float64(), safe=False)
                    block[:, j] = floats.to_numpy(zero_copy_only=False)
                yield block
                first += batch.num_rows
        except (pa.ArrowException, OSError) as error:
            raise UserError(
                f"{label}: reading failed after row {first - 1}: {_first_line(error, None)}"
            ) from None
        finally:
            reader.close()

    return names, blocks()
