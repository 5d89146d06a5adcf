"""What the agent takes from the coordinator: every public value checked against a documented
range before it matters (docs/PRIVACY.md, "What the agent takes from the coordinator").

The ranges keep every quantity the agent computes from public values (σ², count·bound, the
noise) far inside the float range, so no public parameter can make the mechanism behave
differently for different records; the mechanism itself is total for any record value. A
refusal depends on public values only, is one line, and ends the agent with exit status 2.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ldpem.common.core.accounting import Budget
from ldpem.common.core.calibration import smoothing_precision
from ldpem.common.core.errors import UserError
from ldpem.common.mechanisms import Mechanism, get_mechanism
from ldpem.common.models import Records, get_model
from ldpem.common.protocol import (
    configured_model,
    holder_mechanism,
    holder_scale,
    is_equal,
    parameter_size,
    privacy_ratio,
    round_sizes,
)
from ldpem.common.wire import HOSPITAL_NAME_PATTERN, Identity, PublicParameters

__all__ = [
    "BETA_MAX",
    "BUDGET_DELTA",
    "BUDGET_EPSILON",
    "D_MAX",
    "ETA_MAX",
    "FLOAT_CEILING",
    "RECORDS_MAX",
    "ROUNDS_MAX",
    "SCALE_RANGE",
    "SIGMA_RANGE",
    "TAU_MAX",
    "ZETA_RANGE",
    "AgentError",
    "agent_mechanism",
    "agent_mechanisms",
    "check_beta",
    "check_float_range",
    "check_holding",
    "check_own_configuration",
    "check_public",
    "run_budget",
]

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


class AgentError(UserError):
    """The agent stops: a refusal, a rejected report, or an unreachable coordinator."""


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
    size = parameter_size(p)  # the wire checked the options against the model's declaration
    if not size <= D_MAX:
        rule = f"options that give beta at most {D_MAX} values"
        raise _refuse("model_options", p.model_options, rule)
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
    try:  # the schedule must give this hospital a record in every round
        round_sizes(me.records, p.rounds, p.schedule)
    except ValueError as error:
        shown = str(p.schedule)[:80]
        raise _refuse("schedule", shown, f"one that fits {me.records} records ({error})") from None
    kind = get_mechanism(p.mechanism)
    published = p.scale is not None or p.scales is not None
    if kind.needs == "scale" and not kind.per_holder_scale and not published:
        raise _refuse("scale", p.scale, f"given for mechanism {p.mechanism}")
    if kind.needs == "scale" and p.smoothing is None:
        raise _refuse("smoothing", p.smoothing, f"given for mechanism {p.mechanism}")
    if kind.needs == "clip" and p.clip is None:
        raise _refuse("clip", p.clip, f"given for mechanism {p.mechanism}")
    # Whatever the mechanism: every value that is published is checked.
    if p.scale is not None:
        _in("scale", p.scale, *SCALE_RANGE)
    for t, scale in enumerate(p.scales or ()):
        _in(f"scales[{t}]", scale, *SCALE_RANGE)
    if p.smoothing is not None:
        own = smoothing_precision(size, p.zeta)
        if not (math.isfinite(p.smoothing) and abs(p.smoothing - own) <= 1e-12 * own):
            rule = f"sqrt(log(p/zeta)) = {own!r}, p = {size} the size of beta"
            raise _refuse("smoothing", p.smoothing, rule)
    if p.clip is not None:
        _in("clip", p.clip, *SCALE_RANGE)


def check_beta(beta: list[float], size: int) -> None:
    """β of a round: ``size`` finite entries (the run's ``parameter_size``: d but for a
    mixture), |β_j| and ‖β‖₂ at most BETA_MAX."""
    if len(beta) != size:
        raise AgentError(
            f"the coordinator sent a beta with {len(beta)} entries for a run whose beta has "
            f"{size}; refusing"
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
    budget: Budget,
    records: int | None = None,
    t: int | None = None,
) -> tuple[Mechanism, float]:
    """The mechanism this agent runs in round ``t`` and its privacy ratio μ = Δ/σ_r per
    record (∞ when the report is not locally private): ``protocol.holder_mechanism`` at this
    agent's OWN ``budget`` (noise by the aggregator: none here, the coordinator adds it; noise
    per record: σ_r on each record's report; noise per holder: one draw on this agent's
    sum). β_s is the agent's own √(log(d/ζ)), not the published value (``check_public``
    refuses a published value that differs). ``records``: this agent's enrolled count,
    which sets its own scale when each holder takes its own (hospital, docs/HOSPITAL.md).
    ``t`` may be omitted when every round is the same (equal rounds)."""
    kind = get_mechanism(params.mechanism)
    if kind.needs == "scale":
        if params.scale is None and params.scales is None and kind.per_holder_scale:
            if records is None:
                raise AgentError(
                    f"mechanism {params.mechanism} needs this agent's enrolled record count"
                )
            own = holder_scale(params, records, t=t)
            assert own is not None
            _in("scale (this hospital's own s_k)", own, *SCALE_RANGE)
        elif params.scale is None and params.scales is None:
            raise AgentError(f"the run publishes mechanism {params.mechanism} without a scale s")
    if kind.needs == "clip" and params.clip is None:
        raise AgentError(f"the run publishes mechanism {params.mechanism} without a clip norm")
    mechanism = holder_mechanism(
        params,
        records=1 if records is None else records,
        budget=budget,
        t=t,
    )
    return mechanism, privacy_ratio(mechanism, parameter_size(params))


def agent_mechanisms(
    params: PublicParameters, *, budget: Budget, records: int
) -> list[tuple[Mechanism, float]]:
    """``agent_mechanism`` of every round, t = 0 … T−1: one mechanism for all the rounds of
    an equal schedule, one per round under another (each round's scale s_t)."""
    same = is_equal(params.schedule) and params.scales is None
    rounds: list[int | None] = [None] if same else list(range(params.rounds))
    made = [agent_mechanism(params, budget=budget, records=records, t=t) for t in rounds]
    return made * params.rounds if same else made


def check_float_range(me: Identity, mechanism: Mechanism) -> None:
    """count·bound + 64·√count·σ_r far inside the float range, from public values."""
    bound = mechanism.record_bound(parameter_size(me.params))
    if math.isinf(bound):
        return  # mechanism none (--allow-weaker): no privacy to protect
    ceiling = me.records * bound + 64.0 * math.sqrt(me.records) * mechanism.noise_std
    if not ceiling < FLOAT_CEILING:
        raise AgentError(
            f"the run's parameters allow reports as large as {ceiling:.3g} "
            f"(over {FLOAT_CEILING:g}); refusing the run before anything is computed from "
            "the records"
        )


def run_budget(
    params: PublicParameters, *, epsilon: float, delta: float, allow_weaker: bool
) -> tuple[float, float]:
    """The (ε, δ) a run's reports are calibrated for by an agent whose own lifetime budget
    is (``epsilon``, ``delta``): the stricter of its own and the run's. Refuses a run less
    private than that (a mechanism whose reports are not private on their own, or a weaker
    published budget) unless ``allow_weaker``. A run of noise shares whose budget is weaker
    is refused even then: the sum's noise is made by the run's shares, so a larger share of
    this agent's would not make it more private, and the run's modulus is not sized for
    it (the masked sum could wrap; docs/SECAGG.md, "Every share is the run's")."""
    kind = get_mechanism(params.mechanism)
    weaker = params.epsilon > epsilon or params.delta > delta
    # Noise shares are masked (ldpem.client.secagg): only the sum of ≥ t_min is ever seen.
    if kind.noise_site == "shares" and weaker:
        raise AgentError(
            f"the run's budget (epsilon {params.epsilon:g}, delta {params.delta:g}) is weaker "
            f"than this agent's (epsilon {epsilon:g}, delta {delta:g}): the operator should "
            f"create the run with {_request_fix(params, epsilon, delta)} in its request; its "
            "noise is shared, so --allow-weaker cannot help (the sum's privacy is the run's "
            "whatever this agent adds, and a larger share could wrap the run's modulus)"
        )
    if not kind.locally_private() and kind.noise_site != "shares" and not allow_weaker:
        raise AgentError(
            f"the run uses mechanism {params.mechanism!r}: this agent's reports would not "
            "be locally private; start the agent with --allow-weaker to take part anyway"
        )
    if weaker and not allow_weaker:
        raise AgentError(
            f"the run's budget (epsilon {params.epsilon:g}, delta {params.delta:g}) is weaker "
            f"than this agent's (epsilon {epsilon:g}, delta {delta:g}): the operator should "
            f"create the run with {_request_fix(params, epsilon, delta)} in its request; or "
            "start the agent with --allow-weaker, to take part with its own budget (it also "
            "admits runs whose reports are not locally private: mechanisms none and central)"
        )
    return min(epsilon, params.epsilon), min(delta, params.delta)


def _request_fix(params: PublicParameters, epsilon: float, delta: float) -> str:
    """The run request's fields that would make the run as strict as this agent:
    ``"delta": 1e-07``."""
    fields = []
    if params.epsilon > epsilon:
        fields.append(f'"epsilon": {epsilon:g}')
    if params.delta > delta:
        fields.append(f'"delta": {delta:g}')
    return ", ".join(fields)


def check_own_configuration(
    *,
    epsilon: float,
    delta: float,
    seed: int | None,
    model: str,
    model_options: tuple[tuple[str, int], ...] = (),
) -> None:
    """The agent's own budget, research seed, model and its options, before anything else."""
    low, high = BUDGET_EPSILON
    if not (math.isfinite(epsilon) and low <= epsilon <= high):
        raise AgentError(f"epsilon must be in [{low:g}, {high:g}], got {epsilon!r}")
    low, high = BUDGET_DELTA
    if not (math.isfinite(delta) and low <= delta <= high):
        raise AgentError(f"delta must be in [{low:g}, {high:g}], got {delta!r}")
    if seed is not None and seed < 0:
        raise AgentError(f"seed must be >= 0, got {seed}")
    try:
        get_model(model, dict(model_options))
    except ValueError as error:
        raise AgentError(str(error)) from None


def check_holding(
    me: Identity,
    records: Records,
    *,
    model: str,
    model_options: tuple[tuple[str, int], ...] = (),
    data: object,
) -> None:
    """The run fits what this agent holds (``data`` names the records' source): its own
    ``model`` (--model) with its own ``model_options`` (--components: the run's model,
    every option at the value the agent pinned or, unpinned, the model's default), every
    public parameter in its range (``check_public``), and the dimension and count of the
    records it read before the first request. The comparison uses the agent's
    configuration, the file's shape and the enrolment, never a record's value, so the
    refusal is the same for every pair of neighbouring files."""
    params = me.params
    if params.model != model:
        raise AgentError(
            f"run {me.run_id[:80]!r} fits model {params.model}, but this agent holds "
            f"records for model {model} (--model); refusing"
        )
    # The wire checked the run's options against the model's declaration (names, ranges).
    published = configured_model(params).option_values()
    pinned = get_model(model, dict(model_options)).option_values()
    if published != pinned:
        raise AgentError(
            f"run {me.run_id[:80]!r} fits model {model} with {_options_text(published)}, "
            f"but this agent consents to {_options_text(pinned)} "
            f"({', '.join('--' + name for name in pinned)}); refusing"
        )
    check_public(me)
    if records.n != me.records or records.d != params.d:
        raise AgentError(
            f"{data}: {records.n} records of dimension {records.d}, but hospital "
            f"{me.hospital} is enrolled in run {me.run_id} with {me.records} records of "
            f"dimension {params.d}"
        )


def _options_text(values: dict[str, int]) -> str:
    """``components = 3``: a model's option values, as a refusal names them."""
    return ", ".join(f"{name} = {value}" for name, value in values.items())
