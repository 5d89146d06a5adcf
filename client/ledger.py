"""The hospital agent's privacy ledger: what each run bound, what each round spent, and the
exact bytes it sent.

One SQLite file in the agent's state directory (``ledger.sqlite``). Three things live here:

* **The budget key.** A record's privacy spend is charged to a *dataset* of the state
  directory: ``default`` unless the operator declares another population with
  ``--dataset NAME``. The key is never derived from the records or the file: the same
  patients reordered, re-exported or with one more row appended are charged against the
  same budget. The digest of the records last used for each dataset is kept only to warn
  when they changed (docs/PRIVACY.md, "Threat model").
* **The run binding.** At the first contact with a run the agent stores everything the run
  depends on: the coordinator's public parameters (canonical JSON: model, d, σ, T, η,
  mechanism, s, β_s, C, records per round, published budget, accounting), its own derived
  values (the budget it calibrates for, σ_r, μ), the dataset, the partition seed and the
  digest of the records. A later contact that differs in any of them is refused before
  anything is sent: a changed T or seed or record set would re-partition the records and
  let a record report in two rounds.
* **The rounds.** For every (run, round) the agent writes, in ONE committed transaction and
  BEFORE sending anything, the privacy spent by that round's records (as the Gaussian
  privacy ratio μ = Δ/σ_r) and the exact report bytes. A retry after a crash or a timeout
  sends those bytes again, never a new draw: two different noisy reports for one round
  would spend the budget twice. A second, different report for a round is never made.

Budget: under partition each record takes part in one round of a run, so a record's spend
over all runs charged to one dataset composes as μ² = Σ_runs max_t μ_{r,t}² (Gaussian
mechanisms compose in μ², exactly for GDP and as a sum of ρ = μ²/2 for zCDP).
``spent_epsilon`` converts that at the agent's δ. Rounds with no privacy (mechanism
``none``/``central``, μ = ∞) are recorded as such.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from ldpem.common.accounting import epsilon_for_ratio
from ldpem.common.sqlite import connect_durable

__all__ = ["DEFAULT_DATASET", "Binding", "Entry", "Ledger"]

#: The dataset every record is charged to unless the operator declares another population.
DEFAULT_DATASET = "default"

_SCHEMA_VERSION = "2"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS bindings (
    run_key TEXT PRIMARY KEY,
    seed TEXT NOT NULL,
    records TEXT NOT NULL,
    dataset TEXT NOT NULL,
    binding TEXT NOT NULL
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
    """One round's ledger entry. ``data`` is the dataset the spend is charged to. status:
    persisted (not yet acknowledged), acknowledged, or late (the coordinator had closed the
    round; the budget counts as spent all the same)."""

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


@dataclass(frozen=True)
class Binding:
    """What a run was started with: partition seed, records digest, dataset, and the
    canonical JSON of the public parameters and the agent's derived values."""

    seed: int
    records: str
    dataset: str
    binding: str


class Ledger:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "ledger.sqlite"
        # One agent uses its ledger from one thread at a time; tests hand it between threads.
        self._db = connect_durable(self.path)
        self._db.executescript(_SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """A ledger written before schema 2 keyed spends by a digest of the records: charge
        all of them to the default dataset (never less than before). Its runs (table
        ``runs``) have no binding and cannot be resumed: their parameters were never kept."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is not None:
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("UPDATE rounds SET data = ?", (DEFAULT_DATASET,))
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (_SCHEMA_VERSION,))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    def seed(self) -> int:
        """The agent's partition seed: 128 bits drawn once from the operating system, then
        kept with the ledger. It only decides which round each record reports in; the noise
        of a report never comes from it (docs/PRIVACY.md)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'seed'").fetchone()
        if row is not None:
            return int(row["value"])
        value = secrets.randbits(128)
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('seed', ?)", (str(value),))
        return self.seed()

    def binding(self, run_key: str) -> Binding | None:
        """What ``run_key`` was started with, or None at the first contact. A run started by
        an agent older than schema 2 has an empty binding string."""
        row = self._db.execute(
            "SELECT seed, records, dataset, binding FROM bindings WHERE run_key = ?", (run_key,)
        ).fetchone()
        if row is not None:
            return Binding(
                seed=int(row["seed"]),
                records=str(row["records"]),
                dataset=str(row["dataset"]),
                binding=str(row["binding"]),
            )
        legacy = self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'runs'"
        ).fetchone()
        if legacy is not None:
            old = self._db.execute(
                "SELECT seed, data FROM runs WHERE run_key = ?", (run_key,)
            ).fetchone()
            if old is not None:
                return Binding(
                    seed=int(old["seed"]), records=str(old["data"]), dataset="", binding=""
                )
        return None

    def bind_run(self, run_key: str, bound: Binding) -> Binding:
        """Store ``bound`` at the first call for ``run_key``; return what is stored."""
        self._db.execute(
            "INSERT OR IGNORE INTO bindings VALUES (?, ?, ?, ?, ?)",
            (run_key, str(bound.seed), bound.records, bound.dataset, bound.binding),
        )
        stored = self.binding(run_key)
        assert stored is not None
        return stored

    def last_records(self, dataset: str) -> str | None:
        """Digest of the records last used for ``dataset`` (to warn when they change)."""
        row = self._db.execute(
            "SELECT value FROM meta WHERE key = ?", (f"records:{dataset}",)
        ).fetchone()
        return None if row is None else str(row["value"])

    def remember_records(self, dataset: str, digest: str) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"records:{dataset}", digest)
        )

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

    def mu_squared(self, dataset: str, *, extra: tuple[str, float] | None = None) -> float:
        """Σ over runs of max over rounds of μ² for the records of ``dataset`` (see module
        doc), with an ``extra`` (run_key, μ) round included."""
        worst: dict[str, float] = {}
        rows = self._db.execute("SELECT run_key, mu FROM rounds WHERE data = ?", (dataset,))
        pairs = [(r["run_key"], float(r["mu"])) for r in rows]
        if extra is not None:
            pairs.append(extra)
        for run_key, mu in pairs:
            worst[run_key] = max(worst.get(run_key, 0.0), mu * mu)
        return math.fsum(worst.values())

    def spent_epsilon(
        self,
        dataset: str = DEFAULT_DATASET,
        *,
        delta: float,
        accounting: str,
        extra: tuple[str, float] | None = None,
    ) -> float:
        """ε (at ``delta``) spent by any one record of ``dataset`` so far (plus ``extra``)."""
        total = self.mu_squared(dataset, extra=extra)
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
