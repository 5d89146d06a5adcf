"""``ldpem run``: operator commands against a running coordinator.

    ldpem run create --coordinator URL --config run.json [--admin-token-file FILE]
    ldpem run status --coordinator URL [RUN_ID] [--wait] [--beta-star FILE]
                     [--token-file FILE | --admin-token-file FILE]

``create`` posts the run request (JSON, the fields of ``ldpem.common.wire.RunCreate``)
with the admin token (``LDPEM_ADMIN_TOKEN`` or ``--admin-token-file``) and prints the
response: run id, public parameters, expected error, warning and the generated hospital
tokens (shown once). The same is ``POST /v1/runs`` with ``Authorization: Bearer <admin>``.

``status`` prints a run (without RUN_ID: the run created last). It reads with the read
token (``LDPEM_READ_TOKEN`` or ``--token-file``) or the admin token (``LDPEM_ADMIN_TOKEN``
or ``--admin-token-file``); a coordinator started with ``--public-status`` needs neither.
``--wait`` follows it,
one line per closed round on stderr, until it finished (exit 0) or failed (exit 2);
``--beta-star FILE`` (JSON from ``ldpem generate --beta-star-out``) also prints the
estimation error of the run's β against β*, next to the trivial error ‖β*‖.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ldpem.common.errors import UserError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="create or inspect runs on a coordinator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a run (admin)")
    create.add_argument("--coordinator", required=True, metavar="URL")
    create.add_argument("--config", required=True, type=Path, help="run request, JSON")
    create.add_argument("--admin-token-file", type=Path)
    create.add_argument("--ca-cert", type=Path)
    create.set_defaults(handler=create_run)
    status = actions.add_parser("status", help="show a run")
    status.add_argument("--coordinator", required=True, metavar="URL")
    status.add_argument("run_id", nargs="?", help="default: the run created last")
    status.add_argument("--ca-cert", type=Path)
    status.add_argument("--token-file", type=Path, help="file holding the read token")
    status.add_argument("--admin-token-file", type=Path, help="file holding the admin token")
    status.add_argument(
        "--wait", action="store_true", help="follow the run until it finished or failed"
    )
    status.add_argument(
        "--interval", type=float, default=2.0, metavar="SECONDS", help="--wait poll interval"
    )
    status.add_argument(
        "--beta-star", type=Path, help="JSON with the true beta_star: print the error"
    )
    status.set_defaults(handler=show_status)


def _admin_token(path: Path | None) -> str:
    token = os.environ.get("LDPEM_ADMIN_TOKEN", "")
    if not token and path is not None:
        token = path.read_text().strip()
    if not token:
        raise UserError("the admin token is needed: LDPEM_ADMIN_TOKEN or --admin-token-file")
    return token


def _fail(response: Any, what: str) -> UserError:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text
    return UserError(f"{what}: HTTP {response.status_code} {json.dumps(detail)}")


def create_run(args: argparse.Namespace) -> int:
    import httpx

    from ldpem.client.agent import tls_context

    try:
        request = json.loads(args.config.read_text())
    except ValueError as error:
        raise UserError(f"{args.config}: not valid JSON ({error})") from None
    token = _admin_token(args.admin_token_file)
    verify = tls_context(args.ca_cert)
    try:
        response = httpx.post(
            f"{args.coordinator.rstrip('/')}/v1/runs",
            json=request,
            headers={"Authorization": f"Bearer {token}"},
            timeout=120.0,
            verify=verify,
        )
    except httpx.HTTPError as error:
        raise UserError(f"cannot reach {args.coordinator}: {error}") from None
    if response.status_code != 201:
        raise _fail(response, f"{args.config}: run not created")
    body = response.json()
    json.dump(body, sys.stdout, indent=2)
    print()
    if body.get("warning"):
        print(f"warning: {body['warning']}", file=sys.stderr)
    return 0


def _read_headers(token_file: Path | None, admin_token_file: Path | None) -> dict[str, str]:
    """Authorization for reading run state: the read token, else the admin token, else
    none (a coordinator with --public-status)."""

    def read(path: Path | None) -> str:
        if path is None:
            return ""
        try:
            return path.read_text().strip()
        except OSError as error:
            raise UserError(f"{path}: cannot read the token ({error.strerror})") from None

    token = (
        os.environ.get("LDPEM_READ_TOKEN", "")
        or read(token_file)
        or os.environ.get("LDPEM_ADMIN_TOKEN", "")
        or read(admin_token_file)
    )
    return {"Authorization": f"Bearer {token}"} if token else {}


def _get(url: str, verify: Any, what: str, headers: dict[str, str]) -> Any:
    import httpx

    try:
        response = httpx.get(url, timeout=30.0, verify=verify, headers=headers)
    except httpx.HTTPError as error:
        raise UserError(f"cannot reach {url}: {error}") from None
    if response.status_code != 200:
        raise _fail(response, what)
    return response.json()


def _beta_star(path: Path) -> list[float]:
    try:
        data = json.loads(path.read_text())
        beta_star = [float(v) for v in data["beta_star"]]
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path}: expected JSON with a beta_star list ({error})") from None
    return beta_star


def _error_line(run: dict[str, Any], path: Path) -> str:
    import numpy as np

    from ldpem.common.models import get_model

    beta_star = np.array(_beta_star(path))
    beta = np.array(run["beta"], dtype=float)
    if beta_star.shape != beta.shape:
        raise UserError(f"{path}: beta_star has {beta_star.size} entries, the run d={beta.size}")
    error = get_model(run["model"]).error(beta, beta_star)
    expected = run.get("expected_error")
    forecast = f", forecast {expected:.4f}" if expected is not None else ""
    return (
        f"run {run['run_id']}: final error {error:.4f} after {run['round']} rounds "
        f"(trivial error of beta = 0: {float(np.linalg.norm(beta_star)):.4f}{forecast})"
    )


def show_status(args: argparse.Namespace) -> int:
    import time

    from ldpem.client.agent import tls_context

    verify = tls_context(args.ca_cert)
    headers = _read_headers(args.token_file, args.admin_token_file)
    base = f"{args.coordinator.rstrip('/')}/v1/runs"
    run_id = args.run_id
    if run_id is None:
        runs = _get(base, verify, "runs", headers)
        if not runs:
            raise UserError(f"no run on {args.coordinator} yet")
        run_id = max(runs, key=lambda r: r["created_at"])["run_id"]
    run = _get(f"{base}/{run_id}", verify, f"run {run_id}", headers)
    shown = -1
    while args.wait:
        if run["round"] != shown:
            shown = run["round"]
            print(f"run {run_id}: {run['status']}, round {shown}/{run['rounds']}", file=sys.stderr)
        if run["status"] != "running":
            break
        time.sleep(args.interval)
        run = _get(f"{base}/{run_id}", verify, f"run {run_id}", headers)
    json.dump(run, sys.stdout, indent=2)
    print()
    if args.beta_star is not None:
        print(_error_line(run, args.beta_star), flush=True)
    if args.wait and run["status"] != "finished":
        raise UserError(f"run {run_id} {run['status']}: {run.get('reason')}")
    return 0
