"""What the operator's run commands (``ldpem run create|status|cancel|resume``) share: the
admin token, the admin's POST, and the one-line errors of a request that failed (their
options are ``ldpem.options``')."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ldpem.common.core.errors import UserError
from ldpem.secretfiles import read_secret

__all__ = ["admin_post", "admin_token", "refused", "unreachable"]


def admin_token(path: Path | None) -> str:
    """LDPEM_ADMIN_TOKEN, else the token in ``path``; UserError when neither is given."""
    token = os.environ.get("LDPEM_ADMIN_TOKEN", "")
    if not token and path is not None:
        token = read_secret(path, "admin token")
    if not token:
        raise UserError("the admin token is needed: LDPEM_ADMIN_TOKEN or --admin-token-file")
    return token


def refused(response: Any, what: str) -> UserError:
    """One line for a coordinator's refusal: ``what``, the HTTP status and its detail, as
    written (a string in quotes, its "…" and "ε" as such, not as JSON escapes), whole."""
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text
    shown = " ".join(json.dumps(detail, ensure_ascii=False).split())
    return UserError(f"{what}: HTTP {response.status_code} {shown}")


def unreachable(error: Exception, url: str) -> UserError:
    """One line for a request that got no answer: a certificate that did not verify names
    --ca-cert (``link.untrusted``); anything else, the error."""
    from ldpem.client.link import untrusted

    return UserError(untrusted(error, url) or f"cannot reach {url}: {error}")


def admin_post(
    args: argparse.Namespace,
    path: str,
    body: Any,
    *,
    timeout: float,
    expect: int,
    failed: str,
) -> dict[str, Any]:
    """POST ``body`` (JSON) to ``path`` of ``args.coordinator`` with the admin token
    (``admin_token(args.admin_token_file)``), verified by ``args.ca_cert``: the answer's
    JSON when its status is ``expect``, else the one-line UserError of an unreachable
    coordinator or of its refusal (``failed``: what did not happen, said first)."""
    import httpx

    from ldpem.client.link import tls_context

    token = admin_token(args.admin_token_file)
    try:
        response = httpx.post(
            f"{args.coordinator.rstrip('/')}{path}",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            verify=tls_context(args.ca_cert),
        )
    except httpx.HTTPError as error:
        raise unreachable(error, args.coordinator) from None
    if response.status_code != expect:
        raise refused(response, failed)
    answer: dict[str, Any] = response.json()
    return answer
