"""Errors that point the right way (issue 32, point 5): each message names its fix, and
each test checks the text an operator or a hospital reads.

* a TLS certificate that does not verify: one line at once (no retry loop), naming
  --ca-cert, in the agent and in ``run status``;
* an agent stricter than the run: the run request's fix first, --allow-weaker second with
  what else it admits;
* a first contact that was refused binds nothing in the agent's ledger;
* an unknown field is reported before the missing one it is a typo of;
* a roster given to the API as a file name says how to pass it;
* output into a closed pipe ends quietly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from ldpem.cli import main
from ldpem.client.agent import Agent, AgentError
from ldpem.client.config import AgentConfig
from ldpem.client.ledger import Ledger
from ldpem.client.trust import run_budget
from ldpem.common.models import get_model
from ldpem.common.wire import Identity, RoundInfo, RunCreate, public_parameters
from ldpem.server.app import create_app
from tests.cli.clikit import client_argv, one_error_line, tls_coordinator
from tests.fedkit import ADMIN, TOKENS, live_server, run_request, settings
from tests.secaggkit import keys_and_roster

# --- a certificate that is not trusted --------------------------------------------------


def test_an_untrusted_certificate_is_one_line_at_once_in_the_agent_and_run_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with tls_coordinator(tmp_path, "127.0.0.1") as (url, _):
        capsys.readouterr()
        # The default --give-up is 600 s: a retry loop would print "retrying" lines and
        # keep this test waiting for ten minutes; one line and exit 2 is at once.
        code = main(client_argv(url, tmp_path))
        assert code == 2
        line = one_error_line(capsys)
        assert line.startswith(
            f"ldpem client: error: certificate not trusted: the TLS certificate of {url}"
        )
        assert "pass --ca-cert" in line and "retrying" not in line
        assert main(["run", "status", "--coordinator", url]) == 2
        line = one_error_line(capsys)
        assert line.startswith("ldpem run: error: certificate not trusted")
        assert "pass --ca-cert" in line


# --- an agent stricter than the run --------------------------------------------------------
def test_a_stricter_agent_is_told_the_run_request_fix_first() -> None:
    request = RunCreate.model_validate(run_request(epsilon=1.0, delta=1e-6))
    params = public_parameters(request)
    with pytest.raises(AgentError) as refused:
        run_budget(params, epsilon=1.0, delta=1e-7, allow_weaker=False)
    message = str(refused.value)
    assert message.startswith(
        "the run's budget (epsilon 1, delta 1e-06) is weaker than this agent's (epsilon 1, "
        'delta 1e-07): the operator should create the run with "delta": 1e-07 in its request;'
    )
    # --allow-weaker comes second, with what else it lets in.
    assert message.index('"delta": 1e-07') < message.index("--allow-weaker")
    assert (
        "also admits runs whose reports are not locally private: mechanisms none and central"
        in (message)
    )
    assert "\n" not in message
    # Both budgets stricter: both fields named.
    with pytest.raises(AgentError, match=r'with "epsilon": 0\.5, "delta": 1e-07 in its request'):
        run_budget(params, epsilon=0.5, delta=1e-7, allow_weaker=False)


def test_a_stricter_agent_of_a_secagg_run_is_told_the_run_request_fix(tmp_path: Path) -> None:
    """The issue's case: a secagg run created without delta (n^-1.1) and agents started
    with --delta 1e-6, for which --allow-weaker is no way out."""
    _, _, roster = keys_and_roster(tmp_path, 3)
    request = run_request(hospitals=3, records=1000, mechanism="secagg", roster=roster)
    params = public_parameters(RunCreate.model_validate(request))
    assert params.delta == pytest.approx(3000**-1.1)
    with pytest.raises(AgentError) as refused:
        run_budget(params, epsilon=1.0, delta=1e-6, allow_weaker=True)
    message = str(refused.value)
    assert 'the operator should create the run with "delta": 1e-06 in its request' in message
    assert message.index('"delta": 1e-06') < message.index("--allow-weaker cannot help")


# --- a refused first contact binds nothing ------------------------------------------------
D, RECORDS, ROUNDS = 3, 90, 3


def fake_coordinator(round_answer: Callable[[Identity], RoundInfo]) -> httpx.MockTransport:
    """A coordinator that knows one run of hospital h0 and answers its round poll with
    ``round_answer``."""
    params = public_parameters(
        RunCreate.model_validate(run_request(hospitals=1, records=RECORDS, d=D, rounds=ROUNDS))
    )
    me = Identity(run_id="run0", hospital="h0", records=RECORDS, params=params)

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/me":
            return httpx.Response(200, json=me.model_dump(mode="json"))
        if request.url.path == "/v1/runs/run0/round":
            return httpx.Response(200, json=round_answer(me).model_dump(mode="json"))
        return httpx.Response(404, json={"detail": "not here"})

    return httpx.MockTransport(answer)


def fake_agent(tmp_path: Path, transport: httpx.MockTransport, dataset: str) -> Agent:
    records, _ = get_model("gmm").generate(RECORDS, D, rng=np.random.default_rng(1))
    config = AgentConfig(
        coordinator="http://coordinator.test",
        token=TOKENS[0],
        data=tmp_path / "records.csv",
        state=tmp_path / "state",
        epsilon=100.0,
        delta=0.5,
        model="gmm",
        dataset=dataset,
        give_up=5.0,
    )
    return Agent(config, loader=lambda _path, _model: records, transport=transport)


def answered_for_another_run(me: Identity) -> RoundInfo:
    return RoundInfo(
        run_id="other", status="running", round=0, beta=[0.0] * D, deadline=None, params=me.params
    )


def failed_before_round_0(me: Identity) -> RoundInfo:
    return RoundInfo(
        run_id=me.run_id,
        status="failed",
        round=0,
        beta=[0.0] * D,
        deadline=None,
        params=me.params,
        reason="short of quorum",
    )


@pytest.mark.parametrize(
    ("refusal", "said"),
    [
        (answered_for_another_run, "the coordinator answered for run 'other'"),
        (failed_before_round_0, "run run0 failed: short of quorum"),
    ],
)
def test_a_refused_first_contact_binds_nothing(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    refusal: Callable[[Identity], RoundInfo],
    said: str,
) -> None:
    first = fake_agent(tmp_path, fake_coordinator(refusal), "default")
    with pytest.raises(AgentError, match=said):
        first.run()
    first.close()
    ledger = Ledger(tmp_path / "state")
    assert ledger.binding("run0") is None
    ledger.close()

    def finished(me: Identity) -> RoundInfo:
        return RoundInfo(
            run_id=me.run_id,
            status="finished",
            round=ROUNDS,
            beta=[0.0] * D,
            deadline=None,
            params=me.params,
        )

    again = fake_agent(tmp_path, fake_coordinator(finished), "trial2")
    with caplog.at_level("INFO", logger="ldpem.client"):
        assert again.run() == 0  # another --dataset: a first contact, not "the run changed"
    again.close()
    assert "changed" not in caplog.text
    ledger = Ledger(tmp_path / "state")
    bound = ledger.binding("run0")
    assert bound is not None and bound.dataset == "trial2"
    ledger.close()


# --- the run request's fields --------------------------------------------------------------
@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with live_server(create_app(settings(tmp_path))) as url:
        yield url


def post_run(url: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{url}/v1/runs",
        content=content,
        headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
    )


def test_an_unknown_field_comes_before_the_missing_one_with_its_nearest_name(server: str) -> None:
    request = run_request()
    request["hospital"] = request.pop("hospitals")
    response = post_run(server, request)
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "unknown field 'hospital' (did you mean 'hospitals'?) (and 1 more error)"
    )
    # A misspelt optional field: nothing is missing, the model's fields are the guesses.
    response = post_run(server, {**run_request(), "delat": 1e-6})
    assert response.json()["detail"] == "unknown field 'delat' (did you mean 'delta'?)"
    # Inside a hospital's enrolment.
    hostile = run_request(hospitals=1)
    hostile["hospitals"][0]["nmae"] = hostile["hospitals"][0].pop("name")
    assert post_run(server, hostile).json()["detail"] == (
        "unknown field 'hospitals[0].nmae' (did you mean 'name'?) (and 1 more error)"
    )


@pytest.mark.parametrize(
    "key",
    ["x" * 100_000, "h\u0000ospital", "\ud800".encode("utf-8", "surrogatepass").decode("latin-1")],
)
def test_a_hostile_unknown_field_is_a_one_line_422(server: str, key: str) -> None:
    response = post_run(server, {**run_request(), key: 1})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail.startswith("unknown field ") and len(detail) < 300 and "\n" not in detail


def test_a_roster_file_name_over_the_api_says_how_to_pass_it(server: str) -> None:
    response = post_run(server, run_request(mechanism="secagg", roster="roster.json"))
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "roster: must be the roster's JSON object, not a file name: inline the content of "
        "roster.json, or let ldpem run create read it (--roster FILE, or a file name in the "
        "request file)"
    )


# --- a closed pipe --------------------------------------------------------------------------
def test_output_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def ldpem(*args: str, stdout: int | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ldpem", *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE if stdout is None else stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )

    lines = []
    for name in ("hospital-a", "hospital-b"):
        made = ldpem("keys", "generate", "--out", f"{name}.key", "--name", name)
        lines.append(made.stdout.splitlines()[0])
    adds = [part for line in lines for part in ("--add", line)]
    assert ldpem("keys", "roster", "--out", "roster.json", *adds).returncode == 0
    # `ldpem keys show --roster roster.json | head -1`, with head gone before the first
    # write: a pipe whose reader is closed.
    read, write = os.pipe()
    os.close(read)
    try:
        shown = ldpem("keys", "show", "--roster", "roster.json", stdout=write)
    finally:
        os.close(write)
    # Quiet, and the status of a process ended by SIGPIPE (128 + 13), as `cat` gives.
    assert (shown.returncode, shown.stderr) == (141, "")
    # The same command into an open pipe prints its digest line first.
    assert ldpem("keys", "show", "--roster", "roster.json").stdout.startswith("roster digest ")
