"""Secure aggregation rounds of a secagg run (docs/FEDERATED.md, docs/SECAGG.md).

A round of a run whose noise is shared goes through the five holder steps (``Step``) of
``ldpem.common.secagg.Aggregator``: advertisements, encrypted shares, masked inputs,
signatures of the survivor set (the consistency round), unmasking responses. A step
closes when every holder expected in it answered, or at the step's deadline (the run's
``round_deadline``) with at least t_min answers; short of t_min at the deadline the step
is extended or the run fails (``on_short``); whom a step waits for, and the record of its
closing, are ``ldpem.server.secagg.policy``'s. After the unmasking the sum, centered from mod
2^bits to signed and times γ, is the round's total, its count the survivors' expected round
counts; it is range-checked like any report and the ordinary M-step closes it (no central noise).

Every message received or produced is stored, in order (group-committed,
``server/secagg/log.py``; a step's outputs in one transaction), before the holder is
answered; none holds anything from which one holder's sum can be computed
(tests/cli/test_secagg_federated.py tries). The in-memory aggregator is deterministic
given its messages and when each step closed, so a restarted coordinator replays them into
a fresh ``Aggregator`` (``replay``, docs/SECAGG.md "The round"); the sum and the
M-step are one transaction: no round is finished twice.

On the SecAgg+ graph (a run whose ``graph`` is published, docs/SECAGG_GRAPH.md) the round's
``RoundParameters`` carry k, m, τ and h (``runvalues.round_parameters``), and the
participant list and the unmasking request are per holder, like the bundles
(``GraphRelay``): each holder fetches its own, cut to its neighbourhood. A holder that
advertises again with new keys, validly signed, from the masked step on was restarted and
lost its round secrets: it gets 409 and no step of the round waits for it any more
(``_restarted``; on the graph its seed is released against its masked-with attestation).

A holder's fault costs its run a round at most (``_settle``): a step that cannot close
(short of t_min, or ``SecAggFault``: wrong shares, whose senders the aggregator names) is
extended at its deadline under ``on_short`` "extend" while holders are missing, and
otherwise fails its run with the reason; the unmask step is done only once its sum is
stored. A run whose stored messages do not replay fails alone (``_round``, ``recover``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ldpem.common.protocol import parameter_size
from ldpem.common.secagg import (
    Aggregator,
    KeyAdvertisement,
    Roster,
    SecAggError,
    SecAggRefused,
)
from ldpem.common.secagg.checks import check_advertisement
from ldpem.common.secagg.errors import FaultyDealer, SecAggFault
from ldpem.common.secagg.runvalues import (
    grid_of,
    round_parameters,
    run_shares_mechanism,
    signed_sum,
)
from ldpem.common.secagg.steps import Step
from ldpem.common.wire import expected_round_count
from ldpem.server.machine import Note, close_round, lose_round
from ldpem.server.refusals import Conflict, Forbidden, Invalid
from ldpem.server.runrows import get_run, params_of, request_of
from ldpem.server.secagg import policy
from ldpem.server.secagg.log import MessageLog
from ldpem.server.secagg.policy import Faults, Row
from ldpem.server.secagg.replay import READERS, recover, replay
from ldpem.server.store import ReportRow, Store

__all__ = ["MAX_EXTENSIONS", "UNATTRIBUTABLE_LIMIT", "SecAggRounds"]

log = logging.getLogger("ldpem.server")

#: The periods a step after the advertise step is extended at most, holders missing and
#: short of its thresholds, before its round is lost (a crashed holder cannot come back to
#: a round: its secrets were in memory). The advertise step waits as long as "extend" says.
MAX_EXTENSIONS = 3

#: The unattributable losses (an out-of-range sum: no holder can be named) from which a
#: run pauses, with what the operator can do, rather than lose every round to one holder.
UNATTRIBUTABLE_LIMIT = 3
#: The steps at which a restarted holder is counted out at once (``_restarted``).
_COUNTED_OUT_FROM = (Step.MASKED, Step.SIGNATURE, Step.UNMASK)

_encoded = functools.partial(json.dumps, sort_keys=True, separators=(",", ":"))  # stored, sent


@dataclass
class _Round:
    run_id: str
    t: int
    aggregator: Aggregator
    expected: set[str]
    enrolled: frozenset[str]
    period: float
    deadline: float
    #: ``Step.DONE`` once the round's sum is known.
    step: Step = Step.ADVERTISE
    answered: set[str] = field(default_factory=set)
    #: Holders that sent a second, validly signed advertisement from the masked step on:
    #: they restarted and lost their round secrets, so no later step waits for them
    #: (``_restarted``).
    gone: set[str] = field(default_factory=set)
    #: How often the open step was extended at its deadline (``_settle``; 0 when a step
    #: opens): bounded after the advertise step, so no round waits for ever.
    extensions: int = 0
    outputs: dict[str, bytes] = field(default_factory=dict)  # JSON, encoded once (``_close``)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class SecAggRounds:
    """The open secagg rounds of every run, over the store; ``notify`` is called when a
    round closes (the coordinator's long-poll)."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float],
        notify: Callable[[], None],
        range_sigmas: float,
        commit_window: float = 0.002,
    ) -> None:
        self.store = store
        self.clock = clock
        self.notify = notify
        self.range_sigmas = range_sigmas
        self._rounds: dict[tuple[str, int], _Round] = {}
        #: Every write of the rounds goes through it, so messages are stored in the order
        #: the aggregator saw them (``server/secagg/log.py``).
        self._log = MessageLog(store, commit_window)

    # --- the round ----------------------------------------------------------------
    def _round(self, run_id: str, t: int, hospital: str, hospital_run: str) -> _Round:
        if hospital_run != run_id:
            raise Forbidden(f"the token belongs to hospital {hospital} of another run")
        key = (run_id, t)
        current = self._rounds.get(key)
        if current is not None:
            return current
        run = get_run(self.store, run_id)
        params = params_of(run)
        if params.holders is None or params.modulus_bits is None or params.t_min is None:
            raise Conflict(f"run {run_id} does not aggregate securely")
        if run.status != "running" or t != run.current_round:
            raise Conflict(f"round {t} is not open (the run is {run.status})")
        request = request_of(run)
        assert request.roster is not None  # a shares run (wire.secagg.check_shares)
        roster = Roster.from_json(json.dumps(request.roster))
        parameters = round_parameters(params, run_id, t)  # on the graph with k, m, τ, h
        period = request.round_deadline
        enrolled = [h.name for h in self.store.hospitals(run_id)]  # any may advertise
        created = _Round(
            run_id=run_id,
            t=t,
            aggregator=Aggregator(roster, parameters, dimension=parameter_size(params)),
            expected=policy.waited_in(self.store, run_id, t, enrolled),
            enrolled=frozenset(enrolled),
            period=period,
            deadline=self.clock() + period,
        )
        self._rounds[key] = created
        try:
            self._replay(created)
        except (SecAggError, ValueError) as error:
            # This run's stored state does not replay (a message that no longer reads, a
            # step that no longer closes): it fails this run alone, with the reason.
            self._rounds.pop(key, None)
            self._fail(run_id, t, f"its stored secure-aggregation messages do not replay: {error}")
            raise Conflict(f"round {t} is not open (the run failed: {error})") from None
        except BaseException:
            self._rounds.pop(key, None)  # rebuilt again at the next call
            raise
        if key not in self._rounds:  # its last step was complete: settled by the replay
            raise Conflict(f"round {t} is not open (it was settled when the coordinator restarted)")
        return created

    def _replay(self, r: _Round) -> None:
        """Round ``r`` rebuilt from its stored messages (``replay.replay``)."""
        replay(self, r)

    def recover(self) -> None:
        """Rebuild the open rounds with stored messages (``replay.recover``)."""
        recover(self)

    @staticmethod
    def _accept(r: _Round, step: Step, message: Any) -> None:
        """Hand a holder's message of ``step`` to the aggregator."""
        a = r.aggregator
        match step:
            case Step.ADVERTISE:
                a.receive_advertisement(message)
            case Step.SHARES:
                a.receive_shares(message)
            case Step.MASKED:
                a.receive_masked_input(message)
            case Step.SIGNATURE:
                a.receive_signature(message)
            case Step.UNMASK:
                a.receive_unmask_response(message)
            case Step.DONE:
                raise AssertionError("no holder sends a message once the round is done")

    @staticmethod
    def _received(r: _Round, step: Step, holder: str) -> Any:
        """The message of ``step`` the aggregator accepted from ``holder``, or None."""
        a = r.aggregator
        kept: dict[str, Any]
        match step:
            case Step.ADVERTISE:
                kept = a.advertisements
            case Step.SHARES:
                kept = a.encrypted_shares
            case Step.MASKED:
                kept = a.masked_inputs
            case Step.SIGNATURE:
                kept = a.signatures
            case Step.UNMASK:
                kept = a.responses
            case Step.DONE:
                return None
        return kept.get(holder)

    # --- messages from holders ------------------------------------------------------
    def receive(
        self,
        run_id: str,
        t: int,
        hospital: str,
        hospital_run: str,
        step: Step,
        body: object,
        text: str,
    ) -> asyncio.Future[None]:
        """A holder's message of ``step``: ``body``, the JSON ``text`` it was read from (kept
        as sent: what a restart replays); Invalid when it does not fit the round, Conflict
        when the step is not open for it. The same message again is accepted. Returns what
        to await before answering the holder: the message's commit (group commit,
        ``MessageLog``)."""
        r = self._round(run_id, t, hospital, hospital_run)
        try:
            message = READERS[step](body)
        except SecAggRefused as error:
            raise Invalid(str(error)) from None
        if message.holder != hospital:
            raise Forbidden(f"the token belongs to hospital {hospital}, not {message.holder}")
        if self._received(r, step, hospital) == message:
            # A retry (before or after a restart, the step open or closed since): answered
            # once the first is committed.
            return self._log.committed()
        if r.step != step:
            if step is Step.ADVERTISE and r.aggregator.advertisements.get(hospital) is None:
                with self._log.transaction():
                    policy.came_back(self.store, r.run_id, t, hospital)
            elif step is Step.ADVERTISE:
                self._restarted(r, hospital, message)
            if hospital in r.answered or r.step.order > step.order:
                raise Conflict(f"the {step} step of round {t} is closed (now: {r.step})")
            raise Conflict(f"the {step} step of round {t} is not open (now: {r.step})")
        if hospital in r.answered:
            raise Conflict(
                f"hospital {hospital} already sent a different {step} message in round {t}; "
                "it is out of this round"
            )
        if hospital not in (r.enrolled if step is Step.ADVERTISE else r.expected):
            raise Conflict(f"hospital {hospital} is not part of the {step} step of round {t}")
        try:
            self._accept(r, step, message)
        except (SecAggRefused, SecAggError) as error:
            raise Invalid(str(error)) from None
        self._log.append(r.run_id, r.t, step, hospital, text)
        committed = self._log.committed()
        r.answered.add(hospital)
        if policy.complete(r.step, r.answered, r.expected, r.aggregator):
            self._settle(r)  # its close commits the message, with the step's outputs
        return committed

    def _restarted(self, r: _Round, hospital: str, advertisement: KeyAdvertisement) -> None:
        """``hospital`` advertised again, differently, after the advertise step closed: if
        the advertisement is its own for this round (signed by its roster key), it was
        restarted and lost the secrets of the keys it advertised first, so it can answer
        no later step of this round. It is counted out of every step from now on (a
        signer it would have been, its seed is released against its attestation on the
        graph), and the step closes at once if everyone else answered, not at its
        deadline. Stored (a ``restarted`` row) so that a restarted coordinator does the
        same; the holder still gets 409. From the masked step on only: at the shares step
        (just after the advertisements closed) a second advertisement is refused and
        changes nothing else, as before."""
        if hospital in r.gone or r.step not in _COUNTED_OUT_FROM:
            return
        try:
            check_advertisement(advertisement, r.aggregator.roster, r.aggregator.parameters)
        except SecAggRefused:
            return  # not provably its own: it changes nothing
        r.gone.add(hospital)
        body = _encoded({"step": r.step})
        with self._log.transaction():
            self.store.add_secagg(r.run_id, r.t, [(policy.RESTARTED, hospital, body)])
        policy.log_restarted(r.run_id, r.t, hospital, r.step)
        if hospital in r.expected and hospital not in r.answered:
            r.expected.discard(hospital)
            if policy.complete(r.step, r.answered, r.expected, r.aggregator):
                self._settle(r)

    # --- messages to holders ----------------------------------------------------------
    def output(
        self, run_id: str, t: int, hospital: str, hospital_run: str, step: Step
    ) -> bytes | None:
        """What the aggregator sends ``hospital`` after ``step`` closed (the participant
        list, its share bundle, the survivor set, the unmasking request) as JSON, or None
        while the step is open."""
        r = self._round(run_id, t, hospital, hospital_run)
        if r.step.order <= step.order:
            return None
        # One answer for all, or one per holder (bundles; on the graph participant lists
        # and unmasking requests too: each holder fetches its own, never another's).
        answer = r.outputs.get(step) or r.outputs.get(f"{step}:{hospital}")
        if answer is None:
            raise Conflict(f"hospital {hospital} is not part of round {t} after the {step} step")
        return answer

    async def wait(
        self, run_id: str, t: int, hospital: str, hospital_run: str, step: Step, wait: float
    ) -> bytes | None:
        end = self.clock() + wait
        while True:
            r = self._round(run_id, t, hospital, hospital_run)
            answer = self.output(run_id, t, hospital, hospital_run, step)
            remaining = end - self.clock()
            if answer is not None or remaining <= 0:
                return answer
            # Every change of the round sets its event (a step closed, the run failed or
            # ended), so the long-poll sleeps until then: re-checking each second woke
            # every waiting holder once a second (docs/PERFORMANCE.md).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(r.changed.wait(), timeout=remaining)

    # --- closing ------------------------------------------------------------------------
    def _close(self, r: _Round, *, replay: bool = False, by: str = "everyone") -> None:
        """Close the current step (its quorum checked by the aggregator: SecAggError below
        t_min), storing its outputs and closing in one transaction unless ``replay``."""
        aggregator = r.aggregator
        closing = policy.closing_row(r.step, by, r.answered, r.expected, self.clock())
        out: list[tuple[str, str, str]] = []

        def output(key: str, kind: str, name: str, body: dict[str, Any]) -> None:
            encoded = _encoded(body)  # once: sent on as these bytes, stored as a ``kind`` row
            r.outputs[key] = encoded.encode()
            out.append((kind, name, encoded))

        match r.step:
            case Step.ADVERTISE:
                participants = aggregator.participants()
                if aggregator.graph is None:
                    output(Step.ADVERTISE, "participants", "", participants.to_dict())
                else:  # each holder's list holds its neighbours only (``GraphRelay``)
                    for name, listed in aggregator.participant_lists().items():
                        output(f"{Step.ADVERTISE}:{name}", "participants", name, listed.to_dict())
                r.step, r.expected = Step.SHARES, {a.holder for a in participants.advertisements}
            case Step.SHARES:
                bundles = aggregator.share_bundles()
                for name, bundle in bundles.items():
                    output(f"{Step.SHARES}:{name}", "bundle", name, bundle.to_dict())
                r.step, r.expected = Step.MASKED, set(bundles)
            case Step.MASKED:
                check = aggregator.consistency_check()
                output(Step.MASKED, "consistency_check", "", check.to_dict())
                if aggregator.disputed:  # named: each pays its disputes with its place in S
                    out.append(("disputed", "", _encoded(aggregator.disputed)))
                    if not replay:
                        policy.log_disputed(r.run_id, r.t, aggregator.disputed)
                r.step, r.expected = Step.SIGNATURE, set(check.survivors)
            case Step.SIGNATURE:
                request = aggregator.unmask_request()
                if aggregator.graph is None:
                    output(Step.SIGNATURE, "unmask_request", "", request.to_dict())
                else:  # each signer's request: its neighbourhood's part (``GraphRelay``)
                    for name, asked in aggregator.unmask_requests().items():
                        output(f"{Step.SIGNATURE}:{name}", "unmask_request", name, asked.to_dict())
                # Only a holder that signed the survivor set can answer the unmasking.
                r.step, r.expected = Step.UNMASK, {s.holder for s in request.signatures}
            case Step.UNMASK:
                # The sum first (SecAggError: the step stays open, ``_settle`` decides); the
                # step is done only once the sum and the round's close are stored, together.
                residues = [int(v) for v in aggregator.result()]
                survivors = set(aggregator.unmask_request().survivors)
                self._finish(
                    r, residues, survivors, {**aggregator.faulty, **aggregator.dealt_wrong}, closing
                )
                r.step = Step.DONE
        if out and not replay:  # the unmasking's closing is stored with its sum (_finish)
            kind, name, body = closing
            out.append((kind, name, _encoded(body)))
            with self._log.transaction():
                self.store.add_secagg(r.run_id, r.t, out)
            policy.log_closing(r.run_id, r.t, closing[2], len(r.answered))
        r.expected -= r.gone  # restarted holders answer no later step
        r.answered, r.extensions = set(), 0
        r.deadline = self.clock() + r.period
        event, r.changed = r.changed, asyncio.Event()
        event.set()

    def _finish(
        self, r: _Round, residues: list[int], survivors: set[str], faulty: Faults, closing: Row
    ) -> None:
        """The round's total from the unmasked sum, range-checked, and the M-step, stored
        with the unmasking step's ``closing``; ``faulty``: the responders whose wrong shares
        the sum was computed without (named in the stored sum and the log)."""
        run = get_run(self.store, r.run_id)
        params = params_of(run)
        assert params.modulus_bits is not None
        records = {h.name: h.records for h in self.store.hospitals(r.run_id)}
        count = sum(expected_round_count(records[name], params.rounds, r.t) for name in survivors)
        mechanism = run_shares_mechanism(params)
        grid = grid_of(mechanism)
        total = [v * grid for v in signed_sum(residues, params.modulus_bits)]
        body: dict[str, Any] = {"total": total, "count": count, "survivors": sorted(survivors)}
        if faulty:
            body["faulty"] = dict(sorted(faulty.items()))
            policy.log_faulty(r.run_id, r.t, faulty)
        summed = [(k, n, json.dumps(b, sort_keys=True)) for k, n, b in (closing, ("sum", "", body))]
        bound = (
            count * mechanism.record_bound(parameter_size(params))
            + self.range_sigmas * math.sqrt(len(survivors)) * mechanism.noise_std
        )
        if not all(abs(v) <= bound for v in total):
            # Masked inputs cannot be range-checked one by one, so no holder can be named:
            # the round is lost, not the run (``_lose``); repeated, the run stops.
            problem = (
                f"the unmasked sum is outside the range honest holders can produce "
                f"(|total| <= {bound:.4g}): some holder sent a wrong input, which the masks "
                f"keep anyone from attributing"
            )
            self._lose(r, problem, cause="unattributable", stored=summed[:1])
            return
        report = ReportRow(r.run_id, r.t, "", count, total, 0.0, "", self.clock())
        with self._log.transaction():
            self.store.add_secagg(r.run_id, r.t, summed)
            notes = close_round(self.store, run, params, [report], self.clock())
        del self._rounds[(r.run_id, r.t)]
        policy.log_closing(r.run_id, r.t, closing[2], len(r.answered))
        for note in notes:
            policy.sum_note(note, r.run_id, r.t, survivors).emit()
        self.notify()

    def _lose(
        self,
        r: _Round,
        problem: str,
        *,
        cause: str,
        culprits: tuple[str, ...] = (),
        stored: list[tuple[str, str, str]] | None = None,
    ) -> None:
        """Round ``r`` ends without a sum: β is kept, the next round opens and the run goes
        on (``machine.lose_round``); a ``lost`` row names the ``cause`` ("faulty": the
        ``culprits`` the aggregator proved at fault; "unattributable": nobody can be
        named; "short": too few holders left) and is read by the page, the API and
        /metrics. From the ``UNATTRIBUTABLE_LIMIT``-th unattributable loss of a run on, the
        run is paused after it, with what the operator can do (``ldpem run resume`` or
        ``cancel``): a holder that keeps sending wrong inputs would otherwise cost every
        round."""
        run = get_run(self.store, r.run_id)
        params = params_of(run)
        body = {"cause": cause, "reason": problem, "culprits": sorted(culprits)}
        rows = [*(stored or []), ("lost", "", _encoded(body))]
        earlier = self._unattributable(r.run_id) if cause == "unattributable" else 0
        stop = cause == "unattributable" and earlier + 1 >= UNATTRIBUTABLE_LIMIT
        with self._log.transaction():
            self.store.add_secagg(r.run_id, r.t, rows)
            notes = lose_round(self.store, run, params, self.clock())
            if stop and (paused := get_run(self.store, r.run_id)).status == "running":
                reason = (
                    f"round {r.t}: {problem}; that is the {earlier + 1}th round lost this "
                    f"way, so the run is paused: check that every hospital runs an "
                    f"unmodified agent (ldpem --version) and its logs, then `ldpem run "
                    f"resume` to go on, or `ldpem run cancel` and a new run without any "
                    f"hospital you cannot vouch for"
                )
                self.store.update_run(
                    paused.id,
                    status="paused",
                    current_round=paused.current_round,
                    beta=paused.beta,
                    reason=reason,
                )
                notes.append(
                    Note(logging.ERROR, "run %s paused: %s", (run.id, reason), {"run": run.id})
                )
        self._rounds.pop((r.run_id, r.t), None)
        r.changed.set()
        named = f" ({', '.join(sorted(culprits))})" if culprits else ""
        log.error(
            "run %s round %d lost, %s%s: %s; the run goes on without this round's step",
            r.run_id,
            r.t,
            cause,
            named,
            problem,
        )
        for note in notes:
            note.emit()
        self.notify()

    def _unattributable(self, run_id: str) -> int:
        """How many rounds of ``run_id`` were lost to an unattributable fault so far."""
        rows = self.store.secagg_outline(run_id, ("lost",))
        return sum(
            1
            for _, kind, _, body in rows
            if kind == "lost" and json.loads(body)["cause"] == "unattributable"
        )

    def forget(self, run_id: str) -> None:
        """Drop the open rounds of ``run_id``, which ended (cancelled), and wake their
        waiters: their next call finds the run ended (409)."""
        for key in [key for key in self._rounds if key[0] == run_id]:
            self._rounds.pop(key).changed.set()

    def tick(self) -> bool:
        """Close, extend or fail the steps whose deadline passed; whether any changed."""
        now = self.clock()
        changed = False
        for r in list(self._rounds.values()):
            if r.deadline > now or r.step is Step.DONE:
                continue
            changed = True
            self._settle(r, at_deadline=True)
        return changed

    def _settle(self, r: _Round, *, at_deadline: bool = False) -> bool:
        """Close round ``r``'s current step; whether it closed. When it cannot close
        (SecAggError: short of t_min, or a holder's wrong material), at a deadline with
        holders still missing the run's ``on_short`` decides: "extend" gives the step
        another period (a missing holder may still answer; after the advertise step at
        most ``MAX_EXTENSIONS`` times, since a holder that crashed there lost its round's
        secrets and cannot come back to it), "fail" fails the run (the operator's
        choice). Otherwise, and always for a fault the aggregator proved
        (``SecAggFault``: a dealer's wrong shares, a responder's wrong share, which no late
        answer mends), the round is lost and the run goes on (``_lose``): one holder's
        message, or one crash, never ends a run."""
        try:
            self._close(r, by="deadline" if at_deadline else "everyone")
            return True
        except SecAggError as error:
            problem = str(error)
            culprits = error.culprits if isinstance(error, SecAggFault) else ()
            final = isinstance(error, FaultyDealer)  # no late answer can mend its shares
        run = get_run(self.store, r.run_id)
        missing = policy.still_missing(r.step, r.answered, r.expected, r.enrolled)
        bounded = r.step is not Step.ADVERTISE and r.extensions >= MAX_EXTENSIONS
        if at_deadline and missing and not final and not bounded:
            if request_of(run).on_short == "extend":
                r.deadline = self.clock() + r.period
                r.extensions += 1
                log.warning("run %s round %d: %s; extended", r.run_id, r.t, problem)
            else:
                self._fail(r.run_id, r.t, problem)
            return False
        if bounded:
            problem += f" (still short after {MAX_EXTENSIONS} extensions of the {r.step} step)"
        self._lose(r, problem, cause="faulty" if culprits else "short", culprits=culprits)
        return False

    def _fail(self, run_id: str, t: int, problem: str) -> None:
        """Fail run ``run_id`` at round ``t`` with ``problem`` as its reason, and forget
        the round (its waiters are woken: their next call is refused, the run failed)."""
        run = get_run(self.store, run_id)
        reason = f"round {t}: {problem}"
        if run.status == "running":
            with self._log.transaction():
                self.store.update_run(
                    run.id, status="failed", current_round=t, beta=run.beta, reason=reason
                )
            log.error("run %s failed: %s", run.id, reason)
        dropped = self._rounds.pop((run_id, t), None)
        if dropped is not None:
            dropped.changed.set()
        self.notify()
