"""The federated run's protocol: pydantic v2 schemas shared by coordinator and agent.

Every path is under ``/v1`` (``API_PREFIX``); a change that an older agent could not read
gets a new prefix. Floats travel as JSON numbers (Python's repr, so they round-trip
exactly); NaN and infinity are never valid in a report.

Types are strict (pydantic strict mode, on the coordinator and in the agent alike): a number
field takes a JSON number and nothing else (never ``true`` or ``"1"``), an int field takes
no fraction (``1.5`` and ``1.0`` are refused; a float field takes ``1``), unknown fields are
refused, and NaN or infinity is never valid anywhere. ``describe_errors`` turns validation
errors into the one-line message both sides show.

Round numbering: round t (0-based) starts from β^t and ends with the M-step that gives
β^{t+1}; a run of T rounds ends with β^T. Under partition, a hospital enrolled with N
records reports, in round t, the t-th of T disjoint groups of its records, whose size is
``expected_round_count(N, T, t, schedule)`` (the run's schedule,
``ldpem.common.protocol.schedule``; by default ``numpy.array_split`` sizes).

Fields added after a protocol's first release (a schedule, per-round scales, the final
estimate) are optional with a default, and ``PublicParameters`` leaves them out of its
JSON while they hold it: a run without them is published, and bound in an agent's ledger,
byte for byte as before, so older agents and ledgers keep working.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from ldpem.common.models import get_model, model_names
from ldpem.common.models.base import DEFAULT_START
from ldpem.common.protocol import (
    EQUAL,
    GIVEN_START,
    LAST,
    check_final,
    check_noise_shares,
    check_schedule,
    configured_model,
    derive_public_values,
    round_size,
    round_sizes,
)
from ldpem.common.protocol.run_fields import DEFAULT_MECHANISM, RUN_DEFAULTS
from ldpem.common.wire.accuracy import ConfidenceRegion, ErrorBand, Forecast
from ldpem.common.wire.base import Schema
from ldpem.common.wire.errors import describe_errors
from ldpem.common.wire.names import (
    INT_LIMIT,
    AccountingName,
    FederatedMechanism,
    FinalRule,
    ModelName,
    RunStatus,
    ScheduleSpec,
)
from ldpem.common.wire.reads import HospitalParticipation, RoundSummary, Trajectory
from ldpem.common.wire.secagg import (
    SecAggGraph,
    check_shares,
    roster_inlined,
    threshold_values,
    topology_resolved,
)

__all__ = [
    "API_PREFIX",
    "BETA_SIZE_MAX",
    "HOSPITAL_NAME_PATTERN",
    "INT_LIMIT",
    "ConfidenceRegion",
    "ErrorBand",
    "FederatedMechanism",
    "Forecast",
    "HospitalEnrolment",
    "HospitalParticipation",
    "HospitalToken",
    "Identity",
    "PublicParameters",
    "ReportAck",
    "ReportIn",
    "RoundInfo",
    "RoundSummary",
    "RunCancel",
    "RunCreate",
    "RunCreated",
    "RunStatus",
    "RunSummary",
    "ScheduleSpec",
    "Trajectory",
    "describe_errors",
    "expected_round_count",
    "public_parameters",
    "report_digest",
]

API_PREFIX = "/v1"
#: The most values β may have (d, or K·(d + 1) for a mixture): a report carries that many.
BETA_SIZE_MAX = 100_000
HOSPITAL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


def expected_round_count(records: int, rounds: int, t: int, schedule: ScheduleSpec = EQUAL) -> int:
    """Records a holder with ``records`` records reports in round ``t`` of ``rounds``
    (partition by ``schedule``; for ``equal`` the sizes ``numpy.array_split`` gives: the
    first records % rounds groups have one record more)."""
    return round_size(records, rounds, t, schedule)


_Schema = Schema


#: The later fields of the run's parameters and their defaults, left out of the JSON when
#: they hold them (module docstring).
_LATER: dict[str, Any] = {
    "schedule": EQUAL,
    "scales": None,
    "final": LAST,
    "start": DEFAULT_START,
    "model_options": {},
}

#: The model's declared options (``Model.options``) by name: a handful of small integers,
#: each checked against the model's declaration (``protocol.configured_model``).
ModelOptions = Annotated[dict[str, int], Field(max_length=16)]


def _check_later(mechanism: str, schedule: ScheduleSpec, final: str, rounds: int) -> None:
    check_schedule(schedule, rounds)
    check_final(final, rounds)
    check_noise_shares(mechanism, schedule, final)


class HospitalEnrolment(_Schema):
    """One data holder of a run: its name, its number of records, optionally its token
    (otherwise the coordinator generates one and returns it once)."""

    name: str = Field(pattern=HOSPITAL_NAME_PATTERN)
    records: int = Field(ge=1, lt=INT_LIMIT)
    token: str | None = Field(default=None, min_length=16, max_length=256)


class RunCreate(_Schema):
    """What an operator asks for when creating a run (``POST /v1/runs``, admin token)."""

    model: ModelName
    #: The model's declared options (a mixture's ``components``); empty: their defaults.
    model_options: ModelOptions = Field(default_factory=dict)
    d: int = Field(ge=1, le=100_000)
    sigma: float = Field(gt=0, allow_inf_nan=False)
    rounds: int = Field(ge=1, le=10_000)
    eta: float = Field(default=RUN_DEFAULTS.eta, gt=0, allow_inf_nan=False)
    mechanism: FederatedMechanism = DEFAULT_MECHANISM
    epsilon: float = Field(default=RUN_DEFAULTS.epsilon, gt=0, allow_inf_nan=False)
    #: Default: n^-1.1 with n the total number of enrolled records.
    delta: float | None = Field(default=RUN_DEFAULTS.delta, gt=0, lt=1)
    accounting: AccountingName = Field(default=RUN_DEFAULTS.accounting)
    #: Second-moment bound of Assumption 1; default: the model's ``default_tau`` of beta_bound.
    tau: float | None = Field(default=RUN_DEFAULTS.tau, gt=0, allow_inf_nan=False)
    #: Declared bound on ‖β‖₂ used for the default τ; default snr·σ.
    beta_bound: float | None = Field(default=RUN_DEFAULTS.beta_bound, gt=0, allow_inf_nan=False)
    zeta: float = Field(default=RUN_DEFAULTS.zeta, gt=0, lt=1)
    #: Explicit truncation scale s; default: Algorithm 2's rule from the enrolled counts.
    scale: float | None = Field(default=RUN_DEFAULTS.scale, gt=0, allow_inf_nan=False)
    clip: float = Field(default=RUN_DEFAULTS.clip, gt=0, allow_inf_nan=False)
    hospitals: list[HospitalEnrolment] = Field(min_length=1, max_length=1000)
    #: Reports needed to close a round at its deadline; default: every hospital.
    quorum: int | None = Field(default=None, ge=1, lt=INT_LIMIT)
    round_deadline: float = Field(default=600.0, gt=0, le=7 * 86400, allow_inf_nan=False)
    on_short: Literal["extend", "fail"] = "extend"
    beta0: list[float] | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    #: Signal-to-noise ‖β*‖/σ assumed by the accuracy forecast (not used by the EM).
    snr: float = Field(default=RUN_DEFAULTS.snr, gt=0, allow_inf_nan=False)
    #: Fraction of missing covariates assumed by the forecast (RMC).
    missing: float = Field(default=0.0, ge=0, lt=1)
    forecast: bool = True
    #: Accept reports declaring less noise than the run's budget needs (an agent started
    #: with --allow-weaker): the run then shows each such hospital's weaker guarantee.
    #: Default: refused (422), so every counted report meets the run's (epsilon, delta).
    allow_weaker_reports: bool = False
    #: Records per round (``ldpem.common.protocol.schedule``); default: equal rounds.
    schedule: ScheduleSpec = EQUAL
    #: The reported estimate: the last iterate, or the average of the last K
    #: (``ldpem.common.protocol.estimate``; post-processing, no privacy cost).
    final: FinalRule = RUN_DEFAULTS.final
    #: Noise shares only (docs/SECAGG.md): the fewest holders of a released sum, more than
    #: half the enrolled hospitals, at most all; default K − ⌊K/10⌋ (``study_t_min``).
    t_min: int | None = Field(default=RUN_DEFAULTS.t_min, ge=1, le=1000)
    #: Noise shares only: c, the most holders that may collude with the coordinator,
    #: 0 ≤ c < 2·t_min − K; the noise is sized for t_min − c honest shares. Default: the
    #: largest c ≤ ⌊K/3⌋ that the run's t_min allows (``study_colluders``).
    colluders: int | None = Field(default=RUN_DEFAULTS.colluders, ge=0, le=1000)
    #: Noise shares only, on a SecAgg+ graph (docs/SECAGG_GRAPH.md): the share of holders
    #: that may drop out (default 0.1) and h, the least honest noise shares in any sum the
    #: coordinator can learn (default 2; c defaults to ⌊K/3⌋).
    dropout_share: float | None = Field(default=None, ge=0, lt=1, allow_inf_nan=False)
    min_honest_shares: int | None = Field(default=None, ge=2, le=1000)
    #: Noise shares only: the full mesh, the SecAgg+ Harary graph or the expander
    #: (docs/SECAGG_GRAPH.md); "auto" (default) is resolved at validation, so a run never
    #: holds it (``wire.secagg.topology_resolved``; declared after the fields it reads).
    secagg_topology: Literal["auto", "mesh", "graph", "expander"] = Field(
        default="auto", validate_default=True
    )
    #: Noise shares only: the consortium's roster of holders' public keys (the JSON of
    #: ``ldpem keys roster``); every enrolled hospital must be on it.
    roster: dict[str, Any] | None = None

    _roster_inlined = field_validator("roster", mode="before")(roster_inlined)
    _topology_resolved = field_validator("secagg_topology")(topology_resolved)

    @model_validator(mode="after")
    def _consistent(self) -> RunCreate:
        names = [h.name for h in self.hospitals]
        if len(set(names)) != len(names):
            raise ValueError("hospital names must be unique")
        tokens = [h.token for h in self.hospitals if h.token is not None]
        if len(set(tokens)) != len(tokens):
            raise ValueError("hospital tokens must be unique")
        if self.quorum is not None and self.quorum > len(self.hospitals):
            raise ValueError(
                f"quorum {self.quorum} exceeds the {len(self.hospitals)} enrolled hospitals"
            )
        _check_later(self.mechanism, self.schedule, self.final, self.rounds)
        for h in self.hospitals:
            if h.records < self.rounds:
                raise ValueError(
                    f"hospital {h.name} has {h.records} records, fewer than the "
                    f"{self.rounds} rounds they are partitioned over"
                )
            try:
                round_sizes(h.records, self.rounds, self.schedule)
            except ValueError as error:
                raise ValueError(f"hospital {h.name}: {error}") from None
        # ValueError, one line, for an option the model does not declare or out of range.
        size = configured_model(self).parameter_dim(self.d)
        if size > BETA_SIZE_MAX:
            raise ValueError(
                f"beta would have {size} values for model {self.model} with d = {self.d}, "
                f"more than a report carries ({BETA_SIZE_MAX})"
            )
        check_shares(self)
        if self.beta0 is not None and len(self.beta0) != size:
            raise ValueError(f"beta0 must have {size} entries, got {len(self.beta0)}")
        if self.missing and not get_model(self.model).allows_missing:
            names = [name for name in model_names() if get_model(name).allows_missing]
            raise ValueError(f"missing is only meaningful for models {', '.join(names)}")
        return self


class RunCancel(_Schema):
    """Why the operator cancels a run (``POST /v1/runs/{run}/cancel``, admin token): one
    line, shown with the run's status."""

    reason: str = Field(
        default="no reason given", min_length=1, max_length=500, pattern=r"^[^\x00-\x1f\x7f]*$"
    )


