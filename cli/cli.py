"""The ``ldpem`` command: one entry point, one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``handler`` to a function taking the parsed namespace and returning an exit code.
Errors from bad input (``UserError``, ``ValueError``, ``OSError``) end as one line on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from ldpem import __version__
from ldpem.common.errors import UserError

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _command_modules() -> list[ModuleType]:
    # Imported here so that `ldpem --help` does not pay for numpy/fastapi imports twice.
    from ldpem import (
        cmd_audit,
        cmd_client,
        cmd_coordinator,
        cmd_demo,
        cmd_experiment,
        cmd_generate,
        cmd_plan,
        cmd_run,
        cmd_simulate,
    )

    return [
        cmd_simulate,
        cmd_plan,
        cmd_experiment,
        cmd_coordinator,
        cmd_client,
        cmd_run,
        cmd_demo,
        cmd_audit,
        cmd_generate,
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ldpem",
        description="Federated gradient EM under local differential privacy.",
    )
    parser.add_argument("--version", action="version", version=f"ldpem {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _command_modules():
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except (UserError, ValueError, OSError) as error:
        print(f"ldpem {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ldpem {args.command}: interrupted", file=sys.stderr)
        return 130
    return code
