"""``--log-format json``: one JSON object per line with run/round/hospital where known, and
never a token, for the coordinator and the agent (ldpem.common.infra.logs, ldpem.logsetup)."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ldpem.common.infra.logs import (
    AccessFields,
    ContextFilter,
    JsonFormatter,
    RedactTokens,
    log_context,
    request_clock,
)
from ldpem.logsetup import setup_logging
from ldpem.processes import Processes, free_port, start_coordinator
from ldpem.server.app import create_app
from tests.fedkit import ADMIN, TOKENS, admin_headers, live_server, run_request, settings
from tests.server.opkit import READ, start_run


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    handler.addFilter(AccessFields())  # in setup_logging's order: before RedactTokens
    handler.addFilter(RedactTokens())
    logger = logging.getLogger("ldpem.test-logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_has_the_fields_and_the_context(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    logger.info("plain %d", 1)
    logger.warning("with extra", extra={"run": "r1", "round": 3, "hospital": "h2"})
    with log_context(run="r9", hospital="h7"):
        logger.info("in context")
        logger.info("extra wins", extra={"hospital": "h8"})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("failed")
    first, second, third, fourth, fifth = lines(stream)
    assert set(first) == {"time", "level", "logger", "message"}
    assert first["message"] == "plain 1" and first["level"] == "INFO"
    assert first["logger"] == "ldpem.test-logs" and first["time"].endswith("Z")
    assert {k: second[k] for k in ("run", "round", "hospital")} == {
        "run": "r1",
        "round": 3,
        "hospital": "h2",
    }
    assert (third["run"], third["hospital"]) == ("r9", "h7") and "round" not in third
    assert fourth["hospital"] == "h8"
    assert "RuntimeError: boom" in fifth["error"]


def test_log_context_takes_only_the_known_fields() -> None:
    with (
        pytest.raises(ValueError, match="log context fields must be among"),
        log_context(token="x"),
    ):
        pass


@pytest.mark.parametrize(
    "message",
    [
        "GET /runs/abc?token=SECRET-123 HTTP/1.1",
        "GET /runs/abc?x=1&token=SECRET-123&y=2",
        "Authorization: Bearer SECRET-123",
        "authorization: bearer SECRET-123",
    ],
)
def test_tokens_are_redacted(captured: tuple[logging.Logger, io.StringIO], message: str) -> None:
    logger, stream = captured
    logger.info("%s", message)
    text = lines(stream)[0]["message"]
    assert "SECRET" not in text and "<redacted>" in text


def test_access_lines_have_method_path_status_and_duration(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    _, stream = captured
    handler = logging.getLogger("ldpem.test-logs").handlers[0]
    access = logging.getLogger("uvicorn.access")
    access.addHandler(handler)
    access.propagate, access.level = False, logging.INFO
    fmt = '%s - "%s %s HTTP/%s" %d'  # uvicorn's own (protocols/http/*_impl.py)
    try:
        with request_clock():
            time.sleep(0.02)
            access.info(fmt, "127.0.0.1:5", "GET", "/runs/abc?token=SECRET-123", "1.1", 200)
        access.info(fmt, "127.0.0.1:5", "POST", "/v1/runs", "1.1", 409)  # no clock: no duration
    finally:
        access.removeHandler(handler)
        access.propagate, access.level = True, logging.NOTSET
    timed, untimed = lines(stream)
    assert (timed["method"], timed["path"], timed["status"]) == ("GET", "/runs/abc", 200)
    assert 20 <= timed["duration_ms"] < 10_000
    assert "SECRET" not in json.dumps(timed) and "token=<redacted>" in timed["message"]
    assert (untimed["method"], untimed["status"], "duration_ms" in untimed) == ("POST", 409, False)


def test_setup_logging_refuses_unknown_levels_and_formats() -> None:
    with pytest.raises(ValueError, match="log format must be"):
        setup_logging("info", "xml")
    with pytest.raises(ValueError, match="log level must be"):
        setup_logging("loud", "json")


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.strip():
            out.append(json.loads(line))  # every line is one JSON object
    return out


def test_coordinator_json_logs_carry_the_run_and_never_a_token(
    procs: Processes, tmp_path: Path
) -> None:
    server, url = start_coordinator(
        procs,
        state=tmp_path / "c.sqlite",
        args=["--log-format", "json"],
        log_level="info",
        # Private status: the page below is opened with ?token=, which must not be logged.
        env={"LDPEM_READ_TOKEN": READ, "LDPEM_PUBLIC_STATUS": None},
    )
    with httpx.Client(base_url=url, timeout=60) as client:
        study = start_run(client, records=200, rounds=2)
        study.round(0, range(3))
        page = client.get(f"/runs/{study.run_id}?token={READ}", follow_redirects=True)
        assert page.status_code == 200
        created = client.post("/v1/runs", json=run_request(), headers=admin_headers())
        assert created.status_code == 409  # the same tokens again: refused, logged
    procs.stop()
    text = procs.log(server)
    for secret in (ADMIN, READ, *TOKENS):
        assert secret not in text
    records = _json_lines(text)
    accepted = [r for r in records if r["message"].endswith("report from h1 accepted")]
    assert len(accepted) == 1
    assert accepted[0]["run"] == study.run_id
    assert accepted[0]["round"] == 0 and accepted[0]["hospital"] == "h1"
    assert accepted[0]["logger"] == "ldpem.server" and accepted[0]["level"] == "INFO"
    closed = [r for r in records if "round 0 closed" in r["message"]]
    assert closed and closed[0]["run"] == study.run_id and closed[0]["round"] == 0
    # Causal order: the last report's acceptance, then the closing of the round it completed.
    messages = [r["message"] for r in records]
    last = max(i for i, m in enumerate(messages) if "round 0: report from" in m)
    assert last < messages.index(closed[0]["message"]), messages
    access = [r for r in records if r["logger"] == "uvicorn.access"]
    assert any("token=<redacted>" in r["message"] for r in access), access
    for record in access:  # every access line has its fields, not only a message
        assert {"method", "path", "status", "duration_ms"} <= set(record), record
        assert "?" not in record["path"] and record["duration_ms"] >= 0
    reports = [r for r in access if r["path"].endswith("/rounds/0/reports")]
    assert [(r["method"], r["status"]) for r in reports] == [("POST", 200)] * 3
    status_page = [r for r in access if r["path"] == f"/runs/{study.run_id}"]
    assert status_page and status_page[0]["method"] == "GET"


def test_a_group_commit_is_logged_in_causal_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Three reports share one commit (a long commit window), the last one closes the
    round: the three acceptances come before the closing, and the closing before round 1's
    acceptances."""
    caplog.set_level(logging.INFO, logger="ldpem.server")
    app = create_app(settings(tmp_path, commit_window=0.5))
    with live_server(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        study = start_run(client, hospitals=3, records=400, rounds=2)
        threads = [threading.Thread(target=study.round, args=(0, [i])) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        study.round(1, range(3))
    messages = [r.getMessage() for r in caplog.records if r.name == "ldpem.server"]
    steps = [
        "round 0: report from",
        "round 0 closed with 3 reports",
        "round 1: report from",
        "finished after 2 rounds",
    ]
    order = [
        next(j for j, step in enumerate(steps) if step in m)
        for m in messages
        if any(step in m for step in steps)
    ]
    assert order == [0, 0, 0, 1, 2, 2, 2, 3], messages


def test_agent_json_logs(tmp_path: Path) -> None:
    data = tmp_path / "records.csv"
    data.write_text("a,b\n0.5,1.0\n")  # loads: the agent then tries to reach the coordinator
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ldpem",
            "client",
            "--coordinator",
            f"http://127.0.0.1:{free_port()}",
            "--data",
            str(data),
            "--model",
            "gmm",
            "--state",
            str(tmp_path / "agent"),
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--give-up",
            "1",
            "--log-format",
            "json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "LDPEM_TOKEN": TOKENS[0]},
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    *logged, last = done.stderr.strip().splitlines()
    assert last.startswith("ldpem client: error:")  # the one-line error, not a log record
    records = _json_lines("\n".join(logged))
    assert records and all(r["logger"] == "ldpem.client" for r in records)
    assert any("retrying" in r["message"] for r in records)
    assert TOKENS[0] not in done.stderr
