"""The hospital agent: follow a run's rounds, privatize on this machine, report.

Nothing leaves this process but, per round, the sum of the privatized vectors of that
round's records, their count and the noise std used. The agent

* learns its run and enrolment from its token (``GET /v1/me``), loads and validates its
  records once, and checks that their number matches its enrolment;
* refuses a run whose reports would be less private than its own configuration allows
  (mechanism ``none`` or ``central``, or a published budget weaker than its own) unless it
  was started with ``allow_weaker``; even then, local noise is always calibrated from the
  agent's OWN (ε, δ) and the public scale s, never from a σ the coordinator chose;
* partitions its records into T disjoint groups with a seeded permutation (each record
  reports once), and in round t runs ``ldpem.common.rounds.holder_round`` (the same code as
  the simulator) on group t at β^t;
* before sending, commits to its ledger the privacy the round spends and the exact report
  bytes; a retry (after a timeout, a 5xx or a crash and restart) resends those bytes, and a
  round that would take any record over the budget is refused;
* long-polls for the next round, retries connection errors and 5xx with exponential
  backoff, and gives up with a clear message after ``give_up`` seconds without success.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import signal
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
from pydantic import BaseModel, ValidationError

from ldpem.client.ledger import Entry, Ledger
from ldpem.common.accounting import noise_std_for
from ldpem.common.configure import hospital_scale, local_noise_std
from ldpem.common.mechanisms import (
    CentralTruncation,
    HospitalTruncation,
    LocalClipped,
    LocalTruncation,
    Mechanism,
    NoPrivacy,
)
from ldpem.common.models import Records, get_model
from ldpem.common.rounds import holder_round
from ldpem.common.simulation import round_groups
from ldpem.common.wire import (
    API_PREFIX,
    Identity,
    PublicParameters,
    ReportAck,
    ReportIn,
    RoundInfo,
    describe_errors,
)
from ldpem.errors import UserError

__all__ = ["FAULT_ENV", "Agent", "AgentConfig", "AgentError", "agent_mechanism"]

log = logging.getLogger("ldpem.client")

#: Fault injection for tests: "kill-after-persist:T" kills the agent with SIGKILL right after
#: the report of round T is committed to the ledger and before it is sent.
FAULT_ENV = "LDPEM_AGENT_FAULT"

Loader = Callable[[Path, str], Records]
Answer = TypeVar("Answer", bound=BaseModel)


class AgentError(UserError):
    """The agent stops: a refusal, a rejected report, or an unreachable coordinator."""


@dataclass(frozen=True)
class AgentConfig:
    coordinator: str
    token: str
    data: Path
    state: Path
    epsilon: float | None = None
    delta: float | None = None
    accounting: str = "exact"
    allow_weaker: bool = False
    give_up: float = 600.0
    wait: float = 30.0
    #: CA certificate (PEM) to verify the coordinator's TLS certificate; default: system CAs.
    ca_cert: Path | None = None
    seed: int | None = None


def agent_mechanism(
    params: PublicParameters,
    *,
    epsilon: float,
    delta: float,
    accounting: str,
    records: int | None = None,
) -> tuple[Mechanism, float]:
    """The mechanism this agent runs and its privacy ratio μ = Δ/σ_r per record (∞ when the
    report is not locally private). ``records``: this agent's enrolled count, which sets
    its own scale under the ``hospital`` mechanism (docs/HOSPITAL.md)."""
    if params.mechanism == "hospital":
        if params.smoothing is None:
            raise AgentError("the run publishes mechanism hospital without a smoothing β_s")
        scale = params.scale
        if scale is None:
            if records is None:
                raise AgentError("mechanism hospital needs this agent's enrolled record count")
            scale = hospital_scale(
                records=records,
                rounds=params.rounds,
                d=params.d,
                epsilon=params.epsilon,
                delta=params.delta,
                tau=params.tau,
                zeta=params.zeta,
            )
        # The one draw on this agent's sum is calibrated from its OWN (ε, δ): replacing one
        # record moves the sum by at most the sensitivity of that record's contribution.
        sigma = local_noise_std(
            scale=scale,
            smoothing=params.smoothing,
            d=params.d,
            epsilon=epsilon,
            delta=delta,
            accounting=accounting,
        )
        hospital = HospitalTruncation(scale=scale, smoothing=params.smoothing, noise_std=sigma)
        return hospital, hospital.sensitivity(params.d) / sigma
    if params.mechanism == "local":
        if params.scale is None or params.smoothing is None:
            raise AgentError("the run publishes mechanism local without a scale s")
        sigma = local_noise_std(
            scale=params.scale,
            smoothing=params.smoothing,
            d=params.d,
            epsilon=epsilon,
            delta=delta,
            accounting=accounting,
        )
        mechanism = LocalTruncation(scale=params.scale, smoothing=params.smoothing, noise_std=sigma)
        return mechanism, mechanism.sensitivity(params.d) / sigma
    if params.mechanism == "local-clip":
        if params.clip is None:
            raise AgentError("the run publishes mechanism local-clip without a clip norm")
        sensitivity = 2.0 * params.clip
        sigma = noise_std_for(
            epsilon=epsilon, delta=delta, sensitivity=sensitivity, accounting=accounting
        )
        return LocalClipped(clip=params.clip, noise_std=sigma), sensitivity / sigma
    if params.mechanism == "central":
        if params.scale is None or params.smoothing is None:
            raise AgentError("the run publishes mechanism central without a scale s")
        # The coordinator adds the noise: this agent's sum is truncated but not noised.
        return CentralTruncation(scale=params.scale, smoothing=params.smoothing, noise_std=0.0), (
            math.inf
        )
    return NoPrivacy(), math.inf


def tls_context(ca_cert: Path | None) -> ssl.SSLContext:
    """TLS verification with ``ca_cert`` (a self-signed coordinator) or the system CAs."""
    if ca_cert is None:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=str(ca_cert))
    except (OSError, ssl.SSLError) as error:
        raise UserError(f"{ca_cert}: not a readable CA certificate ({error})") from None


def backoff_delay(attempt: int, *, first: float = 0.2, cap: float = 5.0) -> float:
    """Seconds to wait before retry ``attempt`` (0, 1, …): first·2^attempt capped at ``cap``,
    times a uniform jitter in [0.75, 1.25) so that agents do not retry in lockstep."""
    return min(first * 2.0 ** min(attempt, 30), cap) * (0.75 + 0.5 * random.random())


def _digest(values: list[float]) -> str:
    return hashlib.sha256(json.dumps(values).encode()).hexdigest()


def records_digest(records: Records) -> str:
    """SHA-256 of the records' values (not of the file): the same records spend from the
    same budget whatever file or format they are loaded from."""
    h = hashlib.sha256()
    x = np.ascontiguousarray(records.x, dtype=np.float64)
    h.update(repr(x.shape).encode())
    h.update(x.tobytes())
    if records.y is not None:
        h.update(np.ascontiguousarray(records.y, dtype=np.float64).tobytes())
    return h.hexdigest()


def _run_number(run_id: str) -> int:
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:15], 16)


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        loader: Loader | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.clock = clock
        if loader is None:
            from ldpem.client.data import load_records

            loader = load_records
        self.loader = loader
        self.sleep = sleep
        self.base = config.coordinator.rstrip("/")
        self.http = httpx.Client(
            base_url=self.base,
            headers={"Authorization": f"Bearer {config.token}"},
            verify=tls_context(config.ca_cert),
            transport=transport,
            timeout=httpx.Timeout(30.0, read=config.wait + 30.0),
        )
        self.ledger = Ledger(config.state)

    def close(self) -> None:
        self.http.close()
        self.ledger.close()

    # --- HTTP with retries --------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response to a request, retrying connection errors and 5xx with backoff; a 4xx
        is returned to the caller. Raises AgentError after ``give_up`` s without success."""
        started = self.clock()
        attempt = 0
        while True:
            try:
                response = self.http.request(method, path, **kwargs)
                if response.status_code < 500:
                    return response
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.TransportError as error:
                problem = f"{type(error).__name__}: {error}"
            elapsed = self.clock() - started
            if elapsed >= self.config.give_up:
                raise AgentError(
                    f"coordinator {self.base} unreachable for {elapsed:.0f} s, giving up "
                    f"(last error: {problem})"
                )
            delay = backoff_delay(attempt)
            attempt += 1
            log.warning("%s %s failed (%s); retrying in %.1f s", method, path, problem, delay)
            self.sleep(min(delay, max(0.0, self.config.give_up - elapsed)))

    @staticmethod
    def _detail(response: httpx.Response) -> str:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        detail = body.get("detail", body) if isinstance(body, dict) else body
        text = detail if isinstance(detail, str) else json.dumps(detail)
        # The coordinator's words end up in this agent's one-line error: one line, bounded.
        text = " ".join(text.split())
        return text if len(text) <= 300 else text[:300] + "…"

    def _answer(self, model: type[Answer], response: httpx.Response, what: str) -> Answer:
        """The coordinator's 200 answer as ``model`` (strict types); AgentError, one line,
        when it is not one."""
        try:
            return model.model_validate_json(response.content)
        except ValidationError as error:
            raise AgentError(
                f"coordinator {self.base} sent an invalid answer to {what}: "
                f"{describe_errors(error.errors())}"
            ) from None

    def identity(self) -> Identity:
        response = self._request("GET", f"{API_PREFIX}/me")
        if response.status_code != 200:
            raise AgentError(
                f"coordinator {self.base} refused the token: HTTP {response.status_code} "
                f"{self._detail(response)}"
            )
        return self._answer(Identity, response, "GET /me")

    def poll(self, run_id: str, after: int) -> RoundInfo:
        response = self._request(
            "GET",
            f"{API_PREFIX}/runs/{run_id}/round",
            params={"after": after, "wait": self.config.wait},
        )
        if response.status_code != 200:
            raise AgentError(
                f"cannot follow run {run_id}: HTTP {response.status_code} {self._detail(response)}"
            )
        return self._answer(RoundInfo, response, f"GET /runs/{run_id}/round")

    # --- policy -----------------------------------------------------------------------
    def limit(self, params: PublicParameters) -> tuple[float, float]:
        """The agent's overall (ε, δ) per record, over all runs: its own, else the run's."""
        cfg = self.config
        epsilon = cfg.epsilon if cfg.epsilon is not None else params.epsilon
        delta = cfg.delta if cfg.delta is not None else params.delta
        return epsilon, delta

    def budget(self, params: PublicParameters) -> tuple[float, float]:
        """The (ε, δ) this run's reports are calibrated for, refusing a run less private than
        the agent's configuration allows."""
        cfg = self.config
        if params.mechanism in ("none", "central") and not cfg.allow_weaker:
            raise AgentError(
                f"the run uses mechanism {params.mechanism!r}: this agent's reports would not "
                "be locally private; start the agent with --allow-weaker to take part anyway"
            )
        epsilon, delta = self.limit(params)
        if (params.epsilon > epsilon or params.delta > delta) and not cfg.allow_weaker:
            raise AgentError(
                f"the run's budget (epsilon {params.epsilon:g}, delta {params.delta:g}) is weaker "
                f"than this agent's (epsilon {epsilon:g}, delta {delta:g}); start the agent "
                "with --allow-weaker to take part with its own budget"
            )
        # A run asking for more privacy than the agent's limit gets it: the stricter of both.
        return min(epsilon, params.epsilon), min(delta, params.delta)

    # --- the run ----------------------------------------------------------------------
    def run(self) -> int:
        """Follow the run to its end. 0 when it finished; AgentError otherwise."""
        cfg = self.config
        me = self.identity()
        params = me.params
        epsilon, delta = self.budget(params)
        limit_epsilon, limit_delta = self.limit(params)
        records = self.loader(cfg.data, params.model)
        if records.n != me.records or records.d != params.d:
            raise AgentError(
                f"{cfg.data}: {records.n} records of dimension {records.d}, but hospital "
                f"{me.hospital} is enrolled in run {me.run_id} with {me.records} records of "
                f"dimension {params.d}"
            )
        data_key = records_digest(records)
        mechanism, mu = agent_mechanism(
            params, epsilon=epsilon, delta=delta, accounting=cfg.accounting, records=me.records
        )
        seed = cfg.seed if cfg.seed is not None else self.ledger.seed()
        bound_seed, bound_data = self.ledger.bind_run(me.run_id, seed=seed, data=data_key)
        if bound_data != data_key:
            raise AgentError(
                f"{cfg.data}: run {me.run_id} was started with other records; a record "
                "reported under one partition could report again under another"
            )
        if cfg.seed is not None and cfg.seed != bound_seed:
            raise AgentError(
                f"run {me.run_id} was started with --seed {bound_seed}, not {cfg.seed}; "
                "a different seed would partition the records differently"
            )
        seed = bound_seed
        run_number = _run_number(me.run_id)
        groups = round_groups(
            records, params.rounds, reuse=False, rng=np.random.default_rng([seed, run_number])
        )
        model = get_model(params.model)
        log.info(
            "hospital %s in run %s: %d records, %s mechanism, budget epsilon %g delta %g, "
            "noise std %.4g per record",
            me.hospital,
            me.run_id,
            records.n,
            params.mechanism,
            epsilon,
            delta,
            mechanism.noise_std,
        )
        after = -1
        while True:
            info = self.poll(me.run_id, after)
            if info.status == "finished":
                log.info(
                    "run %s finished after %d rounds; beta = %s", me.run_id, info.round, info.beta
                )
                return 0
            if info.status == "failed":
                raise AgentError(f"run {me.run_id} failed: {info.reason}")
            t = info.round
            if t <= after:
                continue  # the long-poll timed out; ask again
            beta_key = _digest(info.beta)
            entry = self.ledger.entry(me.run_id, t)
            if entry is None:
                if not (cfg.allow_weaker and math.isinf(mu)):
                    spent = self.ledger.spent_epsilon(
                        data_key,
                        delta=limit_delta,
                        accounting=cfg.accounting,
                        extra=(me.run_id, mu),
                    )
                    if spent > limit_epsilon * (1.0 + 1e-9):
                        raise AgentError(
                            f"round {t} of run {me.run_id} would spend epsilon {spent:.4g} "
                            f"(at delta {limit_delta:g}) on some records of {cfg.data}, over "
                            f"this agent's budget of {limit_epsilon:g}; refusing"
                        )
                report = holder_round(
                    model=model,
                    beta=np.asarray(info.beta, dtype=np.float64),
                    records=groups[t],
                    sigma=params.sigma,
                    mechanism=mechanism,
                    rng=np.random.default_rng([seed, run_number, t]),
                )
                body = ReportIn(
                    hospital=me.hospital,
                    round=t,
                    mechanism=params.mechanism,
                    count=report.count,
                    total=[float(v) for v in report.total],
                    noise_std=mechanism.noise_std if mechanism.is_local else 0.0,
                ).model_dump_json()
                entry = Entry(
                    run_key=me.run_id,
                    round=t,
                    data=data_key,
                    mu=mu,
                    epsilon=epsilon,
                    delta=delta,
                    noise_std=mechanism.noise_std,
                    beta_digest=beta_key,
                    body=body.encode(),
                    status="persisted",
                )
                self.ledger.persist(entry)
                _fault_after_persist(t)
            elif entry.beta_digest != beta_key:
                raise AgentError(
                    f"round {t} of run {me.run_id} was already reported at a different beta; "
                    "refusing to report it again (that would spend the budget twice)"
                )
            elif entry.status == "persisted":
                log.info("round %d: resending the report persisted before (not redrawn)", t)
            if entry.status == "persisted":
                self._send(me.run_id, t, entry.body)
            after = t

    def _send(self, run_id: str, t: int, body: bytes) -> None:
        response = self._request(
            "POST",
            f"{API_PREFIX}/runs/{run_id}/rounds/{t}/reports",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        detail = self._detail(response)
        if response.status_code == 200:
            ack = self._answer(ReportAck, response, f"the report of round {t}")
            self.ledger.mark(run_id, t, "acknowledged")
            log.info("round %d: report accepted%s", t, " (again)" if ack.duplicate else "")
            return
        if response.status_code == 409 and "is not open" in detail:
            self.ledger.mark(run_id, t, "late")
            log.warning("round %d closed before this report arrived: %s", t, detail)
            return
        raise AgentError(
            f"the coordinator rejected the report of round {t}: HTTP {response.status_code} "
            f"{detail}"
        )


def _fault_after_persist(t: int) -> None:
    fault = os.environ.get(FAULT_ENV, "")
    if fault == f"kill-after-persist:{t}":
        log.warning("fault injection: killing the agent after persisting round %d", t)
        os.kill(os.getpid(), signal.SIGKILL)
