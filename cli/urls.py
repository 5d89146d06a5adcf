"""The coordinator's URL as every command takes it (``--coordinator URL``), checked when the
arguments are parsed: a URL without ``https://`` or ``http://`` would otherwise reach the
agent's retry loop and be retried for its whole ``--give-up`` (httpx's
"UnsupportedProtocol"), where one line at once names the fix."""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit

__all__ = ["coordinator_option", "coordinator_url"]

SCHEMES = ("https", "http")


def coordinator_url(text: str) -> str:
    """``text`` when it is an ``https://`` or ``http://`` URL naming a host (and a valid
    port, if any); ``argparse.ArgumentTypeError``, one line naming the fix, otherwise."""
    if "://" not in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no scheme: add https:// or http:// (https://{text} for a "
            "coordinator serving TLS, http://… for one without)"
        )
    parts = urlsplit(text)
    if parts.scheme.lower() not in SCHEMES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the scheme must be https:// or http://, not {parts.scheme}://"
        )
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1:
        raise argparse.ArgumentTypeError(
            f"{text!r} names no host and valid port: https://HOST[:PORT] (https://coord.example:8443)"
        )
    return text


def coordinator_option(parser: argparse.ArgumentParser) -> None:
    """``--coordinator URL`` (required), checked by ``coordinator_url`` while parsing."""
    parser.add_argument(
        "--coordinator",
        required=True,
        type=coordinator_url,
        metavar="URL",
        help="the coordinator's base URL, https://HOST:PORT (or http:// without TLS)",
    )
