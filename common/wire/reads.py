"""What the coordinator answers about a run's rounds, its hospitals and its trajectory
(``GET /v1/runs/{run}/rounds``, ``…/hospitals``, ``…/trajectory``); re-exported by
``ldpem.common.wire``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ldpem.common.protocol import LAST
from ldpem.common.wire.base import Schema as _Schema

__all__ = [
    "HospitalParticipation",
    "LostStep",
    "RoundSummary",
    "SecAggLostRound",
    "SecAggRoundSteps",
    "SecAggStepClosing",
    "Trajectory",
]


class SecAggStepClosing(_Schema):
    """How one step of a secure-aggregation round closed, as the coordinator recorded it."""

    step: str
    #: "everyone": every holder it waited for answered; "deadline": its deadline passed.
    by: Literal["everyone", "deadline"]
    waited_for: list[str]
    #: The holders it waited for that did not answer: lost at this step.
    missing: list[str]
    at: float


class SecAggLostRound(_Schema):
    """Why a secure-aggregation round ended without a sum."""

    #: "faulty": the aggregator proved ``culprits`` sent wrong material; "unattributable":
    #: the sum was out of range and the masks keep anyone from naming a holder; "short":
    #: too few holders were left for the thresholds.
    cause: Literal["faulty", "unattributable", "short"]
    reason: str
    culprits: list[str]


class SecAggRoundSteps(_Schema):
    """Who took part in each step of a secure-aggregation round (docs/FEDERATED.md)."""

    t_min: int
    colluders: int
    #: The open step (advertise, shares, masked, signature, unmask), "done" once summed.
    step: str
    advertised: list[str]
    shared: list[str]
    masked: list[str]
    signed: list[str]
    unmasked: list[str]
    #: The holders whose inputs are in the round's sum (None before it is known).
    survivors: list[str] | None
    #: Holder → the step it was waited for and did not answer.
    lost: dict[str, str]
    #: Holders that sent a masked input a peer's shares left out of the survivor set.
    excluded: list[str]
    #: Holders lost in an earlier round, not waited for in this one (and not back).
    not_waited_for: list[str]
    #: Holders that advertised after the step closed: waited for again next round.
    returned: list[str]
    closings: list[SecAggStepClosing]
    #: Holder → why the disputes of the masked step (one holder excluding another) left it
    #: out of the survivor set: each dispute costs its parties, never the round.
    disputed: dict[str, str] = Field(default_factory=dict)
    #: Set when the round ended without a sum (step "lost"): the run kept its β and went
    #: on (docs/SECAGG.md, "A fault costs the faulty party").
    lost_round: SecAggLostRound | None = None


class LostStep(_Schema):
    """A secure-aggregation step a holder was waited for and did not answer."""

    round: int
    step: str


class RoundSummary(_Schema):
    round: int
    status: Literal["open", "closed"]
    opened_at: float
    deadline: float
    closed_at: float | None
    #: The hospitals that reported (in a secagg round: the survivors, or the holders that
    #: answered its open step).
    reporters: list[str]
    count: int
    beta: list[float]
    beta_next: list[float] | None
    #: The steps of a secure-aggregation round (None in every other run).
    secagg: SecAggRoundSteps | None = None


class HospitalParticipation(_Schema):
    hospital: str
    records: int
    rounds_reported: list[int]
    last_report_at: float | None
    #: The per-record noise std σ_r of this hospital's least private report (None: no
    #: report carrying noise, as under central and none).
    noise_std: float | None = None
    #: The ε per record that report spends at the run's δ (tight Gaussian accounting).
    epsilon: float | None = None
    #: True when a report declared less noise than the run's budget needs (accepted only
    #: in a run created with ``allow_weaker_reports``): that hospital's guarantee is
    #: ``epsilon``, weaker than the run's.
    weaker: bool = False
    #: The round of that least private report (its sensitivity depends on the round's
    #: scale under a schedule).
    noise_round: int | None = None
    #: Secure aggregation: the steps this holder was waited for and missed, by round (in
    #: ``rounds_reported``: the rounds whose sum holds its input).
    lost: list[LostStep] = Field(default_factory=list)


class Trajectory(_Schema):
    run_id: str
    #: β^0 … β^t (the last is the current or final iterate).
    betas: list[list[float]]
    #: ‖β^{t+1} − β^t‖ for each closed round.
    steps: list[float]
    #: The run's ``final`` rule.
    final: str = LAST
    #: The reported estimate once the run finished (``final`` of the iterates), else None.
    estimate: list[float] | None = None
    #: Once finished: the weights of the iterates averaged, β^{T−k+1} … β^T (sum 1).
    weights: list[float] | None = None
