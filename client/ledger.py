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
* **The rounds.** For every (run, round) the agent first *reserves* the privacy that round's
  records spend (as the Gaussian privacy ratio μ = Δ/σ_r): the budget check and the row
  that charges it are ONE committed transaction, so no second writer can pass the same
  check in between. Then, BEFORE sending anything, it stores the exact report bytes. A
  retry after a crash or a timeout sends those bytes again, never a new draw: two different
  noisy reports for one round would spend the budget twice. A second, different report for
  a round is never made. A reserved round without bytes sent nothing; after a crash it is
  computed afresh at the same β, its spend already charged.

Budget: under partition each record takes part in one round of a run, so a record's spend
over all runs charged to one dataset composes as μ² = Σ_runs max_t μ_{r,t}² (Gaussian
mechanisms compose in μ², exactly for GDP and as a sum of ρ = μ²/2 for zCDP).
The ledger states it as privacy events (``ldpem.common.core.privacy_events``): each run's
costliest round a ``RatioEvent`` of its μ, composed (``spent_event``); ``spent_epsilon``
is the accountant's ε of that composition at the agent's δ (``event_epsilon``, the
accountant every part of ldpem uses). Rounds with no privacy (mechanism
``none``/``central``, μ = ∞) are recorded as such (a ``NonPrivateEvent``).

One agent per state directory: ``Ledger(directory, exclusive=True)`` (what the agent opens)
holds an exclusive ``flock`` on ``agent.lock`` for its lifetime, and a second agent on the
same directory stops with one line before it reads a record or contacts anyone.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

from ldpem.common.core.accounting import event_epsilon
from ldpem.common.core.errors import UserError
from ldpem.common.core.privacy_events import (
    ComposedEvent,
    DpEvent,
    NonPrivateEvent,
    RatioEvent,
)
from ldpem.common.infra.locks import LockHeld, hold_lock
from ldpem.common.infra.sqlite import connect_durable, immediate

__all__ = ["DEFAULT_DATASET", "LOCK_FILE", "Binding", "BudgetExceeded", "Entry", "Ledger"]

#: The file an agent holds locked (``flock``) while it uses its state directory.
LOCK_FILE = "agent.lock"

#: The dataset every record is charged to unless the operator declares another population.
DEFAULT_DATASET = "default"

_SCHEMA_VERSION = "3"

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
    fallback_epsilon REAL,
    PRIMARY KEY (run_key, round)
);
"""

#: The columns of ``rounds`` in the order ``Ledger.reserve`` writes them.
_ROUND_COLUMNS = (
    "run_key, round, data, mu, epsilon, delta, noise_std, beta_digest, body, status, "
    "persisted_at, acknowledged_at, fallback_epsilon"
)


@dataclass(frozen=True)
class Entry:
    """One round's ledger entry. ``data`` is the dataset the spend is charged to. status:
    reserved (spend charged, no report made yet: nothing was sent), persisted (report bytes
    stored, not yet acknowledged), acknowledged, late (the coordinator had closed the
    round; the budget counts as spent all the same), and for noise shares masked and
    refused (``client/secagg.py``)."""

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
    #: Noise shares only: the ε (at the run's δ) of a sum of the honest shares this agent
    #: assumes (t_min − max(c, b), or h), what a masked round costs, refused or not
    #: (docs/PRIVACY.md, "What a refused round costs"). None otherwise.
    fallback_epsilon: float | None = None


@dataclass(frozen=True)
class Binding:
    """What a run was started with: partition seed, records digest, dataset, and the
    canonical JSON of the public parameters and the agent's derived values."""

    seed: int
    records: str
    dataset: str
    binding: str


class BudgetExceeded(Exception):
    """A reservation would take some record over the budget; ``spent`` is the ε it would
    have reached (at the δ of the check)."""

    def __init__(self, spent: float) -> None:
        super().__init__(f"epsilon would reach {spent:.4g}")
        self.spent = spent