class PublicParameters(_Schema):
    """Everything an agent needs to compute its report, fixed when the run is created."""

    model: ModelName
    #: The model's declared options (``RunCreate.model_options``); left out of the JSON
    #: while empty, so a run of a model without options is published as before.
    model_options: ModelOptions = Field(default_factory=dict)
    d: int
    sigma: float
    rounds: int
    eta: float
    mechanism: FederatedMechanism
    epsilon: float
    delta: float
    accounting: AccountingName
    tau: float
    zeta: float
    #: Truncation scale s (local, central); None for local-clip and none. For hospital: None
    #: means each holder's own s_k from its enrolled count (``protocol.holder_scale``).
    scale: float | None
    #: Smoothing precision β_s (local, central, hospital).
    smoothing: float | None
    #: Clip norm C (local-clip).
    clip: float | None
    #: m = Σ enrolled records / rounds.
    records_per_round: int
    #: Records per round (``ldpem.common.protocol.schedule``); default: equal rounds.
    schedule: ScheduleSpec = EQUAL
    #: Truncation scale s_t of each round, when they differ (a schedule other than equal
    #: and Algorithm 2's rule); ``scale`` is then None. None: every round uses ``scale``.
    scales: Annotated[list[float], Field(min_length=1, max_length=10_000)] | None = None
    #: The reported estimate: ``"last"`` or ``"average:K"`` (``protocol.estimate``).
    final: FinalRule = LAST
    #: Noise shares (secagg): the honest holders whose shares together make the noise;
    #: None for every other mechanism.
    t_min: int | None = None
    #: Noise shares (secagg): c, the most holders that may collude with the coordinator
    #: (the noise is sized for t_min − c honest shares); None for every other mechanism.
    colluders: int | None = None
    #: Noise shares on the SecAgg+ graph: its inputs and derived values (t_min is t_k).
    graph: SecAggGraph | None = None
    #: Noise shares (secagg): K, the enrolled holders; the modulus bits of the masked sums;
    #: the roster's digest (each agent's pinned roster must have it). None otherwise.
    holders: int | None = None
    modulus_bits: int | None = None
    roster_digest: str | None = None
    #: How β⁰ was made: the model's public start rule (``Model.start_rule``), or "given"
    #: (the operator's beta0).
    start: str = DEFAULT_START

    @property
    def honest_shares(self) -> int | None:
        """The honest noise shares the run's noise is sized for (``PublicValues``)."""
        if self.t_min is None:
            return None
        return self.graph.honest if self.graph else self.t_min - (self.colluders or 0)

    @property
    def survivors(self) -> int | None:
        """The expander's survivor floor T (``PublicValues``); None otherwise."""
        return self.graph.survivors or None if self.graph else None

    @model_validator(mode="after")
    def _consistent(self) -> PublicParameters:
        _check_later(self.mechanism, self.schedule, self.final, self.rounds)
        rules = (configured_model(self).start_rule, GIVEN_START)
        if self.start not in rules:
            raise ValueError(f"start must be one of {rules} for model {self.model}")
        if self.scales is not None and len(self.scales) != self.rounds:
            raise ValueError(f"scales must have one entry per round ({self.rounds})")
        return self

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name, default in _LATER.items():
            if name in data and data[name] == default:
                del data[name]
        return data


