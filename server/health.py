"""A run's rounds with their reports, and its health: who is late in the open round.

Pure functions over the store's rows: ``ldpem.server.queries`` reads the rows and calls
them, and the status page and ``GET /v1/runs/{run}/rounds`` read the result, so the page
and the JSON cannot disagree.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ldpem.server.store import ReportRow, RoundRow, RoundState, RunState

__all__ = [
    "LATE_FACTOR",
    "LATE_FLOOR",
    "HospitalHealth",
    "Presence",
    "RoundView",
    "RunHealth",
    "assess",
    "late_after",
    "round_views",
]

#: A hospital that has not reported in the open round is late once the round has lasted
#: LATE_FACTOR times a typical round (see ``late_after``), and never before LATE_FLOOR s.
LATE_FACTOR = 1.5
LATE_FLOOR = 5.0

#: A hospital in the open round: reported, not yet (waiting), overdue (late), or "" when
#: no round is open.
Presence = Literal["reported", "waiting", "late", ""]


@dataclass(frozen=True)
class RoundView:
    """One round and its reports, by arrival."""

    t: int
    status: RoundState
    opened_at: float
    deadline: float
    closed_at: float | None
    beta: list[float]
    beta_next: list[float] | None
    reports: tuple[ReportRow, ...]

    @property
    def reporters(self) -> frozenset[str]:
        return frozenset(p.hospital for p in self.reports)


def round_views(rounds: Sequence[RoundRow], reports: Sequence[ReportRow]) -> list[RoundView]:
    """``rounds`` with their ``reports``, in one pass over each: a page of a long run is
    rendered on the event loop, so no round × report scan."""
    by_round: dict[int, list[ReportRow]] = {}
    for p in sorted(reports, key=lambda p: (p.received_at, p.hospital)):
        by_round.setdefault(p.t, []).append(p)
    return [
        RoundView(
            t=r.t,
            status=r.status,
            opened_at=r.opened_at,
            deadline=r.deadline,
            closed_at=r.closed_at,
            beta=r.beta,
            beta_next=r.beta_next,
            reports=tuple(by_round.get(r.t, ())),
        )
        for r in rounds
    ]


def late_after(rounds: Sequence[RoundView]) -> float:
    """Seconds the open round may last before a hospital that has not reported in it is
    late: LATE_FACTOR × the median closed round, at least LATE_FLOOR; infinite while no
    round has closed."""
    durations = [r.closed_at - r.opened_at for r in rounds if r.closed_at is not None]
    if not durations:
        return math.inf
    return max(LATE_FLOOR, LATE_FACTOR * statistics.median(durations))


@dataclass(frozen=True)
class HospitalHealth:
    name: str
    in_open_round: Presence


@dataclass(frozen=True)
class RunHealth:
    """What the health banner says, at ``now``."""

    #: The open round (None once the run ended).
    open_round: int | None
    #: Whether the open round's deadline was moved (short of quorum) or has passed.
    extended: bool
    past_deadline: bool
    #: Whether a hospital absent from the open round is late in it (see ``late_after``).
    overdue: bool
    hospitals: tuple[HospitalHealth, ...]
    now: float

    @property
    def late(self) -> list[str]:
        return [h.name for h in self.hospitals if h.in_open_round == "late"]

    @property
    def waiting(self) -> list[str]:
        return [h.name for h in self.hospitals if h.in_open_round == "waiting"]


def assess(
    *,
    run_status: RunState,
    round_deadline: float,
    views: Sequence[RoundView],
    hospitals: Sequence[str],
    now: float,
) -> RunHealth:
    """The health of a run whose rounds are ``views`` and enrolled hospitals ``hospitals``
    (each round given ``round_deadline`` seconds) at ``now``."""
    open_view = next((r for r in views if r.status == "open"), None)
    if run_status != "running":
        open_view = None
    extended = past = overdue = False
    if open_view is not None:
        # The state machine moves a deadline only to extend a round short of quorum.
        extended = open_view.deadline - open_view.opened_at > round_deadline + 1e-6
        past = open_view.deadline < now
        overdue = now - open_view.opened_at > late_after(views) or extended
    states = []
    for name in hospitals:
        presence: Presence = ""
        if open_view is not None:
            if name in open_view.reporters:
                presence = "reported"
            else:
                presence = "late" if overdue else "waiting"
        states.append(HospitalHealth(name, presence))
    return RunHealth(
        open_round=None if open_view is None else open_view.t,
        extended=extended,
        past_deadline=past,
        overdue=overdue,
        hospitals=tuple(states),
        now=now,
    )
