"""The round state machine: create a run, open a round, accept reports, close, M-step.

State lives in the Store only; this object keeps nothing that a restart would need. Every
change is one transaction: accepting a report (and, if it is the last one, closing the
round, taking the M-step and opening the next round) commits atomically, and only then is
the report acknowledged. Reports that arrive together share one transaction (group commit,
each in its own savepoint), so one fsync makes many durable. Waiters of the long-poll are
woken when a round closes or the run ends.

A round closes when every enrolled hospital reported, or at its deadline when at least the
quorum did; short of quorum at the deadline it is extended by another deadline period or
the run fails (``on_short``), never averaged over nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from pydantic import ValidationError

from ldpem.common.accounting import epsilon_spent
from ldpem.common.planning import BEAT_FRACTION
from ldpem.common.protocol import (
    central_noise,
    central_rng,
    holder_contribution,
    holder_noise_std,
    m_step,
    public_parameters,
    report_sensitivity,
    run_start,
)
from ldpem.common.wire import (
    HospitalParticipation,
    HospitalToken,
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
    describe_errors,
    expected_round_count,
    report_digest,
)
from ldpem.server.forecast import forecast_error
from ldpem.server.store import HospitalRow, ReportRow, RunRow, Store

__all__ = [
    "NOISE_FLOOR_RTOL",
    "Coordinator",
    "ProtocolError",
    "hash_token",
    "implied_epsilon",
    "noise_floor",
    "public_parameters",
    "run_noise_std",
]

log = logging.getLogger("ldpem.server")


class ProtocolError(Exception):
    """A request the coordinator refuses: HTTP ``status`` and a one-line ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def hash_token(token: str) -> str:
    """SHA-256 of a bearer token (tokens are 256-bit random, so a fast hash suffices)."""
    return hashlib.sha256(token.encode()).hexdigest()


#: Relative slack of the noise floor. Agents compute σ_r themselves with the same code as
#: ``noise_floor``, so an honest σ_r at the run's budget equals the floor up to rounding.
NOISE_FLOOR_RTOL = 1e-6


def usable_parameters(request: RunCreate) -> PublicParameters:
    """``public_parameters(request)``, or ProtocolError 422 (one line) when extreme values
    (ε = 5e-324, τ = 1e308, …) make a derived quantity zero or overflow float64: a run whose
    σ_r or bounds are not finite positive numbers could accept no report."""
    try:
        params = public_parameters(request)
        usable = True
        for hospital in request.hospitals:
            floor = noise_floor(params.mechanism, params, hospital.records)
            noise = run_noise_std(params, hospital.records)
            usable = usable and math.isfinite(noise) and math.isfinite(floor)
            if params.mechanism != "none":
                usable = usable and 0 < record_bound(params, hospital.records) < math.inf
    except ValidationError as error:
        raise ProtocolError(
            422, f"the run's derived parameters are out of range: {describe_errors(error.errors())}"
        ) from None
    except (ValueError, ArithmeticError) as error:
        reason = " ".join(str(error).split())[:200]
        raise ProtocolError(422, f"the run's parameters are out of range: {reason}") from None
    if not usable:
        raise ProtocolError(
            422, "the run's parameters are out of range: its noise or record bound overflows"
        )
    return params


def run_noise_std(params: PublicParameters, records: int = 1) -> float:
    """σ_r of a local report (for ``hospital``: of the one draw on the sum of a holder
    enrolled with ``records`` records) calibrated at the run's own budget and accounting; 0
    for mechanisms without holder noise: the reference of the ``max_noise_factor`` ceiling.
    The σ_r an honest agent with the run's budget uses (``protocol.holder_mechanism``)."""
    return holder_noise_std(
        params, records, epsilon=params.epsilon, delta=params.delta, accounting=params.accounting
    )


