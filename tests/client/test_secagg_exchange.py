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

from ldpem.client.secagg import _Exchange
from ldpem.common.wire.shares import SECAGG_ANSWER_HEADER

ANSWER = {"participants": ["the", "list"]}


class ScriptedLink:
    """A link whose responses are scripted, by method, in order; it records the calls."""

    def __init__(self, posted: httpx.Response, fetched: list[httpx.Response]) -> None:
        self.posted, self.fetched = posted, fetched
        self.calls: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        self.calls.append((method, path, kwargs.get("params")))
        return self.posted if method == "POST" else self.fetched.pop(0)

    @staticmethod
    def detail(response: httpx.Response) -> str:
        return str(response.json().get("detail", ""))


def respond(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(body).encode(), headers=headers)


def exchange(link: ScriptedLink) -> _Exchange:
    return _Exchange(link, "run-1", 3, wait=30.0)  # type: ignore[arg-type]


def test_the_answer_named_by_the_coordinator_needs_no_second_request() -> None:
    link = ScriptedLink(respond(200, ANSWER, {SECAGG_ANSWER_HEADER: "participants"}), [])
    assert exchange(link).post_then_fetch("advertise", {}, "participants") == ANSWER
    assert link.calls == [
        ("POST", "/v1/runs/run-1/rounds/3/secagg/advertise", {"then": "participants", "wait": 30.0})
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
    assert exchange(link).post_then_fetch("advertise", {}, "participants") == ANSWER
    assert [method for method, _, _ in link.calls] == ["POST", "GET", "GET"]


def test_a_step_closed_without_this_holder_ends_its_round() -> None:
    link = ScriptedLink(respond(409, {"detail": "the advertise step of round 3 is closed"}), [])
    assert exchange(link).post_then_fetch("advertise", {}, "participants") is None
    assert len(link.calls) == 1
