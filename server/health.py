"""A run's rounds with their reports, and its health: who is late in the open round, who
went missing in closed ones, and the one line that says so.

Pure functions over the store's rows: ``ldpem.server.queries`` reads the rows and calls
them, and the status page, ``GET /v1/runs/{run}/rounds`` and ``/metrics`` all read the
result, so the page, the JSON and the alerts cannot disagree.

A run is *degraded* while any enrolled hospital is late in the open round or has missed a
closed round (a missed round is final: its records never reach the estimate), round 0
included; *failed* when the run failed; *cancelled* when the operator cancelled it (over:
neither degraded nor failed, whatever its rounds missed); *healthy* otherwise. In a
secure-aggregation run a hospital "reports" in a round when its input is in the round's sum
(a survivor), and the run is also degraded once a holder was lost at a step
(``ldpem.server.secagg.view``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ldpem.server.secagg.view import Loss, SecAggRound, losses
from ldpem.server.store import ReportRow, RoundRow, RunState

__all__ = [
    "LATE_FACTOR",
    "LATE_FLOOR",
    "HealthState",
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
#: Hospitals named in the health line at most; a run may enrol thousands.
NAMED = 10

#: A hospital in the open round: reported, not yet (waiting), overdue (late), out of it (a
#: secagg holder lost at a step, or not waited for since), or "" when no round is open.
Presence = Literal["reported", "waiting", "late", "lost", ""]
HealthState = Literal["healthy", "degraded", "paused", "failed", "cancelled"]


@dataclass(frozen=True)
class RoundView(RoundRow):
    """One round's row and its reports, by arrival; in a secagg run, its steps."""

    reports: tuple[ReportRow, ...]
    secagg: SecAggRound | None = None

    @property
    def reporters(self) -> frozenset[str]:
        """The hospitals that reported; in a secagg round, the survivors once the sum is
        known, before that the holders that answered the open step."""
        if self.secagg is not None:
            return self.secagg.present
        return frozenset(p.hospital for p in self.reports)

    @property
    def outside(self) -> frozenset[str]:
        """Secagg holders out of this round (``SecAggRound.outside``)."""
        return frozenset() if self.secagg is None else self.secagg.outside


def round_views(
    rounds: Sequence[RoundRow],
    reports: Sequence[ReportRow],
    secagg: Mapping[int, SecAggRound] | None = None,
) -> list[RoundView]:
    """``rounds`` with their ``reports`` (and, in a secagg run, ``secagg`` by round), in one
    pass over each: a page of a long run is rendered on the event loop, so no round ×
    report scan."""
    by_round: dict[int, list[ReportRow]] = {}
    for p in sorted(reports, key=lambda p: (p.received_at, p.hospital)):
        by_round.setdefault(p.t, []).append(p)
    return [
        RoundView(
            **vars(r),
            reports=tuple(by_round.get(r.t, ())),
            secagg=None if secagg is None else secagg[r.t],
        )
        for r in rounds
    ]


def late_after(rounds: Sequence[RoundView]) -> float:
    """Seconds the open round may last before a hospital that has not reported in it is
    late: LATE_FACTOR × the median closed round or, while none has closed (round 0), × the
    latest report of the open round so far, the pace the hospitals that did report set;
    at least LATE_FLOOR. Infinite while there is neither: before anyone reported, only the
    deadline says who is late."""
    durations = [r.closed_at - r.opened_at for r in rounds if r.closed_at is not None]
    if durations:
        typical = statistics.median(durations)
    else:
        open_round = next((r for r in rounds if r.status == "open"), None)
        if open_round is None or not open_round.reports:
            return math.inf
        typical = max(p.received_at for p in open_round.reports) - open_round.opened_at
    return max(LATE_FLOOR, LATE_FACTOR * typical)


@dataclass(frozen=True)
class HospitalHealth:
    name: str
    #: Rounds it reported in (the open one included).
    reported: int
    #: Closed rounds that went without it.
    missed: tuple[int, ...]
    in_open_round: Presence


