"""What the coordinator answers about a run's rounds, its hospitals and its trajectory
(``GET /v1/runs/{run}/rounds``, ``…/hospitals``, ``…/trajectory``); re-exported by
``ldpem.common.wire``."""

from __future__ import annotations

from typing import Literal

from ldpem.common.protocol import LAST
from ldpem.common.wire_base import Schema as _Schema

__all__ = ["HospitalParticipation", "RoundSummary", "Trajectory"]


class RoundSummary(_Schema):
    round: int
    status: Literal["open", "closed"]
    opened_at: float
    deadline: float
    closed_at: float | None
    reporters: list[str]
    count: int
    beta: list[float]
    beta_next: list[float] | None


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
