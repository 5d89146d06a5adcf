"""``ldpem client``: the hospital agent. Holds this hospital's records, privatizes each
round's report on this machine and never sends a record or an un-noised gradient.

    ldpem client --coordinator URL --token TOKEN --data FILE [--state DIR]
                 [--epsilon E --delta D] [--allow-weaker]

The token may also come from ``--token-file`` or ``LDPEM_TOKEN``. Without --epsilon and
--delta the agent adopts the run's published budget. Exit status 0 when the run finished.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from ldpem.errors import UserError
from ldpem.logs import setup_logging

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "client",
        help="run a hospital agent",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--coordinator", required=True, metavar="URL", help="coordinator base URL")
    parser.add_argument("--token", help="this hospital's bearer token")
    parser.add_argument("--token-file", type=Path, help="file holding the token")
    parser.add_argument("--data", required=True, type=Path, help="records: CSV or .npy")
    parser.add_argument(
        "--state",
        type=Path,
        default=Path("ldpem-agent"),
        help="ledger directory (default ldpem-agent)",
    )
    parser.add_argument("--epsilon", type=float, help="this hospital's privacy budget epsilon")
    parser.add_argument("--delta", type=float, help="this hospital's privacy budget delta")
    parser.add_argument(
        "--accounting", choices=("exact", "paper"), default="exact", help="privacy accounting"
    )
    parser.add_argument(
        "--allow-weaker",
        action="store_true",
        help="take part in runs that are not locally private (none, central) or publish a "
        "weaker budget than --epsilon/--delta (local noise still uses this agent's budget)",
    )
    parser.add_argument(
        "--give-up",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="stop after this long without reaching the coordinator (default 600)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="long-poll duration (default 30)",
    )
    parser.add_argument(
        "--ca-cert", type=Path, help="CA certificate to verify the coordinator's TLS"
    )
    parser.add_argument(
        "--seed", type=int, help="random seed (default: drawn once, kept in --state)"
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text (default) or json: one object a line (ldpem.logs)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ldpem.client.agent import Agent, AgentConfig

    token = args.token or os.environ.get("LDPEM_TOKEN")
    if token is None and args.token_file is not None:
        token = args.token_file.read_text().strip()
    if not token:
        raise UserError("a token is needed: --token, --token-file or LDPEM_TOKEN")
    if (args.epsilon is None) != (args.delta is None):
        raise UserError("--epsilon and --delta go together")
    if args.epsilon is not None and not args.epsilon > 0:
        raise UserError(f"--epsilon must be > 0, got {args.epsilon}")
    if args.delta is not None and not 0 < args.delta < 1:
        raise UserError(f"--delta must be in (0, 1), got {args.delta}")
    if args.give_up <= 0 or args.wait < 0:
        raise UserError("--give-up must be > 0 and --wait >= 0")
    try:
        setup_logging(args.log_level, args.log_format)
    except ValueError as error:
        raise UserError(f"--log-level: {error}") from None
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if not args.data.is_file():
        raise UserError(f"{args.data}: no such file")
    config = AgentConfig(
        coordinator=args.coordinator,
        token=token,
        data=args.data,
        state=args.state,
        epsilon=args.epsilon,
        delta=args.delta,
        accounting=args.accounting,
        allow_weaker=args.allow_weaker,
        give_up=args.give_up,
        wait=args.wait,
        ca_cert=args.ca_cert,
        seed=args.seed,
    )
    agent = Agent(config)
    try:
        return agent.run()
    finally:
        agent.close()
