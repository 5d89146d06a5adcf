"""What the subcommand modules share with the ``ldpem`` command (``ldpem.cli``): example
epilogs, subcommands of a command (``ActionSpec``, ``add_actions``), dataclasses built
from parsed options (``from_options``) and the options' defaults read from them
(``field_defaults``). A module of its own so that the commands import it and
``ldpem.cli``, which imports the commands, is imported by none of them."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    _Described = TypeVar("_Described", bound=DataclassInstance)

__all__ = ["ActionSpec", "add_actions", "examples", "field_defaults", "from_options"]


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
