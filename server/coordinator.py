"""The coordinator: runs of federated gradient EM, as the HTTP routes see them.

``Coordinator`` is a facade over four modules: run creation (``ldpem.server.runs``), the
round state machine (``ldpem.server.machine``: accept, close with the M-step, deadlines),
report policy (``ldpem.server.policy``) and queries (``ldpem.server.queries``); reports
are made durable by the store's group commit (``ldpem.server.groupcommit``). State lives
in the Store only; this object keeps nothing that a restart would need. Waiters of the
long-poll are woken when a round closes or the run ends. Refusals are the plain exceptions
of ``ldpem.server.refusals``; ``ldpem.server.app`` maps them to HTTP statuses.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Callable

from ldpem.common.wire import (
    HospitalParticipation,
    Identity,
    PublicParameters,
    ReportAck,
    ReportIn,
    RoundInfo,
    RoundSummary,
    RunCreate,
    RunCreated,
    RunSummary,
    Trajectory,
    report_digest,
)
from ldpem.server import queries, runrows, runs
from ldpem.server.background import Background
from ldpem.server.confidence import (
    CONFIDENCE,
    ConfidenceJob,
    ConfidenceOptions,
    confidence_due,
)
from ldpem.server.forecast import ForecastOptions
from ldpem.server.groupcommit import GroupCommit
from ldpem.server.machine import Outcome, accept_report, cancel, check_open, expire, resume
from ldpem.server.policy import (
    NOISE_FLOOR_RTOL,
    check_report,
    implied_epsilon,
    noise_floor,
    record_bound,
    run_noise_std,
)
from ldpem.server.refusals import Forbidden, shown_run
from ldpem.server.runs import hash_token
from ldpem.server.secagg.rounds import SecAggRounds
from ldpem.server.store import HospitalRow, RunRow, Store

__all__ = [
    "NOISE_FLOOR_RTOL",
    "Coordinator",
    "hash_token",
    "implied_epsilon",
    "noise_floor",
    "record_bound",
    "run_noise_std",
]


class Coordinator:
    """Runs of federated gradient EM over a Store, the facade the routes use: run creation
    (``runs``), the round state machine (``machine``), report policy (``policy``) and
    queries (``queries``) behind one object, plus authentication and the long-poll. Use
    from one asyncio event loop."""

    def __init__(
        self,
        store: Store,
        *,
        admin_token: str,
        range_sigmas: float = 10.0,
        max_noise_factor: float = 10.0,
        forecast: ForecastOptions | None = None,
        confidence: ConfidenceOptions | None = None,
        clock: Callable[[], float] = time.time,
        commit_window: float = 0.002,
    ) -> None:
        self.store = store
        #: Seconds a report waits for others to share its commit (see ``GroupCommit``).
        self.commit_window = commit_window
        self._commits: GroupCommit[Outcome] = GroupCommit(store, commit_window, self._committed)
        self._admin_hash = hash_token(admin_token)
        self.range_sigmas = range_sigmas
        self.max_noise_factor = max_noise_factor
        self.forecast = forecast if forecast is not None else ForecastOptions()
        self.confidence = confidence if confidence is not None else ConfidenceOptions()
        #: Runs whose confidence region is submitted, stored or failed: not looked at again.
        self._bootstrapped: set[str] = set()
        self.clock = clock
        self._changed = asyncio.Event()
        #: RoundInfo per run for the long-poll, valid until the next ``_notify``: a round
        #: closing wakes every waiting agent, and they all get the same answer. So every
        #: change of a run's status, round or deadline must call ``_notify`` (as it must
        #: anyway to wake the waiters).
        self._infos: dict[str, RoundInfo] = {}
        #: Enrolled hospitals by token digest: a hospital row never changes once its run is
        #: created, and an agent authenticates every request (nine a round under secagg).
        #: Only tokens found are kept, so bogus tokens cannot grow it.
        self._hospitals: dict[str, HospitalRow] = {}
        #: The secure aggregation rounds of runs whose noise is shared.
        self.secagg = SecAggRounds(
            store,
            clock=clock,
            notify=self._notify,
            range_sigmas=range_sigmas,
            commit_window=commit_window,
        )
        # A restart: the open secagg rounds continue from their stored messages.
        self.secagg.recover()
        #: Derived results (the forecast) computed off the event loop; readers are woken
        #: when one is stored.
        self.background = Background(on_change=self._notify)
        #: The health of the runs that ended: final, so assessed once (the run list asks
        #: for every run's, and an ended run may hold thousands of reports per round).
        self._ended_health: dict[str, queries.RunHealth] = {}

    # --- authentication ---------------------------------------------------------------
    def is_admin(self, token: str | None) -> bool:
        if not token:
            return False
        return hmac.compare_digest(hash_token(token), self._admin_hash)

    def hospital_for(self, token: str | None) -> HospitalRow | None:
        if not token:
            return None
        digest = hash_token(token)
        row = self._hospitals.get(digest) or self.store.hospital_by_token_hash(digest)
        if row is None or not hmac.compare_digest(row.token_hash, digest):
            return None
        self._hospitals[digest] = row
        return row

    # --- helpers ----------------------------------------------------------------------
    def _notify(self) -> None:
        self._infos.clear()
        event, self._changed = self._changed, asyncio.Event()
        event.set()
        self._start_confidences()

    def _start_confidences(self) -> None:
        """Submit the confidence region of every run that finished since (every change of
        a run's status comes through ``_notify``); from the event loop only, where
        ``Background`` runs (a synchronous ``tick`` leaves it to the next change)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        for run in self.store.list_runs():
            if run.id in self._bootstrapped or run.status == "running":
                continue
            self._bootstrapped.add(run.id)
            if confidence_due(self.store, run, self.confidence):
                job = ConfidenceJob(
                    self.store,
                    run.id,
                    runrows.request_of(run),
                    runrows.params_of(run),
                    tuple(run.beta),
                    self.confidence,
                    self.forecast,
                )
                self.background.submit(run.id, CONFIDENCE, job.compute, job.save, failed=job.failed)

    def _committed(self, outcomes: list[Outcome | Exception]) -> None:
        # Logged here, once the batch is committed and before any of its callers resumes,
        # in the batch's order: a report's acceptance before the round its last report
        # closed, and a report whose client went away meanwhile is logged too.
        done = [outcome for outcome in outcomes if isinstance(outcome, Outcome)]
        for outcome in done:
            for note in outcome.notes:
                note.emit()
        # Long-poll waiters only care about a new round or the end of the run: they are
        # woken when a batch closed a round, not on every report.
        if any(outcome.status == "closed" for outcome in done):
            self._notify()

    # --- runs -------------------------------------------------------------------------
    async def create_run(self, request: RunCreate) -> RunCreated:
        """Create the run and start its forecast in the background: the answer does not
        wait for it (``pending``); ``summary`` and the page show it once stored."""
        created = await runs.create_run(self.store, request, clock=self.clock)
        if request.forecast:
            self._start_forecast(created.run_id, request, created.params)
        self._notify()
        return created

    def cancel_run(self, run_id: str, reason: str) -> RunSummary:
        """End a running run as cancelled; its agents learn it from the long-poll and stop.
        Conflict when the run ended already. Committed on the event loop, not in a worker
        thread: a secure aggregation round closes on the loop too (``SecAggRounds``), so it
        cannot close between this commit and ``forget`` and write the run back to running."""
        with self.store.transaction():
            notes = cancel(self.store, run_id, reason)
        for note in notes:
            note.emit()
        self.secagg.forget(run_id)
        self._notify()
        return self.summary(run_id)

    def resume_run(self, run_id: str) -> RunSummary:
        """Set a paused run running again (the operator's answer to a pause, docs/SECAGG.md);
        its agents learn it from the long-poll and take part in its open round. Conflict
        unless it is paused."""
        with self.store.transaction():
            notes = resume(self.store, run_id)
        for note in notes:
            note.emit()
        self._notify()
        return self.summary(run_id)

    def _start_forecast(self, run_id: str, request: RunCreate, params: PublicParameters) -> None:
        job = runs.ForecastJob(self.store, run_id, request, params, self.forecast)
        self.background.submit(run_id, runs.FORECAST, job.compute, job.save, failed=job.failed)

    def resume_derived(self) -> None:
        """Submit again the forecasts and confidence regions a stopped coordinator was
        computing (call once the event loop runs)."""
        for run in self.store.list_runs():
            if runs.forecast_due(run):
                request = runrows.request_of(run)
                self._start_forecast(run.id, request, runrows.params_of(run))
        self._start_confidences()

    async def close(self) -> None:
        """Stop the background computations (what is not stored yet is dropped)."""
        await self.background.close()

    def _pending(self, run: RunRow) -> list[str]:
        """The run's derived results not stored yet: those computing, and its confidence
        region from the moment it finished (before ``_start_confidences`` submits it)."""
        kinds = self.background.pending(run.id)
        if CONFIDENCE not in kinds and confidence_due(self.store, run, self.confidence):
            kinds = sorted([*kinds, CONFIDENCE])
        return kinds

    def summary(self, run_id: str) -> RunSummary:
        """The run's summary with its health now (what ``ldpem run status`` shows) and the
        derived results still being computed."""
        run = runrows.get_run(self.store, run_id)
        return queries.summary(self.store, run, self._health(run, self.clock()), self._pending(run))

    def list_runs(self) -> list[RunSummary]:
        """Every run's summary, each with its health now (the status page's run list and
        ``GET /v1/runs``): the same assessment as ``summary``'s, so a run with missing
        rounds reads "degraded" in the list as on its own page."""
        now = self.clock()
        return [
            queries.summary(self.store, r, self._health(r, now), self._pending(r))
            for r in self.store.list_runs()
        ]

    def _health(self, run: RunRow, now: float) -> queries.RunHealth:
        """``queries.health`` of ``run`` at ``now``; kept once the run ended."""
        kept = self._ended_health.get(run.id)
        if kept is not None:
            return kept
        health = queries.health(self.store, run, now)
        if run.status != "running":
            self._ended_health[run.id] = health
        return health

    def identity(self, hospital: HospitalRow) -> Identity:
        return queries.identity(self.store, hospital)

    def round_info(self, run_id: str) -> RoundInfo:
        return queries.round_info(self.store, run_id)

    async def wait_round(self, run_id: str, after: int, wait: float) -> RoundInfo:
        """The open round once it is later than ``after`` (or the run ended), waiting up to
        ``wait`` seconds; after that, the current state, whatever it is. Time is the injected
        ``clock``; a wall clock set back mid-wait stretches no single sleep beyond ``wait``."""
        end = self.clock() + wait
        while True:
            event = self._changed
            info = self._infos.get(run_id)
            if info is None:
                info = self._infos[run_id] = self.round_info(run_id)
            remaining = min(wait, end - self.clock())
            # A paused run is neither open nor ended: the agents wait until it resumes.
            waiting = info.status == "paused" or (info.status == "running" and info.round <= after)
            if not waiting or remaining <= 0:
                return info
            try:
                await asyncio.wait_for(event.wait(), timeout=remaining)
            except TimeoutError:
                return self.round_info(run_id)

    def rounds(self, run_id: str) -> list[RoundSummary]:
        return queries.rounds(self.store, run_id)

    def trajectory(self, run_id: str) -> Trajectory:
        return queries.trajectory(self.store, run_id)

    def participation(self, run_id: str) -> list[HospitalParticipation]:
        """Per hospital: the rounds it reported and the weakest noise it declared, with the
        ε per record that noise implies (``weaker`` when below the run's budget)."""
        return queries.participation(self.store, run_id)

    def run_view(self, run_id: str) -> queries.RunView:
        """What the run's status page shows, with its health now."""
        run = runrows.get_run(self.store, run_id)
        return queries.run_view(self.store, run_id, self.clock(), self._pending(run))

    # --- reports ----------------------------------------------------------------------
    async def submit_report(
        self, run_id: str, t: int, hospital: HospitalRow, report: ReportIn
    ) -> ReportAck:
        if hospital.run_id != run_id:
            raise Forbidden(f"the token is not enrolled in run {shown_run(run_id)}")
        if report.hospital != hospital.name:
            raise Forbidden(f"the token belongs to hospital {hospital.name}, not {report.hospital}")
        digest = report_digest(report)
        run, duplicate = check_open(self.store, run_id, t, hospital, digest)
        if duplicate:
            return ReportAck(run_id=run_id, round=t, hospital=hospital.name, duplicate=True)
        params = runrows.params_of(run)
        check_report(
            params,
            hospital,
            t,
            report,
            allow_weaker=runrows.request_of(run).allow_weaker_reports,
            range_sigmas=self.range_sigmas,
            max_noise_factor=self.max_noise_factor,
        )
        outcome = await self._commits.durably(
            lambda: accept_report(self.store, params, hospital, t, report, digest, self.clock())
        )
        # Logged by _committed, with the rest of its batch.
        return ReportAck(
            run_id=run_id,
            round=t,
            hospital=hospital.name,
            duplicate=outcome.status == "duplicate",
        )

    # --- deadlines --------------------------------------------------------------------
    def tick(self) -> None:
        """Close, extend or fail the open rounds whose deadline passed (on this thread)."""
        if expire(self.store, self.clock()):
            self._notify()
        self.secagg.tick()

    async def check_deadlines(self) -> None:
        """``tick`` with its transactions in a worker thread, off the event loop."""
        if await asyncio.to_thread(expire, self.store, self.clock()):
            self._notify()
        self.secagg.tick()
