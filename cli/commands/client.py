"""ldpem client: the hospital agent. Holds this hospital's records, privatizes each
round's report on this machine and never sends a record or an un-noised gradient.

    ldpem client --coordinator URL --token-file FILE --model M --data FILE --epsilon E
                 --delta D [--ca-cert PEM] [--state DIR] [--dataset NAME] [--allow-weaker]
    ldpem client … --data postgresql://user@host/db --query "SELECT … ORDER BY …"
                 [--columns a,b,c] [--target y] [--password-file FILE]

--data: a CSV, .npy or .parquet file, or a database (postgresql://… or sqlite:///…) with
--query; the database password comes from PGPASSWORD, ~/.pgpass, a libpq service or
--password-file, never from the command line (docs/FEDERATED.md, "Where the records come
from").

The token comes from --token-file (mode 600, as ldpem run create --tokens-dir writes it)
or LDPEM_TOKEN, never from the command line, where every user of the machine can read it.
--epsilon and --delta are this hospital's own lifetime budget per record, over every run
charged to the state directory's dataset; they are required: a budget is never taken from
the coordinator. A run whose epsilon or delta is larger is refused (the run's request
should state the hospitals' delta). --dataset declares a disjoint population with a budget
of its own. Exit status 0 when the run finished.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ldpem.client.config import AgentConfig
from ldpem.common.core.accounting import ACCOUNTING_MODES
from ldpem.common.core.errors import UserError
from ldpem.common.models import model_names
from ldpem.logsetup import setup_logging
from ldpem.options import (
    coordinator_option,
    field_defaults,
    model_option_arguments,
    model_options_of,
)
from ldpem.secretfiles import read_secret

if TYPE_CHECKING:
    from ldpem.client.secagg import SecAggConfig
    from ldpem.client.sources import Source

__all__ = ["add_arguments", "add_source_arguments", "source_from_args"]


def add_source_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """--data, --query, --columns, --target and --password-file (also for ``simulate``)."""
    parser.add_argument(
        "--data",
        required=required,
        metavar="FILE_OR_URL",
        help="records: a .csv, .npy or .parquet file, or postgresql://… / sqlite:///… with --query"
        + ("" if required else " (default: synthetic records)"),
    )
    parser.add_argument(
        "--query",
        help='SQL giving one row per record, ending "ORDER BY <key>" (default: none; '
        "needed for a database)",
    )
    parser.add_argument(
        "--columns", metavar="A,B,C", help="covariate columns (default: all but the response)"
    )
    parser.add_argument(
        "--target", metavar="NAME", help="response column of mrm and rmc (default: y)"
    )
    parser.add_argument(
        "--password-file",
        type=Path,
        metavar="FILE",
        help="file holding the database password (default: PGPASSWORD, ~/.pgpass or PGSERVICE)",
    )


def source_from_args(args: argparse.Namespace) -> Source:
    """The ``ldpem.client.sources.Source`` the arguments describe (checked, not yet read)."""
    from ldpem.client.columns import parse_columns
    from ldpem.client.sources import Source

    return Source(
        location=str(args.data),
        query=args.query,
        columns=parse_columns(args.columns),
        target=args.target,
        password_file=args.password_file,
    )


class _RefuseToken(argparse.Action):
    """--token TOKEN: refused, since every user of the machine sees a command line (ps)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        parser.error(
            "--token puts the token on the command line, where every user of this machine "
            "can read it (ps): use --token-file FILE (mode 600) or LDPEM_TOKEN"
        )


def _token(token_file: Path | None) -> str:
    """This hospital's token: --token-file (owner-only), else LDPEM_TOKEN."""
    if token_file is not None:
        token = read_secret(token_file, "token")
        if not token:
            raise UserError(f"{token_file}: empty; expected this hospital's token")
        return token
    token = os.environ.get("LDPEM_TOKEN", "").strip()
    if not token:
        raise UserError("a token is needed: --token-file FILE or LDPEM_TOKEN")
    return token


NAME = "client"
HELP = "run a hospital agent"
EXAMPLES = (
    "ldpem client --coordinator https://coord.example:8443 --ca-cert ca.pem "
    "--token-file hospital.token --model gmm --data records.csv --state agent-state "
    "--epsilon 1 --delta 1e-6",
    "ldpem client --coordinator https://coord.example:8443 --token-file hospital.token "
    "--model mrm --data sqlite:///records.db "
    "--query 'SELECT x1, x2, y FROM study ORDER BY id' --epsilon 1 --delta 1e-6",
)

