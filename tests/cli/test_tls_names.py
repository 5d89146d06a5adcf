"""A TLS certificate that verifies but is for another name (issue 43, finding 4): the
README's ``init … --self-signed coord.example`` followed by a https://127.0.0.1 URL said
"pass --ca-cert" although it was passed. The line now names the certificate's names and
the fix, ``--with-localhost`` or the name to connect to, in the agent and in run status,
at once (a certificate that does not fit will not fit later either)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpem.cli import main
from tests.cli.clikit import client_argv, one_error_line, tls_coordinator


def test_a_certificate_for_another_name_names_with_localhost_not_ca_cert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with tls_coordinator(tmp_path, "coord.example") as (url, ca):
        capsys.readouterr()
        agent = client_argv(url, tmp_path, "--ca-cert", str(ca))
        status = ["run", "status", "--coordinator", url, "--ca-cert", str(ca)]
        for argv in (agent, status):
            assert main(argv) == 2
            line = one_error_line(capsys)
            assert f"certificate not valid for 127.0.0.1: the TLS certificate of {url}" in line
            assert "it is for coord.example only" in line, line
            assert "connect to https://coord.example:" in line, line
            assert "--self-signed coord.example --with-localhost" in line, line
            assert "pass --ca-cert" not in line and "retrying" not in line, line
