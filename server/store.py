"""The coordinator's durable state: one SQLite file (stdlib sqlite3, WAL, synchronous=FULL).

Every state change is one transaction (``Store.transaction``): a report is acknowledged
only after the transaction that inserted it has committed, so killing the process at any
moment leaves either the state before the change or the state after it, never half of it.
Reports that arrive together share one such transaction (one fsync): the group commit of
``ldpem.server.groupcommit``, which runs it in a worker thread.

Tables
------
runs       one row per run: its request, public parameters, status, open round and β.
hospitals  enrolment: name, record count and SHA-256 of the bearer token (never the token).
rounds     one row per opened round: β^t, deadline; once closed β^{t+1}, central noise drawn.
reports    one per (run, round, hospital) at most: sum, count, σ_r, digest (idempotent retry).
secagg_messages  every message of a secure-aggregation round, received or produced, in
           order (``seq``): what a restarted coordinator replays (``ldpem.server.secagg.rounds``).
derived    results derived from a run off the event loop (``ldpem.server.background``),
           one JSON body per (run, kind), for those without a column of their own.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, TypeVar

from ldpem.common.core.naming import natural_key
from ldpem.common.infra.sqlite import connect_durable, immediate

__all__ = ["HospitalRow", "ReportRow", "RoundRow", "RoundState", "RunRow", "RunState", "Store"]

RunState = Literal["running", "paused", "finished", "failed", "cancelled"]
RoundState = Literal["open", "closed"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL,
    current_round INTEGER NOT NULL,
    beta TEXT NOT NULL,
    quorum INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    created_at REAL NOT NULL,
    expected_error REAL,
    trivial_error REAL NOT NULL,
    warning TEXT,
    reason TEXT,
    forecast TEXT
);
CREATE TABLE IF NOT EXISTS hospitals (
    run_id TEXT NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    records INTEGER NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS rounds (
    run_id TEXT NOT NULL REFERENCES runs(id),
    t INTEGER NOT NULL,
    status TEXT NOT NULL,
    beta TEXT NOT NULL,
    opened_at REAL NOT NULL,
    deadline REAL NOT NULL,
    closed_at REAL,
    beta_next TEXT,
    noise TEXT,
    PRIMARY KEY (run_id, t)
);
CREATE TABLE IF NOT EXISTS reports (
    run_id TEXT NOT NULL,
    t INTEGER NOT NULL,
    hospital TEXT NOT NULL,
    count INTEGER NOT NULL,
    total TEXT NOT NULL,
    noise_std REAL NOT NULL,
    digest TEXT NOT NULL,
    received_at REAL NOT NULL,
    PRIMARY KEY (run_id, t, hospital),
    FOREIGN KEY (run_id, t) REFERENCES rounds(run_id, t)
);
CREATE TABLE IF NOT EXISTS secagg_messages (
    run_id TEXT NOT NULL,
    t INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    holder TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run_id, t, seq)
);
CREATE TABLE IF NOT EXISTS derived (
    run_id TEXT NOT NULL REFERENCES runs(id),
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run_id, kind)
);
"""


def _dumps(values: list[float]) -> str:
    return json.dumps(values)


def _loads(text: str) -> list[float]:
    values = json.loads(text)
    return [float(v) for v in values]


@dataclass(frozen=True)
class RunRow:
    id: str
    request: str
    params: str
    status: RunState
    current_round: int
    beta: list[float]
    quorum: int
    seed: int
    created_at: float
    expected_error: float | None
    trivial_error: float
    warning: str | None
    reason: str | None
    #: The forecast stated at creation, as ``wire.Forecast`` JSON (None: no forecast).
    forecast: str | None = None


@dataclass(frozen=True)
class HospitalRow:
    run_id: str
    name: str
    records: int
    token_hash: str


@dataclass(frozen=True)
class RoundRow:
    run_id: str
    t: int
    status: RoundState
    beta: list[float]
    opened_at: float
    deadline: float
    closed_at: float | None
    beta_next: list[float] | None
    noise: list[float] | None


@dataclass(frozen=True)
class ReportRow:
    run_id: str
    t: int
    hospital: str
    count: int
    total: list[float]
    noise_std: float
    digest: str
    received_at: float


_Row = TypeVar("_Row", RunRow, HospitalRow, RoundRow, ReportRow)
_ROUND_LISTS = ("beta", "beta_next", "noise")


def _from_row(cls: type[_Row], row: sqlite3.Row, *lists: str) -> _Row:
    """``row`` as a ``cls``: each field from the column of its name, the ``lists`` decoded
    from their JSON (a NULL one stays None). The tables' columns are named as the fields."""
    values = {field.name: row[field.name] for field in fields(cls)}
    for name in lists:
        if values[name] is not None:
            values[name] = _loads(values[name])
    return cls(**values)