#: What the agent does unless told otherwise: the options' defaults.
AGENT_DEFAULTS = field_defaults(AgentConfig)
#: The agent's waits in seconds: option, ``AgentConfig`` field, help.
_WAITS = (
    ("--give-up", "give_up", "stop after this long without reaching the coordinator"),
    ("--wait", "wait", "how long one request for the next round waits"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    coordinator_option(parser)
    parser.add_argument(
        "--model",
        required=True,
        choices=model_names(),
        help="the model this hospital's records are for: the agent reads its records for "
        "this model before contacting the coordinator and refuses a run of another model",
    )
    model_option_arguments(parser, pinned=True)
    # Registered only to refuse it: unknown, "--token X" would be taken as an abbreviation
    # of --token-file and the token would end up in a "no such file" message.
    parser.add_argument("--token", action=_RefuseToken, help=argparse.SUPPRESS)
    parser.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="file holding this hospital's token, mode 600, as written by ldpem run create "
        "--tokens-dir (default: the LDPEM_TOKEN environment variable)",
    )
    add_source_arguments(parser)
    parser.add_argument(
        "--state",
        type=Path,
        default=Path("ldpem-agent"),
        metavar="DIR",
        help="ledger directory: the budget spent so far, kept across runs",
    )
    parser.add_argument(
        "--epsilon",
        type=float,
        required=True,
        help="this hospital's own privacy budget epsilon per record, over all runs",
    )
    parser.add_argument(
        "--delta",
        type=float,
        required=True,
        help="this hospital's own privacy budget delta per record, over all runs",
    )
    parser.add_argument(
        "--signing-key",
        type=Path,
        default=None,
        metavar="FILE",
        help="secagg runs: this hospital's Ed25519 signing key (mode 600, `ldpem keys generate`; "
        "default: none, for runs of other mechanisms)",
    )
    parser.add_argument(
        "--roster",
        type=Path,
        default=None,
        metavar="FILE",
        help="secagg runs: the consortium's roster, whose digest must equal the run's "
        "(default: none)",
    )
    parser.add_argument(
        "--min-honest",
        type=int,
        default=None,
        metavar="N",
        help="secagg runs: refuse a run whose honest noise shares t_min - c (c: the colluders "
        "it declares) are fewer than N (default: none; set with --signing-key and --roster)",
    )
    parser.add_argument(
        "--max-colluders",
        type=int,
        default=None,
        metavar="N",
        help="secagg runs: the most roster members this hospital assumes may collude with "
        "the coordinator (default: a third of the roster, rounded down). The agent checks "
        "the run's K, t_min, c and topology against it, never against the run's c alone, "
        "and charges each round for t_min - max(c, N) honest shares (docs/PRIVACY.md)",
    )
    parser.add_argument(
        "--dataset",
        default=AGENT_DEFAULTS["dataset"],
        metavar="NAME",
        help="the population the budget belongs to: declare another name ONLY for records "
        "of patients disjoint from every other dataset of this --state",
    )
    parser.add_argument(
        "--accounting",
        choices=ACCOUNTING_MODES,
        default=AGENT_DEFAULTS["accounting"],
        help="privacy accounting: exact (tight Gaussian DP) or the paper's (more noise)",
    )
    parser.add_argument(
        "--allow-weaker",
        action="store_true",
        help="take part in runs that are not locally private (none, central) or publish a "
        "weaker budget than --epsilon/--delta (local noise still uses this agent's budget)",
    )
    for flag, field, text in _WAITS:
        parser.add_argument(
            flag, type=float, default=AGENT_DEFAULTS[field], metavar="SECONDS", help=text
        )
    parser.add_argument(
        "--ca-cert",
        type=Path,
        metavar="PEM",
        help="CA certificate that signed the coordinator's (the ca.pem the operator sent; "
        "default: the system's CAs)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="research only: reproducible partition and noise; VOIDS the privacy guarantee "
        "(default: partition seed drawn once and kept in --state, fresh noise per report)",
    )
    parser.add_argument(
        "--log-level", default="info", help="least severe level logged: debug, info, warning, error"
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text, or json: one object a line (ldpem.common.infra.logs)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ldpem.client.agent import Agent
    from ldpem.common.wire import HOSPITAL_NAME_PATTERN

    token = _token(args.token_file)
    if not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise UserError(f"--epsilon must be > 0, got {args.epsilon}")
    if not 0 < args.delta < 1:
        raise UserError(f"--delta must be in (0, 1), got {args.delta}")
    if not re.fullmatch(HOSPITAL_NAME_PATTERN, args.dataset):
        raise UserError(f"--dataset must match {HOSPITAL_NAME_PATTERN}, got {args.dataset!r}")
    if args.give_up <= 0 or args.wait < 0:
        raise UserError("--give-up must be > 0 and --wait >= 0")
    try:
        setup_logging(args.log_level, args.log_format)
    except ValueError as error:
        raise UserError(f"--log-level: {error}") from None
    logging.getLogger("httpx").setLevel(logging.WARNING)
    source = source_from_args(args)
    if source.scheme is None and not Path(source.location).is_file():
        raise UserError(f"{source.location}: no such file")
    config = AgentConfig(
        coordinator=args.coordinator,
        token=token,
        # Only named in the agent's messages (a URL as a Path would lose its "//").
        data=Path(source.name),
        state=args.state,
        epsilon=args.epsilon,
        delta=args.delta,
        model=args.model,
        model_options=model_options_of(args),
        accounting=args.accounting,
        allow_weaker=args.allow_weaker,
        give_up=args.give_up,
        wait=args.wait,
        ca_cert=args.ca_cert,
        seed=args.seed,
        dataset=args.dataset,
        secagg=_secagg_config(args),
    )
    agent = Agent(config, loader=source.loader)
    try:
        return agent.run()
    finally:
        agent.close()


def _secagg_config(args: argparse.Namespace) -> SecAggConfig | None:
    from ldpem.client.secagg import SecAggConfig

    """The secure aggregation flags, all three or none (UserError otherwise)."""
    given = [args.signing_key, args.roster, args.min_honest]
    if all(v is None for v in given):
        if args.max_colluders is not None:
            raise UserError("--max-colluders goes with --signing-key, --roster and --min-honest")
        return None
    if any(v is None for v in given):
        raise UserError("--signing-key, --roster and --min-honest go together")
    if args.signing_key.exists() and args.signing_key.stat().st_mode & 0o077:
        raise UserError(f"{args.signing_key}: a signing key must be mode 600")
    if args.min_honest < 1:
        raise UserError(f"--min-honest must be at least 1, got {args.min_honest}")
    if args.max_colluders is not None and args.max_colluders < 0:
        raise UserError(f"--max-colluders must be at least 0, got {args.max_colluders}")
    return SecAggConfig(
        args.signing_key, args.roster, args.min_honest, max_colluders=args.max_colluders
    )
