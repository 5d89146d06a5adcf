"""The hospital agent: follow a run's rounds, privatize on this machine, report.

Nothing leaves this process but, per round, the sum of the privatized vectors of that
round's records, their count and the noise std used. The coordinator is an adversary
(docs/PRIVACY.md, "What the agent takes from the coordinator"). The agent

* reads and validates its records for its OWN model and columns before its first request,
  so what is read, how long it takes and whether it fails cannot depend on anything the
  coordinator says; a file that does not load ends the agent before it contacts anyone;
* holds an exclusive lock on its state directory for its lifetime (one agent per ledger);
* refuses a run of another model, dimension or record count, and checks every public
  value against a documented range (``ldpem.client.trust``): a refusal depends on no
  record's value; local noise is always calibrated from the agent's OWN budget (the
  stricter of its own and the run's), never from a σ_r the coordinator chose;
* binds, at the first contact, the run's public parameters, its own derived values, the
  partition seed, the dataset and the records to the run in its ledger, and refuses any
  later change before anything is sent (``ldpem.client.binding``);
* partitions its records into T disjoint groups of the run's schedule's sizes (partition
  seed and the run id's SHA-256; each record reports in one round) and in round t runs
  ``ldpem.common.protocol.rounds.holder_round`` (the simulator's code) on group t at β^t with round
  t's mechanism (its scale s_t under a schedule), with noise from a fresh 256-bit OS seed
  (``--seed`` makes it reproducible for research and voids the guarantee);
* checks the round's spend against its budget and charges it in one ledger transaction,
  then commits the exact report bytes before sending; a retry (timeout, 5xx, crash and
  restart) resends those bytes, and a second, different report for a round is never made;
* warns for each round that closed before it could report; long-polls, retrying
  connection errors and 5xx with backoff (``ldpem.client.link``);
* in a run of noise shares, masks the persisted report (``ldpem.client.secagg``).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

import numpy as np

from ldpem.client.binding import (
    beta_digest,
    bind_run,
    canonical,
    check_round,
    records_digest,
    run_binding,
)
from ldpem.client.config import AgentConfig
from ldpem.client.faults import FAULT_ENV, inject
from ldpem.client.ledger import Binding, BudgetExceeded, Entry, Ledger
from ldpem.client.link import CoordinatorLink, LinkHooks
from ldpem.client.secagg import (
    MASKED,
    SecAggReports,
    charged_ratio,
    check_graph,
    check_worst_case,
    load_secagg,
    session_ratio,
)
from ldpem.client.transport import PlainReports, ReportTransport
from ldpem.client.trust import (
    AgentError,
    agent_mechanisms,
    check_beta,
    check_float_range,
    check_holding,
    check_own_configuration,
    run_budget,
)
from ldpem.common.core.accounting import Budget
from ldpem.common.core.plugins import ensure_plugins
from ldpem.common.infra.logs import log_context
from ldpem.common.mechanisms import Mechanism
from ldpem.common.models import Records
from ldpem.common.planning.simulator import round_groups
from ldpem.common.protocol import (
    configured_model,
    noise_rng,
    parameter_size,
    partition_rng,
    report_noise_std,
    start_round,
)
from ldpem.common.protocol.rounds import holder_round
from ldpem.common.wire import (
    Identity,
    PublicParameters,
    ReportIn,
    RoundInfo,
)

__all__ = ["FAULT_ENV", "Agent", "AgentError"]

log = logging.getLogger("ldpem.client")

Loader = Callable[[Path, str], Records]


@dataclass(frozen=True)
class _Session:
    """What the agent fixed when it joined a run: the run's identity and parameters, the
    budget it calibrates for, each round's mechanism and μ, and its records' partition
    into rounds."""

    me: Identity
    epsilon: float
    delta: float
    #: Round t's mechanism and μ, t = 0 … T−1.
    mechanisms: list[tuple[Mechanism, float]]
    groups: list[Records]
    #: The run's public parameters as canonical JSON: every round's must equal them.
    params_json: str
    #: How its reports reach the coordinator: as they are, or by secure aggregation.
    transport: ReportTransport

    @property
    def run_id(self) -> str:
        return self.me.run_id

    @property
    def params(self) -> PublicParameters:
        return self.me.params


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        loader: Loader | None = None,
        **hooks: Unpack[LinkHooks],
    ) -> None:
        self.config = config
        if loader is None:
            from ldpem.client.data import load_records

            loader = load_records
        self.loader = loader
        self.link = CoordinatorLink(
            config.coordinator,
            config.token,
            give_up=config.give_up,
            wait=config.wait,
            ca_cert=config.ca_cert,
            **hooks,
        )
        # Before anything else: one agent per state directory (its ledger guards one budget).
        self.ledger = Ledger(config.state, exclusive=True)

    def close(self) -> None:
        self.link.close()
        self.ledger.close()

    def identity(self) -> Identity:
        """``GET /v1/me``: the run and enrolment this agent's token stands for."""
        return self.link.identity()

    def poll(self, run_id: str, after: int) -> RoundInfo:
        """The round after ``after`` (long-poll) or the run's end."""
        return self.link.poll(run_id, after)

    # --- policy -----------------------------------------------------------------------
    def budget(self, params: PublicParameters) -> tuple[float, float]:
        """The (ε, δ) this run's reports are calibrated for (``trust.run_budget``)."""
        cfg = self.config
        return run_budget(
            params, epsilon=cfg.epsilon, delta=cfg.delta, allow_weaker=cfg.allow_weaker
        )

    # --- the run ----------------------------------------------------------------------
    def run(self) -> int:
        """Follow the run to its end. 0 when it finished; AgentError otherwise."""
        with contextlib.ExitStack() as context:
            # The run's model and mechanism may be a plugin's (docs/EXTENDING.md).
            ensure_plugins()
            cfg = self.config
            check_own_configuration(
                epsilon=cfg.epsilon,
                delta=cfg.delta,
                seed=cfg.seed,
                model=cfg.model,
                model_options=cfg.model_options,
            )
            if cfg.seed is not None:
                log.warning(
                    "--seed %d: the noise of every report is reproducible from the seed; "
                    "this VOIDS the privacy guarantee (research runs only)",
                    cfg.seed,
                )
            # The records are read and checked BEFORE the first request, for the agent's own
            # model and columns: nothing the coordinator says can change what is read, how,
            # or whether reading fails (docs/PRIVACY.md, "What the agent takes from the
            # coordinator").
            records = self.loader(cfg.data, cfg.model)
            me = self.identity()
            check_holding(
                me, records, model=cfg.model, model_options=cfg.model_options, data=cfg.data
            )
            # Structured logs (--log-format json) carry the run and hospital from here on.
            context.enter_context(log_context(run=me.run_id, hospital=me.hospital))
            first_contact = self.ledger.binding(me.run_id) is None
            try:
                return self._follow(self._join(me, records))
            except AgentError:
                if first_contact:
                    # A refused first contact binds nothing: the next start, with other
                    # flags, is a first contact again (unless a round was charged since).
                    self.ledger.unbind_unused(me.run_id)
                raise

    def _join(self, me: Identity, records: Records) -> _Session:
        """Calibrate to the run, bind it in the ledger (or check the binding of a restart)
        and partition the records: nothing is sent here."""
        cfg = self.config
        params = me.params
        epsilon, delta = self.budget(params)
        budget = Budget(epsilon=epsilon, delta=delta, accounting=cfg.accounting)
        check_graph(params)  # hostile values: checked before any calibration uses them
        mechanisms = agent_mechanisms(params, records=me.records, budget=budget)
        # Noise shares: the ledger charges the μ of the budget the round's SUM is calibrated
        # for (``charged_ratio``); every other mechanism's μ as it is.
        mechanisms = [(m, charged_ratio(params, mu, budget)) for m, mu in mechanisms]
        for mechanism in {id(m): m for m, _ in mechanisms}.values():
            check_float_range(me, mechanism)
        transport: ReportTransport = PlainReports(self.link, self.ledger, me.run_id)
        if params.holders is not None:  # noise shares: masked (ldpem.client.secagg)
            # Equal rounds only (``protocol.check_noise_shares``): one mechanism for all.
            shares = load_secagg(cfg.secagg, params, me.hospital, mechanisms[0][0])
            # Under this agent's own colluder bound a round's sum may hold fewer honest
            # shares than the run's c promises: each round is charged for what it holds.
            least = session_ratio(shares)
            mechanisms = [(m, max(mu, least)) for m, mu in mechanisms]
            check_worst_case(
                self.ledger,
                shares,
                run_id=me.run_id,
                mu=max(mu for _, mu in mechanisms),
                dataset=cfg.dataset,
                epsilon=cfg.epsilon,
                delta=cfg.delta,
                accounting=cfg.accounting,
            )
            transport = SecAggReports(shares, self.link, self.ledger, me.run_id)
        binding = run_binding(
            me,
            mechanisms=mechanisms,
            allow_weaker=cfg.allow_weaker,
            dataset=cfg.dataset,
            budget=budget,
        )
        bound = self._bind(me.run_id, binding, records_digest(records))
        rng = partition_rng(bound.seed, me.run_id)
        groups = round_groups(
            records, params.rounds, reuse=False, rng=rng, schedule=params.schedule
        )
        return _Session(
            transport=transport,
            me=me,
            epsilon=epsilon,
            delta=delta,
            mechanisms=mechanisms,
            groups=groups,
            params_json=canonical(params.model_dump(mode="json")),
        )

    def _bind(self, run_id: str, binding: str, data_key: str) -> Binding:
        """The run's binding: stored at the first contact, checked at every restart."""
        cfg = self.config
        return bind_run(self.ledger, run_id, binding, data_key, cfg.dataset, cfg.data, cfg.seed)

    def _follow(self, session: _Session) -> int:
        """Long-poll round after round until the run ends; 0 when it finished."""
        after, paused = -1, False
        while True:
            info = self.poll(session.run_id, after)
            check_round(session.me, info, session.params_json)
            if after == -1:
                self._announce(session, info.round)
            if info.status == "finished":
                self._warn_missed(session, after + 1, session.params.rounds)
                log.info("run %s finished after %d rounds", session.run_id, session.params.rounds)
                return 0
            if info.status == "failed":
                raise AgentError(f"run {session.run_id} failed: {(info.reason or '')[:500]}")
            if info.status == "cancelled":  # the operator's decision: a clean stop
                log.warning(
                    "run %s was cancelled (%s); stopping: nothing more is charged",
                    session.run_id,
                    " ".join((info.reason or "no reason given").split())[:500],
                )
                return 0
            if info.status == "paused":  # the operator's decision: resume or cancel
                if not paused:
                    log.warning(
                        "run %s is paused (%s); waiting for the operator",
                        session.run_id,
                        " ".join((info.reason or "no reason given").split())[:500],
                    )
                paused = True
                continue  # the coordinator holds the long-poll while paused
            paused = False
            if info.round <= after:
                continue  # the long-poll timed out; ask again
            self._warn_missed(session, after + 1, info.round)
            with log_context(round=info.round):
                self._report(session, info)
            after = info.round

    def _announce(self, session: _Session, t: int) -> None:
        """The agent's first line, once the run's round ``t`` is known (a restarted agent
        joins a run at its round, not at round 0): who, what, the budget and the noise of
        the round it takes part in next."""
        params = session.params
        current = min(t, params.rounds - 1)
        log.info(
            "hospital %s in run %s: %d records, %s mechanism, budget epsilon %g delta %g, "
            "noise std %.4g %s (round %d of %d)",
            session.me.hospital,
            session.run_id,
            session.me.records,
            params.mechanism,
            session.epsilon,
            session.delta,
            session.mechanisms[current][0].noise_std,
            session.mechanisms[current][0].noise_where,
            current,
            params.rounds,
        )

    def _warn_missed(self, session: _Session, first: int, end: int) -> None:
        """A warning for each round in [first, end) that closed before this agent reported
        in it: its share of the records was never used."""
        for t in range(first, end):
            if self.ledger.entry(session.run_id, t) is None:
                with log_context(round=t):
                    log.warning(
                        "round %d closed before this agent joined it: its %d records were not used",
                        t,
                        session.groups[t].n,
                    )

    def _report(self, session: _Session, info: RoundInfo) -> None:
        """Round ``info.round``: charge it, make the report once, persist it, send it."""
        cfg = self.config
        t = info.round
        check_beta(info.beta, parameter_size(session.params))
        beta_key = beta_digest(info.beta)
        entry = self.ledger.entry(session.run_id, t)
        mechanism, mu = session.mechanisms[t]
        if entry is None:
            entry = self._reserve(session, t, mu, mechanism, beta_key)
        if entry.beta_digest != beta_key:
            raise AgentError(
                f"round {t} of run {session.run_id} was already reported at a different "
                "beta; refusing to report it again (that would spend the budget twice)"
            )
        if entry.status == "reserved":
            # Charged but not made (a first attempt, or a crash before the bytes were
            # stored: nothing was sent, so a fresh draw spends nothing more).
            report = holder_round(
                model=configured_model(session.params),
                beta=np.asarray(info.beta, dtype=np.float64),
                records=session.groups[t],
                sigma=session.params.sigma,
                mechanism=mechanism,
                rng=noise_rng(cfg.seed, session.run_id, t),
                in_start_round=start_round(configured_model(session.params), t),
            )
            total = [float(v) for v in report.total]
            if not all(math.isfinite(v) for v in total):
                # Unreachable with parameters inside the checked ranges (the mechanism is
                # total and bounded); never persist or send such a report.
                raise AgentError(
                    f"round {t}: the report is not finite; nothing was sent (please report "
                    "this as a bug)"
                )
            body = ReportIn(
                hospital=session.me.hospital,
                round=t,
                mechanism=session.params.mechanism,
                count=report.count,
                total=total,
                # Only a report private on its own declares its noise (a noise share is
                # not: the coordinator checks none, docs/SECAGG.md).
                noise_std=report_noise_std(mechanism),
            ).model_dump_json()
            entry = self.ledger.persist(entry, body.encode())
            _fault_after_persist(t)
        elif entry.status == "persisted":
            log.info("round %d: resending the report persisted before (not redrawn)", t)
        elif entry.status == MASKED:  # noise shares: one masked input per round, ever
            log.warning("round %d: its input was masked before a restart; not made again", t)
            session.transport.restarted(t)
        if entry.status == "persisted":
            session.transport.deliver(t, entry.body)

    def _reserve(
        self, session: _Session, t: int, mu: float, mechanism: Mechanism, beta_key: str
    ) -> Entry:
        """Round ``t``'s spend, checked against this agent's lifetime budget and charged in
        one ledger transaction (a report that is not private at all, under --allow-weaker,
        is charged without a check). Refuses, one line, a round over the budget."""
        cfg, me = self.config, session.me
        limit_epsilon, limit_delta = cfg.epsilon, cfg.delta
        unchecked = cfg.allow_weaker and math.isinf(mu)
        try:
            reserved = self.ledger.reserve(
                Entry(
                    run_key=me.run_id,
                    round=t,
                    data=cfg.dataset,
                    mu=mu,
                    epsilon=session.epsilon,
                    delta=session.delta,
                    noise_std=mechanism.noise_std,
                    beta_digest=beta_key,
                    body=b"",
                    status="reserved",
                    fallback_epsilon=session.transport.fallback_epsilon,
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
        session.transport.charged(t, session.epsilon)
        return reserved


def _fault_after_persist(t: int) -> None:
    inject("after-persist", t)  # tests only (ldpem.client.faults)