class HospitalToken(_Schema):
    name: str
    token: str


class RunCreated(_Schema):
    run_id: str
    params: PublicParameters
    #: Tokens the coordinator generated (only for hospitals enrolled without one); shown once.
    tokens: list[HospitalToken]
    expected_error: float | None
    trivial_error: float
    warning: str | None
    #: The forecast behind expected_error (its mean), with its band (None: no forecast
    #: yet, or none: it is computed after the run is created, see ``pending``).
    forecast: Forecast | None = None
    #: Results the coordinator is computing for this run in the background
    #: (``ldpem.server.background``), e.g. ["forecast"]: shown in its status when ready.
    pending: list[str] = Field(default_factory=list)


class RoundInfo(_Schema):
    """The broadcast of ``GET /v1/runs/{run}/round``: the open round, or the end of the run."""

    run_id: str
    status: RunStatus
    #: The open round; equal to ``rounds`` when the run finished.
    round: int
    beta: list[float]
    deadline: float | None
    params: PublicParameters
    reason: str | None = None


class ReportIn(_Schema):
    """One hospital's report for one round: Σ of its privatized record vectors and their count."""

    hospital: str = Field(pattern=HOSPITAL_NAME_PATTERN)
    round: int = Field(ge=0, lt=INT_LIMIT)
    mechanism: FederatedMechanism
    count: int = Field(ge=0, lt=INT_LIMIT)
    total: list[float] = Field(max_length=BETA_SIZE_MAX)
    #: Per-record noise std σ_r the agent used (0 for central and none); for hospital the
    #: std of the one draw on the whole sum.
    noise_std: float = Field(ge=0)


