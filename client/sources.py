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

import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

import numpy as np
from numpy.typing import NDArray

from ldpem.client.columns import check_id_columns, resolve_columns
from ldpem.client.data import load_records
from ldpem.client.parquet import read_parquet
from ldpem.client.sql import has_top_level_order_by, read_postgres, read_sqlite, redacted_url
from ldpem.common.core.errors import UserError
from ldpem.common.models import Records, get_model

__all__ = ["CHUNK_ROWS", "Source"]

#: Rows fetched and checked at a time from Parquet and SQL sources.
CHUNK_ROWS = 1 << 15
_SQL_SCHEMES = ("postgresql", "postgres", "sqlite")
#: Python types a numeric SQL value arrives as (psycopg: numeric is Decimal; bool is refused).
_NUMBER_TYPES = frozenset({int, float, Decimal, type(None)})
#: libpq's URL query parameters that carry a secret.
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
#: The first bytes of every SQLite 3 database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: Where libpq looks for a password (PGSERVICE too, but it names more than a password).
_PASSWORD_HINT = "give it in PGPASSWORD, ~/.pgpass (or PGPASSFILE) or --password-file FILE"

Block = NDArray[np.float64]


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
            key.lower() in SECRET_PARAMETERS for key, _ in parse_qsl(parts.query)
        )
        if parts.password is not None or secret_parameter:
            raise UserError(
                f"{redacted_url(self.location)}: the URL carries a password, which would "
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
        return self.location if self.scheme is None else redacted_url(self.location)

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
                names, blocks = read_parquet(path, self, model=model)
                return _collect(self.label, names, blocks, self, model=model)
            return load_records(path, model, columns=self.columns, target=self.target)
        if scheme == "sqlite":
            names, blocks = read_sqlite(self, model=model)
        else:
            names, blocks = read_postgres(self, model=model)
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
