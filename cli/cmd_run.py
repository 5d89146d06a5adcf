"""``ldpem run``: operator commands against a running coordinator.

    ldpem run create --coordinator URL --config run.json [--admin-token-file FILE]
    ldpem run status --coordinator URL RUN_ID

``create`` posts the run request (JSON, the fields of ``ldpem.common.wire.RunCreate``)
with the admin token (``LDPEM_ADMIN_TOKEN`` or ``--admin-token-file``) and prints the
response: run id, public parameters, expected error, warning and the generated hospital
tokens (shown once). The same is ``POST /v1/runs`` with ``Authorization: Bearer <admin>``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ldpem.errors import UserError

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
    status.add_argument("run_id")
    status.add_argument("--ca-cert", type=Path)
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


def show_status(args: argparse.Namespace) -> int:
    import httpx

    from ldpem.client.agent import tls_context

    verify = tls_context(args.ca_cert)
    try:
        response = httpx.get(
            f"{args.coordinator.rstrip('/')}/v1/runs/{args.run_id}", timeout=30.0, verify=verify
        )
    except httpx.HTTPError as error:
        raise UserError(f"cannot reach {args.coordinator}: {error}") from None
    if response.status_code != 200:
        raise _fail(response, f"run {args.run_id}")
    json.dump(response.json(), sys.stdout, indent=2)
    print()
    return 0
