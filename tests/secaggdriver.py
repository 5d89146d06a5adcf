"""Secure-aggregation rounds driven over the coordinator's HTTP API by the library's
``Holder``, one per hospital, in the test's process: the coordinator is real (in-process
through a ``TestClient``, or a process through an ``httpx.Client``), the holders are not
agents, so that one of them can send what no honest agent sends (``alter``), or the test
can act between two messages of a step (``at``)."""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from ldpem.common.secagg import (
    ConsistencyCheck,
    Holder,
    ParticipantList,
    Roster,
    ShareBundle,
    UnmaskRequest,
    UnmaskResponse,
    generate_signing_key,
    public_key_bytes,
)
from ldpem.common.secagg.runvalues import round_parameters
from ldpem.common.secagg.shamir import PRIME, SHARE_BYTES
from ldpem.common.secagg.steps import ANSWERS, Step
from ldpem.common.wire import PublicParameters
from ldpem.server.app import create_app
from tests.fedkit import admin_headers, run_request, settings

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

K, T_MIN, D = 4, 3, 3
NAMES = [f"h{i}" for i in range(K)]
KEYS = {n: generate_signing_key() for n in NAMES}
ROSTER = Roster({n: public_key_bytes(key) for n, key in KEYS.items()})

#: ``alter(step, holder, message)``: the message ``holder`` sends in ``step`` instead.
Alter = Callable[[str, str, Any], Any]
#: ``at(point, posted)``: called after the second holder's message of each step (point
#: ``"STEP-partial"``) and after the step's last (point ``"STEP"``), with every
#: (step, holder, message) posted so far, in order.
At = Callable[[str, list[tuple[str, str, Any]]], None]