def noise_floor(mechanism: str, params: PublicParameters, records: int) -> float:
    """The least noise std a report under ``mechanism`` by a holder enrolled with
    ``records`` records may declare and still be (ε, δ)-DP per record at the run's budget:
    the σ_r that tight ("exact") accounting needs for the mechanism's sensitivity, whatever
    accounting the run publishes (an agent may calibrate with either; both meet the budget
    above this floor). 0 for central and none, whose reports carry no noise."""
    return holder_noise_std(
        params,
        records,
        epsilon=params.epsilon,
        delta=params.delta,
        accounting="exact",
        mechanism=mechanism,
    )


def implied_epsilon(
    mechanism: str, params: PublicParameters, noise_std: float, records: int
) -> float | None:
    """ε per record at the run's δ of a report declaring ``noise_std`` by a holder enrolled
    with ``records`` records (tight accounting); None when the report carries no noise
    (central, none); infinity when σ_r is so small that Δ/σ_r or ε overflows float64
    (σ_r = 1e-300: no privacy)."""
    sensitivity = report_sensitivity(params, records, mechanism=mechanism)
    if sensitivity is None or not noise_std > 0:
        return None
    return _epsilon(sensitivity, noise_std, params.delta)


@lru_cache(maxsize=1024)
def _epsilon(sensitivity: float, noise_std: float, delta: float) -> float:
    with np.errstate(over="ignore"):
        try:
            return epsilon_spent(
                sensitivity=sensitivity, noise_std=noise_std, delta=delta, accounting="exact"
            )
        except (ValueError, ArithmeticError):  # μ = Δ/σ_r or ε beyond float64
            return math.inf


def record_bound(params: PublicParameters, records: int = 1) -> float:
    """Largest |coordinate| of one record's contribution before noise (inf for ``none``), for
    a holder enrolled with ``records`` records (only ``hospital`` depends on it)."""
    return holder_contribution(params, records).record_bound(params.d)


def _shown(run_id: str) -> str:
    """A run id from the URL as it may appear in a one-line message: quoted, escaped,
    shortened."""
    return repr(run_id[:40]) + ("…" if len(run_id) > 40 else "")


@dataclass(frozen=True)
class _Caller:
    run_id: str
    hospital: str


