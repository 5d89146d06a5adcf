"""Private reads: every route that reveals run state needs the read or the admin token,
unless the coordinator runs with --public-status.

The routes are enumerated from the app itself: a route not listed below as open, agent or
admin is a read route and must refuse a caller without a token, so a new route cannot be
forgotten.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ldpem.commands.coordinator import resolve_token
from ldpem.server.app import create_app
from ldpem.server.deps import READ_COOKIE
from tests.fedkit import ADMIN, admin_headers, hospital_headers, live_server, settings
from tests.server.opkit import READ, read_headers, start_run

#: Open to anyone: health, and the API schema and its viewers (no run state in them).
OPEN = {
    ("GET", "/healthz"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/docs/oauth2-redirect"),
    ("GET", "/redoc"),
}
#: What agents need: a hospital token (or admin), never open, even with --public-status.
AGENT = {
    ("GET", "/v1/me"),
    ("GET", "/v1/runs/{run_id}/round"),
    ("POST", "/v1/runs/{run_id}/rounds/{t}/reports"),
    # Secure aggregation's steps (mechanism secagg): a holder posts and fetches its messages.
    ("POST", "/v1/runs/{run_id}/rounds/{t}/secagg/{step}"),
    ("GET", "/v1/runs/{run_id}/rounds/{t}/secagg/{fetched}"),
}
ADMIN_ONLY = {
    ("POST", "/v1/runs"),
    ("POST", "/v1/runs/{run_id}/cancel"),
    ("POST", "/v1/runs/{run_id}/resume"),
}


def routes(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves, included routers flattened."""
    import fastapi.routing

    # FastAPI ≥ 0.16x keeps included routers as one entry each; iter_route_contexts
    # flattens them. Older releases list every route in app.routes.
    flatten = getattr(fastapi.routing, "iter_route_contexts", None)
    entries = list(flatten(app.routes)) if flatten is not None else list(app.routes)
    found: set[tuple[str, str]] = set()
    for route in entries:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        assert path is not None and methods, f"a route without path or methods: {route!r}"
        found.update((method, path) for method in methods if method != "HEAD")
    return found


def read_routes(app: FastAPI) -> list[tuple[str, str]]:
    return sorted(routes(app) - OPEN - AGENT - ADMIN_ONLY)


def url(path: str, run_id: str) -> str:
    return (
        path.replace("{run_id}", run_id)
        .replace("{t}", "0")
        .replace("{step}", "advertise")
        .replace("{fetched}", "participants")
    )


