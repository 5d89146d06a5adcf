"""One holder's requests of a secagg step (``client.secagg._Exchange``): a post that names
the step's answer (``then``) takes it from the coordinator's 200 when the coordinator says
which answer it is (its header), and otherwise asks for it as before, so that an agent
works with a coordinator that does not answer posts, and never takes an acceptance for an
answer."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ldpem.client.link import READ_MARGIN
from ldpem.client.secagg import STEP_WAIT, _Exchange
from ldpem.common.secagg.steps import Step
from ldpem.common.wire.secagg import SECAGG_ANSWER_HEADER
from ldpem.server.settings import Settings

ANSWER = {"participants": ["the", "list"]}


class ScriptedLink:
    """A link whose responses are scripted, by method, in order; it records the calls."""

    def __init__(self, posted: httpx.Response, fetched: list[httpx.Response]) -> None:
        self.posted, self.fetched = posted, fetched
        self.calls: list[tuple[str, str, Any]] = []
        self.timeouts: list[Any] = []

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        self.calls.append((method, path, kwargs.get("params")))
        self.timeouts.append(kwargs.get("timeout"))
        return self.posted if method == "POST" else self.fetched.pop(0)

    @staticmethod
    def detail(response: httpx.Response) -> str:
        return str(response.json().get("detail", ""))


def respond(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(body).encode(), headers=headers)


def exchange(link: ScriptedLink, wait: float = 30.0) -> _Exchange:
    return _Exchange(link, "run-1", 3, wait=wait)  # type: ignore[arg-type]


def test_the_answer_named_by_the_coordinator_needs_no_second_request() -> None:
    link = ScriptedLink(respond(200, ANSWER, {SECAGG_ANSWER_HEADER: "participants"}), [])
    assert exchange(link).post_then_fetch(Step.ADVERTISE, {}) == ANSWER
    assert link.calls == [
        (
            "POST",
            "/v1/runs/run-1/rounds/3/secagg/advertise",
            {"then": "participants", "wait": 300.0},
        )
    ]


@pytest.mark.parametrize(
    "posted",
    [
        respond(200, {"status": "accepted"}),  # a coordinator that ignores then
        respond(200, ANSWER),  # an answer it does not name: not taken
        respond(200, ANSWER, {SECAGG_ANSWER_HEADER: "bundle"}),  # another step's
        respond(202, {"detail": "the step is still open"}),  # accepted, still open
    ],
)
def test_otherwise_the_answer_is_fetched(posted: httpx.Response) -> None:
    link = ScriptedLink(posted, [respond(202, {}), respond(200, ANSWER)])
    assert exchange(link).post_then_fetch(Step.ADVERTISE, {}) == ANSWER
    assert [method for method, _, _ in link.calls] == ["POST", "GET", "GET"]


def test_a_step_closed_without_this_holder_ends_its_round() -> None:
    link = ScriptedLink(respond(409, {"detail": "the advertise step of round 3 is closed"}), [])
    assert exchange(link).post_then_fetch(Step.ADVERTISE, {}) is None
    assert len(link.calls) == 1


@pytest.mark.parametrize(("agent_wait", "asked"), [(30.0, STEP_WAIT), (900.0, 900.0)])
def test_a_steps_answer_is_long_polled_as_long_as_a_deadline_may_take(
    agent_wait: float, asked: float
) -> None:
    """Every long-poll of a step's answer asks at least STEP_WAIT (the agent's own --wait
    when longer), with a read timeout beyond it: a holder whose step waits for a dropped
    peer's deadline re-asks once per STEP_WAIT, not once per round long-poll."""
    link = ScriptedLink(respond(202, {}), [respond(202, {}), respond(200, ANSWER)])
    assert exchange(link, agent_wait).post_then_fetch(Step.MASKED, {}) == ANSWER
    assert [params["wait"] for _, _, params in link.calls] == [asked] * 3
    assert all(timeout.read == asked + READ_MARGIN for timeout in link.timeouts)
    assert all(timeout.read > asked for timeout in link.timeouts)


def test_the_coordinator_holds_such_a_long_poll_by_default() -> None:
    """A coordinator that capped it lower (60 s before) would answer 202 sooner, and each
    survivor of a step waiting for its deadline would re-ask every max_wait seconds."""
    assert Settings().max_wait >= STEP_WAIT