class Coordinator:
    """Runs of federated gradient EM over a Store. Use from one asyncio event loop."""

    def __init__(
        self,
        store: Store,
        *,
        admin_token: str,
        range_sigmas: float = 10.0,
        max_noise_factor: float = 10.0,
        forecast_seeds: int = 4,
        forecast_max_records: int = 200_000,
        clock: Callable[[], float] = time.time,
        commit_window: float = 0.002,
    ) -> None:
        self.store = store
        #: Seconds a report waits for others to share its commit (see ``_durably``).
        self.commit_window = commit_window
        self._pending: list[tuple[Callable[[], str], asyncio.Future[str]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._admin_hash = hash_token(admin_token)
        self.range_sigmas = range_sigmas
        self.max_noise_factor = max_noise_factor
        self.forecast_seeds = forecast_seeds
        self.forecast_max_records = forecast_max_records
        self.clock = clock
        self._changed = asyncio.Event()
        #: RoundInfo per run for the long-poll, valid until the next ``_notify``: a round
        #: closing wakes every waiting agent, and they all get the same answer. So every
        #: change of a run's status, round or deadline must call ``_notify`` (as it must
        #: anyway to wake the waiters).
        self._infos: dict[str, RoundInfo] = {}

    # --- authentication ---------------------------------------------------------------
    def is_admin(self, token: str | None) -> bool:
        if not token:
            return False
        return hmac.compare_digest(hash_token(token), self._admin_hash)

    def hospital_for(self, token: str | None) -> HospitalRow | None:
        if not token:
            return None
        digest = hash_token(token)
        row = self.store.hospital_by_token_hash(digest)
        if row is None or not hmac.compare_digest(row.token_hash, digest):
            return None
        return row

    # --- helpers ----------------------------------------------------------------------
    def _run(self, run_id: str) -> RunRow:
        run = self.store.get_run(run_id)
        if run is None:
            raise ProtocolError(404, f"no run {_shown(run_id)}")
        return run

    @staticmethod
    def _params(run: RunRow) -> PublicParameters:
        return PublicParameters.model_validate_json(run.params)

    @staticmethod
    def _request(run: RunRow) -> RunCreate:
        return RunCreate.model_validate_json(run.request)

    def _notify(self) -> None:
        self._infos.clear()
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    # --- runs -------------------------------------------------------------------------
    async def create_run(self, request: RunCreate) -> RunCreated:
        params = usable_parameters(request)
        self._check_tokens_free(request)
        seed = request.seed if request.seed is not None else secrets.randbits(62)
        if request.beta0 is not None:
            beta0 = [float(v) for v in request.beta0]
        else:
            beta0 = [float(v) for v in run_start(seed, request.d, request.sigma)]
        trivial = request.snr * request.sigma
        if not math.isfinite(trivial):
            raise ProtocolError(422, "snr × sigma overflows float64: the run is out of range")
        expected: float | None = None
        warning: str | None = None
        if request.forecast:
            try:
                expected = await asyncio.to_thread(
                    forecast_error,
                    request,
                    params,
                    seeds=self.forecast_seeds,
                    max_records=self.forecast_max_records,
                )
            except (ValueError, ArithmeticError) as error:
                log.exception("accuracy forecast failed")
                warning = f"no accuracy forecast: the simulation failed ({error})"
            if expected is not None and not math.isfinite(expected):
                expected = None
                warning = "the simulated run diverges: expect no useful estimate"
            elif expected is not None and expected > BEAT_FRACTION * trivial:
                # The same criterion as `ldpem plan`: the run starts at a random β of norm σ,
                # already about ‖β*‖ away, so only a clearly lower error shows learning.
                warning = (
                    f"expected error {expected:.3g} is not below half the error of beta = 0 "
                    f"({trivial:.3g} at snr {request.snr:g}): the estimate will probably be no "
                    "better than the trivial estimate beta = 0; more records, a larger epsilon, "
                    "fewer rounds or another mechanism are needed (see `ldpem plan`)"
                )
        run_id = uuid.uuid4().hex[:12]
        tokens: list[HospitalToken] = []
        hospitals: list[HospitalRow] = []
        for h in request.hospitals:
            token = h.token
            if token is None:
                token = secrets.token_urlsafe(32)
                tokens.append(HospitalToken(name=h.name, token=token))
            hospitals.append(
                HospitalRow(
                    run_id=run_id, name=h.name, records=h.records, token_hash=hash_token(token)
                )
            )
        # Tokens are never stored: the request is saved without them.
        stored_request = request.model_copy(
            update={
                "hospitals": [h.model_copy(update={"token": None}) for h in request.hospitals],
                "seed": seed,
            }
        )
        quorum = request.quorum if request.quorum is not None else len(request.hospitals)
        now = self.clock()
        run = RunRow(
            id=run_id,
            request=stored_request.model_dump_json(),
            params=params.model_dump_json(),
            status="running",
            current_round=0,
            beta=beta0,
            quorum=quorum,
            seed=seed,
            created_at=now,
            expected_error=expected,
            trivial_error=trivial,
            warning=warning,
            reason=None,
        )
        # Checked again after the forecast's await: another run may have taken a token since.
        self._check_tokens_free(request)
        with self.store.transaction():
            self.store.insert_run(run, hospitals)
            self.store.insert_round(run_id, 0, beta0, now, now + request.round_deadline)
        log.info(
            "run %s created: %s, d=%d, %d rounds, mechanism %s, %d hospitals, expected error %s",
            run_id,
            request.model,
            request.d,
            request.rounds,
            request.mechanism,
            len(hospitals),
            "n/a" if expected is None else f"{expected:.4g}",
            extra={"run": run_id},
        )
        if warning:
            log.warning("run %s: %s", run_id, warning, extra={"run": run_id})
        self._notify()
        return RunCreated(
            run_id=run_id,
            params=params,
            tokens=tokens,
            expected_error=expected,
            trivial_error=trivial,
            warning=warning,
        )

    def _check_tokens_free(self, request: RunCreate) -> None:
        for h in request.hospitals:
            if h.token is not None and self.store.hospital_by_token_hash(hash_token(h.token)):
                raise ProtocolError(409, f"the token of hospital {h.name} is already in use")

    def summary(self, run_id: str) -> RunSummary:
        return self._summary(self._run(run_id))

    def _summary(self, run: RunRow) -> RunSummary:
        params = self._params(run)
        return RunSummary(
            run_id=run.id,
            status=run.status,
            round=run.current_round,
            rounds=params.rounds,
            model=params.model,
            d=params.d,
            mechanism=params.mechanism,
            hospitals=len(self.store.hospitals(run.id)),
            quorum=run.quorum,
            created_at=run.created_at,
            expected_error=run.expected_error,
            trivial_error=run.trivial_error,
            warning=run.warning,
            reason=run.reason,
            beta=run.beta,
            allow_weaker_reports=self._request(run).allow_weaker_reports,
        )

    def list_runs(self) -> list[RunSummary]:
        return [self._summary(r) for r in self.store.list_runs()]

    def identity(self, hospital: HospitalRow) -> Identity:
        run = self._run(hospital.run_id)
        return Identity(
            run_id=run.id,
            hospital=hospital.name,
            records=hospital.records,
            params=self._params(run),
        )

    def round_info(self, run_id: str) -> RoundInfo:
        run = self._run(run_id)
        deadline: float | None = None
        if run.status == "running":
            current = self.store.get_round(run_id, run.current_round)
            deadline = None if current is None else current.deadline
        return RoundInfo(
            run_id=run.id,
            status=run.status,
            round=run.current_round,
            beta=run.beta,
            deadline=deadline,
            params=self._params(run),
            reason=run.reason,
        )

    async def wait_round(self, run_id: str, after: int, wait: float) -> RoundInfo:
        """The open round once it is later than ``after`` (or the run ended), waiting up to
        ``wait`` seconds; after that, the current state, whatever it is."""
        end = time.monotonic() + wait
        while True:
            event = self._changed
            info = self._infos.get(run_id)
            if info is None:
                info = self._infos[run_id] = self.round_info(run_id)
            remaining = end - time.monotonic()
            if info.round > after or info.status != "running" or remaining <= 0:
                return info
            try:
                await asyncio.wait_for(event.wait(), timeout=remaining)
            except TimeoutError:
                return self.round_info(run_id)

    def rounds(self, run_id: str) -> list[RoundSummary]:
        self._run(run_id)
        reports = self.store.reports(run_id)
        out = []
        for r in self.store.rounds(run_id):
            mine = [p for p in reports if p.t == r.t]
            out.append(
                RoundSummary(
                    round=r.t,
                    status=r.status,
                    opened_at=r.opened_at,
                    deadline=r.deadline,
                    closed_at=r.closed_at,
                    reporters=[p.hospital for p in mine],
                    count=sum(p.count for p in mine),
                    beta=r.beta,
                    beta_next=r.beta_next,
                )
            )
        return out

    def trajectory(self, run_id: str) -> Trajectory:
        run = self._run(run_id)
        rounds = self.store.rounds(run_id)
        betas = [r.beta for r in rounds]
        if run.status == "finished" and rounds and rounds[-1].beta_next is not None:
            betas.append(rounds[-1].beta_next)
        steps = [
            float(np.linalg.norm(np.subtract(r.beta_next, r.beta)))
            for r in rounds
            if r.beta_next is not None
        ]
        return Trajectory(run_id=run_id, betas=betas, steps=steps)

    def participation(self, run_id: str) -> list[HospitalParticipation]:
        """Per hospital: the rounds it reported and the weakest noise it declared, with the
        ε per record that noise implies (``weaker`` when below the run's budget)."""
        run = self._run(run_id)
        params = self._params(run)
        reports = self.store.reports(run_id)
        out = []
        for h in self.store.hospitals(run_id):
            mine = [p for p in reports if p.hospital == h.name]
            noise_std: float | None = None
            epsilon: float | None = None
            weaker = False
            for p in mine:  # the report with the largest ε is the hospital's guarantee
                spent = implied_epsilon(params.mechanism, params, p.noise_std, h.records)
                if spent is not None and (epsilon is None or spent > epsilon):
                    noise_std, epsilon = p.noise_std, spent
                floor = noise_floor(params.mechanism, params, h.records)
                weaker = weaker or p.noise_std < floor * (1.0 - NOISE_FLOOR_RTOL)
            out.append(
                HospitalParticipation(
                    hospital=h.name,
                    records=h.records,
                    rounds_reported=[p.t for p in mine],
                    last_report_at=max((p.received_at for p in mine), default=None),
                    noise_std=noise_std,
                    epsilon=epsilon,
                    weaker=weaker,
                )
            )
        return out

    # --- reports ----------------------------------------------------------------------
    def check_report(
        self, run: RunRow, params: PublicParameters, hospital: HospitalRow, t: int, report: ReportIn
    ) -> None:
        """Raise ProtocolError unless ``report`` is one an honest agent could have sent and
        as private as the run promises (or the run was created to accept weaker reports)."""
        who = f"hospital {hospital.name}"
        if report.round != t:
            raise ProtocolError(
                422, f"report names round {report.round} but was posted to round {t}"
            )
        if report.mechanism != params.mechanism:
            raise ProtocolError(
                422,
                f"report uses mechanism {report.mechanism}, the run uses {params.mechanism}",
            )
        if len(report.total) != params.d:
            raise ProtocolError(
                422, f"total must have dimension d = {params.d}, got {len(report.total)}"
            )
        expected = expected_round_count(hospital.records, params.rounds, t)
        if report.count != expected:
            raise ProtocolError(
                422,
                f"count {report.count} does not match enrolment: {who} enrolled "
                f"{hospital.records} records, {expected} in round {t}",
            )
        local_noise = params.mechanism in ("local", "local-clip", "hospital")
        if local_noise and report.noise_std <= 0:
            raise ProtocolError(422, f"mechanism {params.mechanism} needs noise_std > 0")
        if not local_noise and report.noise_std != 0:
            raise ProtocolError(422, f"mechanism {params.mechanism} takes noise_std = 0")
        # The honest range grows with the stated σ_r, so an unbounded σ_r would let one
        # enrolled hospital move β arbitrarily. An agent may be stricter than the run (more
        # noise), but not beyond max_noise_factor × the σ_r of the run's own budget.
        ceiling = self.max_noise_factor * run_noise_std(params, hospital.records)
        if local_noise and report.noise_std > ceiling:
            raise ProtocolError(
                422,
                f"noise_std {report.noise_std:.6g} exceeds {self.max_noise_factor:g}× the "
                f"run's calibrated σ_r ({ceiling:.6g}): a budget that strict adds more noise "
                "than this run accepts",
            )
        # The floor: a report declaring less noise than the run's budget needs would count
        # near-noiseless sums in a run whose published guarantee is (ε, δ).
        floor = noise_floor(report.mechanism, params, hospital.records)
        if report.noise_std < floor * (1.0 - NOISE_FLOOR_RTOL):
            implied = implied_epsilon(report.mechanism, params, report.noise_std, hospital.records)
            shown = "n/a" if implied is None else f"{implied:.4g}"
            if implied is not None and not math.isfinite(implied):
                raise ProtocolError(
                    422,
                    f"noise_std {report.noise_std:.6g} is below the σ_r {floor:.6g} the run's "
                    "budget needs and too small for any finite epsilon: refused in every run",
                )
            if not self._request(run).allow_weaker_reports:
                raise ProtocolError(
                    422,
                    f"noise_std {report.noise_std:.6g} is below the σ_r {floor:.6g} the run's "
                    f"budget needs (epsilon {params.epsilon:g}, delta {params.delta:.3g}): "
                    f"this report would spend epsilon {shown}; the run was not created with "
                    "allow_weaker_reports",
                )
            log.warning(
                "run %s round %d: %s declares noise_std %.6g below the run's %.6g "
                "(epsilon %s per record, run's %g): accepted, the run allows weaker reports",
                run.id,
                t,
                who,
                report.noise_std,
                floor,
                shown,
                params.epsilon,
            )
        bound = record_bound(params, hospital.records)
        # Local noise is one draw per record (std √count·σ_r on the sum); hospital-level
        # noise is one draw on the whole sum (std σ).
        draws = 1 if params.mechanism == "hospital" else report.count
        limit = report.count * bound + self.range_sigmas * math.sqrt(draws) * report.noise_std
        worst = max((abs(v) for v in report.total), default=0.0)
        if worst > limit:
            spread = "" if params.mechanism == "hospital" else "√count·"
            raise ProtocolError(
                422,
                f"total is outside the range an honest client can produce: |total| = {worst:.6g}"
                f" > count·bound + {self.range_sigmas:g}·{spread}noise_std = {limit:.6g}",
            )

    def _check_open(
        self, run_id: str, t: int, hospital: HospitalRow, digest: str
    ) -> tuple[RunRow, bool]:
        """The run, and whether this exact report was accepted before; ProtocolError (409)
        when another report of this hospital was, or round t is not open."""
        run = self._run(run_id)
        previous = self.store.get_report(run_id, t, hospital.name)
        if previous is not None:
            if previous.digest == digest:
                return run, True
            raise ProtocolError(
                409,
                f"hospital {hospital.name} already reported round {t} with different contents",
            )
        if run.status != "running" or t != run.current_round:
            state = (
                f"the run is {run.status}"
                if run.status != "running"
                else f"the open round is {run.current_round}"
            )
            raise ProtocolError(409, f"round {t} is not open ({state})")
        return run, False

    async def submit_report(
        self, run_id: str, t: int, hospital: HospitalRow, report: ReportIn
    ) -> ReportAck:
        if hospital.run_id != run_id:
            raise ProtocolError(403, f"the token is not enrolled in run {_shown(run_id)}")
        if report.hospital != hospital.name:
            raise ProtocolError(
                403, f"the token belongs to hospital {hospital.name}, not {report.hospital}"
            )
        digest = report_digest(report)
        run, duplicate = self._check_open(run_id, t, hospital, digest)
        if duplicate:
            return ReportAck(run_id=run_id, round=t, hospital=hospital.name, duplicate=True)
        params = self._params(run)
        self.check_report(run, params, hospital, t, report)

        def accept() -> str:
            # In the batch's transaction, checked again: a report earlier in the batch may
            # have closed the round, or been this one (a retry).
            current, again = self._check_open(run_id, t, hospital, digest)
            if again:
                return "duplicate"
            now = self.clock()
            self.store.insert_report(
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
            # Counted, not loaded: loading the round's reports on every report made a
            # round of N hospitals cost O(N²) rows.
            if self.store.report_count(run_id, t) == self.store.hospital_count(run_id):
                self._close(current, params, self.store.reports(run_id, t), now)
                return "closed"
            return "accepted"

        outcome = await self._durably(accept)
        if outcome != "duplicate":
            log.info(
                "run %s round %d: report from %s accepted",
                run_id,
                t,
                hospital.name,
                extra={"run": run_id, "round": t, "hospital": hospital.name},
            )
        return ReportAck(
            run_id=run_id, round=t, hospital=hospital.name, duplicate=outcome == "duplicate"
        )

    async def _durably(self, apply: Callable[[], str]) -> str:
        """``apply()`` committed to disk, in one transaction with the other reports that
        arrive within ``commit_window`` seconds (group commit: one fsync makes the batch
        durable). Returns only after that commit; each ``apply`` runs in its own savepoint,
        so a refused report does not undo the others."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending.append((apply, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        await asyncio.sleep(self.commit_window)
        batch, self._pending = self._pending, []
        outcomes: list[str | Exception] = []
        try:
            with self.store.transaction():
                for apply, _ in batch:
                    try:
                        with self.store.savepoint():
                            outcomes.append(apply())
                    except Exception as error:
                        outcomes.append(error)
        except Exception as error:  # the commit failed: nothing of the batch is durable
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():  # the request was cancelled (client gone); it is committed
                continue
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        if "closed" in outcomes:
            # Long-poll waiters only care about a new round or the end of the run: they are
            # woken when a round closes, not on every report.
            self._notify()

    def _close(
        self, run: RunRow, params: PublicParameters, reports: list[ReportRow], now: float
    ) -> None:
        """M-step over ``reports`` and open the next round (inside a transaction)."""
        t = run.current_round
        step = m_step(
            run.beta,
            [r.total for r in reports],
            [r.count for r in reports],
            eta=params.eta,
            central=central_noise(params),
            rng=central_rng(run.seed, t),
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
            self.store.update_run(
                run.id, status="failed", current_round=t, beta=run.beta, reason=reason
            )
            log.error("run %s failed: %s", run.id, reason)
            return
        beta_next = [float(v) for v in step.beta]
        self.store.close_round(run.id, t, now=now, beta_next=beta_next, noise=noise)
        request = self._request(run)
        if t + 1 >= params.rounds:
            self.store.update_run(
                run.id, status="finished", current_round=t + 1, beta=beta_next, reason=None
            )
            log.info(
                "run %s finished after %d rounds: beta = %s",
                run.id,
                t + 1,
                beta_next,
                extra={"run": run.id, "round": t},
            )
        else:
            self.store.update_run(
                run.id, status="running", current_round=t + 1, beta=beta_next, reason=None
            )
            self.store.insert_round(run.id, t + 1, beta_next, now, now + request.round_deadline)
            log.info(
                "run %s round %d closed with %d reports (%d records); round %d open",
                run.id,
                t,
                len(reports),
                count,
                t + 1,
                extra={"run": run.id, "round": t},
            )

    # --- deadlines --------------------------------------------------------------------
    def tick(self) -> None:
        """Close, extend or fail the open rounds whose deadline passed."""
        now = self.clock()
        changed = False
        for r in self.store.open_rounds():
            if r.deadline > now:
                continue
            with self.store.transaction():
                run = self.store.get_run(r.run_id)
                current = self.store.get_round(r.run_id, r.t)
                if (
                    run is None
                    or current is None
                    or run.status != "running"
                    or current.status != "open"
                    or current.deadline > now
                ):
                    continue
                reports = self.store.reports(r.run_id, r.t)
                request = self._request(run)
                if len(reports) >= run.quorum:
                    self._close(run, self._params(run), reports, now)
                    log.info(
                        "run %s round %d closed at its deadline",
                        run.id,
                        r.t,
                        extra={"run": run.id, "round": r.t},
                    )
                elif request.on_short == "extend":
                    self.store.set_deadline(run.id, r.t, now + request.round_deadline)
                    log.warning(
                        "run %s round %d: %d of quorum %d reported by the deadline; extended",
                        run.id,
                        r.t,
                        len(reports),
                        run.quorum,
                        extra={"run": run.id, "round": r.t},
                    )
                else:
                    reason = (
                        f"round {r.t} had {len(reports)} reports at its deadline, short of "
                        f"the quorum {run.quorum}"
                    )
                    self.store.update_run(
                        run.id,
                        status="failed",
                        current_round=r.t,
                        beta=run.beta,
                        reason=reason,
                    )
                    log.error(
                        "run %s failed: %s", run.id, reason, extra={"run": run.id, "round": r.t}
                    )
            changed = True
        if changed:
            self._notify()
