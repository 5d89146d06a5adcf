"""A restarted coordinator's secure-aggregation rounds, rebuilt from the store
(docs/SECAGG.md "The round"; ``server/secagg/rounds.py`` runs them).

Every message a holder sent and every output that closed a step is stored, in order
(``Store.add_secagg``, through ``server/secagg/log.py``). The in-memory ``Aggregator`` is
deterministic given its messages and when each step closed, so a fresh one fed the stored
rows, closing each step where a stored output says it closed, is in the state the lost one
was in (``replay``). ``recover`` does it at start-up for every open round with stored
messages, so that their deadlines run before a holder calls again; a run whose stored
state does not replay fails alone, and never stops start-up or another run. Both work on
``SecAggRounds``'s own state and steps (its ``_round``, ``_accept``, ``_close``, ``_settle``
and ``_fail``): this module is that class's restart path, kept apart for its length.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

from ldpem.common.secagg import (
    EncryptedShares,
    KeyAdvertisement,
    MaskedInput,
    SurvivorSignature,
    UnmaskResponse,
)
from ldpem.common.secagg.steps import Step
from ldpem.server.refusals import Conflict
from ldpem.server.secagg import policy
from ldpem.server.store import Store

__all__ = ["CLOSED_BY", "READERS", "SecAggRounds", "recover", "replay"]

log = logging.getLogger("ldpem.server")

#: The stored kind of the aggregator's output that closed each step (``SecAggRounds._close``;
#: on the SecAgg+ graph one row per holder for participants, bundles and unmasking requests,
#: the first of which marks the closing).
CLOSED_BY: dict[str, Step] = {
    "participants": Step.ADVERTISE,
    "bundle": Step.SHARES,
    "consistency_check": Step.MASKED,
    "unmask_request": Step.SIGNATURE,
}

#: How each step's stored (and received) message reads.
READERS: dict[Step, Callable[[object], Any]] = {
    Step.ADVERTISE: KeyAdvertisement.from_dict,
    Step.SHARES: EncryptedShares.from_dict,
    Step.MASKED: MaskedInput.from_dict,
    Step.SIGNATURE: SurvivorSignature.from_dict,
    Step.UNMASK: UnmaskResponse.from_dict,
}


class _Round(Protocol):
    """What the replay reads and sets of ``rounds._Round``."""

    run_id: str
    t: int
    step: Step
    answered: set[str]
    expected: set[str]
    gone: set[str]
    aggregator: Any


class SecAggRounds(Protocol):
    """What the replay uses of ``rounds.SecAggRounds`` (declared here: that module imports
    this one)."""

    store: Store
    _rounds: dict[tuple[str, int], Any]

    def _round(self, run_id: str, t: int, hospital: str, hospital_run: str) -> Any: ...
    def _accept(self, r: Any, step: Step, message: Any) -> None: ...
    def _close(self, r: Any, *, replay: bool = False, by: str = "everyone") -> None: ...
    def _settle(self, r: Any, *, at_deadline: bool = False) -> bool: ...
    def _fail(self, run_id: str, t: int, problem: str) -> None: ...


def replay(rounds: SecAggRounds, r: _Round) -> None:
    """Feed round ``r``'s stored messages, in order, to its fresh aggregator, closing each
    step where a stored output says it closed; then close the open step if every holder it
    expects has answered (the coordinator stopped before closing it)."""
    stored = rounds.store.secagg_messages(r.run_id, r.t)
    for kind, holder, body in stored:
        if kind in READERS:
            step = Step(kind)
            rounds._accept(r, step, READERS[step](json.loads(body)))
            r.answered.add(holder)
        elif CLOSED_BY.get(kind) == r.step:
            rounds._close(r, replay=True)
        elif kind == policy.RESTARTED:  # as ``SecAggRounds._restarted`` did
            r.gone.add(holder)
            if holder not in r.answered:
                r.expected.discard(holder)
    if stored:
        log.info(
            "run %s round %d: secure aggregation rebuilt from %d stored messages, at the %s step",
            r.run_id,
            r.t,
            len(stored),
            r.step,
        )
    if r.answered and policy.complete(r.step, r.answered, r.expected, r.aggregator):
        rounds._settle(r)


def recover(rounds: SecAggRounds) -> None:
    """Rebuild the open secagg rounds that have stored messages (at start-up, so their
    deadlines run even before a holder calls again)."""
    for row in rounds.store.open_rounds():
        key = (row.run_id, row.t)
        if key in rounds._rounds or not rounds.store.secagg_messages(row.run_id, row.t):
            continue
        try:
            rounds._round(row.run_id, row.t, "", row.run_id)
        except Conflict:
            continue  # closed or failed by its replay (``_round`` logged why)
        except Exception as error:  # one run's state never stops start-up or another run
            log.exception("run %s round %d: the rebuild failed", row.run_id, row.t)
            rounds._rounds.pop(key, None)
            try:
                rounds._fail(row.run_id, row.t, f"its state could not be rebuilt ({error!r:.200})")
            except Exception:  # its failure not even stored: the others still start
                log.exception("run %s: could not be marked failed", row.run_id)
