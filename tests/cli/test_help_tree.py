"""Help that teaches: every subcommand of ``ldpem`` (the parser the CLI itself builds,
walked recursively) has a description, a help text on every option, every default shown,
no ``%%`` or RST markup in what it prints, and ends with one or two examples that parse."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

import pytest

from ldpem.cli import build_parser

#: Actions that take no value: nothing to default (a flag is off unless given).
VALUELESS = (
    argparse._HelpAction,
    argparse._VersionAction,
    argparse._StoreConstAction,  # store_true, store_false
    argparse._CountAction,
)


def walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases: once
                yield from walk(sub)


PARSERS = list(walk(build_parser()))
SUBCOMMANDS = PARSERS[1:]


def ids(parsers: list[argparse.ArgumentParser]) -> list[str]:
    return [p.prog for p in parsers]


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Its options and positionals, without -h, subcommand lists and hidden options (a
    refused --token is registered only to refuse it, and not offered in the help)."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
        and a.help != argparse.SUPPRESS
    ]


def rendered(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help of ``action`` as ``--help`` prints it (defaults and %-escapes expanded)."""
    return parser._get_formatter()._expand_help(action)


def test_the_walk_finds_every_subcommand() -> None:
    names = set(ids(SUBCOMMANDS))
    assert {
        "ldpem coordinator init",
        "ldpem run create",
        "ldpem run status",
        "ldpem run cancel",
    } <= names
    assert len(SUBCOMMANDS) >= 12


@pytest.mark.parametrize("parser", SUBCOMMANDS, ids=ids(SUBCOMMANDS))
def test_every_subcommand_says_what_it_does(parser: argparse.ArgumentParser) -> None:
    assert parser.description and len(parser.description.split()) >= 8, parser.prog


@pytest.mark.parametrize("parser", PARSERS, ids=ids(PARSERS))
def test_every_option_has_a_help_text(parser: argparse.ArgumentParser) -> None:
    missing = [a.dest for a in options(parser) if not (a.help and a.help.strip())]
    assert not missing, f"{parser.prog}: no help for {missing}"


@pytest.mark.parametrize("parser", PARSERS, ids=ids(PARSERS))
def test_every_default_is_shown(parser: argparse.ArgumentParser) -> None:
    """An option that may be left out says what it then is: ``(default: …)`` added by the
    formatter for a set default, or the help's own words ("default: the run created
    last") when the default is None and means something."""
    silent = [
        a.option_strings[0] if a.option_strings else a.dest
        for a in options(parser)
        if not isinstance(a, VALUELESS)
        and not a.required
        and (a.option_strings or a.nargs in ("?", "*"))
        and "default" not in rendered(parser, a)
    ]
    assert not silent, f"{parser.prog}: no default shown for {silent}"


@pytest.mark.parametrize("parser", PARSERS, ids=ids(PARSERS))
def test_help_has_no_escaped_percent_or_rst_markup(parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    assert "%%" not in text, parser.prog
    assert "``" not in text, parser.prog


def examples(parser: argparse.ArgumentParser) -> list[str]:
    epilog = parser.epilog or ""
    _, marker, tail = epilog.rpartition("examples:\n")
    assert marker == "examples:\n", f"{parser.prog}: the help does not end with examples"
    lines = tail.rstrip("\n").split("\n")
    assert all(line.startswith("  ") for line in lines), f"{parser.prog}: {lines}"
    return [line.strip() for line in lines]


@pytest.mark.parametrize("parser", SUBCOMMANDS, ids=ids(SUBCOMMANDS))
def test_every_subcommand_ends_with_one_or_two_examples_that_parse(
    parser: argparse.ArgumentParser,
) -> None:
    found = examples(parser)
    assert 1 <= len(found) <= 2, f"{parser.prog}: {len(found)} examples"
    assert parser.format_help().rstrip().endswith(found[-1])
    for example in found:
        words = shlex.split(example)
        while "=" in words[0]:  # LDPEM_ADMIN_TOKEN=... ldpem run create ...
            words = words[1:]
        assert " ".join(words).startswith(parser.prog), f"{parser.prog}: {example}"
        try:
            build_parser().parse_args(words[1:])  # a fresh parser: no state shared
        except SystemExit as stopped:
            pytest.fail(
                f"{parser.prog}: the example does not parse (exit {stopped.code}): {example}"
            )


@pytest.mark.parametrize("parser", PARSERS, ids=ids(PARSERS))
def test_no_parser_takes_a_prefix_of_an_option(parser: argparse.ArgumentParser) -> None:
    """Issue 43, finding 13: ``--eps 1`` must not be taken as ``--epsilon 1`` (nor
    ``--coord`` as ``--coordinator``) in any parser of the tree."""
    assert parser.allow_abbrev is False, parser.prog
