"""When a secure-aggregation step may close, and what its closing records and logs
(``ldpem.server.secagg.rounds`` applies it; ``ldpem.server.secagg.view`` reads the records back).

A step waits for the holders it expects: at the advertise step every enrolled holder but
those lost in an earlier round (``view.waited_for``), at each later step those that
answered the one before. It closes early once all of them answered (advertising, at least
t_min of them: short of that a lost holder may still come back before the deadline),
otherwise at its deadline. So a dead holder costs the deadline of the step it missed, once,
not one per round (docs/FEDERATED.md, "What a lost holder costs").
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence, Set
from typing import Any

from ldpem.common.secagg import Aggregator
from ldpem.common.secagg.steps import Step
from ldpem.server.machine import Note
from ldpem.server.secagg.view import LIGHT_KINDS, STEP_WORDS, read_round, waited_for
from ldpem.server.store import Store

__all__ = [
    "RESTARTED",
    "Faults",
    "Row",
    "came_back",
    "closing_row",
    "complete",
    "log_closing",
    "log_disputed",
    "log_faulty",
    "log_restarted",
    "still_missing",
    "sum_note",
    "waited_in",
]

log = logging.getLogger("ldpem.server")

#: A row of ``secagg_messages`` to store: kind, holder, body.
Row = tuple[str, str, dict[str, Any]]
#: Holder → why its unmasking share was wrong (``Aggregator.faulty``).
Faults = dict[str, str]


def complete(step: Step, answered: Set[str], expected: Set[str], aggregator: Aggregator) -> bool:
    """Whether ``step`` may close before its deadline: every holder it waits for answered
    (and, advertising, at least the ``aggregator``'s t_min did)."""
    enough = step is not Step.ADVERTISE or len(answered) >= aggregator.parameters.t_min
    return enough and answered >= expected


def still_missing(
    step: Step, answered: Set[str], expected: Set[str], enrolled: Set[str]
) -> set[str]:
    """Who may still answer ``step`` at its deadline: advertising, any enrolled holder
    (one not waited for may come back); later, the holders it expects."""
    return set((enrolled if step is Step.ADVERTISE else expected) - answered)


def closing_row(step: Step, by: str, answered: Set[str], expected: Set[str], now: float) -> Row:
    """The ``closed`` row of ``step`` (``view.Closing``): ``by`` "everyone" or
    "deadline", whom the step waited for and who of them it missed."""
    body = {
        "step": step,
        "by": by,
        "waited_for": sorted(expected),
        "missing": sorted(expected - answered),
        "at": now,
    }
    return ("closed", "", body)


def log_closing(run_id: str, t: int, closing: dict[str, Any], answered: int) -> None:
    """One line per closing, naming the step, how it closed and the holders it lost."""
    missing: list[str] = closing["missing"]
    how = "its deadline passed" if closing["by"] == "deadline" else "everyone answered"
    lost = f"; lost: {', '.join(missing)} (did not {STEP_WORDS[closing['step']]})"
    log.log(
        logging.WARNING if missing else logging.INFO,
        "run %s round %d: the %s step closed (%s) with %d of the %d holders it waited for%s",
        run_id,
        t,
        closing["step"],
        how,
        answered,
        len(closing["waited_for"]),
        lost if missing else "",
    )


def log_faulty(run_id: str, t: int, faulty: Faults) -> None:
    """One warning per holder at fault in a round whose sum came out all the same: a
    responder whose wrong unmasking share the sum was computed without, or a dealer whose
    wrong shares were decoded around (``Aggregator.faulty``, ``dealt_wrong``)."""
    for name, why in sorted(faulty.items()):
        log.warning(
            "run %s round %d: hospital %s is at fault (%s); the sum was computed without "
            "its wrong shares",
            run_id,
            t,
            name,
            why,
        )


def log_disputed(run_id: str, t: int, disputed: Faults) -> None:
    """One warning per holder the disputes of the masked step left out of S."""
    for name, why in sorted(disputed.items()):
        log.warning(
            "run %s round %d: hospital %s is left out of the survivor set, %s",
            run_id,
            t,
            name,
            why,
        )


def sum_note(note: Note, run_id: str, t: int, survivors: Collection[str]) -> Note:
    """``close_round``'s line, which counts the one report a secure sum is, naming the
    survivors whose inputs it holds instead."""
    if not note.message.startswith("run %s round %d closed with"):
        return note
    return Note(
        note.level,
        "run %s round %d closed with the secure sum of %d survivors (%s); round %d open",
        (run_id, t, len(survivors), ", ".join(sorted(survivors)), t + 1),
        note.fields,
    )


def waited_in(store: Store, run_id: str, t: int, enrolled: Sequence[str]) -> set[str]:
    """Whom round t's advertise step waits for: the enrolled holders not lost after round
    t − 1 (read from its stored outline)."""
    previous = None
    if t > 0:
        rows = store.secagg_outline(run_id, LIGHT_KINDS, t - 1)
        previous = read_round(t - 1, [row[1:] for row in rows], enrolled)
    return waited_for(enrolled, previous)


#: The kind of the row stored when a holder restarted mid-round (``SecAggRounds._restarted``).
RESTARTED = "restarted"


def log_restarted(run_id: str, t: int, hospital: str, step: Step) -> None:
    log.warning(
        "run %s round %d: %s advertised again with new keys during the %s step: it restarted "
        "and lost this round's secrets; no step of this round waits for it any more",
        run_id,
        t,
        hospital,
        step,
    )


def came_back(store: Store, run_id: str, t: int, hospital: str) -> None:
    """``hospital`` advertised in round t after the advertise step closed: stored once (a
    ``returned`` row, inside the caller's transaction), so that the next round waits for it
    again."""
    rows = store.secagg_outline(run_id, (), t)
    if any(kind == "returned" and holder == hospital for _, kind, holder, _ in rows):
        return
    store.add_secagg(run_id, t, [("returned", hospital, "{}")])
    log.info(
        "run %s round %d: %s advertised after the advertise step closed; it is waited for "
        "again from round %d",
        run_id,
        t,
        hospital,
        t + 1,
    )
