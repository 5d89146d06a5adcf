"""The ``ldpem coordinator``, ``ldpem client`` and ``ldpem run`` commands: flags and errors."""

from __future__ import annotations

import json
import os
import ssl
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ldpem.cli import main
from ldpem.commands.coordinator import resolve_admin_token
from ldpem.processes import start_coordinator
from ldpem.server.app import create_app
from ldpem.server.settings import load_settings
from tests.cli.clikit import client_argv, one_error_line
from tests.fedkit import (
    ADMIN,
    AGENT_BUDGET,
    TOKENS,
    live_server,
    process_manager,
    run_request,
    settings,
    token_file,
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with live_server(create_app(settings(tmp_path))) as url:
        yield url


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator's admin token in the environment, where ``ldpem run`` reads it."""
    monkeypatch.setenv("LDPEM_ADMIN_TOKEN", ADMIN)


def create_argv(server: str, tmp_path: Path, request: dict[str, Any]) -> tuple[Path, list[str]]:
    """``request`` written to a config file, and ``ldpem run create``'s arguments for it."""
    config = tmp_path / "run.json"
    config.write_text(json.dumps(request))
    return config, ["run", "create", "--coordinator", server, "--config", str(config)]


def test_client_without_its_data_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "client",
            "--coordinator",
            "http://127.0.0.1:9",
            "--token-file",
            str(token_file(tmp_path, TOKENS[0])),
            "--data",
            str(tmp_path / "nope.csv"),
            "--model",
            "gmm",
            *AGENT_BUDGET,
        ]
    )
    assert code == 2
    assert one_error_line(capsys) == f"ldpem client: error: {tmp_path / 'nope.csv'}: no such file"


def test_client_with_a_bad_csv_names_file_line_and_column(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = run_request(hospitals=1, records=3, d=3, rounds=1)
    assert (
        httpx.post(
            f"{server}/v1/runs", json=request, headers={"Authorization": f"Bearer {ADMIN}"}
        ).status_code
        == 201
    )
    data = tmp_path / "records.csv"
    data.write_text("a,b,c\n1,2,3\n4,x,6\n7,8,9\n")
    code = main(client_argv(server, tmp_path, data=data))
    assert code == 2
    assert one_error_line(capsys) == (
        f"ldpem client: error: {data} line 3, column 'b': not a number"
    )
    participation = httpx.get(f"{server}/v1/runs").json()
    assert participation[0]["round"] == 0


@pytest.mark.parametrize(
    ("budget", "missing"),
    [
        ([], "--epsilon, --delta"),
        (["--epsilon", "1"], "--delta"),
        (["--delta", "1e-6"], "--epsilon"),
    ],
)
def test_client_without_its_own_budget_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], budget: list[str], missing: str
) -> None:
    """The budget is the hospital's own: never adopted from the coordinator."""
    data = tmp_path / "d.csv"
    data.write_text("a\n1\n")
    argv = ["client", "--coordinator", "http://x", "--token-file", "t", "--data", str(data)]
    argv += ["--model", "gmm"]
    with pytest.raises(SystemExit) as stopped:
        main([*argv, *budget])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"error: the following arguments are required: {missing}" in err


def test_coordinator_tls_needs_certificate_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["coordinator", "--state", str(tmp_path / "s.sqlite"), "--tls-cert", "c.pem"])
    assert code == 2
    assert (
        one_error_line(capsys) == "ldpem coordinator: error: --tls-cert and --tls-key go together"
    )


def test_run_create_with_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.json"
    config.write_text("{not json")
    code = main(["run", "create", "--coordinator", "http://127.0.0.1:9", "--config", str(config)])
    assert code == 2
    assert one_error_line(capsys).startswith(f"ldpem run: error: {config}: not valid JSON")


def test_run_create_refused_by_the_coordinator(
    server: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    admin: None,
) -> None:
    config, argv = create_argv(server, tmp_path, run_request(quorum=9))
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"ldpem run: error: {config}: run not created: HTTP 422")
    assert "quorum 9 exceeds the 3 enrolled hospitals" in line
    monkeypatch.setenv("LDPEM_ADMIN_TOKEN", "wrong-admin-token-000000")
    _, argv = create_argv(server, tmp_path, run_request())
    assert main(argv) == 2
    assert "HTTP 403" in one_error_line(capsys)


