"""The round state machine: accept a report, close a round (the M-step), deadlines.

This module says what each change writes; the store's group commit
(``ldpem.server.groupcommit``) says how it becomes durable. Every change is one
transaction: accepting a report (and, if it is the last one, closing the round, taking the
M-step of ``ldpem.common.protocol`` and opening the next round) commits atomically, and
only then is the report acknowledged. Closing the last round also makes the run's reported
estimate (its ``final``: β^T, or the weighted average of its last iterates,
``queries.estimate_of``), stored as the run's β. A round
closes when every enrolled hospital reported, or at its deadline when at least the quorum
did; short of quorum at the deadline it is extended by another deadline period or the run
fails (``on_short``), never averaged over nothing.

What a change logs is returned as ``Note``s and logged by the caller once the transaction
has committed, in the order of the changes: logged inside the transaction, "round 8
closed … round 9 open" came before "round 8: report from a accepted" (the acceptance is
logged after the commit), and would have claimed a change that a failed COMMIT undid.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ldpem.common.protocol import (
    central_noise,
    central_rng,
    configured_model,
    m_step,
    start_finish,
)
from ldpem.common.wire import PublicParameters, ReportIn
from ldpem.server.queries import averaged_reports, estimate_of
from ldpem.server.refusals import Conflict
from ldpem.server.runrows import get_run, params_of, request_of
from ldpem.server.store import HospitalRow, ReportRow, RunRow, RunState, Store

__all__ = [
    "Note",
    "Outcome",
    "accept_report",
    "cancel",
    "check_open",
    "close_round",
    "expire",
    "lose_round",
    "resume",
]

log = logging.getLogger("ldpem.server")


@dataclass(frozen=True)
class Note:
    """A log line of a change, to be logged (``emit``) once the change is committed."""

    level: int
    message: str
    args: tuple[object, ...]
    fields: dict[str, object] = field(default_factory=dict)

    def emit(self) -> None:
        log.log(self.level, self.message, *self.args, extra=self.fields)


@dataclass(frozen=True)
class Outcome:
    """What ``accept_report`` did, and its log lines in causal order: the acceptance, then
    the round's closing (and the next round's opening) when this report closed it."""

    status: Literal["accepted", "closed", "duplicate"]
    notes: tuple[Note, ...] = ()


def check_open(
    store: Store, run_id: str, t: int, hospital: HospitalRow, digest: str
) -> tuple[RunRow, bool]:
    """The run, and whether this exact report was accepted before; Conflict when another
    report of this hospital was, or round t is not open."""
    run = get_run(store, run_id)
    previous = store.get_report(run_id, t, hospital.name)
    if previous is not None:
        if previous.digest == digest:
            return run, True
        raise Conflict(
            f"hospital {hospital.name} already reported round {t} with different contents",
        )
    if run.status != "running" or t != run.current_round:
        state = (
            f"the run is {run.status}"
            if run.status != "running"
            else f"the open round is {run.current_round}"
        )
        raise Conflict(f"round {t} is not open ({state})")
    return run, False


def accept_report(
    store: Store,
    params: PublicParameters,
    hospital: HospitalRow,
    t: int,
    report: ReportIn,
    digest: str,
    now: float,
) -> Outcome:
    """Insert ``report`` (inside the batch's transaction) and, if it is the round's last,
    close the round: "accepted", "closed", or "duplicate" when this exact report is in."""
    run_id = hospital.run_id
    # Checked again: a report earlier in the batch may have closed the round, or been this
    # one (a retry).
    current, again = check_open(store, run_id, t, hospital, digest)
    if again:
        return Outcome("duplicate")
    store.insert_report(
        ReportRow(
            run_id=run_id,
            t=t,
            hospital=hospital.name,
            count=report.count,
            total=list(report.total),
            noise_std=report.noise_std,
            digest=digest,
            received_at=now,
        )
    )
    accepted = Note(
        logging.INFO,
        "run %s round %d: report from %s accepted",
        (run_id, t, hospital.name),
        {"run": run_id, "round": t, "hospital": hospital.name},
    )
    # Counted, not loaded: loading the round's reports on every report made a round of N
    # hospitals cost O(N²) rows.
    if store.report_count(run_id, t) == store.hospital_count(run_id):
        closed = close_round(store, current, params, store.reports(run_id, t), now)
        return Outcome("closed", (accepted, *closed))
    return Outcome("accepted", (accepted,))


def close_round(
    store: Store, run: RunRow, params: PublicParameters, reports: list[ReportRow], now: float
) -> list[Note]:
    """M-step over ``reports`` and open the next round (inside a transaction); the log
    lines to write once it is committed."""
    t = run.current_round
    step = m_step(
        run.beta,
        [r.total for r in reports],
        [r.count for r in reports],
        eta=params.eta,
        central=central_noise(params, t),
        rng=central_rng(run.seed, t),
        start_from=start_finish(configured_model(params), params.sigma, t),
    )
    count = step.count
    noise = None if step.noise is None else [float(v) for v in step.noise]
    with np.errstate(over="ignore", invalid="ignore"):
        moved = np.linalg.norm(step.beta - np.asarray(run.beta, dtype=np.float64))
    finite = bool(np.all(np.isfinite(step.beta)) and np.isfinite(moved))
    if not finite:
        # Only reachable where the honest range is unbounded (mechanism none) or the run's
        # η or σ is extreme: an infinite β could be neither stored nor sent.
        reason = (
            f"the M-step of round {t} overflowed float64 (the reports' totals are too "
            "large); no estimate"
        )
        store.update_run(run.id, status="failed", current_round=t, beta=run.beta, reason=reason)
        return [
            Note(logging.ERROR, "run %s failed: %s", (run.id, reason), {"run": run.id, "round": t})
        ]
    beta_next = [float(v) for v in step.beta]
    store.close_round(run.id, t, now=now, beta_next=beta_next, noise=noise)
    return _advance(store, run, params, beta_next, now, len(reports), count)


def lose_round(store: Store, run: RunRow, params: PublicParameters, now: float) -> list[Note]:
    """Close the run's current round without an update, β^{t+1} = β^t, and open the next
    (inside a transaction): a secure-aggregation round whose sum could not be had or
    trusted (``server/secagg/rounds.py``) costs that round's step, never the run. Its holders'
    records were charged and are not asked again: the run's estimate has one step less."""
    t = run.current_round
    store.close_round(run.id, t, now=now, beta_next=list(run.beta), noise=None)
    return _advance(store, run, params, list(run.beta), now, 0, 0)


def _advance(
    store: Store,
    run: RunRow,
    params: PublicParameters,
    beta_next: list[float],
    now: float,
    reports: int,
    count: int,
) -> list[Note]:
    """After round t closed with ``beta_next``: finish the run, or open round t + 1."""
    t = run.current_round
    request = request_of(run)
    if t + 1 >= params.rounds:
        # The reported estimate, from the trajectory and the averaged rounds' reports (this
        # transaction sees the round just closed).
        betas = [r.beta for r in store.rounds(run.id)] + [beta_next]
        final = estimate_of(params, betas, averaged_reports(store, run.id, params))
        estimate = [float(v) for v in final.beta]
        store.update_run(run.id, status="finished", current_round=t + 1, beta=estimate, reason=None)
        return [
            Note(
                logging.INFO,
                "run %s finished after %d rounds: beta = %s (%s)",
                (run.id, t + 1, estimate, params.final),
                {"run": run.id, "round": t},
            )
        ]
    store.update_run(run.id, status="running", current_round=t + 1, beta=beta_next, reason=None)
    store.insert_round(run.id, t + 1, beta_next, now, now + request.round_deadline)
    return [
        Note(
            logging.INFO,
            "run %s round %d closed with %d reports (%d records); round %d open",
            (run.id, t, reports, count, t + 1),
            {"run": run.id, "round": t},
        )
    ]


def expire(store: Store, now: float) -> bool:
    """Close, extend or fail the open rounds whose deadline passed at ``now``; whether any
    run changed."""
    changed = False
    # Not the secure-aggregation rounds (their steps keep their own deadlines, secagg/rounds.py):
    # each tick read their runs for nothing.
    for r in store.open_rounds(plain=True):
        if r.deadline > now:
            continue
        notes: list[Note] = []
        with store.transaction():
            run = store.get_run(r.run_id)
            current = store.get_round(r.run_id, r.t)
            if (
                run is None
                or current is None
                or run.status != "running"
                or current.status != "open"
                or current.deadline > now
            ):
                continue
            reports = store.reports(r.run_id, r.t)
            request = request_of(run)
            fields: dict[str, object] = {"run": run.id, "round": r.t}
            if len(reports) >= run.quorum:
                notes += close_round(store, run, params_of(run), reports, now)
                closing = "run %s round %d closed at its deadline"
                notes.append(Note(logging.INFO, closing, (run.id, r.t), fields))
            elif request.on_short == "extend":
                store.set_deadline(run.id, r.t, now + request.round_deadline)
                notes.append(
                    Note(
                        logging.WARNING,
                        "run %s round %d: %d of quorum %d reported by the deadline; extended",
                        (run.id, r.t, len(reports), run.quorum),
                        fields,
                    )
                )
            else:
                reason = (
                    f"round {r.t} had {len(reports)} reports at its deadline, short of "
                    f"the quorum {run.quorum}"
                )
                store.update_run(
                    run.id,
                    status="failed",
                    current_round=r.t,
                    beta=run.beta,
                    reason=reason,
                )
                notes.append(Note(logging.ERROR, "run %s failed: %s", (run.id, reason), fields))
        for note in notes:  # committed
            note.emit()
        changed = True
    return changed


def resume(store: Store, run_id: str) -> list[Note]:
    """Set the paused run ``run_id`` running again (inside a transaction): its open round
    takes reports and secure-aggregation messages again. Conflict unless it is paused."""
    run = get_run(store, run_id)
    if run.status != "paused":
        raise Conflict(f"run {run_id} is {run.status}: only a paused run can be resumed")
    return _operator_set(
        store, run, "running", None, "run %s resumed by the operator at round %d", ()
    )


def cancel(store: Store, run_id: str, reason: str) -> list[Note]:
    """End the running run ``run_id`` as cancelled, with the operator's ``reason`` (inside a
    transaction); Conflict when it ended already. Its open round is left as it was, like a
    failed run's: no report is accepted any more and nothing is averaged."""
    run = get_run(store, run_id)
    if run.status not in ("running", "paused"):
        raise Conflict(
            f"run {run_id} is {run.status}: only a running or paused run can be cancelled"
        )
    stated = f"cancelled by the operator: {reason}"
    return _operator_set(
        store, run, "cancelled", stated, "run %s cancelled in round %d: %s", (reason,)
    )


def _operator_set(
    store: Store,
    run: RunRow,
    status: RunState,
    reason: str | None,
    line: str,
    more: tuple[str, ...],
) -> list[Note]:
    """Set ``run``'s ``status`` (and ``reason``) at its round and β, as the operator asked;
    the warning ``line`` to log, with the run, its round and ``more`` as its arguments."""
    store.update_run(
        run.id, status=status, current_round=run.current_round, beta=run.beta, reason=reason
    )
    context = {"run": run.id, "round": run.current_round}
    return [Note(logging.WARNING, line, (run.id, run.current_round, *more), context)]