@pytest.fixture
def private(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    app = create_app(settings(tmp_path, public_status=False, read_token=READ))
    with TestClient(app) as client:
        study = start_run(client, records=200)
        study.round(0, range(3))
        yield client, study.run_id


def test_the_route_table_is_what_this_test_knows(private: tuple[TestClient, str]) -> None:
    client, _ = private
    app = client.app
    assert isinstance(app, FastAPI)
    found = routes(app)
    # Every listed route exists (a renamed route must be re-classified here) ...
    assert found >= OPEN | AGENT | ADMIN_ONLY
    # ... and what is left are the reads, at least these.
    assert {
        ("GET", "/"),
        ("GET", "/runs/{run_id}"),
        ("GET", "/metrics"),
        ("GET", "/v1/runs"),
        ("GET", "/v1/runs/{run_id}"),
        ("GET", "/v1/runs/{run_id}/rounds"),
        ("GET", "/v1/runs/{run_id}/trajectory"),
        ("GET", "/v1/runs/{run_id}/participation"),
    } <= set(read_routes(app))


def test_every_read_route_needs_the_read_or_admin_token(
    private: tuple[TestClient, str],
) -> None:
    client, run_id = private
    app = client.app
    assert isinstance(app, FastAPI)
    for method, path in read_routes(app):
        target = url(path, run_id)
        client.cookies.clear()
        anonymous = client.request(method, target)
        assert anonymous.status_code == 401, (method, path, anonymous.text[:200])
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert run_id not in anonymous.text or path == "/runs/{run_id}"  # the form's action
        hospital = client.request(method, target, headers=hospital_headers(0))
        assert hospital.status_code == 403, (method, path)
        bogus = client.request(method, target, headers={"Authorization": "Bearer x" * 3})
        assert bogus.status_code == 403, (method, path)
        for headers in (read_headers(), admin_headers()):
            allowed = client.request(method, target, headers=headers)
            assert allowed.status_code == 200, (method, path, allowed.text[:200])


def test_public_status_opens_the_reads_but_not_the_agent_or_admin_routes(
    tmp_path: Path,
) -> None:
    app = create_app(settings(tmp_path, public_status=True))
    with TestClient(app) as client:
        study = start_run(client, records=200)
        study.round(0, range(3))
        for method, path in read_routes(app):
            response = client.request(method, url(path, study.run_id))
            assert response.status_code == 200, (method, path, response.text[:200])
        for method, path in sorted(AGENT | ADMIN_ONLY):
            response = client.request(method, url(path, study.run_id), json={})
            assert response.status_code == 401, (method, path, response.text[:200])
        for method, path in sorted(OPEN):
            assert client.request(method, path).status_code == 200, path


def test_open_and_agent_routes_are_as_documented(private: tuple[TestClient, str]) -> None:
    client, run_id = private
    for method, path in sorted(OPEN):
        assert client.request(method, path).status_code == 200, path
    for method, path in sorted(AGENT | ADMIN_ONLY):
        response = client.request(method, url(path, run_id), json={})
        assert response.status_code == 401, (method, path)
    # Hospital tokens keep what an agent needs; a read token is not a hospital's.
    assert client.get("/v1/me", headers=hospital_headers(0)).status_code == 200
    poll = client.get(f"/v1/runs/{run_id}/round", headers=hospital_headers(1))
    assert poll.status_code == 200 and poll.json()["round"] == 1
    assert client.get("/v1/me", headers=read_headers()).status_code == 401
    assert client.post("/v1/runs", json={}, headers=read_headers()).status_code == 403


def test_a_page_opened_with_the_token_in_the_url_moves_it_to_a_cookie(
    private: tuple[TestClient, str],
) -> None:
    client, run_id = private
    opened = client.get(f"/runs/{run_id}?token={READ}", follow_redirects=False)
    assert opened.status_code == 303
    assert opened.headers["location"] == f"/runs/{run_id}"
    cookie = opened.headers["set-cookie"]
    assert cookie.startswith(f"{READ_COOKIE}={READ};")
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain HTTP here; set under TLS
    page = client.get(f"/runs/{run_id}")  # the client now holds the cookie
    assert page.status_code == 200 and f"run {run_id}" in page.text
    assert page.headers["cache-control"] == "no-store"
    client.cookies.clear()
    assert client.get(f"/runs/{run_id}").status_code == 401
    client.cookies.set(READ_COOKIE, ADMIN)
    assert client.get("/").status_code == 200
    client.cookies.set(READ_COOKIE, "hospital-token-0-abcdefghijklmnop")
    assert client.get("/").status_code == 403
    client.cookies.clear()
    assert client.get("/?token=wrong-token-0000000000").status_code == 403
    # /metrics and the JSON API take a bearer token only (as Prometheus and scripts send).
    assert client.get(f"/metrics?token={READ}").status_code == 401
    assert client.get(f"/v1/runs?token={READ}").status_code == 401
    client.cookies.set(READ_COOKIE, READ)
    assert client.get("/v1/runs").status_code == 401


def test_the_login_page_escapes_the_path(private: tuple[TestClient, str]) -> None:
    client, _ = private
    denied = client.get("/runs/<script>")
    assert denied.status_code == 401
    assert "<script>" not in denied.text


def test_read_token_file_is_generated_private_and_reused(tmp_path: Path) -> None:
    state = tmp_path / "c.sqlite"
    token, written = resolve_token("", None, state, kind="read")
    assert written == Path(f"{state}.read-token") and len(token) >= 32
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o600
    assert resolve_token("", None, state, kind="read") == (token, None)
    assert resolve_token("given-read-token-0123", None, state, kind="read") == (
        "given-read-token-0123",
        None,
    )


def test_run_status_reads_a_private_coordinator_with_the_admin_token(tmp_path: Path) -> None:
    app = create_app(settings(tmp_path, public_status=False, read_token=READ))
    with live_server(app) as base:
        import httpx

        with httpx.Client(base_url=base, timeout=60) as client:
            study = start_run(client, records=200)
        command = [sys.executable, "-m", "ldpem", "run", "status", "--coordinator", base]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDPEM_")}
        refused = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert refused.returncode == 2 and "HTTP 401" in refused.stderr
        for extra in ({"LDPEM_ADMIN_TOKEN": ADMIN}, {"LDPEM_READ_TOKEN": READ}):
            shown = subprocess.run(
                command, capture_output=True, text=True, env={**env, **extra}, timeout=120
            )
            assert shown.returncode == 0, shown.stderr
            assert study.run_id in shown.stdout


def test_the_compose_demo_serves_its_status_page_publicly() -> None:
    import yaml

    compose = yaml.safe_load((Path(__file__).parents[2] / "docker-compose.yml").read_text())
    assert "--public-status" in compose["services"]["coordinator"]["command"]


def test_a_start_that_fails_on_the_read_token_leaves_no_admin_token_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ldpem.cli import main

    for name in list(os.environ):
        if name.startswith("LDPEM_"):
            monkeypatch.delenv(name)
    state = tmp_path / "c.sqlite"
    missing = tmp_path / "no-such-read-token"
    code = main(["coordinator", "--state", str(state), "--read-token-file", str(missing)])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"ldpem coordinator: error: {missing}: no such file"
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    code = main(["coordinator", "--state", str(state), "--read-token-file", str(tmp_path)])
    assert code == 2
    assert "cannot read the read token (Is a directory)" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