@pytest.mark.parametrize("model", ["gmmk", "lca"])
def test_run_create_publishes_the_model_options_and_sizes_beta_by_them(
    model: str, server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], admin: None
) -> None:
    _, argv = create_argv(server, tmp_path, run_request(model=model, d=4))
    assert main([*argv, "--components", "2"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["params"]["model_options"] == {"components": 2}
    assert main(["run", "status", "--coordinator", server, created["run_id"]]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model_options"] == {"components": 2}
    assert len(summary["beta"]) == 2 * (4 + 1)  # β⁰: K·(d + 1), not d


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        (
            "lca",
            ["--components", "11"],
            "components must be an integer in [2, 10] for model lca, got 11",
        ),
        ("gmm", ["--components", "3"], "model gmm has no option components (its options: none)"),
    ],
)
def test_run_create_refuses_model_options_outside_the_declaration_in_one_line(
    model: str,
    options: list[str],
    message: str,
    server: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    admin: None,
) -> None:
    config, argv = create_argv(server, tmp_path, run_request(model=model))
    assert main([*argv, *options]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"ldpem run: error: {config}: run not created: HTTP 422")
    assert message in line


def test_run_create_and_status_print_json(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    request = run_request()
    request["hospitals"].append({"name": "new", "records": 100})
    _, argv = create_argv(server, tmp_path, request)
    admin = token_file(tmp_path, ADMIN, "admin")
    monkeypatch.delenv("LDPEM_ADMIN_TOKEN", raising=False)
    assert main([*argv, "--admin-token-file", str(admin)]) == 0
    created = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in created["tokens"]] == ["new"]  # generated, shown once
    assert main(["run", "status", "--coordinator", server, created["run_id"]]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "running"


def test_admin_token_is_generated_once_and_kept(tmp_path: Path) -> None:
    state = tmp_path / "c.sqlite"
    token, written = resolve_admin_token("", None, state)
    assert written == Path(f"{state}.admin-token") and len(token) >= 32
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o600
    assert resolve_admin_token("", None, state) == (token, None)
    assert resolve_admin_token("from-env-0123456789", None, state) == ("from-env-0123456789", None)


def test_settings_from_file_environment_and_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "coordinator.toml"
    config.write_text('[coordinator]\nport = 9000\nmax_body = 4096\nhost = "0.0.0.0"\n')
    monkeypatch.setenv("LDPEM_MAX_BODY", "8192")
    loaded = load_settings(config, port=None, host="127.0.0.1")
    assert (loaded.port, loaded.max_body, loaded.host) == (9000, 8192, "127.0.0.1")


@pytest.mark.slow
def test_coordinator_serves_tls_and_an_agent_verifies_it(tmp_path: Path) -> None:
    # The operator's way to a certificate: a private CA and a server certificate for the
    # address the agents connect to.
    assert main(["coordinator", "init", str(tmp_path / "coord"), "--self-signed", "127.0.0.1"]) == 0
    ca, cert, key = (tmp_path / "coord" / name for name in ("ca.pem", "server.pem", "server.key"))
    trust = ssl.create_default_context(cafile=str(ca))
    with process_manager(tmp_path) as procs:
        _, url = start_coordinator(
            procs,
            state=tmp_path / "c.sqlite",
            args=["--tls-cert", str(cert), "--tls-key", str(key)],
            verify=trust,
        )
        assert url.startswith("https://")
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/healthz")  # not trusted without the certificate
        request = run_request(hospitals=1, records=30, d=2, rounds=2)
        response = httpx.post(
            f"{url}/v1/runs",
            json=request,
            verify=trust,
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert response.status_code == 201
        (tmp_path / "d.csv").write_text("a,b\n" + "1,2\n-1,-2\n" * 15)
        client = procs.start(
            "agent",
            "client",
            "--coordinator",
            url,
            "--token-file",
            str(token_file(tmp_path, TOKENS[0])),
            "--data",
            "d.csv",
            "--model",
            "gmm",
            "--ca-cert",
            str(ca),
            "--state",
            "agent",
            *AGENT_BUDGET,
        )
        assert client.wait(120) == 0, procs.log(client)[-2000:]
        run = httpx.get(f"{url}/v1/runs", verify=trust).json()[0]
        assert (run["status"], run["round"]) == ("finished", 2)
