"""What a secure-aggregation round did, read from its stored messages (``Store.secagg_outline``):
who advertised, shared keys, masked, signed the survivor set and answered the unmasking,
each step's closing (by everyone it waited for, or by its deadline, and who it missed),
the survivors, and who was lost at which step.

Pure functions over (kind, holder, body) rows, read by the step-closing policy
(``ldpem.server.secagg.rounds``: whom a round waits for) and by the health, the read API, the
status page and ``/metrics`` (``ldpem.server.queries``), so they cannot disagree.

Rows the coordinator stores besides the protocol's messages (``ldpem.server.secagg.rounds``):

* ``closed`` (holder ""): a step closed; body ``{"step", "by", "waited_for", "missing",
  "at"}`` with ``by`` "everyone" (every holder it waited for answered) or "deadline".
* ``returned`` (holder: a holder): a holder's advertisement came after its step closed; it
  is waited for again from the next round on.
* ``restarted`` (holder: a holder; body ``{"step"}``): a holder that had advertised sent a
  second, validly signed advertisement during that step: it restarted and lost its round
  secrets, so no later step of the round waits for it (not read here: the replay of
  ``ldpem.server.secagg.replay`` applies it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ldpem.common.core.naming import natural_sorted
from ldpem.common.secagg import ConsistencyCheck
from ldpem.common.secagg.steps import HOLDER_STEPS, Step

__all__ = [
    "LIGHT_KINDS",
    "STEP_WORDS",
    "Closing",
    "Loss",
    "SecAggRound",
    "losses",
    "lost_after",
    "read_round",
    "read_rounds",
    "waited_for",
]

#: Each step as the page, the API's lines and the log name it. The holders' steps are the
#: kinds of their stored messages (``HOLDER_STEPS``).
STEP_WORDS: dict[str, str] = {
    Step.ADVERTISE: "advertise keys",
    Step.SHARES: "share keys",
    Step.MASKED: "send the masked input",
    Step.SIGNATURE: "sign the survivor set",
    Step.UNMASK: "answer the unmasking",
    Step.DONE: "done",
}
#: Outputs whose body the outline keeps (small: holder names and the sum).
LIGHT_KINDS = ("closed", "returned", "consistency_check", "sum", "disputed", "lost")


@dataclass(frozen=True)
class Closing:
    """One step's closing as the coordinator recorded it."""

    step: str
    #: "everyone": every holder it waited for answered; "deadline": its deadline passed.
    by: str
    waited_for: tuple[str, ...]
    missing: tuple[str, ...]
    at: float


@dataclass(frozen=True)
class SecAggRound:
    """Round ``t`` of a secagg run as its stored messages tell it."""

    t: int
    #: Step → the holders that sent that step's message, in name order.
    answered: dict[str, tuple[str, ...]]
    closings: tuple[Closing, ...]
    #: Holders that advertised after the advertise step closed (waited for next round).
    returned: tuple[str, ...]
    #: The survivor set of the consistency check (None before the masked step closed).
    checked: tuple[str, ...] | None
    #: The holders whose inputs are in the round's sum (None before it is known).
    survivors: tuple[str, ...] | None
    #: Holder → the step it was lost at: expected there, and the step closed without it.
    lost: dict[str, str] = field(default_factory=dict)
    #: Holder → "masked": it sent its input but a peer's shares left it out of the set.
    excluded: dict[str, str] = field(default_factory=dict)
    #: Enrolled holders the advertise step did not wait for (lost in an earlier round) and
    #: that did not advertise in this one; empty before that step closed.
    not_waited: tuple[str, ...] = ()
    #: Holder → why the disputes of the masked step left it out of S (``aggregator.disputed``).
    disputed: dict[str, str] = field(default_factory=dict)
    #: The round ended without a sum (``SecAggRounds._lose``): cause ("faulty",
    #: "unattributable", "short"), reason and culprits; None otherwise.
    lost_round: dict[str, Any] | None = None

    @property
    def step(self) -> str:
        """The open step ("done" once the sum is known, "lost" once the round ended without
        one)."""
        if self.lost_round is not None:
            return "lost"
        if self.survivors is not None:
            return Step.DONE
        return HOLDER_STEPS[min(len(self.closings), len(HOLDER_STEPS) - 1)]

    def closing(self, step: str) -> Closing | None:
        return next((c for c in self.closings if c.step == step), None)

    @property
    def present(self) -> frozenset[str]:
        """Holders that answered the open step (the survivors once the round is done)."""
        if self.survivors is not None:
            return frozenset(self.survivors)
        return frozenset(self.answered.get(self.step, ()))

    @property
    def outside(self) -> frozenset[str]:
        """Holders out of this round: not waited for (lost before), or lost at one of its
        steps, or left out of the survivor set by a peer."""
        return frozenset(self.not_waited) | set(self.lost) | set(self.excluded)


