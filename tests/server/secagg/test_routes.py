"""The secagg routes' own input checks (they are served without FastAPI's validation,
server/routes/secagg.py): every malformed path, query, body or caller is a one-line 4xx,
never a 5xx, and the schema still describes both routes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldpem.common.wire.secagg import SECAGG_ANSWER_HEADER
from tests.secaggdriver import NAMES, DrivenRun, InProcessCoordinator, create_run, stored


@pytest.fixture
def run(tmp_path: Path) -> Iterator[DrivenRun]:
    coordinator = InProcessCoordinator(tmp_path)
    try:
        yield create_run(coordinator.client, "routes")
    finally:
        coordinator.close()


def base(run: DrivenRun) -> str:
    return f"/v1/runs/{run.run_id}/rounds"


@pytest.mark.parametrize(
    ("suffix", "named"),
    [
        ("x/secagg/participants", "t"),
        ("-1/secagg/participants", "t"),
        ("+1/secagg/participants", "t"),
        ("1.0/secagg/participants", "t"),
        (f"{2**63}/secagg/participants", "t"),
        ("99999999999999999999999/secagg/participants", "t"),
        ("0/secagg/advertise", "fetched"),
        ("0/secagg/PARTICIPANTS", "fetched"),
        ("0/secagg/participants?wait=-1", "wait"),
        ("0/secagg/participants?wait=nan", "wait"),
        ("0/secagg/participants?wait=inf", "wait"),
        ("0/secagg/participants?wait=soon", "wait"),
    ],
)
def test_a_malformed_fetch_is_a_one_line_422(run: DrivenRun, suffix: str, named: str) -> None:
    response = run.client.get(f"{base(run)}/{suffix}", headers=run.headers(NAMES[0]))
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and named in detail


@pytest.mark.parametrize(
    ("step", "body", "named"),
    [
        ("participants", b"{}", "step"),
        ("advertise", b"{", "JSON"),
        ("advertise", b"[1, 2]", "object"),
        ("advertise", b'{"holder": "h0", "holder": "h1"}', "duplicate"),
        ("advertise", b"\xff\xfe", "UTF-8"),
        ("advertise", b"[" * 100_000 + b"]" * 100_000, "nested"),
        ("advertise", b'{"holder": "h0"}', "advertise"),
    ],
)
def test_a_malformed_message_is_a_one_line_4xx(
    run: DrivenRun, step: str, body: bytes, named: str
) -> None:
    response = run.client.post(
        f"{base(run)}/0/secagg/{step}",
        content=body,
        headers={**run.headers(NAMES[0]), "Content-Type": "application/json"},
    )
    assert 400 <= response.status_code < 500, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    assert named.lower() in detail.lower(), detail


@pytest.mark.parametrize("authorization", [None, "Bearer nobody-has-this-token", "Basic x"])
def test_a_caller_without_a_hospital_token_is_401(
    run: DrivenRun, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for response in (
        run.client.get(f"{base(run)}/0/secagg/participants", headers=headers),
        run.client.post(f"{base(run)}/0/secagg/advertise", json={}, headers=headers),
    ):
        assert response.status_code == 401, response.text
        assert response.headers["www-authenticate"] == "Bearer"


def test_the_schema_describes_both_routes(run: DrivenRun) -> None:
    paths = run.client.get("/openapi.json").json()["paths"]
    posted = paths["/v1/runs/{run_id}/rounds/{t}/secagg/{step}"]["post"]
    fetched = paths["/v1/runs/{run_id}/rounds/{t}/secagg/{fetched}"]["get"]
    assert {p["name"] for p in posted["parameters"]} == {"run_id", "t", "step", "then", "wait"}
    assert {p["name"] for p in fetched["parameters"]} == {"run_id", "t", "fetched", "wait"}
    step = next(p for p in posted["parameters"] if p["name"] == "step")
    assert step["schema"]["enum"] == ["advertise", "shares", "masked", "signature", "unmask"]
    assert "requestBody" in posted


def test_a_message_is_stored_as_the_holder_sent_it(run: DrivenRun, tmp_path: Path) -> None:
    """What a restart replays is the holder's own text, not a re-encoding of what the
    coordinator parsed (no field of it is lost or reordered on the way to the store)."""
    message = run.holders(0)[NAMES[0]].advertise().to_dict()
    sent = json.dumps(message, indent=1)  # not the canonical form the coordinator writes
    posted = run.client.post(
        f"{base(run)}/0/secagg/advertise",
        content=sent.encode(),
        headers={**run.headers(NAMES[0]), "Content-Type": "application/json"},
    )
    assert posted.status_code == 200, posted.text
    assert ("advertise", NAMES[0], sent) in stored(tmp_path, run.run_id)


@pytest.mark.parametrize(
    ("step", "then"),
    [
        ("advertise", "bundle"),
        ("shares", "participants"),
        ("unmask", "participants"),
        ("advertise", "nothing"),
    ],
)
def test_a_post_waits_only_for_its_own_steps_answer(run: DrivenRun, step: str, then: str) -> None:
    response = run.client.post(
        f"{base(run)}/0/secagg/{step}",
        params={"then": then},
        json={},
        headers=run.headers(NAMES[0]),
    )
    assert response.status_code == 422, response.text
    assert "then" in response.json()["detail"]


def test_a_post_with_then_answers_as_the_fetch_does(run: DrivenRun) -> None:
    """Posting with ``then`` is the answer's long-poll: 202 (accepted) while the step is
    open, then 200 with the answer, named by its header, the same bytes as the GET's."""
    holders = run.holders(0)
    url = f"{base(run)}/0/secagg/advertise"
    first, *others = NAMES
    early = run.client.post(
        url,
        params={"then": "participants", "wait": 0.2},
        json=holders[first].advertise().to_dict(),
        headers=run.headers(first),
    )
    assert early.status_code == 202, early.text
    assert SECAGG_ANSWER_HEADER not in early.headers
    for name in others:
        posted = run.post(0, name, "advertise", holders[name].advertise().to_dict())
        assert posted.status_code == 200 and posted.json() == {"status": "accepted"}
        assert SECAGG_ANSWER_HEADER not in posted.headers  # no then: the old answer
    again = run.client.post(  # the same message again: accepted, and now answered
        url,
        params={"then": "participants", "wait": 5},
        json=holders[first].advertise().to_dict(),
        headers=run.headers(first),
    )
    assert again.status_code == 200, again.text
    assert again.headers[SECAGG_ANSWER_HEADER] == "participants"
    fetched = run.get(0, first, "participants")
    assert fetched.status_code == 200 and again.content == fetched.content
