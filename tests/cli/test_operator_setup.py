"""The operator's setup: ``ldpem coordinator init``, ``ldpem run create --tokens-dir``, and
the refusal of token and key files others can read and of tokens on the command line."""

from __future__ import annotations

import json
import re
import shlex
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from ldpem.cli import build_parser, main
from ldpem.commands.run import forecast_lines
from ldpem.server.app import create_app
from tests.cli.clikit import one_error_line
from tests.fedkit import (
    ADMIN,
    AGENT_BUDGET,
    TOKENS,
    admin_headers,
    live_server,
    run_request,
    settings,
    settled,
)

INIT_FILES = ["admin.token", "read.token", "ca.pem", "server.pem", "server.key"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- ldpem coordinator init ------------------------------------------------------------
def test_init_writes_private_tokens_and_prints_a_command_that_parses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    coord = tmp_path / "coord"
    assert main(["coordinator", "init", str(coord)]) == 0
    assert sorted(p.name for p in coord.iterdir()) == ["admin.token", "read.token"]
    assert mode(coord) == 0o700
    tokens = [(coord / name).read_text().strip() for name in ("admin.token", "read.token")]
    assert all(mode(coord / name) == 0o600 for name in ("admin.token", "read.token"))
    assert len(set(tokens)) == 2 and all(len(t) >= 32 for t in tokens)
    out = capsys.readouterr().out
    command = next(line.strip() for line in out.splitlines() if line.startswith("  ldpem "))
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.command, args.action) == ("coordinator", None)
    assert args.admin_token_file == coord / "admin.token"
    assert args.read_token_file == coord / "read.token"
    assert args.tls_cert is None  # without --self-signed: no certificate to name


def test_init_self_signed_makes_a_ca_and_a_server_certificate_for_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    coord = tmp_path / "coord"
    argv = ["coordinator", "init", str(coord), "--self-signed", "Coord.Example"]
    assert main([*argv, "--with-localhost"]) == 0
    assert sorted(p.name for p in coord.iterdir()) == sorted(INIT_FILES)
    assert all(mode(coord / name) == 0o600 for name in INIT_FILES)
    ca = x509.load_pem_x509_certificate((coord / "ca.pem").read_bytes())
    server = x509.load_pem_x509_certificate((coord / "server.pem").read_bytes())
    server.verify_directly_issued_by(ca)  # raises unless the CA signed it
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["coord.example", "localhost"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    out = capsys.readouterr().out
    command = next(line.strip() for line in out.splitlines() if line.startswith("  ldpem "))
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.tls_cert, args.tls_key) == (coord / "server.pem", coord / "server.key")
    assert "ca.pem" in out and "--ca-cert" in out


def test_init_never_overwrites_and_refuses_a_bad_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    coord = tmp_path / "coord"
    assert main(["coordinator", "init", str(coord)]) == 0
    before = (coord / "admin.token").read_text()
    capsys.readouterr()
    assert main(["coordinator", "init", str(coord), "--self-signed", "127.0.0.1"]) == 2
    line = one_error_line(capsys)
    assert line.startswith(
        f"ldpem coordinator: error: {coord / 'admin.token'}: exists, and ldpem coordinator "
        "init never overwrites"
    ), line
    # What to do instead (issue 43, finding 4): a new folder, or remove this one.
    assert "init into a new folder (ldpem coordinator init NEW_DIR" in line, line
    assert f"or remove {coord} first" in line, line
    assert (coord / "admin.token").read_text() == before
    assert sorted(p.name for p in coord.iterdir()) == ["admin.token", "read.token"]
    assert main(["coordinator", "init", str(tmp_path / "x"), "--self-signed", "a b"]) == 2
    assert "neither an IP address nor a host name" in one_error_line(capsys)
    assert main(["coordinator", "init", str(tmp_path / "y"), "--with-localhost"]) == 2
    assert "--with-localhost goes with --self-signed" in one_error_line(capsys)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


# --- files others can read -------------------------------------------------------------
def test_coordinator_refuses_a_token_file_others_can_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "admin.token"
    token.write_text(ADMIN + "\n")
    token.chmod(0o644)
    argv = ["coordinator", "--state", str(tmp_path / "c.sqlite"), "--admin-token-file"]
    assert main([*argv, str(token)]) == 2
    line = one_error_line(capsys)
    assert line == (
        f"ldpem coordinator: error: {token}: the admin token is accessible to group or "
        f"others (mode 644); chmod 600 {token}"
    )
    assert ADMIN not in line
    assert not (tmp_path / "c.sqlite").exists()


def test_coordinator_refuses_a_tls_key_others_can_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    coord = tmp_path / "coord"
    assert main(["coordinator", "init", str(coord), "--self-signed", "127.0.0.1"]) == 0
    capsys.readouterr()
    key = coord / "server.key"
    key.chmod(0o640)
    argv = ["coordinator", "--state", str(coord / "c.sqlite")]
    argv += ["--tls-cert", str(coord / "server.pem"), "--tls-key", str(key)]
    assert main(argv) == 2
    assert one_error_line(capsys).endswith(
        f"{key}: the TLS private key is accessible to group or others (mode 640); chmod 600 {key}"
    )


