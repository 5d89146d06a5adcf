"""Malformed input fails when the arguments are parsed, with one line that names the fix
(issue 43, findings 3 and 13):

* a coordinator URL without ``https://`` or ``http://`` in every command that takes one
  (the agent retried it for its whole ``--give-up``: httpx's "UnsupportedProtocol");
* an option is never taken by a prefix of its name, and an unknown option is named (with
  the option it is nearest to) before a missing required one is reported.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from ldpem.cli import build_parser, main
from tests.cli.clikit import one_error_line
from tests.cli.test_help_tree import PARSERS

#: Every parser of the tree that takes the coordinator's URL.
URL_PARSERS = [p for p in PARSERS if any("--coordinator" in a.option_strings for a in p._actions)]


def words(parser: argparse.ArgumentParser) -> list[str]:
    """The command words of ``parser`` (``ldpem run status`` → ``["run", "status"]``)."""
    return parser.prog.split()[1:]


def test_every_command_that_takes_a_url_is_checked() -> None:
    found = {p.prog for p in URL_PARSERS}
    assert {"ldpem client", "ldpem run create", "ldpem run status", "ldpem run cancel"} <= found


@pytest.mark.parametrize("parser", URL_PARSERS, ids=[p.prog for p in URL_PARSERS])
@pytest.mark.parametrize("url", ["127.0.0.1:8443", "coord.example:8443", "coord.example"])
def test_a_url_without_a_scheme_is_refused_at_once_naming_the_fix(
    parser: argparse.ArgumentParser, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args([*words(parser), "--coordinator", url])
    assert stopped.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith(f"{parser.prog}: error: argument --coordinator: '{url}'"), line
    assert "add https:// or http://" in line, line


@pytest.mark.parametrize(
    ("url", "words_in_line"),
    [
        ("ftp://coord.example:8443", ["must be https:// or http://", "ftp://"]),
        ("https://", ["names no host"]),
        ("https://coord.example:99999", ["names no host and valid port"]),
    ],
)
def test_other_malformed_urls_are_refused(
    url: str, words_in_line: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "status", "--coordinator", url])
    line = one_error_line(capsys)
    assert all(w in line for w in words_in_line), line


@pytest.mark.parametrize(
    "url", ["https://coord.example:8443", "http://127.0.0.1:8765/", "https://[::1]:8443/ldpem"]
)
def test_well_formed_urls_pass(url: str) -> None:
    args = build_parser().parse_args(["run", "status", "--coordinator", url])
    assert args.coordinator == url


CLIENT = "client --coordinator http://127.0.0.1:1 --token-file t --model gmm --data d.csv"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            f"{CLIENT} --eps 1 --delta 1e-6",
            "unknown option --eps (options are not abbreviated: did you mean --epsilon?)",
        ),
        (
            f"{CLIENT} --epsilom 1 --delta 1e-6",
            "unknown option --epsilom (did you mean --epsilon?)",
        ),
        ("run status --coord http://127.0.0.1:1", "unknown option --coord "),
        ("coordinator init coord --self-sig h", "unknown option --self-sig "),
    ],
)
def test_an_unknown_option_is_named_not_taken_as_a_prefix(
    argv: str,
    named: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a command taken wrongly writes there, not in the checkout
    assert_refused(argv, capsys)
    line = capsys.readouterr().err.strip()
    assert named in line, line
    assert "required" not in line, line


def assert_refused(argv: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(shlex.split(argv))
    assert stopped.value.code == 2


def test_a_missing_required_option_is_still_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert_refused(f"{CLIENT} --delta 1e-6", capsys)
    assert "required: --epsilon" in capsys.readouterr().err
