"""The hospital agent's privacy ledger: what each round spent, and the exact bytes it sent.

One SQLite file in the agent's state directory. For every (coordinator, run, round) the
agent writes, in ONE committed transaction and BEFORE sending anything, the privacy spent
by the records of that round (as the Gaussian privacy ratio μ = Δ/σ_r) and the exact report
bytes. A retry after a crash or a timeout sends those bytes again, never a new draw: two
different noisy reports for one round would spend the budget twice.

Budget: under partition each record takes part in one round of a run, so the records of
round t of run r have spent μ_{r,t}; a record's spend over all runs on the same data file
composes as μ² = Σ_runs max_t μ_{r,t}² (Gaussian mechanisms compose in μ², exactly for
GDP and as a sum of ρ = μ²/2 for zCDP). ``spent_epsilon`` converts that at the agent's δ.
Rounds with no privacy (mechanism ``none``/``central``, μ = ∞) are recorded as such.
"""

from __future__ import annotations

import math
import os
import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from ldpem.common.accounting import epsilon_for_ratio

__all__ = ["Entry", "Ledger"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_key TEXT PRIMARY KEY,
    seed INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rounds (
    run_key TEXT NOT NULL,
    round INTEGER NOT NULL,
    data TEXT NOT NULL,
    mu REAL NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    noise_std REAL NOT NULL,
    beta_digest TEXT NOT NULL,
    body BLOB NOT NULL,
    status TEXT NOT NULL,
    persisted_at REAL NOT NULL,
    acknowledged_at REAL,
    PRIMARY KEY (run_key, round)
);
"""


@dataclass(frozen=True)
class Entry:
    """One round's ledger entry. status: persisted (not yet acknowledged), acknowledged, or
    late (the coordinator had closed the round; the budget counts as spent all the same)."""

    run_key: str
    round: int
    data: str
    mu: float
    epsilon: float
    delta: float
    noise_std: float
    beta_digest: str
    body: bytes
    status: str


class Ledger:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "ledger.sqlite"
        # One agent uses its ledger from one thread at a time; tests hand it between threads.
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def seed(self) -> int:
        """The agent's random seed: drawn once, then kept with the ledger."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'seed'").fetchone()
        if row is not None:
            return int(row["value"])
        value = secrets.randbits(62)
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('seed', ?)", (str(value),))
        return self.seed()

    def bind_run(self, run_key: str, *, seed: int, data: str) -> tuple[int, str]:
        """The (seed, records digest) a run was started with: stored at the first call, then
        returned unchanged, so that a restart partitions the same records the same way."""
        self._db.execute("INSERT OR IGNORE INTO runs VALUES (?, ?, ?)", (run_key, seed, data))
        row = self._db.execute(
            "SELECT seed, data FROM runs WHERE run_key = ?", (run_key,)
        ).fetchone()
        return int(row["seed"]), str(row["data"])

    def entry(self, run_key: str, round: int) -> Entry | None:
        row = self._db.execute(
            "SELECT * FROM rounds WHERE run_key = ? AND round = ?", (run_key, round)
        ).fetchone()
        if row is None:
            return None
        return Entry(
            run_key=row["run_key"],
            round=row["round"],
            data=row["data"],
            mu=row["mu"],
            epsilon=row["epsilon"],
            delta=row["delta"],
            noise_std=row["noise_std"],
            beta_digest=row["beta_digest"],
            body=bytes(row["body"]),
            status=row["status"],
        )

    def entries(self, run_key: str | None = None) -> list[Entry]:
        if run_key is None:
            rows = self._db.execute("SELECT run_key, round FROM rounds ORDER BY rowid").fetchall()
        else:
            rows = self._db.execute(
                "SELECT run_key, round FROM rounds WHERE run_key = ? ORDER BY round", (run_key,)
            ).fetchall()
        out = []
        for row in rows:
            entry = self.entry(row["run_key"], row["round"])
            assert entry is not None
            out.append(entry)
        return out

    def mu_squared(self, data: str, *, extra: tuple[str, float] | None = None) -> float:
        """Σ over runs of max over rounds of μ² for the records of ``data`` (see module doc),
        with an ``extra`` (run_key, μ) round included."""
        worst: dict[str, float] = {}
        rows = self._db.execute("SELECT run_key, mu FROM rounds WHERE data = ?", (data,))
        pairs = [(r["run_key"], float(r["mu"])) for r in rows]
        if extra is not None:
            pairs.append(extra)
        for run_key, mu in pairs:
            worst[run_key] = max(worst.get(run_key, 0.0), mu * mu)
        return math.fsum(worst.values())

    def spent_epsilon(
        self,
        data: str,
        *,
        delta: float,
        accounting: str,
        extra: tuple[str, float] | None = None,
    ) -> float:
        """ε (at ``delta``) spent by any one record of ``data`` so far (plus ``extra``)."""
        total = self.mu_squared(data, extra=extra)
        if math.isinf(total):
            return math.inf
        if total == 0.0:
            return 0.0
        return epsilon_for_ratio(math.sqrt(total), delta, accounting)

    def persist(self, entry: Entry) -> None:
        """Record the spend and the exact report bytes; committed (fsynced) on return."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute(
                "INSERT INTO rounds VALUES (?,?,?,?,?,?,?,?,?,?,?,NULL)",
                (
                    entry.run_key,
                    entry.round,
                    entry.data,
                    entry.mu,
                    entry.epsilon,
                    entry.delta,
                    entry.noise_std,
                    entry.beta_digest,
                    entry.body,
                    entry.status,
                    time.time(),
                ),
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        _fsync_dir(self.directory)

    def mark(self, run_key: str, round: int, status: str) -> None:
        self._db.execute(
            "UPDATE rounds SET status = ?, acknowledged_at = ? WHERE run_key = ? AND round = ?",
            (status, time.time(), run_key, round),
        )


def _fsync_dir(directory: Path) -> None:
    """Make a newly created WAL file's directory entry durable too (POSIX)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