class InProcessCoordinator:
    """The coordinator's app on ``tmp_path``'s state file, in the test's process
    (``TestClient``); ``restart`` closes it and opens a new one on the same file."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.restarts = 0
        self._stack = contextlib.ExitStack()
        self.client = self._open()

    def _open(self) -> TestClient:
        # Imported here: the tests driving a coordinator process need no TestClient (whose
        # import warns that starlette's httpx support is deprecated).
        from fastapi.testclient import TestClient

        app = create_app(settings(self.tmp_path, tick=0.05))
        return self._stack.enter_context(TestClient(app))

    def close(self) -> None:
        self._stack.close()

    def restart(self) -> None:
        self.close()
        self._stack = contextlib.ExitStack()
        self.client = self._open()
        self.restarts += 1


@dataclass
class DrivenRun:
    """A secagg run on the coordinator behind ``client`` (``create_run``): of K hospitals
    h0 … h{K-1} unless made with another roster (``holders`` and ``inputs`` are theirs)."""

    client: httpx.Client
    run_id: str
    params: PublicParameters
    tokens: dict[str, str]

    def url(self, t: int, what: str) -> str:
        return f"/v1/runs/{self.run_id}/rounds/{t}/secagg/{what}"

    def headers(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def post(self, t: int, name: str, step: str, body: object) -> httpx.Response:
        return self.client.post(self.url(t, step), json=body, headers=self.headers(name))

    def get(self, t: int, name: str, what: str, wait: float = 5.0) -> httpx.Response:
        return self.client.get(self.url(t, what), params={"wait": wait}, headers=self.headers(name))

    def answer(self, t: int, name: str, what: str, *, within: float = 60.0) -> dict[str, Any]:
        """``name``'s ``what`` of round t, once its step closed: a step closed by its
        deadline answers 202 until then (asked again for up to ``within`` seconds)."""
        end = time.monotonic() + within
        while True:
            response = self.get(t, name, what, wait=2.0)
            if response.status_code != 202 or time.monotonic() > end:
                break
        assert response.status_code == 200, (what, name, response.text)
        answer: dict[str, Any] = response.json()
        return answer

    def holders(self, t: int) -> dict[str, Holder]:
        assert self.params.modulus_bits is not None
        parameters = round_parameters(self.params, self.run_id, t)
        assert (parameters.k, parameters.t_min) == (K, T_MIN)
        return {n: Holder(n, ROSTER, KEYS[n], parameters, min_honest=1) for n in NAMES}

    def inputs(self, seed: int) -> dict[str, list[int]]:
        """Small signed integers (grid units) as residues mod 2^bits, by holder."""
        bits = self.params.modulus_bits
        assert bits is not None
        rng = np.random.default_rng(seed)
        return {n: [int(v) % 2**bits for v in rng.integers(-500, 500, size=D)] for n in NAMES}

    def summary(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.read()
        return answer

    def read(self, what: str = "") -> Any:
        """``GET /v1/runs/{run}{what}`` (the run's summary, ``/rounds``, …), as JSON."""
        response = self.client.get(f"/v1/runs/{self.run_id}{what}")
        assert response.status_code == 200, response.text
        return response.json()

    def page(self) -> str:
        """The run's status page."""
        response = self.client.get(f"/runs/{self.run_id}")
        assert response.status_code == 200
        return str(response.text)


def hospital_tokens(tag: str, names: Iterable[str]) -> dict[str, str]:
    """The hospitals' tokens of a run, by name, starting with ``tag``."""
    return {n: f"{tag}-token-{n}-abcdefghijklmnop" for n in names}


def create_run(
    client: httpx.Client,
    tag: str,
    *,
    round_deadline: float = 600.0,
    on_short: str = "fail",
    roster: Roster = ROSTER,
    shares: dict[str, Any] | None = None,
    rounds: int = 2,
) -> DrivenRun:
    """A secagg run of the hospitals of ``roster`` (default: K, h0 … h{K-1}), 100 records
    each, whose tokens start with ``tag`` (two runs on one coordinator need different
    tokens); ``shares``: the request's share fields (default: t_min = T_MIN on the mesh)."""
    tokens = hospital_tokens(tag, roster.names)
    request = run_request(
        records=100,
        d=D,
        rounds=rounds,
        mechanism="secagg",
        roster=json.loads(roster.to_json()),
        round_deadline=round_deadline,
        on_short=on_short,
        **({"t_min": T_MIN} if shares is None else shares),
    )
    request["hospitals"] = [{"name": n, "records": 100, "token": t} for n, t in tokens.items()]
    response = client.post("/v1/runs", json=request, headers=admin_headers())
    assert response.status_code == 201, response.text
    created = response.json()
    params = PublicParameters.model_validate(created["params"])
    return DrivenRun(client, created["run_id"], params, tokens)


def stored(directory: Path, run_id: str) -> list[tuple[str, str, str]]:
    """(kind, holder, body) of every secure-aggregation message of round 0 of ``run_id``
    in the state file of the coordinator on ``directory``, in order."""
    with contextlib.closing(sqlite3.connect(directory / "coordinator.sqlite")) as db:
        rows = db.execute(
            "SELECT kind, holder, body FROM secagg_messages WHERE run_id = ? AND t = 0 "
            "ORDER BY seq",
            (run_id,),
        ).fetchall()
    return [(str(k), str(h), str(b)) for k, h, b in rows]


def stored_body(directory: Path, run_id: str, t: int, kind: str) -> dict[str, Any]:
    """The body of the ``kind`` message of round t of ``run_id`` in the state file of the
    coordinator on ``directory`` (one row: a sum, a loss)."""
    with contextlib.closing(sqlite3.connect(directory / "coordinator.sqlite")) as db:
        (body,) = db.execute(
            "SELECT body FROM secagg_messages WHERE run_id = ? AND t = ? AND kind = ?",
            (run_id, t, kind),
        ).fetchone()
    answer: dict[str, Any] = json.loads(body)
    return answer


@dataclass
class Played:
    """What ``play_round`` did: the status of every post, the messages of each step by
    holder (the unmasking responses included, sent or not), the holders."""

    statuses: list[int]
    sent: dict[str, dict[str, Any]]
    holders: dict[str, Holder]


def play_round(
    run: DrivenRun,
    t: int,
    inputs: dict[str, list[int]],
    *,
    alter: Alter | None = None,
    until: Step = Step.UNMASK,
    silent: Collection[str] = (),
    holders: dict[str, Holder] | None = None,
    at: At | None = None,
    within: float = 60.0,
) -> Played:
    """Round ``t`` through the steps up to ``until`` (included), every holder but the
    ``silent`` ones answering the unmasking request; ``holders``: those taking part (by
    default all K), or those of an earlier call, to play the round again from its start
    (what they sent before is sent again, as an agent retries), in the order they post
    each step; ``at``: called at each point of each step. Every fetch must succeed (a
    step closed by its deadline is waited for, up to ``within`` seconds:
    ``DrivenRun.answer``)."""
    holders = run.holders(t) if holders is None else holders
    statuses: list[int] = []
    sent: dict[str, dict[str, Any]] = {}
    played = Played(statuses, sent, holders)
    posted: list[tuple[str, str, Any]] = []

    def step(name: Step, messages: dict[str, Any], skip: Collection[str] = ()) -> None:
        sent[name] = messages
        for holder, message in messages.items():
            if holder in skip:
                continue
            body = alter(name, holder, message) if alter else message
            statuses.append(run.post(t, holder, name, body.to_dict()).status_code)
            posted.append((name, holder, body))
            if at is not None and sum(s == name for s, _, _ in posted) == 2:
                at(f"{name}-partial", posted)
        if at is not None:
            at(name, posted)

    def fetch(what: str) -> dict[str, Any]:
        return {n: run.answer(t, n, what, within=within) for n in holders}

    step(Step.ADVERTISE, {n: h.advertise() for n, h in holders.items()})
    if until == Step.ADVERTISE:
        return played
    lists = {n: ParticipantList.from_dict(b) for n, b in fetch(ANSWERS[Step.ADVERTISE]).items()}
    step(Step.SHARES, {n: h.share_keys(lists[n]) for n, h in holders.items()})
    if until == Step.SHARES:
        return played
    bundles = {n: ShareBundle.from_dict(b) for n, b in fetch(ANSWERS[Step.SHARES]).items()}
    step(Step.MASKED, {n: h.masked_input(bundles[n], inputs[n]) for n, h in holders.items()})
    if until == Step.MASKED:
        return played
    order = next(iter(holders.values())).roster.names
    checks = {
        n: ConsistencyCheck.from_dict(b, order) for n, b in fetch(ANSWERS[Step.MASKED]).items()
    }
    step(Step.SIGNATURE, {n: h.sign_survivors(checks[n]) for n, h in holders.items()})
    if until == Step.SIGNATURE:
        return played
    requests = {
        n: UnmaskRequest.from_dict(b, order) for n, b in fetch(ANSWERS[Step.SIGNATURE]).items()
    }
    step(Step.UNMASK, {n: h.unmask(requests[n]) for n, h in holders.items()}, silent)
    return played


def random_share(response: UnmaskResponse, owner: str) -> UnmaskResponse:
    """``response`` with the value of its share of ``owner``'s self-mask seed replaced by a
    random field element (what a faulty or lying holder sends)."""
    shares = dict(response.self_mask_shares)
    value = secrets.randbelow(PRIME).to_bytes(SHARE_BYTES, "big")
    shares[owner] = value + shares[owner][SHARE_BYTES:]  # the dealer's signature kept
    return UnmaskResponse(
        response.holder, response.run_id, response.round, shares, response.key_shares
    )


def liar(culprit: str, owner: str) -> Alter:
    """``alter``: ``culprit`` answers the unmasking request with a random share of
    ``owner``'s seed; every other message is sent as it is."""

    def alter(step: str, holder: str, message: Any) -> Any:
        if step == Step.UNMASK and holder == culprit:
            return random_share(message, owner)
        return message

    return alter


def spoil(
    db: Path,
    run: DrivenRun,
    t: int,
    played: Played,
    requests: dict[str, dict[str, Any]],
    *,
    liars: Collection[str] = ("h1",),
) -> None:
    """Store round ``t``'s unmasking responses of every holder (answering ``requests``,
    fetched before), each of the ``liars``' with a random share of h0's seed, straight
    into the state file ``db`` of a stopped coordinator: the state 8e54e94 left behind
    once it had answered the last of them 500."""
    order = played.holders[NAMES[0]].roster.names
    responses = {
        n: played.holders[n].unmask(UnmaskRequest.from_dict(requests[n], order)) for n in NAMES
    }
    for name in liars:
        responses[name] = random_share(responses[name], "h0")
    with sqlite3.connect(db) as connection:
        (seq,) = connection.execute(
            "SELECT COUNT(*) FROM secagg_messages WHERE run_id = ? AND t = ?", (run.run_id, t)
        ).fetchone()
        connection.executemany(
            "INSERT INTO secagg_messages (run_id, t, seq, kind, holder, body) "
            "VALUES (?, ?, ?, 'unmask', ?, ?)",
            [
                (run.run_id, t, seq + i, n, json.dumps(r.to_dict(), sort_keys=True))
                for i, (n, r) in enumerate(responses.items())
            ],
        )
    connection.close()
