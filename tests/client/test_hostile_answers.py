"""The coordinator's answers are hostile input: the agent parses them with the strict wire
schemas, so a string or a bool where a number belongs, a fraction where an int belongs, an
unknown field or a non-finite number is refused with a one-line AgentError (no traceback,
no silent coercion), and so is a refusal whose body is not the expected ``{"detail": …}``."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from ldpem.client.agent import Agent, AgentError
from ldpem.client.config import AgentConfig
from ldpem.client.retry import GIVE_UP
from tests.fedkit import TOKENS
from tests.publickit import published_params

PARAMS = published_params(d=4, rounds=5, scale=0.5, smoothing=2.0, records_per_round=60)
IDENTITY: dict[str, Any] = {"run_id": "r1", "hospital": "h0", "records": 100, "params": PARAMS}
ROUND: dict[str, Any] = {
    "run_id": "r1",
    "status": "running",
    "round": 0,
    "beta": [0.5, -0.5, 0.25, 0.0],
    "deadline": 2e9,
    "params": PARAMS,
}


def agent(
    tmp_path: Path,
    handler: Callable[[httpx.Request], httpx.Response],
    *,
    sleep: Callable[[float], None] = lambda _: None,
    give_up: float = 1.0,
) -> Agent:
    """An agent whose coordinator is ``handler`` and whose waits are ``sleep``."""
    return Agent(
        AgentConfig(
            coordinator="http://coordinator",
            token=TOKENS[0],
            data=tmp_path / "d.npy",
            state=tmp_path / "s",
            epsilon=1.0,
            delta=1e-5,
            model="gmm",
            give_up=give_up,
        ),
        transport=httpx.MockTransport(handler),
        sleep=sleep,
    )


def changed(base: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(base)
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


def one_line_refusal(tmp_path: Path, call: str, content: bytes, *words: str) -> str:
    a = agent(tmp_path, lambda _: httpx.Response(200, content=content))
    try:
        with pytest.raises(AgentError) as caught:
            if call == "identity":
                a.identity()
            else:
                a.poll("r1", -1)
    finally:
        a.close()
    message = str(caught.value)
    assert "\n" not in message
    assert "invalid answer" in message
    for word in words:
        assert word in message, message
    assert TOKENS[0] not in message
    return message


def test_valid_answers_are_parsed(tmp_path: Path) -> None:
    answers = {"/v1/me": IDENTITY, "/v1/runs/r1/round": ROUND}
    a = agent(tmp_path, lambda r: httpx.Response(200, content=json.dumps(answers[r.url.path])))
    try:
        assert a.identity().params.d == 4
        info = a.poll("r1", -1)
        assert info.beta == [0.5, -0.5, 0.25, 0.0] and info.round == 0
    finally:
        a.close()


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("params", "d"), "4", "params.d"),
        (("params", "d"), True, "params.d"),
        (("params", "d"), 4.0, "params.d"),
        (("params", "epsilon"), "1.0", "params.epsilon"),
        (("params", "epsilon"), True, "params.epsilon"),
        (("records",), "100", "records"),
        (("records",), 100.5, "records"),
        (("params", "extra_field"), 1, "params.extra_field"),
    ],
)
def test_identity_with_a_wrong_type_is_refused(
    tmp_path: Path, path: tuple[str, ...], value: Any, where: str
) -> None:
    body = json.dumps(changed(IDENTITY, path, value)).encode()
    one_line_refusal(tmp_path, "identity", body, where)


@pytest.mark.parametrize(
    ("content", "where"),
    [
        (b'"round": "1"', "round"),
        (b'"round": 1.5', "round"),
        (b'"round": true', "round"),
        (b'"deadline": "soon"', "deadline"),
        (b'"deadline": NaN', "deadline"),
        (b'"deadline": Infinity', "deadline"),
        (b'"deadline": 1e999', "deadline"),
    ],
)
def test_round_with_a_wrong_type_is_refused(tmp_path: Path, content: bytes, where: str) -> None:
    key = content.split(b":")[0].strip(b'"').decode()
    body = json.dumps({**ROUND, key: "PLACEHOLDER"}).encode()
    body = body.replace(f'"{key}": "PLACEHOLDER"'.encode(), content)
    one_line_refusal(tmp_path, "poll", body, where)


def test_a_non_finite_beta_is_refused(tmp_path: Path) -> None:
    body = json.dumps(ROUND).replace("-0.5", "-Infinity").encode()
    one_line_refusal(tmp_path, "poll", body, "beta[1]", "finite")


def test_an_answer_that_is_not_json_is_refused(tmp_path: Path) -> None:
    one_line_refusal(tmp_path, "identity", b"<html>\n\nhello\n</html>", "not valid JSON")


@pytest.mark.parametrize(
    "content",
    [b"[1, 2]", b'{"detail": "line one\\nline two"}', b"not json\nat all", b'{"detail": 5}'],
)
def test_a_refusal_with_an_odd_body_is_one_line(tmp_path: Path, content: bytes) -> None:
    a = agent(tmp_path, lambda _: httpx.Response(401, content=content))
    try:
        with pytest.raises(AgentError) as caught:
            a.identity()
    finally:
        a.close()
    assert "\n" not in str(caught.value) and "HTTP 401" in str(caught.value)


def test_5xx_answers_are_retried_with_backoff(tmp_path: Path) -> None:
    answers = [503, 500, 200]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == f"Bearer {TOKENS[0]}"
        status = answers.pop(0)
        return httpx.Response(status, json=IDENTITY if status == 200 else {"detail": "busy"})

    sleeps: list[float] = []
    a = agent(tmp_path, handler, sleep=sleeps.append, give_up=GIVE_UP)
    assert a.identity().run_id == "r1"
    a.close()
    assert answers == [] and len(sleeps) == 2
