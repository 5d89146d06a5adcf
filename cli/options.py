"""What the commands' parsers share, in one place: example epilogs, subcommands of a
command (``ActionSpec``, ``add_actions``), dataclasses built from parsed options
(``from_options``) and the options' defaults read from them (``field_defaults``), and the
options several commands take, worded alike: the
coordinator's URL (checked while parsing), its CA certificate, token files, where
simulations run, and the models' declared options (``--components``: one generator,
``model_option_arguments``, for every command that takes a model). The commands and
``ldpem.cli`` import it; it imports neither, since ``ldpem.cli`` imports the commands."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from ldpem.common.models.base import ModelOption

    _Described = TypeVar("_Described", bound=DataclassInstance)

__all__ = [
    "CA_HELP",
    "ActionSpec",
    "accounting_option",
    "add_actions",
    "add_executor_arguments",
    "admin_token_file_option",
    "ca_cert_option",
    "coordinator_option",
    "coordinator_url",
    "examples",
    "field_defaults",
    "from_options",
    "missing_option",
    "model_option_arguments",
    "model_options",
    "model_options_of",
    "token_file_option",
]


def examples(*lines: str) -> str:
    """An epilog of one or two example command lines (tests/cli/test_help_tree.py parses
    them with the real parser, so an example cannot drift from the options)."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


@dataclass(frozen=True)
class ActionSpec:
    """A subcommand of a command (``ldpem keys generate``), as ``add_actions`` registers it:
    its name, the handler it runs, its one-line help, its description, its example lines
    and the function that adds its options to its parser."""

    name: str
    handler: Callable[[argparse.Namespace], int]
    help: str
    description: str
    example_lines: Sequence[str]
    options: Callable[[argparse.ArgumentParser], None]


def add_actions(
    parser: argparse.ArgumentParser, *actions: ActionSpec, required: bool = True
) -> None:
    """The subcommands ``actions`` of ``parser``: the one given is ``args.action`` and runs
    as ``args.handler`` (``required``: one must be given); each one's epilog is
    ``examples(*example_lines)``."""
    subparsers = parser.add_subparsers(dest="action", required=required, metavar="ACTION")
    for action in actions:
        sub: argparse.ArgumentParser = subparsers.add_parser(
            action.name,
            help=action.help,
            description=action.description,
            epilog=examples(*action.example_lines),
        )
        sub.set_defaults(handler=action.handler)
        action.options(sub)


def from_options(cls: type[_Described], args: argparse.Namespace, **given: Any) -> _Described:
    """A ``cls`` (a dataclass: a study, a planned problem) from a command's parsed options:
    the ``given`` fields, and every other field from the option of its name where the
    command has one (else the field's default). Options are named after the fields they
    set, so that one added to both reaches the object without a second list of names."""
    values = {
        field.name: getattr(args, field.name)
        for field in fields(cls)
        if field.name not in given and hasattr(args, field.name)
    }
    return cls(**values, **given)


def field_defaults(cls: type[DataclassInstance]) -> dict[str, Any]:
    """The default of each field of the dataclass ``cls`` that has one, by name: what the
    command's options that fill it default to, so that the class states them once."""
    return {field.name: field.default for field in fields(cls) if field.default is not MISSING}


#: The schemes ``--coordinator URL`` takes, checked while parsing: a URL without one would
#: otherwise reach the agent's retry loop and be retried for its whole ``--give-up``
#: (httpx's "UnsupportedProtocol"), where one line at once names the fix.
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


#: ``--ca-cert``'s help, for the operator's commands (the agent's names the CA it was sent).
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


def ca_cert_option(parser: argparse.ArgumentParser) -> None:
    """``--ca-cert PEM``: the CA that signed the coordinator's certificate (``CA_HELP``)."""
    parser.add_argument("--ca-cert", type=Path, metavar="PEM", help=CA_HELP)


def admin_token_file_option(parser: argparse.ArgumentParser) -> None:
    """``--admin-token-file FILE``, read when LDPEM_ADMIN_TOKEN is not set."""
    token_file_option(parser, "--admin-token-file", "admin token", "LDPEM_ADMIN_TOKEN")


def add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    """--workers and --scheduler: where the simulations run (``common.planning.executor``)."""
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes that run the simulations (default: this machine's cores; 1: serial)",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        metavar="tcp://HOST:8786",
        help="run the simulations on this existing Dask distributed cluster "
        "(pip install 'ldpem[dask]'); the numbers are the same as on this machine "
        "(default: none, this machine's cores)",
    )


def accounting_option(parser: argparse.ArgumentParser, *, default: str) -> None:
    """``--accounting``: how a planned or simulated study accounts its privacy budget."""
    # Imported here, not with this module: ``ldpem.cli`` imports it before ``main`` sets
    # the demo's BLAS thread count, and the accountant imports numpy and scipy.
    from ldpem.common.core.accounting import ACCOUNTING_MODES

    parser.add_argument(
        "--accounting",
        choices=ACCOUNTING_MODES,
        default=default,
        help="privacy accounting: exact (tight Gaussian DP) or the paper's",
    )


def missing_option(parser: argparse.ArgumentParser, *, default: float | None) -> None:
    """``--missing``: the share of covariates a planned or simulated rmc study leaves missing."""
    parser.add_argument(
        "--missing",
        type=float,
        default=default,
        help="rmc: share of missing covariates (default: 0.1 for rmc)",
    )


def model_options() -> dict[str, tuple[ModelOption, list[str]]]:
    """The options the registered models declare (``Model.options``) by name: one
    ``--NAME`` each, shown with the first declaration's help and range and the names of
    the models that declare it (each model checks its own range)."""
    # Imported here, not with this module (``accounting_option``: the models load numpy).
    from ldpem.common.models import get_model, model_names

    found: dict[str, tuple[ModelOption, list[str]]] = {}
    for name in model_names():
        for option in get_model(name).options:
            found.setdefault(option.name, (option, []))[1].append(name)
    return found


def model_option_arguments(parser: argparse.ArgumentParser, *, pinned: bool = False) -> None:
    """``--NAME`` for each declared model option (``model_options``), default None: the
    model's own default. ``pinned``: the agent's wording (the value it consents to; a run
    of another value is refused)."""
    for option, owners in model_options().values():
        also = "; a run of another value is refused" if pinned else ""
        parser.add_argument(
            f"--{option.name}",
            type=int,
            default=None,
            help=f"{', '.join(owners)}: {option.help}, {option.low} to {option.high} "
            f"(default: {option.default}{also})",
        )


def model_options_of(args: argparse.Namespace) -> tuple[tuple[str, int], ...]:
    """The (name, value) pairs of the model options given on the command line
    (``model_option_arguments``), in declaration order; the model checks them
    (``Model.configured``)."""
    return tuple(
        (name, getattr(args, name))
        for name in model_options()
        if getattr(args, name, None) is not None
    )