class Ledger:
    def __init__(self, directory: str | Path, *, exclusive: bool = False) -> None:
        """The ledger in ``directory`` (created if missing). ``exclusive``: hold the
        directory's lock until ``close`` (the agent's way); UserError, one line, when another
        process holds it. Readers (status commands, tests) open it without the lock."""
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock: int | None = None
        if exclusive:
            self._lock = _lock_directory(self.directory)
        self.path = self.directory / "ledger.sqlite"
        # One agent uses its ledger from one thread at a time; tests hand it between threads.
        self._db = connect_durable(self.path)
        self._db.executescript(_SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Bring an older ledger to the current schema, in one transaction.

        Schema 1 keyed spends by a digest of the records: all of them are charged to the
        default dataset (never less than before). Its runs (table ``runs``) have no binding
        and cannot be resumed: their parameters were never kept. Schema 2 had no
        ``fallback_epsilon``: its rounds get NULL (no fallback recorded)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is not None and row["value"] == _SCHEMA_VERSION:
            return
        with immediate(self._db):
            if row is None:
                self._db.execute("UPDATE rounds SET data = ?", (DEFAULT_DATASET,))
            columns = {r["name"] for r in self._db.execute("PRAGMA table_info(rounds)")}
            if "fallback_epsilon" not in columns:
                self._db.execute("ALTER TABLE rounds ADD COLUMN fallback_epsilon REAL")
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (_SCHEMA_VERSION,))

    def close(self) -> None:
        self._db.close()
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor releases the flock
            self._lock = None

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

    def unbind_unused(self, run_key: str) -> bool:
        """Remove the binding of ``run_key`` if no round of it was charged (a first contact
        that was refused); whether it was removed."""
        with immediate(self._db):
            removed = self._db.execute(
                "DELETE FROM bindings WHERE run_key = ? AND NOT EXISTS "
                "(SELECT 1 FROM rounds WHERE run_key = ?)",
                (run_key, run_key),
            ).rowcount
        return bool(removed)

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
        values = {field.name: row[field.name] for field in fields(Entry)}
        fallback = values["fallback_epsilon"]
        return Entry(
            **{
                **values,
                "body": bytes(values["body"]),
                "fallback_epsilon": None if fallback is None else float(fallback),
            }
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

    def _worst_ratios(self, dataset: str, extra: tuple[str, float] | None) -> list[float]:
        """Each run's largest μ over its rounds for the records of ``dataset`` (see module
        doc), with an ``extra`` (run_key, μ) round included."""
        worst: dict[str, float] = {}
        rows = self._db.execute("SELECT run_key, mu FROM rounds WHERE data = ?", (dataset,))
        pairs = [(r["run_key"], float(r["mu"])) for r in rows]
        if extra is not None:
            pairs.append(extra)
        for run_key, mu in pairs:
            worst[run_key] = max(worst.get(run_key, 0.0), mu)
        return list(worst.values())

    def spent_event(self, dataset: str, *, extra: tuple[str, float] | None = None) -> DpEvent:
        """What any one record of ``dataset`` has spent (plus ``extra``), as the
        accountant composes it: each run's costliest round, a ``RatioEvent`` of its μ (a
        ``NonPrivateEvent`` for μ = ∞), one after another (see module doc)."""
        return ComposedEvent(
            tuple(
                NonPrivateEvent() if math.isinf(mu) else RatioEvent(mu)
                for mu in self._worst_ratios(dataset, extra)
            )
        )

    def mu_squared(self, dataset: str, *, extra: tuple[str, float] | None = None) -> float:
        """μ² of the composition ``spent_event``: Σ over runs of max over rounds of μ²."""
        return math.fsum(mu * mu for mu in self._worst_ratios(dataset, extra))

    def spent_epsilon(
        self,
        dataset: str = DEFAULT_DATASET,
        *,
        delta: float,
        accounting: str,
        extra: tuple[str, float] | None = None,
    ) -> float:
        """ε (at ``delta``) spent by any one record of ``dataset`` so far (plus ``extra``):
        the accountant's ε of ``spent_event``."""
        return event_epsilon(self.spent_event(dataset, extra=extra), delta, accounting)

    def reserve(
        self,
        entry: Entry,
        *,
        budget: float | None,
        delta: float,
        accounting: str,
    ) -> Entry:
        """Charge ``entry``'s spend (status ``reserved``, no body) unless the round already
        has an entry, in ONE committed transaction with the budget check: the stored entry
        is returned (the existing one if there was one). ``budget``: the ε at ``delta`` that
        no record of ``entry.data`` may exceed (None: no check, for reports that are not
        private at all); BudgetExceeded when the reservation would exceed it."""
        with immediate(self._db):
            existing = self.entry(entry.run_key, entry.round)
            if existing is None:
                if budget is not None:
                    spent = self.spent_epsilon(
                        entry.data,
                        delta=delta,
                        accounting=accounting,
                        extra=(entry.run_key, entry.mu),
                    )
                    if spent > budget * (1.0 + 1e-9):
                        raise BudgetExceeded(spent)
                self._db.execute(
                    f"INSERT INTO rounds ({_ROUND_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,NULL,?)",
                    (
                        entry.run_key,
                        entry.round,
                        entry.data,
                        entry.mu,
                        entry.epsilon,
                        entry.delta,
                        entry.noise_std,
                        entry.beta_digest,
                        b"",
                        "reserved",
                        time.time(),
                        entry.fallback_epsilon,
                    ),
                )
        _fsync_dir(self.directory)
        if existing is not None:
            return existing
        return replace(entry, body=b"", status="reserved")

    def persist(self, entry: Entry, body: bytes) -> Entry:
        """Store the exact report bytes of the reserved ``entry``; committed (fsynced) on
        return. Only a reserved entry takes a body: a round's report is made once."""
        with immediate(self._db):
            changed = self._db.execute(
                "UPDATE rounds SET body = ?, status = 'persisted' "
                "WHERE run_key = ? AND round = ? AND status = 'reserved'",
                (body, entry.run_key, entry.round),
            ).rowcount
        if changed != 1:
            raise RuntimeError(
                f"round {entry.round} of run {entry.run_key} is not reserved; not persisted"
            )
        return replace(entry, body=body, status="persisted")

    def recharge(self, run_key: str, round: int, *, mu: float, epsilon: float, status: str) -> None:
        """Charge round ``round`` at least ``mu`` (its ε then ``epsilon``) and mark it
        ``status``: a masked round whose secure aggregation was refused after its masked
        input left counts at its fallback ε, never less than it was charged."""
        self._db.execute(
            "UPDATE rounds SET mu = MAX(mu, ?), epsilon = MAX(epsilon, ?), status = ?, "
            "acknowledged_at = ? WHERE run_key = ? AND round = ?",
            (mu, epsilon, status, time.time(), run_key, round),
        )

    def release(self, run_key: str, round: int, *, status: str) -> None:
        """Release the charge of round ``round`` whose report never left (μ and ε 0) and
        mark it ``status``: a secagg round refused before its masked input was sent. Only
        a reserved or persisted entry is released: a masked, sent or acknowledged round
        keeps its charge (RuntimeError)."""
        with immediate(self._db):
            changed = self._db.execute(
                "UPDATE rounds SET mu = 0, epsilon = 0, status = ?, acknowledged_at = ? "
                "WHERE run_key = ? AND round = ? AND status IN ('reserved', 'persisted')",
                (status, time.time(), run_key, round),
            ).rowcount
        if changed != 1:
            raise RuntimeError(
                f"round {round} of run {run_key} is not reserved or persisted; not released"
            )

    def mark(self, run_key: str, round: int, status: str) -> None:
        self._db.execute(
            "UPDATE rounds SET status = ?, acknowledged_at = ? WHERE run_key = ? AND round = ?",
            (status, time.time(), run_key, round),
        )


def _lock_directory(directory: Path) -> int:
    """An open descriptor of ``directory``/LOCK_FILE holding an exclusive flock, with this
    process's pid written in it (``common/infra/locks.py``, the coordinator's lock too);
    UserError naming the holder when another process has it."""
    try:
        return hold_lock(directory / LOCK_FILE)
    except LockHeld as held:
        pid = held.holder.get("pid", "")
        who = f" (pid {pid})" if pid.isdigit() else ""
        raise UserError(
            f"{directory}: another agent{who} is using this state directory; one agent per "
            "state directory (its ledger guards one budget)"
        ) from None


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