def report_digest(report: ReportIn) -> str:
    """SHA-256 of a report's canonical JSON: equal digests ⇔ the same report."""
    canonical = json.dumps(report.model_dump(mode="python"), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


class ReportAck(_Schema):
    run_id: str
    round: int
    hospital: str
    #: True when this exact report had already been accepted (an idempotent retry).
    duplicate: bool


class Identity(_Schema):
    """Who a hospital token belongs to (``GET /v1/me``)."""

    run_id: str
    hospital: str
    records: int
    params: PublicParameters


class RunSummary(_Schema):
    run_id: str
    status: RunStatus
    round: int
    rounds: int
    model: ModelName
    #: The model's declared options (``PublicParameters.model_options``); empty: none.
    model_options: ModelOptions = Field(default_factory=dict)
    d: int
    mechanism: FederatedMechanism
    hospitals: int
    quorum: int
    created_at: float
    expected_error: float | None
    trivial_error: float
    warning: str | None
    reason: str | None
    #: β^t of the open round; once the run finished, the reported estimate (``final``).
    beta: list[float]
    #: Whether the run accepts reports weaker than its budget (see HospitalParticipation).
    allow_weaker_reports: bool = False
    #: Noise shares (secagg): the run's published topology ("mesh", "graph", "expander")
    #: and on the expander its survivor floor T; None otherwise.
    secagg_topology: str | None = None
    survivors: int | None = None
    #: The run's forecast (see RunCreated), once it is computed.
    forecast: Forecast | None = None
    #: The run's health (healthy, degraded, failed, cancelled) and the status page's line
    #: for it, naming late, missing and lost hospitals, in every summary (``GET /v1/runs``
    #: included). None only in an answer of an older coordinator, which sent them for
    #: ``GET /v1/runs/{run}`` alone.
    health: str | None = None
    health_line: str | None = None
    #: Results being computed in the background (see RunCreated), e.g. ["forecast"].
    pending: list[str] = Field(default_factory=list)
    #: The finished run's confidence region around ``beta``, once its parametric bootstrap
    #: is done (``ldpem.common.planning.confidence``; pending as "confidence" until then).
    confidence: ConfidenceRegion | None = None


def public_parameters(request: RunCreate) -> PublicParameters:
    """The public mechanism parameters of a run, from its request and the study defaults
    (``protocol.derive_public_values``)."""
    values = derive_public_values(request)
    if request.roster is not None:  # noise shares (``wire.secagg.check_shares``)
        values.update(threshold_values(request, values["t_min"]))
        from ldpem.common.secagg import Roster
        from ldpem.common.secagg.runvalues import shares_values

        digest = Roster.from_json(json.dumps(request.roster)).digest
        holders = len(request.hospitals)
        values.update(
            shares_values(PublicParameters(**values), holders=holders, roster_digest=digest)
        )
    return PublicParameters(**values)