@dataclass(frozen=True)
class RunHealth:
    """What the health banner and the run's health metrics say, at ``now``."""

    run_status: RunState
    rounds: int
    closed: int
    #: The open round (None once the run ended).
    open_round: int | None
    opened_at: float | None
    #: Whether the open round's deadline was moved (short of quorum), and whether it passed.
    extended: bool
    past_deadline: bool
    #: Whether a hospital absent from the open round is late in it (see ``late_after``).
    overdue: bool
    hospitals: tuple[HospitalHealth, ...]
    reason: str | None
    warning: str | None
    now: float
    #: Whether the run aggregates securely, and its holders lost at a step (or left out of
    #: a survivor set), in round order.
    secagg: bool = False
    lost: tuple[Loss, ...] = ()

    @property
    def late(self) -> list[str]:
        return [h.name for h in self.hospitals if h.in_open_round == "late"]

    @property
    def waiting(self) -> list[str]:
        return [h.name for h in self.hospitals if h.in_open_round == "waiting"]

    @property
    def missing(self) -> list[HospitalHealth]:
        """Hospitals that missed at least one closed round."""
        return [h for h in self.hospitals if h.missed]

    @property
    def open_age(self) -> float | None:
        """Seconds the open round has been open (None once the run ended)."""
        return None if self.opened_at is None else max(0.0, self.now - self.opened_at)

    @property
    def degraded(self) -> bool:
        """Whether a hospital is late in the open round, missed a closed one or was lost
        (never in a cancelled run: the operator ended it, nothing is left to alert on)."""
        return self.run_status != "cancelled" and bool(self.late or self.missing or self.lost)

    @property
    def state(self) -> HealthState:
        if self.run_status in ("paused", "failed", "cancelled"):
            return self.run_status
        return "degraded" if self.degraded else "healthy"

    def headline(self) -> str:
        """One line: the state's reason, naming the late and missing hospitals."""
        if self.run_status == "failed":
            return f"stopped after {self.closed} of {self.rounds} rounds"
        if self.run_status == "cancelled":
            return f"cancelled after {self.closed} of {self.rounds} rounds"
        if self.run_status == "paused":
            return f"paused after {self.closed} of {self.rounds} rounds: `ldpem run resume` goes on"
        lost = f"; lost: {_named([str(x) for x in self.lost])}" if self.lost else ""
        if self.run_status == "finished":
            if not self.missing:
                return f"finished all {self.rounds} rounds{lost}"
            reported = [f"{h.name} reported {h.reported} of {self.rounds}" for h in self.missing]
            return f"finished with missing rounds: {_named(reported)}{lost}"
        parts = [
            f"running, round t = {self.open_round} open, {self.closed} of {self.rounds} closed"
        ]
        if self.late:
            parts.append(f"late in round t = {self.open_round}: {_named(self.late)}")
        if self.missing:
            missed = [f"{h.name} (t = {_spans(h.missed)})" for h in self.missing]
            parts.append(f"missed rounds: {_named(missed)}")
        if self.waiting:
            parts.append(f"waiting for {_named(self.waiting)}")
        return "; ".join(parts) + lost

    def details(self) -> list[str]:
        """What else needs the operator's attention, beside the headline."""
        found: list[str] = []
        if self.run_status == "failed":
            found.append(f"the run failed: {self.reason or 'no reason recorded'}")
        if self.run_status == "cancelled":
            found.append(self.reason or "cancelled by the operator")
        if self.run_status == "paused":
            found.append(f"the run is paused: {self.reason or 'no reason recorded'}")
        if self.warning:
            found.append(f"forecast warning: {self.warning}")
        if self.open_round is not None:
            if self.extended:
                found.append(f"round t = {self.open_round} was extended: short of quorum")
            if self.past_deadline:
                found.append(f"round t = {self.open_round} is past its deadline")
        return found


def assess(
    *,
    run_status: RunState,
    rounds: int,
    round_deadline: float,
    views: Sequence[RoundView],
    hospitals: Sequence[str],
    reason: str | None,
    warning: str | None,
    now: float,
) -> RunHealth:
    """The health of a run whose rounds are ``views`` and enrolled hospitals ``hospitals``
    (``rounds`` planned, each with ``round_deadline`` seconds) at ``now``."""
    open_view = next((r for r in views if r.status == "open"), None)
    if run_status != "running":
        open_view = None
    extended = past = overdue = False
    if open_view is not None:
        # The state machine moves a deadline only to extend a round short of quorum.
        extended = open_view.deadline - open_view.opened_at > round_deadline + 1e-6
        past = open_view.deadline < now
        overdue = now - open_view.opened_at > late_after(views) or extended or past
    closed = [r for r in views if r.status == "closed"]
    reported: dict[str, int] = dict.fromkeys(hospitals, 0)
    for r in views:
        for name in r.reporters:
            reported[name] = reported.get(name, 0) + 1
    states = []
    for name in hospitals:
        presence: Presence = ""
        if open_view is not None:
            if name in open_view.reporters:
                presence = "reported"
            elif name in open_view.outside:
                presence = "lost"
            else:
                presence = "late" if overdue else "waiting"
        missed = tuple(r.t for r in closed if name not in r.reporters)
        states.append(HospitalHealth(name, reported[name], missed, presence))
    return RunHealth(
        run_status=run_status,
        rounds=rounds,
        closed=len(closed),
        open_round=None if open_view is None else open_view.t,
        opened_at=None if open_view is None else open_view.opened_at,
        extended=extended,
        past_deadline=past,
        overdue=overdue,
        hospitals=tuple(states),
        reason=reason,
        warning=warning,
        now=now,
        secagg=any(r.secagg is not None for r in views),
        lost=tuple(losses(r.secagg for r in views if r.secagg is not None)),
    )


def _named(items: Sequence[str]) -> str:
    shown = ", ".join(items[:NAMED])
    return shown if len(items) <= NAMED else f"{shown} and {len(items) - NAMED} more"


def _spans(rounds: Sequence[int]) -> str:
    """Round numbers as ranges: 0, 1, 2, 3, 7 → "0–3, 7"."""
    spans: list[list[int]] = []
    for t in rounds:
        if spans and t == spans[-1][1] + 1:
            spans[-1][1] = t
        else:
            spans.append([t, t])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)