def read_round(
    t: int,
    rows: Iterable[tuple[str, str, str]],
    enrolled: Sequence[str],
    gone_before: frozenset[str] | None = None,
    order: Sequence[str] = (),
) -> SecAggRound:
    """Round ``t`` from its outline ``rows`` (kind, holder, body; the bodies of LIGHT_KINDS
    only are read) of a run enrolling ``enrolled``; ``gone_before``: ``lost_after`` of round
    t − 1, when known (otherwise read from this round's advertise closing, once closed).
    ``order``: the roster's names, over which the stored survivor set is a bitmap; without
    it the survivor set is not read (``checked`` None, nobody ``excluded``: enough for
    ``lost_after``)."""
    answered: dict[str, set[str]] = {step: set() for step in HOLDER_STEPS}
    closings: list[Closing] = []
    returned: list[str] = []
    checked: tuple[str, ...] | None = None
    survivors: tuple[str, ...] | None = None
    disputed: dict[str, str] = {}
    lost_round: dict[str, Any] | None = None
    for kind, holder, body in rows:
        if kind in answered:
            answered[kind].add(holder)
        elif kind == "closed":
            data: dict[str, Any] = json.loads(body)
            closings.append(
                Closing(
                    str(data["step"]),
                    str(data["by"]),
                    tuple(data["waited_for"]),
                    tuple(natural_sorted(data["missing"])),
                    float(data["at"]),
                )
            )
        elif kind == "returned" and holder not in returned:
            returned.append(holder)
        elif kind == "consistency_check" and order:
            checked = _survivors(json.loads(body), order)
        elif kind == "sum":
            survivors = tuple(natural_sorted(json.loads(body)["survivors"]))
        elif kind == "disputed":
            disputed = {str(k): str(v) for k, v in json.loads(body).items()}
        elif kind == "lost":
            lost_round = dict(json.loads(body))
    lost: dict[str, str] = {}
    for c in closings:
        for name in c.missing:
            lost.setdefault(name, c.step)
    excluded: dict[str, str] = {}
    if checked is not None:
        left_out = [n for n in answered[Step.MASKED] if n not in checked and n not in lost]
        excluded = {n: Step.MASKED for n in left_out}
    first = next((c for c in closings if c.step == Step.ADVERTISE), None)
    if first is not None:
        gone_before = frozenset(n for n in enrolled if n not in first.waited_for)
    gone = gone_before or frozenset()
    not_waited = tuple(n for n in enrolled if n in gone and n not in answered[Step.ADVERTISE])
    return SecAggRound(
        t=t,
        answered={step: tuple(natural_sorted(names)) for step, names in answered.items()},
        closings=tuple(closings),
        returned=tuple(natural_sorted(returned)),
        checked=checked,
        survivors=survivors,
        lost=lost,
        excluded=excluded,
        not_waited=not_waited,
        disputed=disputed,
        lost_round=lost_round,
    )


def lost_after(view: SecAggRound) -> frozenset[str]:
    """The holders the next round does not wait for: those this round did not wait for and
    that did not advertise in it, and those that missed a step of it; less those that
    advertised late (``returned``: they are back). Empty when the advertise step left no
    record (a round stored before records were kept: everyone is waited for)."""
    if view.closing(Step.ADVERTISE) is None:
        return frozenset()
    return frozenset((set(view.not_waited) | set(view.lost)) - set(view.returned))


def _survivors(check: dict[str, Any], order: Sequence[str]) -> tuple[str, ...]:
    """The survivor set of a stored consistency check: a bitmap over ``order``, or a list
    of names in a round stored before the bitmap (a store kept across the upgrade)."""
    if isinstance(check.get("survivors"), list):
        return tuple(check["survivors"])
    return ConsistencyCheck.from_dict(check, order).survivors


def read_rounds(
    outline: Iterable[tuple[int, str, str, str]],
    enrolled: Sequence[str],
    rounds: Iterable[int],
    order: Sequence[str],
) -> dict[int, SecAggRound]:
    """``rounds`` (0, 1, …) of a run from its outline (``Store.secagg_outline``), each
    knowing whom the one before lost (a round with nothing stored yet included);
    ``order``: the roster's names (``read_round``)."""
    by_round: dict[int, list[tuple[str, str, str]]] = {}
    for t, kind, holder, body in outline:
        by_round.setdefault(t, []).append((kind, holder, body))
    out: dict[int, SecAggRound] = {}
    gone: frozenset[str] = frozenset()
    for t in sorted(rounds):
        out[t] = view = read_round(t, by_round.get(t, ()), enrolled, gone, order)
        gone = lost_after(view)
    return out


def losses(rounds: Iterable[SecAggRound]) -> list[Loss]:
    """Each time a holder was lost (missed a step it was waited for) or left out of the
    survivor set, by round."""
    found = []
    for view in rounds:
        for name, step in sorted({**view.excluded, **view.lost}.items()):
            found.append(Loss(name, view.t, step, excluded=name in view.excluded))
    return found


@dataclass(frozen=True)
class Loss:
    """Holder ``name`` lost at ``step`` of round ``t`` (``excluded``: it sent its masked
    input but a peer's shares left it out of the survivor set)."""

    name: str
    t: int
    step: str
    excluded: bool = False

    def __str__(self) -> str:
        if self.excluded:
            return f"{self.name} (left out of the survivor set in round {self.t})"
        return f"{self.name} (did not {STEP_WORDS[self.step]} in round {self.t})"


def waited_for(enrolled: Iterable[str], previous: SecAggRound | None) -> set[str]:
    """Whom round t's advertise step waits for: every enrolled holder not lost after round
    t − 1 (``previous``; None in round 0)."""
    gone = frozenset() if previous is None else lost_after(previous)
    return {n for n in enrolled if n not in gone}