def test_client_refuses_a_token_file_others_can_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "a.token"
    token.write_text(TOKENS[0])
    token.chmod(0o604)
    data = tmp_path / "d.csv"
    data.write_text("a\n1\n")
    argv = ["client", "--coordinator", "http://127.0.0.1:9", "--model", "gmm", "--data", str(data)]
    assert main([*argv, "--token-file", str(token), *AGENT_BUDGET]) == 2
    line = one_error_line(capsys)
    assert line.endswith(f"(mode 604); chmod 600 {token}")
    assert TOKENS[0] not in line


def test_client_refuses_a_token_on_its_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["client", "--coordinator", "http://127.0.0.1:9", "--model", "gmm", "--data", "d.csv"]
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--token", TOKENS[1], *AGENT_BUDGET])
    assert stopped.value.code == 2
    line = one_error_line(capsys)
    assert "use --token-file FILE (mode 600) or LDPEM_TOKEN" in line
    assert TOKENS[1] not in line


def test_client_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LDPEM_TOKEN", raising=False)
    argv = ["client", "--coordinator", "http://127.0.0.1:9", "--model", "gmm", "--data", "d.csv"]
    argv += AGENT_BUDGET
    assert main(argv) == 2
    assert one_error_line(capsys) == (
        "ldpem client: error: a token is needed: --token-file FILE or LDPEM_TOKEN"
    )


# --- ldpem run create --tokens-dir -----------------------------------------------------
@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("LDPEM_ADMIN_TOKEN", ADMIN)
    with live_server(create_app(settings(tmp_path))) as url:
        yield url


def test_run_create_writes_one_private_token_file_per_hospital(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = run_request(hospitals=2, records=100, d=2, rounds=2)
    for hospital in request["hospitals"]:
        del hospital["token"]  # the coordinator generates them
    request["hospitals"].append({"name": "given", "records": 100, "token": TOKENS[3]})
    config = tmp_path / "run.json"
    config.write_text(json.dumps(request))
    tokens = tmp_path / "tokens"
    argv = ["run", "create", "--coordinator", server, "--config", str(config)]
    assert main([*argv, "--tokens-dir", str(tokens)]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in tokens.iterdir()) == ["h0.token", "h1.token"]
    assert mode(tokens) == 0o700
    for name in ("h0", "h1"):
        path = tokens / f"{name}.token"
        assert mode(path) == 0o600
        assert f"  {name}     {path}" in out  # which file goes to whom
        me = httpx.get(
            f"{server}/v1/me", headers={"Authorization": f"Bearer {path.read_text().strip()}"}
        )
        assert me.status_code == 200 and me.json()["hospital"] == name
        assert path.read_text().strip() not in out  # the tokens are only in the files
    assert "  given  its token was given in the run request" in out
    assert "agents take part with --epsilon 1 --delta " in out


def test_run_create_states_the_forecast_band_and_its_snr_sensitivity(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = run_request(hospitals=2, records=500, d=2, rounds=2, forecast=True)
    for hospital in request["hospitals"]:
        del hospital["token"]
    config = tmp_path / "run.json"
    config.write_text(json.dumps(request))
    argv = ["run", "create", "--coordinator", server, "--config", str(config)]
    assert main([*argv, "--tokens-dir", str(tmp_path / "tokens")]) == 0
    out = capsys.readouterr().out
    # run create answers at once; the forecast follows in the background.
    assert "forecast pending: the coordinator simulates the run in the background" in out
    run_id = re.search(r"run (\w+) created", out).group(1)  # type: ignore[union-attr]
    with httpx.Client(base_url=server) as client:
        summary = settled(client, run_id, headers=admin_headers())
    lines = "\n".join(forecast_lines(summary))
    # fedkit's coordinator settings: 2 forecast seeds.
    assert re.search(
        r"expected error [\d.]+, 10-90% of 2 simulated runs in \[[\d.]+, [\d.]+\] "
        r"\(beta = 0: 3, at the assumed snr 3\)",
        lines,
    ), lines
    assert re.search(
        r"if ‖β\*‖/σ is not as assumed: at snr 1.5: [\d.]+ \(beta = 0: 1.5\); "
        r"at snr 6: [\d.]+ \(beta = 0: 6\)",
        lines,
    ), lines


def test_run_create_refuses_to_overwrite_a_token_file_before_creating_the_run(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = run_request(hospitals=1, records=100, d=2, rounds=2)
    del request["hospitals"][0]["token"]
    config = tmp_path / "run.json"
    config.write_text(json.dumps(request))
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / "h0.token").write_text("in use\n")
    argv = ["run", "create", "--coordinator", server, "--config", str(config)]
    assert main([*argv, "--tokens-dir", str(tokens)]) == 2
    assert one_error_line(capsys) == (
        f"ldpem run: error: {tokens / 'h0.token'}: exists; refusing to overwrite a token file"
    )
    assert (tokens / "h0.token").read_text() == "in use\n"
    assert httpx.get(f"{server}/v1/runs").json() == []  # no run left without its token
