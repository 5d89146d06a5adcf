"""What the operator's run commands (``ldpem run create|status|cancel``) share: their token
and CA options, the admin token, and the one-line errors of a request that failed."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ldpem.common.core.errors import UserError
from ldpem.secretfiles import read_secret

__all__ = ["CA_HELP", "admin_token", "refused", "token_file_option", "unreachable"]

CA_HELP = (
    "CA certificate that signed the coordinator's (ca.pem of ldpem coordinator init "
    "--self-signed; default: the system's CAs)"
)


def token_file_option(parser: argparse.ArgumentParser, flag: str, token: str, default: str) -> None:
    """``flag FILE``: the file holding ``token`` (mode 600), else ``default``; every
    action's token files are worded alike."""
    parser.add_argument(
        flag,
        type=Path,
        metavar="FILE",
        help=f"file holding the {token}, mode 600 (default: {default})",
    )


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
