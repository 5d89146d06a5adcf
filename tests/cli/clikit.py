"""What the command-line tests share: ``ldpem`` run as a process, the one line a refused
command writes, and a coordinator serving HTTPS with the certificate ``coordinator init
--self-signed`` makes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldpem.cli import main
from ldpem.server.app import create_app
from tests.fedkit import AGENT_BUDGET, TOKENS, live_server, settings, token_file


def client_argv(url: str, tmp_path: Path, *extra: str, data: Path | None = None) -> list[str]:
    """``ldpem client`` of hospital h0 (TOKENS[0], in a token file) on the records ``data``
    (default: 30 valid two-column records written to ``tmp_path``/d.csv) of a GMM run, its
    state in ``tmp_path``/agent, budget AGENT_BUDGET; ``extra`` after the coordinator's
    URL."""
    if data is None:
        data = tmp_path / "d.csv"
        data.write_text("a,b\n" + "1,2\n-1,-2\n" * 15)
    token = str(token_file(tmp_path, TOKENS[0]))
    where = ["--coordinator", url, *extra, "--token-file", token, "--data", str(data)]
    return ["client", *where, "--model", "gmm", "--state", str(tmp_path / "agent"), *AGENT_BUDGET]


def run_ldpem(
    argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m ldpem argv`` in a process of its own (``env``: added to this one's
    environment), which must exit 0 within ``timeout`` seconds."""
    done = subprocess.run(
        [sys.executable, "-m", "ldpem", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def refused_from_the_shell(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m ldpem argv``, which must exit 2 (a usage error) without a traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "ldpem", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    return done


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """What the command wrote on stderr, which must be one line."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@contextlib.contextmanager
def tls_coordinator(tmp_path: Path, host: str) -> Iterator[tuple[str, Path]]:
    """A coordinator on 127.0.0.1 serving HTTPS with the certificate of a private CA that
    ``coordinator init --self-signed host`` makes (no --with-localhost), which nothing
    here trusts; its URL and the CA certificate."""
    coord = tmp_path / "coord"
    assert main(["coordinator", "init", str(coord), "--self-signed", host]) == 0
    with live_server(create_app(settings(tmp_path)), tls=coord) as url:
        yield url, coord / "ca.pem"
