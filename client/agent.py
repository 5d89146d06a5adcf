"""The hospital agent: follow a run's rounds, privatize on this machine, report.

Nothing leaves this process but, per round, the sum of the privatized vectors of that
round's records, their count and the noise std used. The coordinator is an adversary: every
value it sends is checked against documented ranges or bound at the first contact, and no
refusal ever depends on the records (docs/PRIVACY.md, "What the agent takes from the
coordinator"). The agent

* reads and validates its records for its OWN model and columns (``--model``, ``--columns``,
  ``--target``) before its first request, so what is read, how long it takes and whether
  it fails cannot depend on anything the coordinator says; a file that does not load ends
  the agent before it contacts anyone, whatever the coordinator;
* holds an exclusive lock on its state directory for its lifetime (one agent per ledger);
* learns its run and enrolment from its token (``GET /v1/me``), validates every public
  parameter (``check_public``) and refuses a run of another model, dimension or record
  count, comparing public values with its configuration and the file's shape only: a
  refusal depends on no record's value, so it reveals nothing about the records;
* refuses a run whose reports would be less private than its own budget allows (mechanism
  ``none`` or ``central``, or a published budget weaker than its own) unless it was started
  with ``allow_weaker``; local noise is always calibrated from the agent's OWN (ε, δ) (the
  stricter of its own and the run's) and the public scale s, never from a σ_r the
  coordinator chose; β_s is recomputed from d and ζ;
* binds, at the first contact, the run's public parameters, its own derived values, the
  partition seed, the dataset and the records to the run in its ledger, and refuses any
  later change before anything is sent;
* partitions its records into T disjoint groups with a permutation seeded by its partition
  seed and the full SHA-256 of the run id (each record reports in one round), and in round
  t runs ``ldpem.common.rounds.holder_round`` (the same code as the simulator) on group t
  at β^t, with noise from a fresh 256-bit seed from the operating system (``--seed`` makes
  it reproducible for research and voids the guarantee);
* checks the round's spend against its budget and charges it in one ledger transaction,
  then, before sending, commits the exact report bytes; a retry (after a timeout, a 5xx or
  a crash and restart) resends those bytes, a second, different report for a round is never
  made, and a round that would take any record over the budget is refused;
* long-polls for the next round, retries connection errors and 5xx with exponential
  backoff, and gives up with a clear message after ``give_up`` seconds without success.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import random
import re
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

from ldpem.client.ledger import DEFAULT_DATASET, Binding, BudgetExceeded, Entry, Ledger
from ldpem.common.calibration import smoothing_precision
from ldpem.common.errors import UserError
from ldpem.common.logs import log_context
from ldpem.common.mechanisms import Mechanism, get_mechanism
from ldpem.common.models import Records, get_model
from ldpem.common.protocol import (
    holder_mechanism,
    holder_scale,
    noise_rng,
    partition_rng,
    privacy_ratio,
    run_digest,
)
from ldpem.common.rounds import holder_round
from ldpem.common.simulation import round_groups
from ldpem.common.wire import (
    API_PREFIX,
    HOSPITAL_NAME_PATTERN,
    Identity,
    PublicParameters,
    ReportAck,
    ReportIn,
    RoundInfo,
    describe_errors,
)

__all__ = [
    "BETA_MAX",
    "BUDGET_DELTA",
    "BUDGET_EPSILON",
    "D_MAX",
    "ETA_MAX",
    "FAULT_ENV",
    "FLOAT_CEILING",
    "RECORDS_MAX",
    "ROUNDS_MAX",
    "SCALE_RANGE",
    "SIGMA_RANGE",
    "TAU_MAX",
    "ZETA_RANGE",
    "Agent",
    "AgentConfig",
    "AgentError",
    "agent_mechanism",
    "check_beta",
    "check_public",
    "noise_rng",
    "partition_rng",
    "records_digest",
    "run_digest",
]

log = logging.getLogger("ldpem.client")

#: Fault injection for tests: "kill-after-persist:T" kills the agent with SIGKILL right after
#: the report of round T is committed to the ledger and before it is sent.
FAULT_ENV = "LDPEM_AGENT_FAULT"

# The ranges every value from the coordinator must lie in (docs/PRIVACY.md). They keep every
# quantity the agent computes from public values (σ², count·bound, the noise) far inside the
# float range, so no public parameter can make the mechanism behave differently for
# different records; the mechanism itself is total for any record value.
#: |β_j| and ‖β‖₂ at most this.
BETA_MAX = 1e100
#: The model's σ (its square stays in [1e-200, 1e200]).
SIGMA_RANGE = (1e-100, 1e100)
#: The truncation scale s and the clip norm C.
SCALE_RANGE = (1e-100, 1e100)
#: The failure probability ζ behind β_s = √(log(d/ζ)).
ZETA_RANGE = (1e-12, 0.5)
#: τ (used by the coordinator only, for s) and the step size η.
TAU_MAX = 1e200
ETA_MAX = 1e3
D_MAX = 100_000
ROUNDS_MAX = 10_000
#: Enrolled records and records per round.
RECORDS_MAX = 10**9
#: Any budget (the agent's own and a run's published one).
BUDGET_EPSILON = (1e-6, 1e3)
BUDGET_DELTA = (1e-100, 0.5)
#: count · record bound + 64 √count · σ_r must stay below this (far inside 1.8e308).
FLOAT_CEILING = 1e250

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
    #: This hospital's own lifetime budget per record; never taken from the coordinator.
    epsilon: float
    delta: float
    #: The model this hospital's records are for (gmm, mrm, rmc): the agent's own choice,
    #: never the coordinator's; a run of another model is refused.
    model: str
    accounting: str = "exact"
    allow_weaker: bool = False
    give_up: float = 600.0
    wait: float = 30.0
    #: CA certificate (PEM) to verify the coordinator's TLS certificate; default: system CAs.
    ca_cert: Path | None = None
    #: Research only: reproducible partition AND noise. Voids the privacy guarantee.
    seed: int | None = None
    #: The population the budget belongs to (docs/PRIVACY.md); one budget per state directory
    #: unless another, disjoint population is declared.
    dataset: str = DEFAULT_DATASET


def _refuse(field: str, value: object, rule: str) -> AgentError:
    return AgentError(
        f"the coordinator sent {field} = {value!r}, which must be {rule}; refusing the run "
        "before anything is computed from the records"
    )


def _in(field: str, value: float, low: float, high: float) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        raise _refuse(field, value, f"a finite number in [{low:g}, {high:g}]")


def check_public(me: Identity) -> None:
    """Every public parameter of ``me`` within the documented ranges; AgentError otherwise.

    Called before any record is read, so a refusal depends on public values only."""
    p = me.params
    # Both go into URLs, the ledger and the log: plain names only.
    if not re.fullmatch(HOSPITAL_NAME_PATTERN, me.run_id):
        raise _refuse("run_id", me.run_id[:80], f"a name matching {HOSPITAL_NAME_PATTERN}")
    if not re.fullmatch(HOSPITAL_NAME_PATTERN, me.hospital):
        raise _refuse("hospital", me.hospital[:80], f"a name matching {HOSPITAL_NAME_PATTERN}")
    if not 1 <= p.d <= D_MAX:
        raise _refuse("d", p.d, f"an integer in [1, {D_MAX}]")
    if not 1 <= p.rounds <= ROUNDS_MAX:
        raise _refuse("rounds", p.rounds, f"an integer in [1, {ROUNDS_MAX}]")
    if not p.rounds <= me.records <= RECORDS_MAX:
        raise _refuse("records", me.records, f"an integer in [rounds = {p.rounds}, {RECORDS_MAX}]")
    if not 1 <= p.records_per_round <= RECORDS_MAX:
        raise _refuse("records_per_round", p.records_per_round, f"in [1, {RECORDS_MAX}]")
    _in("sigma", p.sigma, *SIGMA_RANGE)
    if not (math.isfinite(p.eta) and 0.0 < p.eta <= ETA_MAX):
        raise _refuse("eta", p.eta, f"a finite number in (0, {ETA_MAX:g}]")
    if not (math.isfinite(p.tau) and 0.0 < p.tau <= TAU_MAX):
        raise _refuse("tau", p.tau, f"a finite number in (0, {TAU_MAX:g}]")
    _in("zeta", p.zeta, *ZETA_RANGE)
    _in("epsilon", p.epsilon, *BUDGET_EPSILON)
    _in("delta", p.delta, *BUDGET_DELTA)
    kind = get_mechanism(p.mechanism)
    if kind.needs == "scale" and not kind.per_holder_scale and p.scale is None:
        raise _refuse("scale", p.scale, f"given for mechanism {p.mechanism}")
    if kind.needs == "scale" and p.smoothing is None:
        raise _refuse("smoothing", p.smoothing, f"given for mechanism {p.mechanism}")
    if kind.needs == "clip" and p.clip is None:
        raise _refuse("clip", p.clip, f"given for mechanism {p.mechanism}")
    # Whatever the mechanism: every value that is published is checked.
    if p.scale is not None:
        _in("scale", p.scale, *SCALE_RANGE)
    if p.smoothing is not None:
        own = smoothing_precision(p.d, p.zeta)
        if not (math.isfinite(p.smoothing) and abs(p.smoothing - own) <= 1e-12 * own):
            raise _refuse("smoothing", p.smoothing, f"sqrt(log(d/zeta)) = {own!r}")
    if p.clip is not None:
        _in("clip", p.clip, *SCALE_RANGE)


def check_beta(beta: list[float], d: int) -> None:
    """β of a round: d finite entries, |β_j| and ‖β‖₂ at most BETA_MAX."""
    if len(beta) != d:
        raise AgentError(
            f"the coordinator sent a beta with {len(beta)} entries for a run of dimension {d}; "
            "refusing"
        )
    values = np.asarray(beta, dtype=np.float64)
    peak = float(np.max(np.abs(values)))
    norm = math.inf
    if math.isfinite(peak):
        # The norm as peak·‖β/peak‖: it cannot overflow for entries near the float range.
        norm = peak * float(np.linalg.norm(values / peak)) if peak > 0.0 else 0.0
    if not (peak <= BETA_MAX and norm <= BETA_MAX):
        raise AgentError(
            f"the coordinator sent a beta with max |beta_j| = {peak!r} and norm {norm!r}, which "
            f"must be finite and at most {BETA_MAX:g}; refusing"
        )


def agent_mechanism(
    params: PublicParameters,
    *,
    epsilon: float,
    delta: float,
    accounting: str,
    records: int | None = None,
) -> tuple[Mechanism, float]:
    """The mechanism this agent runs and its privacy ratio μ = Δ/σ_r per record (∞ when the
    report is not locally private): ``protocol.holder_mechanism`` at this agent's OWN budget
    (noise by the aggregator: none here, the coordinator adds it; noise per record: σ_r on
    each record's report; noise per holder: one draw on this agent's sum). β_s is the
    agent's own √(log(d/ζ)), not the published value (``check_public`` refuses a published
    value that differs). ``records``: this agent's enrolled count, which sets its own scale
    when each holder takes its own (hospital, docs/HOSPITAL.md)."""
    kind = get_mechanism(params.mechanism)
    if kind.needs == "scale":
        scale = params.scale
        if scale is None and kind.per_holder_scale:
            if records is None:
                raise AgentError(
                    f"mechanism {params.mechanism} needs this agent's enrolled record count"
                )
            scale = holder_scale(params, records)
            assert scale is not None
            _in("scale (this hospital's own s_k)", scale, *SCALE_RANGE)
        if scale is None:
            raise AgentError(f"the run publishes mechanism {params.mechanism} without a scale s")
    if kind.needs == "clip" and params.clip is None:
        raise AgentError(f"the run publishes mechanism {params.mechanism} without a clip norm")
    mechanism = holder_mechanism(
        params,
        records=1 if records is None else records,
        epsilon=epsilon,
        delta=delta,
        accounting=accounting,
    )
    return mechanism, privacy_ratio(mechanism, params.d)


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
    """SHA-256 of the records' values in order. Not a budget key (the budget belongs to the
    state directory's dataset): it binds a run to its records, and warns of a change."""
    h = hashlib.sha256()
    x = np.ascontiguousarray(records.x, dtype=np.float64)
    h.update(repr(x.shape).encode())
    h.update(x.tobytes())
    if records.y is not None:
        h.update(np.ascontiguousarray(records.y, dtype=np.float64).tobytes())
    return h.hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _first_difference(bound: Any, now: Any, path: str = "") -> str:
    """``path.key was X, now Y`` for the first differing key; the coordinator's parameters
    are compared before the agent's values derived from them."""
    if isinstance(bound, dict) and isinstance(now, dict):
        keys = sorted(set(bound) | set(now), key=lambda key: (key != "params", key))
        for key in keys:
            if bound.get(key) != now.get(key):
                return _first_difference(bound.get(key), now.get(key), f"{path}{key}.")
    return f"{path.rstrip('.')} was {bound!r}, now {now!r}"


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
        # Before anything else: one agent per state directory (its ledger guards one budget).
        self.ledger = Ledger(config.state, exclusive=True)

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
                f"{describe_errors(error.errors())}; refusing"
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
    def limit(self) -> tuple[float, float]:
        """The agent's overall (ε, δ) per record, over all runs: always its own."""
        return self.config.epsilon, self.config.delta

    def budget(self, params: PublicParameters) -> tuple[float, float]:
        """The (ε, δ) this run's reports are calibrated for, refusing a run less private than
        the agent's configuration allows."""
        cfg = self.config
        if not get_mechanism(params.mechanism).locally_private() and not cfg.allow_weaker:
            raise AgentError(
                f"the run uses mechanism {params.mechanism!r}: this agent's reports would not "
                "be locally private; start the agent with --allow-weaker to take part anyway"
            )
        epsilon, delta = self.limit()
        if (params.epsilon > epsilon or params.delta > delta) and not cfg.allow_weaker:
            raise AgentError(
                f"the run's budget (epsilon {params.epsilon:g}, delta {params.delta:g}) is weaker "
                f"than this agent's (epsilon {epsilon:g}, delta {delta:g}); start the agent "
                "with --allow-weaker to take part with its own budget"
            )
        # A run asking for more privacy than the agent's limit gets it: the stricter of both.
        return min(epsilon, params.epsilon), min(delta, params.delta)

    def _check_config(self) -> None:
        cfg = self.config
        low, high = BUDGET_EPSILON
        if not (math.isfinite(cfg.epsilon) and low <= cfg.epsilon <= high):
            raise AgentError(f"epsilon must be in [{low:g}, {high:g}], got {cfg.epsilon!r}")
        low, high = BUDGET_DELTA
        if not (math.isfinite(cfg.delta) and low <= cfg.delta <= high):
            raise AgentError(f"delta must be in [{low:g}, {high:g}], got {cfg.delta!r}")
        if cfg.seed is not None and cfg.seed < 0:
            raise AgentError(f"seed must be >= 0, got {cfg.seed}")
        try:
            get_model(cfg.model)
        except ValueError as error:
            raise AgentError(str(error)) from None

    # --- the run ----------------------------------------------------------------------
    def run(self) -> int:
        """Follow the run to its end. 0 when it finished; AgentError otherwise."""
        with contextlib.ExitStack() as context:
            return self._run(context)

    def _run(self, context: contextlib.ExitStack) -> int:
        cfg = self.config
        self._check_config()
        if cfg.seed is not None:
            log.warning(
                "--seed %d: the noise of every report is reproducible from the seed; this "
                "VOIDS the privacy guarantee (research runs only)",
                cfg.seed,
            )
        # The records are read and checked BEFORE the first request, for the agent's own
        # model and columns: nothing the coordinator says can change what is read, how, or
        # whether reading fails (docs/PRIVACY.md, "What the agent decides alone").
        records = self.loader(cfg.data, cfg.model)
        me = self.identity()
        params = me.params
        self._check_holding(me, records)
        # Structured logs (--log-format json) carry the run and hospital from here on.
        context.enter_context(log_context(run=me.run_id, hospital=me.hospital))
        epsilon, delta = self.budget(params)
        mechanism, mu = agent_mechanism(
            params, epsilon=epsilon, delta=delta, accounting=cfg.accounting, records=me.records
        )
        self._check_float_range(me, mechanism)
        binding = _canonical(
            {
                "hospital": me.hospital,
                "records": me.records,
                "params": params.model_dump(mode="json"),
                "agent": {
                    "epsilon": epsilon,
                    "delta": delta,
                    "accounting": cfg.accounting,
                    "noise_std": mechanism.noise_std,
                    "mu": mu,
                    "allow_weaker": cfg.allow_weaker,
                    "dataset": cfg.dataset,
                },
            }
        )
        bound = self.ledger.binding(me.run_id)
        if bound is not None:
            self._check_binding(me.run_id, bound, binding)
        data_key = records_digest(records)
        if bound is None:
            last = self.ledger.last_records(cfg.dataset)
            if last is not None and last != data_key:
                log.warning(
                    "%s: records changed since the last run; charged against the same budget "
                    "(dataset %r)",
                    cfg.data,
                    cfg.dataset,
                )
            seed = cfg.seed if cfg.seed is not None else self.ledger.seed()
            bound = self.ledger.bind_run(
                me.run_id,
                Binding(seed=seed, records=data_key, dataset=cfg.dataset, binding=binding),
            )
            self.ledger.remember_records(cfg.dataset, data_key)
        if bound.records != data_key:
            raise AgentError(
                f"{cfg.data}: run {me.run_id} was started with other records; a record "
                "reported under one partition could report again under another"
            )
        if cfg.seed is not None and cfg.seed != bound.seed:
            raise AgentError(
                f"run {me.run_id} was started with --seed {bound.seed}, not {cfg.seed}; "
                "a different seed would partition the records differently"
            )
        groups = round_groups(
            records, params.rounds, reuse=False, rng=partition_rng(bound.seed, me.run_id)
        )
        del records
        model = get_model(params.model)
        log.info(
            "hospital %s in run %s: %d records, %s mechanism, budget epsilon %g delta %g, "
            "noise std %.4g per record",
            me.hospital,
            me.run_id,
            me.records,
            params.mechanism,
            epsilon,
            delta,
            mechanism.noise_std,
        )
        canonical_params = _canonical(params.model_dump(mode="json"))
        after = -1
        while True:
            info = self.poll(me.run_id, after)
            self._check_round(me, info, canonical_params)
            if info.status == "finished":
                log.info("run %s finished after %d rounds", me.run_id, params.rounds)
                return 0
            if info.status == "failed":
                raise AgentError(f"run {me.run_id} failed: {(info.reason or '')[:500]}")
            t = info.round
            if t <= after:
                continue  # the long-poll timed out; ask again
            check_beta(info.beta, params.d)
            beta_key = _digest(info.beta)
            entry = self.ledger.entry(me.run_id, t)
            if entry is None:
                entry = self._reserve(me, t, mu, epsilon, delta, mechanism, beta_key)
            if entry.beta_digest != beta_key:
                raise AgentError(
                    f"round {t} of run {me.run_id} was already reported at a different beta; "
                    "refusing to report it again (that would spend the budget twice)"
                )
            if entry.status == "reserved":
                # Charged but not made (a first attempt, or a crash before the bytes were
                # stored: nothing was sent, so a fresh draw spends nothing more).
                report = holder_round(
                    model=model,
                    beta=np.asarray(info.beta, dtype=np.float64),
                    records=groups[t],
                    sigma=params.sigma,
                    mechanism=mechanism,
                    rng=noise_rng(cfg.seed, me.run_id, t),
                )
                total = [float(v) for v in report.total]
                if not all(math.isfinite(v) for v in total):
                    # Unreachable with parameters inside the checked ranges (the mechanism
                    # is total and bounded); never persist or send such a report.
                    raise AgentError(
                        f"round {t}: the report is not finite; nothing was sent (please report "
                        "this as a bug)"
                    )
                body = ReportIn(
                    hospital=me.hospital,
                    round=t,
                    mechanism=params.mechanism,
                    count=report.count,
                    total=total,
                    noise_std=mechanism.noise_std if mechanism.is_local else 0.0,
                ).model_dump_json()
                entry = self.ledger.persist(entry, body.encode())
                _fault_after_persist(t)
            elif entry.status == "persisted":
                log.info("round %d: resending the report persisted before (not redrawn)", t)
            if entry.status == "persisted":
                self._send(me.run_id, t, entry.body)
            after = t

    def _reserve(
        self,
        me: Identity,
        t: int,
        mu: float,
        epsilon: float,
        delta: float,
        mechanism: Mechanism,
        beta_key: str,
    ) -> Entry:
        """Round ``t``'s spend, checked against this agent's lifetime budget and charged in
        one ledger transaction (a report that is not private at all, under --allow-weaker,
        is charged without a check). Refuses, one line, a round over the budget."""
        cfg = self.config
        limit_epsilon, limit_delta = self.limit()
        unchecked = cfg.allow_weaker and math.isinf(mu)
        try:
            return self.ledger.reserve(
                Entry(
                    run_key=me.run_id,
                    round=t,
                    data=cfg.dataset,
                    mu=mu,
                    epsilon=epsilon,
                    delta=delta,
                    noise_std=mechanism.noise_std,
                    beta_digest=beta_key,
                    body=b"",
                    status="reserved",
                ),
                budget=None if unchecked else limit_epsilon,
                delta=limit_delta,
                accounting=cfg.accounting,
            )
        except BudgetExceeded as over:
            raise AgentError(
                f"round {t} of run {me.run_id} would spend epsilon {over.spent:.4g} "
                f"(at delta {limit_delta:g}) on some records of dataset {cfg.dataset!r} of "
                f"{cfg.state}, over this agent's budget of {limit_epsilon:g}; refusing"
            ) from None

    def _check_holding(self, me: Identity, records: Records) -> None:
        """The run fits what this agent holds: its own model (--model), and the dimension
        and count of the records it read before the first request, and every public
        parameter in its range (``check_public``). The comparison uses the
        agent's configuration, the file's shape and the enrolment, never a record's value,
        so the refusal is the same for every pair of neighbouring files."""
        cfg = self.config
        params = me.params
        if params.model != cfg.model:
            raise AgentError(
                f"run {me.run_id[:80]!r} fits model {params.model}, but this agent holds "
                f"records for model {cfg.model} (--model); refusing"
            )
        check_public(me)
        if records.n != me.records or records.d != params.d:
            raise AgentError(
                f"{cfg.data}: {records.n} records of dimension {records.d}, but hospital "
                f"{me.hospital} is enrolled in run {me.run_id} with {me.records} records of "
                f"dimension {params.d}"
            )

    def _check_float_range(self, me: Identity, mechanism: Mechanism) -> None:
        """count·bound + 64·√count·σ_r far inside the float range, from public values."""
        bound = mechanism.record_bound(me.params.d)
        if math.isinf(bound):
            return  # mechanism none (--allow-weaker): no privacy to protect
        ceiling = me.records * bound + 64.0 * math.sqrt(me.records) * mechanism.noise_std
        if not ceiling < FLOAT_CEILING:
            raise AgentError(
                f"the run's parameters allow reports as large as {ceiling:.3g} "
                f"(over {FLOAT_CEILING:g}); refusing the run before anything is computed from "
                "the records"
            )

    def _check_binding(self, run_id: str, bound: Binding, binding: str) -> None:
        if not bound.binding:
            raise AgentError(
                f"run {run_id} was started by an older agent that did not record its "
                "parameters; it cannot be resumed safely (nothing was sent)"
            )
        if bound.binding != binding:
            difference = _first_difference(json.loads(bound.binding), json.loads(binding))
            raise AgentError(
                f"run {run_id} changed since this agent first took part: {difference}; refusing "
                "before sending anything (a changed parameter could make a record report twice "
                "or change its noise)"
            )

    def _check_round(self, me: Identity, info: RoundInfo, canonical_params: str) -> None:
        if info.run_id != me.run_id:
            raise AgentError(
                f"the coordinator answered for run {info.run_id[:80]!r}, not {me.run_id!r}; "
                "refusing"
            )
        now = _canonical(info.params.model_dump(mode="json"))
        if now != canonical_params:
            difference = _first_difference(json.loads(canonical_params), json.loads(now))
            raise AgentError(
                f"run {me.run_id} changed its parameters during the run: {difference}; refusing"
            )
        if info.status == "running" and not 0 <= info.round < me.params.rounds:
            raise AgentError(
                f"the coordinator opened round {info.round} of a run of "
                f"{me.params.rounds} rounds (0..{me.params.rounds - 1}); refusing"
            )

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
