"""SQL record sources: SQLite (the standard library, read-only) and PostgreSQL (psycopg 3, a
server-side cursor), fetched ``Source.chunk_rows`` rows at a time, each chunk checked.
Only the columns ``--columns``/``--target`` choose are converted and checked; the query's
other columns are fetched with the row and left alone (they may hold text).

A query must have a top-level ORDER BY (``has_top_level_order_by``): the order decides each
record's round. No message shows a password (``redacted_url``) or a value the query
computed (``first_line``: a PostgreSQL data exception quotes the value, a record's).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import sqlite3
from collections.abc import Callable, Iterator
from decimal import Decimal
from operator import itemgetter
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

import numpy as np
from numpy.typing import NDArray

from ldpem.client.columns import resolve_columns
from ldpem.common.core.errors import UserError

__all__ = [
    "Source",
    "first_line",
    "has_top_level_order_by",
    "missing_extra",
    "read_postgres",
    "read_sqlite",
    "redacted_url",
]


class Source(Protocol):
    """What the readers take from a data source: ``ldpem.client.sources.Source`` is one
    (declared here, where the readers live, so that they never import the module that
    dispatches to them)."""

    @property
    def location(self) -> str: ...
    @property
    def query(self) -> str | None: ...
    @property
    def columns(self) -> tuple[str, ...] | None: ...
    @property
    def target(self) -> str | None: ...
    @property
    def password_file(self) -> Path | None: ...
    @property
    def chunk_rows(self) -> int: ...
    @property
    def label(self) -> str: ...


#: Python types a numeric SQL value arrives as (psycopg: numeric is Decimal; bool is refused).
_NUMBER_TYPES = frozenset({int, float, Decimal, type(None)})
#: libpq's URL query parameters that carry a secret.
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
#: Where libpq looks for a password (PGSERVICE too, but it names more than a password).
_PASSWORD_HINT = "give it in PGPASSWORD, ~/.pgpass (or PGPASSFILE) or --password-file FILE"

Block = NDArray[np.float64]
Row = tuple[Any, ...]


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


def redacted_url(url: str) -> str:
    """``url`` without any password (user info or query parameter), for messages."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = "&".join(
        f"{key}={'***' if key.lower() in SECRET_PARAMETERS else value}"
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
    )
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def first_line(error: BaseException, secret: str | None) -> str:
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


def _to_block(label: str, names: list[str], rows: list[Row], first: int) -> Block:
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


def _chosen(
    source: Source, names: list[str], *, model: str
) -> tuple[list[str], Callable[[list[Row]], list[Row]]]:
    """The names of the columns the model reads (covariates, then the response) and the
    function that keeps only those values of a chunk of rows."""
    covariates, response = resolve_columns(
        source.label, names, model=model, columns=source.columns, target=source.target
    )
    used = [*covariates, *([] if response is None else [response])]
    chosen = [names[j] for j in used]
    if used == list(range(len(names))):
        return chosen, lambda rows: rows
    if len(used) == 1:
        # itemgetter of one index gives the value itself, not a 1-tuple.
        (only,) = used
        return chosen, lambda rows: [(row[only],) for row in rows]
    take = itemgetter(*used)
    return chosen, lambda rows: list(map(take, rows))


def read_sqlite(source: Source, *, model: str) -> tuple[list[str], Iterator[Block]]:
    """The names of the columns ``model`` reads and their blocks (``row_blocks``)."""
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
        raise UserError(f"{label}: cannot open: {first_line(error, None)}") from None
    try:
        cursor = db.execute(source.query or "")
    except sqlite3.Error as error:
        db.close()
        raise UserError(f"{label}: query failed: {first_line(error, None)}") from None
    try:
        names, pick = _chosen(source, _column_names(label, cursor.description), model=model)
    except UserError:
        db.close()
        raise

    def fetch(size: int) -> list[Row]:
        return pick(cursor.fetchmany(size))

    return names, row_blocks(
        source, names, fetch, failure=sqlite3.Error, secret=None, close=db.close
    )


def row_blocks(
    source: Source,
    names: list[str],
    fetch: Callable[[int], list[Row]],
    *,
    failure: type[Exception],
    secret: str | None,
    close: Callable[[], None],
) -> Iterator[Block]:
    """The blocks of a SQL cursor of ``source``: ``fetch(source.chunk_rows)`` (its
    ``fetchmany``, keeping the values of the columns ``names``) until it returns no row,
    each chunk checked by ``_to_block``; a ``failure`` while fetching is one line naming
    the last row read (``secret`` masked); ``close`` runs at the end, however the reading
    ends."""
    label = source.label
    first = 1
    try:
        while True:
            try:
                rows = fetch(source.chunk_rows)
            except failure as error:
                raise UserError(
                    f"{label}: reading failed after row {first - 1}: {first_line(error, secret)}"
                ) from None
            if not rows:
                return
            yield _to_block(label, names, rows, first)
            first += len(rows)
    finally:
        close()


def missing_extra(what: str, module: str, extra: str) -> UserError:
    return UserError(f"{what} needs the Python package {module}: pip install 'ldpem[{extra}]'")


def read_postgres(source: Source, *, model: str) -> tuple[list[str], Iterator[Block]]:
    """The names of the columns ``model`` reads and their blocks (``row_blocks``)."""
    try:
        import psycopg
    except ImportError:
        raise missing_extra("reading PostgreSQL", "psycopg", "postgres") from None
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
        line = first_line(error, secret)
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
        raise UserError(f"{label}: query failed: {first_line(error, secret)}") from None
    try:
        names, pick = _chosen(source, names, model=model)
    except UserError:
        connection.close()
        raise

    def close() -> None:
        # A server that went away leaves nothing to release.
        with contextlib.suppress(psycopg.Error):
            connection.close()

    def fetch(size: int) -> list[Row]:
        return pick(cursor.fetchmany(size))

    return names, row_blocks(
        source, names, fetch, failure=psycopg.Error, secret=secret, close=close
    )