class Store:
    """SQLite persistence. Methods are called from one event loop; a lock guards the shared
    connection against the odd call from a worker thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.RLock()
        self._db = connect_durable(self.path)
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
        if "forecast" not in columns:
            # A state file written before forecasts kept their band: its runs have none.
            self._db.execute("ALTER TABLE runs ADD COLUMN forecast TEXT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE … COMMIT, or ROLLBACK if the block raises."""
        with self._lock, immediate(self._db):
            yield

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """SAVEPOINT … RELEASE inside a transaction; ROLLBACK TO it if the block raises."""
        with self._lock:
            self._db.execute("SAVEPOINT item")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK TO item")
                self._db.execute("RELEASE item")
                raise
            self._db.execute("RELEASE item")

    # The lock makes a read and its fetch one step against a write from a worker thread.
    def _one(self, sql: str, args: tuple[object, ...] = ()) -> sqlite3.Row | None:
        with self._lock:
            row: sqlite3.Row | None = self._db.execute(sql, args).fetchone()
        return row

    def _all(self, sql: str, args: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _count(self, sql: str, args: tuple[object, ...]) -> int:
        with self._lock:
            return int(self._db.execute(sql, args).fetchone()[0])

    # --- runs -------------------------------------------------------------------------
    def insert_run(self, run: RunRow, hospitals: list[HospitalRow]) -> None:
        self._db.execute(
            "INSERT INTO runs (id, request, params, status, current_round, beta, quorum, "
            "seed, created_at, expected_error, trivial_error, warning, reason, forecast) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run.id,
                run.request,
                run.params,
                run.status,
                run.current_round,
                _dumps(run.beta),
                run.quorum,
                run.seed,
                run.created_at,
                run.expected_error,
                run.trivial_error,
                run.warning,
                run.reason,
                run.forecast,
            ),
        )
        self._db.executemany(
            "INSERT INTO hospitals VALUES (?,?,?,?)",
            [(h.run_id, h.name, h.records, h.token_hash) for h in hospitals],
        )

    def get_run(self, run_id: str) -> RunRow | None:
        row = self._one("SELECT * FROM runs WHERE id = ?", (run_id,))
        return None if row is None else _from_row(RunRow, row, "beta")

    def list_runs(self) -> list[RunRow]:
        rows = self._all("SELECT * FROM runs ORDER BY created_at, id")
        return [_from_row(RunRow, r, "beta") for r in rows]

    def update_run(
        self,
        run_id: str,
        *,
        status: RunState,
        current_round: int,
        beta: list[float],
        reason: str | None,
    ) -> None:
        self._db.execute(
            "UPDATE runs SET status = ?, current_round = ?, beta = ?, reason = ? WHERE id = ?",
            (status, current_round, _dumps(beta), reason, run_id),
        )

    def set_forecast(
        self,
        run_id: str,
        *,
        forecast: str | None,
        expected_error: float | None,
        warning: str | None,
    ) -> None:
        """Store the forecast computed after the run was created (``wire.Forecast`` JSON,
        None: none could be made), its mean and the warning that goes with it."""
        with self.transaction():
            self._db.execute(
                "UPDATE runs SET forecast = ?, expected_error = ?, warning = ? WHERE id = ?",
                (forecast, expected_error, warning, run_id),
            )

    # --- derived results (ldpem.server.background) --------------------------------------
    def put_derived(self, run_id: str, kind: str, body: str) -> None:
        """Store (or replace) the ``kind`` result of run ``run_id``, a JSON ``body``."""
        with self.transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO derived (run_id, kind, body) VALUES (?,?,?)",
                (run_id, kind, body),
            )

    def derived(self, run_id: str, kind: str) -> str | None:
        """The stored ``kind`` result of run ``run_id`` (JSON), None until there is one."""
        row = self._one("SELECT body FROM derived WHERE run_id = ? AND kind = ?", (run_id, kind))
        return None if row is None else str(row[0])

    # --- hospitals --------------------------------------------------------------------
    def hospital_by_token_hash(self, token_hash: str) -> HospitalRow | None:
        row = self._one("SELECT * FROM hospitals WHERE token_hash = ?", (token_hash,))
        return None if row is None else _from_row(HospitalRow, row)

    def hospital_count(self, run_id: str) -> int:
        return self._count("SELECT COUNT(*) FROM hospitals WHERE run_id = ?", (run_id,))

    def hospitals(self, run_id: str) -> list[HospitalRow]:
        """The run's hospitals in natural order of their names (h2 before h10), the order
        every page and answer lists them in."""
        rows = self._all("SELECT * FROM hospitals WHERE run_id = ?", (run_id,))
        return sorted((_from_row(HospitalRow, r) for r in rows), key=lambda h: natural_key(h.name))

    # --- rounds -----------------------------------------------------------------------
    def insert_round(
        self, run_id: str, t: int, beta: list[float], now: float, deadline: float
    ) -> None:
        self._db.execute(
            "INSERT INTO rounds (run_id, t, status, beta, opened_at, deadline) "
            "VALUES (?, ?, 'open', ?, ?, ?)",
            (run_id, t, _dumps(beta), now, deadline),
        )

    def close_round(
        self,
        run_id: str,
        t: int,
        *,
        now: float,
        beta_next: list[float],
        noise: list[float] | None,
    ) -> None:
        self._db.execute(
            "UPDATE rounds SET status = 'closed', closed_at = ?, beta_next = ?, noise = ? "
            "WHERE run_id = ? AND t = ?",
            (now, _dumps(beta_next), None if noise is None else _dumps(noise), run_id, t),
        )

    def set_deadline(self, run_id: str, t: int, deadline: float) -> None:
        self._db.execute(
            "UPDATE rounds SET deadline = ? WHERE run_id = ? AND t = ?", (deadline, run_id, t)
        )

    def get_round(self, run_id: str, t: int) -> RoundRow | None:
        row = self._one("SELECT * FROM rounds WHERE run_id = ? AND t = ?", (run_id, t))
        return None if row is None else _from_row(RoundRow, row, *_ROUND_LISTS)

    def rounds(self, run_id: str) -> list[RoundRow]:
        rows = self._all("SELECT * FROM rounds WHERE run_id = ? ORDER BY t", (run_id,))
        return [_from_row(RoundRow, r, *_ROUND_LISTS) for r in rows]

    def open_rounds(self, *, plain: bool = False) -> list[RoundRow]:
        # ``plain``: only runs without secure aggregation (their steps have own deadlines).
        secure = " AND json_extract(runs.params, '$.holders') IS NULL" if plain else ""
        rows = self._all(
            "SELECT rounds.* FROM rounds JOIN runs ON runs.id = rounds.run_id "
            "WHERE rounds.status = 'open' AND runs.status = 'running'" + secure
        )
        return [_from_row(RoundRow, r, *_ROUND_LISTS) for r in rows]

    # --- reports ----------------------------------------------------------------------
    def insert_report(self, report: ReportRow) -> None:
        self._db.execute(
            "INSERT INTO reports VALUES (?,?,?,?,?,?,?,?)",
            (
                report.run_id,
                report.t,
                report.hospital,
                report.count,
                _dumps(report.total),
                report.noise_std,
                report.digest,
                report.received_at,
            ),
        )

    def get_report(self, run_id: str, t: int, hospital: str) -> ReportRow | None:
        row = self._one(
            "SELECT * FROM reports WHERE run_id = ? AND t = ? AND hospital = ?",
            (run_id, t, hospital),
        )
        return None if row is None else _from_row(ReportRow, row, "total")

    def report_count(self, run_id: str, t: int) -> int:
        return self._count("SELECT COUNT(*) FROM reports WHERE run_id = ? AND t = ?", (run_id, t))

    def reports(self, run_id: str, t: int | None = None) -> list[ReportRow]:
        if t is None:
            rows = self._all(
                "SELECT * FROM reports WHERE run_id = ? ORDER BY t, hospital", (run_id,)
            )
        else:
            rows = self._all(
                "SELECT * FROM reports WHERE run_id = ? AND t = ? ORDER BY hospital", (run_id, t)
            )
        return [_from_row(ReportRow, r, "total") for r in rows]

    # Secure aggregation (``ldpem.server.secagg.rounds``): every message of a round, in order.
    def add_secagg(self, run_id: str, t: int, rows: list[tuple[str, str, str]]) -> None:
        """Append (kind, holder, body) ``rows`` to round t's messages, in order, inside the
        caller's transaction (so that a step's outputs are stored all or none)."""
        with self._lock:
            seq = self._db.execute(  # one lookup in the key (COUNT(*) read the round's rows)
                "SELECT MAX(seq) + 1 FROM secagg_messages WHERE run_id = ? AND t = ?", (run_id, t)
            ).fetchone()[0]  # NULL before the round's first message
            self._db.executemany(
                "INSERT INTO secagg_messages (run_id, t, seq, kind, holder, body) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, t, (seq or 0) + i, *row) for i, row in enumerate(rows)],
            )

    def secagg_messages(self, run_id: str, t: int) -> list[tuple[str, str, str]]:
        """(kind, holder, body) of round t's stored messages, in the order received."""
        with self._lock:
            rows = self._db.execute(
                "SELECT kind, holder, body FROM secagg_messages WHERE run_id = ? AND t = ? "
                "ORDER BY seq",
                (run_id, t),
            ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def secagg_outline(
        self, run_id: str, light: tuple[str, ...], t: int | None = None
    ) -> list[tuple[int, str, str, str]]:
        """(t, kind, holder, body) of the run's stored secagg rows (of round ``t`` only,
        when given), in order, with the body of the ``light`` kinds only ("" for the rest:
        a round's keys and shares are large and not needed to say who sent what)."""
        marks = ",".join("?" * len(light))
        where, args = ("", ()) if t is None else (" AND t = ?", (t,))
        rows = self._all(
            f"SELECT t, kind, holder, CASE WHEN kind IN ({marks}) THEN body ELSE '' END "
            f"FROM secagg_messages WHERE run_id = ?{where} ORDER BY t, seq",
            (*light, run_id, *args),
        )
        return [(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]
