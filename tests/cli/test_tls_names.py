"""A TLS certificate that verifies but is for another name (issue 43, finding 4): the
README's ``init … --self-signed coord.example`` followed by a https://127.0.0.1 URL said
"pass --ca-cert" although it was passed. The line now names the certificate's names and
the fix, ``--with-localhost`` or the name to connect to, in the agent and in run status,
at once (a certificate that does not fit will not fit later either)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from ldpem.cli import main
from ldpem.processes import free_port
from ldpem.server.app import create_app
from tests.fedkit import AGENT_BUDGET, TOKENS, settings, token_file


@contextlib.contextmanager
def coordinator_for(tmp_path: Path, host: str) -> Iterator[tuple[str, Path]]:
    """A coordinator on 127.0.0.1 serving the certificate ``init --self-signed host``
    makes (no --with-localhost); its URL and the CA certificate."""
    coord = tmp_path / "coord"
    assert main(["coordinator", "init", str(coord), "--self-signed", host]) == 0
    port = free_port()
    config = uvicorn.Config(
        create_app(settings(tmp_path)),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ssl_certfile=str(coord / "server.pem"),
        ssl_keyfile=str(coord / "server.key"),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the TLS server did not start"
        time.sleep(0.02)
    try:
        yield f"https://127.0.0.1:{port}", coord / "ca.pem"
    finally:
        server.should_exit = True
        thread.join(10)


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_certificate_for_another_name_names_with_localhost_not_ca_cert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "d.csv").write_text("a,b\n" + "1,2\n-1,-2\n" * 15)
    with coordinator_for(tmp_path, "coord.example") as (url, ca):
        capsys.readouterr()
        agent = [
            "client",
            "--coordinator",
            url,
            "--ca-cert",
            str(ca),
            "--token-file",
            str(token_file(tmp_path, TOKENS[0])),
            "--data",
            str(tmp_path / "d.csv"),
            "--model",
            "gmm",
            "--state",
            str(tmp_path / "agent"),
            *AGENT_BUDGET,
        ]
        status = ["run", "status", "--coordinator", url, "--ca-cert", str(ca)]
        for argv in (agent, status):
            assert main(argv) == 2
            line = error_line(capsys)
            assert f"certificate not valid for 127.0.0.1: the TLS certificate of {url}" in line
            assert "it is for coord.example only" in line, line
            assert "connect to https://coord.example:" in line, line
            assert "--self-signed coord.example --with-localhost" in line, line
            assert "pass --ca-cert" not in line and "retrying" not in line, line
