"""The agent's side of secure aggregation (docs/FEDERATED.md): pin the roster, bind K,
t_min, c and the modulus of the run (on the SecAgg+ graph also k, m, τ and h, each
recomputed here from K, c, the dropout share and h: ``check_graph``), and run one
``Holder`` per round over HTTP.

The report of a round is made, charged and persisted in the ledger exactly as any other
(client/agent.py); here it is converted to integers (÷γ, mod 2^bits) and masked. The
ledger marks the round "masked" BEFORE the masked input is sent: a restarted agent never
masks a round's input a second time (with other keys and other survivors the difference of
two unmasked sums would isolate its input), it skips that round.

The agent's share is the run's: ``trust.run_budget`` refuses a shares run whose budget is
weaker than the agent's own (a larger share of its own would not make the sum more
private), and ``load_secagg`` refuses a share larger than the one the run's modulus was
sized for (the masked sum could wrap).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ldpem.client.faults import inject
from ldpem.client.ledger import Ledger
from ldpem.client.link import CoordinatorLink, long_poll_timeout
from ldpem.client.trust import AgentError
from ldpem.common.core.accounting import Budget, ratio_for_budget
from ldpem.common.mechanisms import Mechanism
from ldpem.common.protocol import parameter_size
from ldpem.common.secagg import (
    ConsistencyCheck,
    Holder,
    ParticipantList,
    Roster,
    RosterError,
    RoundParameters,
    SecAggError,
    SecAggRefused,
    ShareBundle,
    UnmaskRequest,
    signing_key_from_pem,
)
from ldpem.common.secagg.parameters import most_colluders
from ldpem.common.secagg.runvalues import (
    graph_problem,
    grid_of,
    round_parameters,
    run_shares_mechanism,
    to_residues,
)
from ldpem.common.secagg.steps import ANSWERS, Step
from ldpem.common.wire import API_PREFIX, PublicParameters
from ldpem.common.wire.secagg import SECAGG_ANSWER_HEADER

__all__ = [
    "MASKED",
    "REFUSED",
    "SecAggConfig",
    "SecAggReports",
    "SecAggSession",
    "aggregate",
    "assumed_colluders",
    "charged_ratio",
    "check_graph",
    "check_share",
    "check_worst_case",
    "fallback",
    "load_secagg",
    "session_ratio",
    "threat_problem",
]

log = logging.getLogger("ldpem.client")

#: The ledger status of a round whose masked input may have been sent.
MASKED = "masked"
#: The ledger status of a masked round whose aggregation this agent then refused (a lying
#: coordinator): charged at the fallback ε of its own share.
REFUSED = "refused"


@dataclass(frozen=True)
class SecAggConfig:
    signing_key: Path
    roster: Path
    min_honest: int
    #: The most roster members this hospital assumes may collude with the coordinator
    #: (``--max-colluders``); None: a third of its roster (``assumed_colluders``).
    max_colluders: int | None = None


def assumed_colluders(config: SecAggConfig, roster: Roster) -> int:
    """The agent's own colluder bound b: ``--max-colluders``, or ⌊N/3⌋ of its roster's N
    names. It is anchored in the roster the hospital pinned, never in what the coordinator
    says of the run (docs/PRIVACY.md, "The threat model lives at the holder")."""
    bound = len(roster.names) // 3 if config.max_colluders is None else config.max_colluders
    if not 0 <= bound < len(roster.names):
        raise AgentError(
            f"--max-colluders must be in [0, {len(roster.names) - 1}] for a roster of "
            f"{len(roster.names)} names, got {bound}"
        )
    return bound


def threat_problem(params: PublicParameters, bound: int) -> str | None:
    """Why a run's K, t_min, c and topology do not hide an input from ``bound`` colluders
    (None: they do). On the mesh a coordinator with b colluders cannot collect both seeds
    of an honest holder while b ≤ 2·t_min − K − 1 (``most_colluders``, docs/SECAGG.md "The
    threshold"); the SecAgg+ graph's degree, committee and h are derived for the run's c
    (``check_graph``), so they cover b only when b ≤ c."""
    assert params.holders is not None and params.t_min is not None
    colluders = params.colluders or 0
    if params.graph is not None:
        if bound > colluders:
            return (
                f"its SecAgg+ graph is derived for c = {colluders} colluders, fewer than "
                f"this agent's --max-colluders {bound}"
            )
        return None
    most = most_colluders(params.holders, params.t_min)
    if bound > most:
        return (
            f"K = {params.holders}, t_min = {params.t_min} hide an input from at most "
            f"2·t_min - K - 1 = {max(most, 0)} colluders, fewer than this agent's "
            f"--max-colluders {bound}"
        )
    return None


@dataclass(frozen=True)
class SecAggSession:
    """What the agent pinned for a secagg run."""

    name: str
    roster: Roster
    key: Any
    t_min: int
    bits: int
    #: c, the most holders the run declares may collude with the coordinator.
    colluders: int
    #: b, the most roster members this agent assumes may collude (``assumed_colluders``).
    assumed: int
    min_honest: int
    grid: float
    #: ε of the round's sum with only this agent's guaranteed honest shares
    #: (``honest_shares``): the most the coordinator and b colluders can learn of a round
    #: this agent masked, whether the round completes or the agent refuses it after its
    #: masked input left (docs/PRIVACY.md, "What a refused round costs"). Every masked
    #: round is charged at least this; recorded in the ledger.
    fallback_epsilon: float
    #: The run's public values as checked at the first contact (``round_parameters``; on
    #: the SecAgg+ graph with its k, m, τ and h, and T on the expander, recomputed by
    #: ``check_graph``).
    run: PublicParameters
    #: The honest noise shares the charged ε assumes: t_min − max(c, b) on the mesh, h on
    #: the graph (where b ≤ c).
    honest_shares: int

    def describe(self) -> str:
        """How many honest holders the charged ε assumes, for the agent's log."""
        if self.run.graph is None:
            return f"t_min - max(c, b) = {self.t_min} - max({self.colluders}, {self.assumed})"
        g = self.run.graph
        if g.survivors:
            return (
                f"h = {g.honest} (SecAgg+ expander: k = {g.neighbours}, t_k = {self.t_min}, "
                f"T = {g.survivors}, committee {g.committee_threshold} of {g.committee}, "
                f"c = {self.colluders})"
            )
        return (
            f"h = {g.honest} (SecAgg+ graph: k = {g.neighbours}, t_k = {self.t_min}, "
            f"committee {g.committee_threshold} of {g.committee}, c = {self.colluders})"
        )


def load_secagg(
    config: SecAggConfig | None, params: PublicParameters, name: str, mechanism: Mechanism
) -> SecAggSession:
    """Refuse (AgentError, one line) a secagg run this agent cannot join: no key or roster
    given, a roster whose digest differs from the run's, a key not the roster's for this
    hospital, SecAgg+ graph values that are not the agent's own recomputation
    (``check_graph``), honest noise shares (t_min − c, or h on the graph) below
    --min-honest, c ≥ 2·t_min − K on the mesh (the check of ``RoundParameters``), a noise
    share larger than the run's modulus was sized for."""
    if config is None:
        raise AgentError(
            f"run of mechanism {params.mechanism} needs --signing-key, --roster and --min-honest"
        )
    assert params.holders is not None and params.t_min is not None
    assert params.modulus_bits is not None
    try:
        roster = Roster.from_json(config.roster.read_text(encoding="utf-8"))
        key = signing_key_from_pem(config.signing_key.read_bytes())
    except (OSError, RosterError, ValueError) as error:
        raise AgentError(f"cannot read the signing key or roster: {error}") from None
    if roster.digest != params.roster_digest:
        raise AgentError(
            f"the run's roster digest {params.roster_digest} is not that of {config.roster} "
            f"({roster.digest}): refusing the run"
        )
    colluders = params.colluders or 0
    check_graph(params)
    if params.holders > len(roster.names):
        raise AgentError(
            f"the run has K = {params.holders} holders, but this agent's roster names only "
            f"{len(roster.names)}: refusing the run before sending anything"
        )
    bound = assumed_colluders(config, roster)
    if (problem := threat_problem(params, bound)) is not None:
        raise AgentError(
            f"the run's secure aggregation does not hold under this agent's threat model: "
            f"{problem} (of the roster's {len(roster.names)}); refusing the run before "
            f"sending anything"
        )
    promised = params.honest_shares
    assert promised is not None  # a shares run publishes t_min
    honest = promised - max(0, bound - colluders)
    if honest < config.min_honest:
        what = (
            f"h = {honest}"
            if params.graph
            else f"t_min - max(c, b) = {params.t_min} - max({colluders}, {bound}) = {honest}"
        )
        raise AgentError(
            f"the run guarantees {what} honest noise shares under this agent's "
            f"--max-colluders {bound}, below its --min-honest {config.min_honest}: refusing "
            f"the run before sending anything"
        )
    check_share(mechanism, params)
    session = SecAggSession(
        name=name,
        roster=roster,
        key=key,
        t_min=params.t_min,
        bits=params.modulus_bits,
        colluders=colluders,
        assumed=bound,
        min_honest=config.min_honest,
        grid=grid_of(mechanism),
        fallback_epsilon=fallback(mechanism, params, honest),
        run=params,
        honest_shares=honest,
    )
    try:
        Holder(name, roster, key, _parameters(session, "check", 0), min_honest=config.min_honest)
    except (SecAggRefused, SecAggError) as error:
        raise AgentError(f"secure aggregation: {error}") from None
    return session


def check_graph(params: PublicParameters) -> None:
    """Refuse (AgentError, one line) a run whose published SecAgg+ graph values are not
    what K, c, the dropout share and h give (``runvalues.graph_problem``; on the expander
    also T): a coordinator that published a sparser graph, a smaller committee, a lower
    survivor floor or a larger h than the derivation allows could unmask an input, or make
    the shares too small for the charged ε."""
    problem = graph_problem(params)
    if problem is not None:
        raise AgentError(
            f"the run's SecAgg+ graph does not check: {problem}; refusing the run before "
            "sending anything"
        )


def check_share(mechanism: Mechanism, params: PublicParameters) -> None:
    """Refuse a share of this agent's larger than the run's: the run's modulus bits hold
    the sum of K shares of the RUN's size (``runvalues.run_modulus_bits``), and a larger
    one could make the masked sum wrap (and would not make it more private: the sum's
    noise is that of its t_min smallest honest shares)."""
    own = float(getattr(mechanism, "share_mean"))  # noqa: B009 - a shares' mechanism
    run = float(getattr(run_shares_mechanism(params), "share_mean"))  # noqa: B009
    if own > run * (1.0 + 1e-9):
        raise AgentError(
            f"this agent's noise share (lambda {own:.6g}) is larger than the run's "
            f"({run:.6g}), for which its modulus of {params.modulus_bits} bits was sized: "
            "the masked sum could wrap; refusing the run before sending anything"
        )


def charged_ratio(params: PublicParameters, mu: float, budget: Budget) -> float:
    """The μ the ledger charges for a round: for noise shares (not private on their own) the
    μ of the (ε, δ) the round's SUM was calibrated for, the guarantee under the run's trust
    assumption (at least t_min − c honest holders; ``SecAggSession.charge`` raises it to
    the agent's own); ``mu`` itself otherwise."""
    if params.holders is None:
        return mu
    return ratio_for_budget(budget.epsilon, budget.delta, budget.accounting)


def check_worst_case(
    ledger: Ledger,
    session: SecAggSession,
    *,
    run_id: str,
    mu: float,
    dataset: str,
    epsilon: float,
    delta: float,
    accounting: str,
) -> None:
    """Refuse (AgentError, one line), before joining, a secagg run whose worst case would
    take ``dataset`` over the agent's budget (``epsilon`` at ``delta``): every round
    charged ``mu``, the most one can cost, a round refused after its masked input left
    included (``SecAggSession.fallback_epsilon``; docs/PRIVACY.md, "What a refused round
    costs"). The ledger then never meets a round it must refuse half-way through."""
    spent = ledger.spent_epsilon(dataset, delta=delta, accounting=accounting, extra=(run_id, mu))
    if spent > epsilon * (1.0 + 1e-9):
        raise AgentError(
            f"run {run_id}: its worst case, every round charged epsilon "
            f"{max(session.fallback_epsilon, session.run.epsilon):.4g} (a round refused "
            f"after masking costs the same: a sum with {session.describe()} honest shares), "
            f"would bring dataset {dataset!r} to epsilon {spent:.4g}, over this agent's "
            f"--epsilon {epsilon:g}: refusing the run before joining (a smaller "
            f"--max-colluders, if fewer roster members can collude, lowers it)"
        )


def session_ratio(session: SecAggSession) -> float:
    """The μ of ``session.fallback_epsilon`` at the run's δ and accounting: the least a
    masked round is charged."""
    run = session.run
    return ratio_for_budget(session.fallback_epsilon, run.delta, run.accounting)


def fallback(mechanism: Mechanism, params: PublicParameters, honest: int) -> float:
    """ε at the run's δ of a round's sum holding only ``honest`` honest shares of this
    agent's size (its share is at most the run's, ``check_share``): what the coordinator
    and the colluders this agent assumes can learn of a round it masked, refused or not
    (docs/PRIVACY.md, "What a refused round costs")."""
    compute = getattr(mechanism, "epsilon")  # noqa: B009 - a shares' mechanism
    return float(compute(parameter_size(params), delta=params.delta, honest=honest))


def _parameters(session: SecAggSession, run_id: str, t: int) -> RoundParameters:
    return round_parameters(session.run, run_id, t)


def _holder(session: SecAggSession, run_id: str, t: int) -> Holder:
    """A fresh ``Holder`` for round t: new keys and seed, the run's bound parameters."""
    return Holder(
        session.name,
        session.roster,
        session.key,
        _parameters(session, run_id, t),
        min_honest=session.min_honest,
    )


#: Seconds a holder asks the coordinator to hold each long-poll of a step's answer (it
#: holds at most its ``max_wait``, 300 s by default). A step whose holders all answered
#: closes at once, but one that lost a holder closes only at its deadline, and until then
#: every survivor waits: asking for 30 s made the 900 survivors of a K = 1000 round re-ask
#: about 2,400 times while a 120 s deadline ran out (docs/PERFORMANCE.md, "The
#: coordinator's CPU at K = 1000, third pass"), and 20 times each at the default deadline
#: of 600 s.
STEP_WAIT = 300.0


class _Exchange:
    """One holder's messages of round t over the link."""

    def __init__(self, link: CoordinatorLink, run_id: str, t: int, wait: float) -> None:
        self.link, self.base, self.wait = (
            link,
            f"{API_PREFIX}/runs/{run_id}/rounds/{t}/secagg",
            max(wait, STEP_WAIT),
        )
        # The link's own timeout fits its round long-poll, shorter than these.
        self.timeout = long_poll_timeout(self.wait)

    def _post(self, step: Step, body: dict[str, Any], then: str | None) -> httpx.Response:
        return self.link.request(
            "POST",
            f"{self.base}/{step}",
            content=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            params=None if then is None else {"then": then, "wait": self.wait},
            timeout=self.timeout,
        )

    def _accepted(self, step: Step, response: httpx.Response) -> bool:
        """True when the message was accepted (200, or 202: accepted, its step still open);
        False when the step closed without this holder (409); AgentError otherwise."""
        if response.status_code in (200, 202):
            return True
        detail = self.link.detail(response)
        if response.status_code == 409:
            log.warning("secure aggregation, %s step: %s", step, detail)
            return False
        raise AgentError(
            f"the coordinator refused the {step} message: HTTP {response.status_code} {detail}"
        )

    def post(self, step: Step, body: dict[str, Any]) -> bool:
        """True when accepted; False when the step closed without this holder."""
        return self._accepted(step, self._post(step, body, None))

    def post_then_fetch(self, step: Step, body: dict[str, Any]) -> Any:
        """The aggregator's answer to ``step`` (a dict, ``ANSWERS[step]``) after posting
        ``body``, or None when the round went on without us. The post is also the answer's
        long-poll (one request a step, not two); the answer is taken from it only when the
        coordinator names it (its header), otherwise fetched."""
        what = ANSWERS[step]
        response = self._post(step, body, what)
        if not self._accepted(step, response):
            return None
        if response.status_code == 200 and response.headers.get(SECAGG_ANSWER_HEADER) == what:
            return response.json()
        return self.fetch(what)

    def fetch(self, what: str) -> Any:
        """The aggregator's answer (a dict), or None when the round went on without us."""
        while True:
            response = self.link.request(
                "GET", f"{self.base}/{what}", params={"wait": self.wait}, timeout=self.timeout
            )
            if response.status_code == 202:
                time.sleep(0.05)
                continue
            if response.status_code == 200:
                return response.json()
            log.warning("secure aggregation, %s: %s", what, self.link.detail(response))
            return None


def aggregate(
    session: SecAggSession,
    link: CoordinatorLink,
    ledger: Ledger,
    run_id: str,
    t: int,
    body: bytes,
    wait: float,
) -> None:
    """Mask round t's persisted report and take part in its secure aggregation: advertise,
    share, mask, sign the survivor set (the consistency round), unmask. Any refusal of the
    coordinator's messages ends the agent (AgentError) before anything unmasked is sent; a
    peer whose shares do not open only costs that peer the round (logged by name)."""
    total = json.loads(body)["total"]
    values = to_residues(total, session.grid, session.bits)
    holder = _holder(session, run_id, t)
    exchange = _Exchange(link, run_id, t, wait)
    masked_sent = False
    try:
        data = exchange.post_then_fetch(Step.ADVERTISE, holder.advertise().to_dict())
        if data is None:
            return
        shares = holder.share_keys(ParticipantList.from_dict(data))
        data = exchange.post_then_fetch(Step.SHARES, shares.to_dict())
        if data is None:
            return
        masked = holder.masked_input(ShareBundle.from_dict(data), values)
        if masked.excluded:
            log.warning(
                "round %d: the shares of %s did not open: not masked with them this round",
                t,
                ", ".join(masked.excluded),
            )
        masked_sent = True  # from here on, assume the coordinator holds it
        ledger.mark(run_id, t, MASKED)  # before sending: never a second masking
        inject("after-mask", t)  # tests only (ldpem.client.faults)
        data = exchange.post_then_fetch(Step.MASKED, masked.to_dict())
        if data is None:
            return
        check = ConsistencyCheck.from_dict(data, session.roster.names)
        if session.name not in check.survivors:
            # Counted as dropped: its masks with the others are removed from their sum,
            # never its self-mask (no honest holder shares b of a holder outside the one
            # survivor set it signed), so its masked input stays hidden.
            log.warning("round %d: the aggregator left this holder out of the survivor set", t)
            return
        inject("before-sign", t)  # tests only: a survivor that never signs
        signature = holder.sign_survivors(check).to_dict()
        data = exchange.post_then_fetch(Step.SIGNATURE, signature)
        if data is None:
            return
        request = UnmaskRequest.from_dict(data, session.roster.names)
        exchange.post(Step.UNMASK, holder.unmask(request).to_dict())
        log.info(
            "round %d: masked input sent and unmasking answered (fallback epsilon %.4g "
            "if all others collude)",
            t,
            session.fallback_epsilon,
        )
    except (SecAggRefused, SecAggError) as error:
        if masked_sent:
            _charge_refused(session, ledger, run_id, t, str(error))
        else:
            _release_unsent(ledger, run_id, t)
        raise AgentError(f"round {t}: secure aggregation refused: {error}") from None


def announce_restart(
    session: SecAggSession, link: CoordinatorLink, run_id: str, t: int, wait: float
) -> None:
    """Round t's input was masked before this agent restarted: the round's keys, seed and
    received shares were in memory only, so it can sign and answer nothing of the round.
    It says so at once with a fresh advertisement for the round, signed with its roster
    key (fresh keys and a fresh seed, never used: nothing of the report): the coordinator
    answers 409 and counts it out of the round's later steps (server/secagg/rounds.py,
    ``_restarted``), which then close without waiting for their deadline; on the graph its
    neighbours release its seed against the masked-with set it signed with its input. A
    refusal or a lost connection here only costs that early close: logged, never fatal."""
    try:
        holder = _holder(session, run_id, t)
        exchange = _Exchange(link, run_id, t, wait)
        accepted = exchange.post(Step.ADVERTISE, holder.advertise().to_dict())
    except (SecAggRefused, SecAggError, AgentError) as error:
        log.warning("round %d: could not tell the coordinator of the restart: %s", t, error)
        return
    if accepted:  # never for a round it masked (its advertise step closed): said if so
        log.warning("round %d: the coordinator took the restart's advertisement as new", t)
    else:
        log.info("round %d: the coordinator was told this agent restarted", t)


class SecAggReports:
    """The agent's transport in a run of noise shares (``ldpem.client.transport``): each
    persisted report masked and summed by secure aggregation (``aggregate``)."""

    def __init__(
        self, session: SecAggSession, link: CoordinatorLink, ledger: Ledger, run_id: str
    ) -> None:
        self.session = session
        self.link = link
        self.ledger = ledger
        self.run_id = run_id
        self.fallback_epsilon: float | None = session.fallback_epsilon

    def charged(self, t: int, epsilon: float) -> None:
        """Said once it is so: a refused round was never charged."""
        session = self.session
        log.info(
            "round %d charged: epsilon %.4g, a sum with at least %s honest shares "
            "(--max-colluders %d; a round refused after masking costs the same)",
            t,
            max(epsilon, session.fallback_epsilon),
            session.describe(),
            session.assumed,
        )

    def deliver(self, t: int, body: bytes) -> None:
        # Each step's answer is long-polled at least ``STEP_WAIT`` (the link's wait if
        # longer): the coordinator answers as soon as a step closes, so a shorter one only
        # re-asks (docs/PERFORMANCE.md).
        aggregate(self.session, self.link, self.ledger, self.run_id, t, body, self.link.wait)

    def restarted(self, t: int) -> None:
        """Its round secrets are lost: said at once (``announce_restart``)."""
        announce_restart(self.session, self.link, self.run_id, t, self.link.wait)


def _charge_refused(
    session: SecAggSession, ledger: Ledger, run_id: str, t: int, refusal: str
) -> None:
    """A refusal after the masked input left: its ledger entry becomes "refused", charged
    at ``fallback_epsilon``. Under this agent's threat model (at most b colluders, b ≤
    2·t_min − K − 1 on the mesh, b ≤ c on the graph) the honest holders sign one survivor
    set, so the coordinator learns at most one sum over a set of ≥ t_min holders, or
    nothing of this input (docs/PRIVACY.md, "What a refused round costs"): no more than a
    round that completed, so a lying coordinator cannot drain the budget by lying."""
    epsilon = session.fallback_epsilon
    mu = session_ratio(session)
    ledger.recharge(run_id, t, mu=mu, epsilon=epsilon, status=REFUSED)
    log.warning(
        "round %d: the masked input was sent, then secure aggregation was refused (%s); "
        "the round is charged at epsilon %.4g (a sum with %s honest shares at the least)",
        t,
        refusal,
        epsilon,
        session.describe(),
    )


def _release_unsent(ledger: Ledger, run_id: str, t: int) -> None:
    """A refusal before the masked input left: nothing that depends on the records was sent
    (the advertisement and the shares are fresh keys and seeds), so the round's charge is
    released and it is marked "refused": it is never masked later."""
    ledger.release(run_id, t, status=REFUSED)
    log.warning(
        "round %d: secure aggregation refused before the masked input left; nothing of "
        "this round's report was sent and nothing is charged for it",
        t,
    )
