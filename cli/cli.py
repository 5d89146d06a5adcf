"""The ``ldpem`` command: one entry point, one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``handler`` to a function taking the parsed namespace and returning an exit code.
Errors from bad input (``UserError``, ``ValueError``, ``OSError``) end as one line on
stderr and exit status 2, never a traceback. Output into a pipe whose reader went away
(``ldpem keys show --roster roster.json | head -1``) ends quietly with the status of a
process ended by SIGPIPE, 141, as ``cat`` would.
"""

from __future__ import annotations

import argparse
import difflib
import os
import select
import sys
import textwrap
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NoReturn

from ldpem import __version__
from ldpem.common.core.errors import UserError
from ldpem.common.core.plugins import ensure_plugins
from ldpem.options import ActionSpec, add_actions, examples, from_options

__all__ = [
    "BLAS_THREAD_VARIABLES",
    "ONE_BLAS_THREAD_COMMANDS",
    "PIPE_CLOSED",
    "ActionSpec",
    "HelpFormatter",
    "add_actions",
    "build_parser",
    "examples",
    "from_options",
    "main",
    "one_blas_thread",
]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written (examples keep their lines), and every option's
    default after its help unless the help already states it: an operator should not have
    to read the code to learn what an omitted option means."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """A one-line paragraph is wrapped to the terminal; a paragraph of several lines
        (a usage sketch, the examples) is kept as written."""
        paragraphs = []
        for paragraph in text.strip("\n").split("\n\n"):
            if "\n" in paragraph:
                paragraphs.append("\n".join(indent + line for line in paragraph.splitlines()))
            else:
                paragraphs.append(
                    textwrap.fill(paragraph, width, initial_indent=indent, subsequent_indent=indent)
                )
        return "\n\n".join(paragraphs)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False  # a flag: off unless given (0, a real default, is shown)
            or default == argparse.SUPPRESS
            or not (action.option_strings or action.nargs in ("?", "*"))
        ):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block), exit status 2, and
    whose help (its subcommands' too: they are of this class) uses HelpFormatter.

    No option is taken by a prefix of its name (``allow_abbrev=False``): ``--eps 1`` is not
    ``--epsilon 1`` but an unknown option, and so is a prefix that a later option would make
    ambiguous. An unknown option is named before a missing required one (``--epsilom 1``
    is reported as unknown, with the option it is nearest to, not as "--epsilon is
    required"): it is most often that option misspelt."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        self._refuse_unknown_options(given)
        return super().parse_known_args(given, namespace)

    def _refuse_unknown_options(self, given: list[str]) -> None:
        """Exit naming the first option of ``given`` that this parser (or a subcommand's,
        which checks its own) does not know, before required options are checked: a first
        parse with none of them required finds what is left over."""
        required = [action for action in self._actions if action.required]
        for action in required:
            action.required = False
        try:
            _, extras = super().parse_known_args(list(given), None)
        finally:
            for action in required:
                action.required = True
        for extra in extras:
            if extra == "--":
                break
            if extra.startswith("-") and not self._negative_number_matcher.match(extra):
                name = extra.split("=", 1)[0]
                self.error(f"unknown option {name}{self._nearest_option(name)}")

    def _nearest_option(self, name: str) -> str:
        """`` (did you mean --x?)`` for the option ``name`` abbreviates or is nearest to."""
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        longer = [o for o in known if o.startswith(name) and len(name) > 2]
        if longer:
            return f" (options are not abbreviated: did you mean {' or '.join(longer)}?)"
        nearest = difflib.get_close_matches(name, known, n=1)
        return f" (did you mean {nearest[0]}?)" if nearest else ""


def _command_modules() -> list[ModuleType]:
    # Imported here so that `ldpem --help` does not pay for numpy/fastapi imports twice.
    from ldpem.commands import (
        audit,
        client,
        coordinator,
        demo,
        experiment,
        generate,
        keys,
        plan,
        run,
        simulate,
    )

    return [simulate, plan, experiment, coordinator, client, run, demo, audit, generate, keys]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ldpem",
        description="Federated gradient EM under local differential privacy.",
    )
    parser.add_argument("--version", action="version", version=f"ldpem {__version__}")
    # The entry point itself, for a command that runs ``ldpem`` commands in children it
    # forks (the demo): handed down, since no command module may import this one back.
    parser.set_defaults(main=main)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _command_modules():
        command = subparsers.add_parser(
            module.NAME,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.__doc__),
            epilog=examples(*module.EXAMPLES),
        )
        module.add_arguments(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command of ``argv``; its exit status."""
    try:
        try:
            code = _run(argv)
        except SystemExit:  # --help, --version, a usage error: flushed here, as below
            sys.stdout.flush()
            raise
        # Here, where a closed pipe is caught, not at the interpreter's exit.
        sys.stdout.flush()
    except BrokenPipeError:
        return _pipe_closed()
    return code


#: Commands that run several numpy processes on this machine at once, each of whose BLAS
#: gets one thread (``one_blas_thread``): ``ldpem demo`` (itself, its coordinator and its
#: agents).
ONE_BLAS_THREAD_COMMANDS = frozenset({"demo"})
#: What OpenBLAS, OpenMP builds and MKL read for their thread count, once, when numpy loads.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread(argv: Sequence[str]) -> None:
    """For a command of ``ONE_BLAS_THREAD_COMMANDS``: one BLAS thread in this process and
    the children it starts or forks, unless the user set a count (``BLAS_THREAD_VARIABLES``).

    The BLAS products here are matrix-vector products of n × d records (``y @ β``, a sum of
    rows): at the demo's d = 10 a second BLAS thread saves no time on them and spins on a
    core between calls (twice the CPU of one thread, measured: docs/PERFORMANCE.md, the
    demo's third pass), a core that the demo's other processes need. BLAS reads the count
    when numpy is first imported, here before the parser, whose command modules import
    it; a process that imported numpy already (a test calling ``main``) keeps its count."""
    if argv[:1] and argv[0] in ONE_BLAS_THREAD_COMMANDS and "numpy" not in sys.modules:
        for name in BLAS_THREAD_VARIABLES:
            os.environ.setdefault(name, "1")


def _run(argv: Sequence[str] | None) -> int:
    one_blas_thread(list(sys.argv[1:] if argv is None else argv))
    try:
        # Before the parser: registered models and mechanisms are its choices.
        ensure_plugins()
    except UserError as error:
        print(f"ldpem: error: {error}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except BrokenPipeError as error:
        if _reader_gone():
            raise  # not an error of the input: main ends quietly
        print(f"ldpem {args.command}: error: {error}", file=sys.stderr)  # another pipe
        return 2
    except (UserError, ValueError, OSError) as error:
        print(f"ldpem {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ldpem {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


#: The exit status of a process ended by SIGPIPE (128 + 13), what ``cat`` gives in a pipe
#: whose reader went away.
PIPE_CLOSED = 141


def _reader_gone() -> bool:
    """Whether standard output is a pipe whose reader went away (POLLERR on its end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor: not a pipe of ours
        return False


def _pipe_closed() -> int:
    """The reader of our output went away (``… | head -1``): nothing to say, and nothing
    more to write. Standard output now points to /dev/null, so that the interpreter's last
    flush at exit does not fail on the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a file descriptor (tests)
        pass
    finally:
        os.close(devnull)
    return PIPE_CLOSED
