"""ldpem keys: a holder's Ed25519 signing key and the consortium's roster of public keys.

    ldpem keys generate --out hospital-a.key [--name hospital-a]
    ldpem keys show --key hospital-a.key [--name hospital-a] | --roster roster.json
    ldpem keys roster --out roster.json --add NAME=PUBKEY [--add NAME=PUBKEY ...]

Secure aggregation (docs/SECAGG.md) needs every holder to sign its round keys, and every
other holder to check that signature against a roster of public keys agreed out of band:
otherwise a coordinator could play all the other holders itself. Each holder runs
"generate" once: it writes the private key (mode 600, never overwritten) and prints the
line NAME=PUBKEY for the roster. Whoever keeps the roster collects those lines through a
channel the coordinator does not control and runs "roster --add" for each; every holder
then gets the same roster.json and checks its digest ("show --roster") with the others.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ldpem.common.core.errors import UserError
from ldpem.options import ActionSpec, add_actions
from ldpem.secretfiles import read_secret, write_secret

if TYPE_CHECKING:
    from ldpem.common.secagg.keys import Roster

__all__ = ["EXAMPLES", "HELP", "NAME", "add_arguments"]

_WHAT = "signing key"
_NAME_HELP = "the holder's name in the roster (default: the key file's name without its suffix)"


NAME = "keys"
HELP = "holders' signing keys and the consortium's roster (secure aggregation)"
EXAMPLES = (
    "ldpem keys generate --out hospital-a.key",
    "ldpem keys roster --out roster.json --add hospital-a=PUBKEY --add hospital-b=PUBKEY",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_actions(
        parser,
        ActionSpec(
            "generate",
            run_generate,
            help="write a new signing key and print its roster line",
            description=(
                "Write a new Ed25519 signing key to --out (PEM, mode 600; an existing file is "
                "never overwritten) and print the line NAME=PUBKEY that goes into the "
                "consortium's roster. Keep the key file on the holder's machine only."
            ),
            example_lines=("ldpem keys generate --out hospital-a.key --name hospital-a",),
            options=_generate_options,
        ),
        ActionSpec(
            "show",
            run_show,
            help="print a key's roster line, or a roster's digest and entries",
            description=(
                "With --key, print the roster line NAME=PUBKEY of a signing key file (which "
                "must be mode 600). With --roster, print the roster's digest, which every "
                "holder should compare with the others', and then its entries."
            ),
            example_lines=(
                "ldpem keys show --key hospital-a.key",
                "ldpem keys show --roster roster.json",
            ),
            options=_show_options,
        ),
        ActionSpec(
            "roster",
            run_roster,
            help="create or extend the consortium's roster file",
            description=(
                "Add holders to the roster file --out, creating it if needed. Each --add takes "
                "a line NAME=PUBKEY as printed by ldpem keys generate. Adding an entry that is "
                "already there changes nothing; giving a known name another key is refused "
                "(edit the file on purpose: every holder will see a new digest)."
            ),
            example_lines=(
                "ldpem keys roster --out roster.json --add hospital-a=PUBKEY "
                "--add hospital-b=PUBKEY",
            ),
            options=_roster_options,
        ),
    )


def _out_option(parser: argparse.ArgumentParser, written: str) -> None:
    """The required ``--out FILE`` of a subcommand that writes ``written``."""
    parser.add_argument("--out", required=True, type=Path, metavar="FILE", help=written)


def _generate_options(generate: argparse.ArgumentParser) -> None:
    _out_option(generate, "the new private key file")
    generate.add_argument("--name", help=_NAME_HELP)


def _show_options(show: argparse.ArgumentParser) -> None:
    which = show.add_mutually_exclusive_group(required=True)
    for flag, what, other in (
        ("--key", "a signing key file, mode 600", "--roster"),
        ("--roster", "a roster file, JSON", "--key"),
    ):
        which.add_argument(
            flag, type=Path, metavar="FILE", help=f"{what} (default: none; give this or {other})"
        )
    show.add_argument("--name", help=_NAME_HELP + "; with --key only")


def _roster_options(roster: argparse.ArgumentParser) -> None:
    _out_option(roster, "the roster file to write")
    roster.add_argument(
        "--add",
        required=True,
        action="append",
        metavar="NAME=PUBKEY",
        help="a holder's roster line; repeat for several holders",
    )


def _name(given: str | None, key_file: Path) -> str:
    """The holder name: --name, else the key file's stem; UserError if it is not a name."""
    # Imported here: `ldpem --help` and every other command need no cryptography.
    from ldpem.common.secagg.keys import check_holder_name

    name = given if given is not None else key_file.stem
    try:
        return check_holder_name(name)
    except ValueError as error:
        origin = "--name" if given is not None else f"{key_file.name} (use --name)"
        raise UserError(f"{origin}: {error}") from None


def _holders(count: int) -> str:
    return f"{count} holder{'' if count == 1 else 's'}"


def _line(name: str, public: bytes) -> str:
    # Imported here: `ldpem --help` and every other command need no cryptography.
    from ldpem.common.secagg.keys import encode_public_key

    return f"{name}={encode_public_key(public)}"


def run_generate(args: argparse.Namespace) -> int:
    # Imported here: `ldpem --help` and every other command need no cryptography.
    from ldpem.common.secagg.keys import generate_signing_key, public_key_bytes, signing_key_to_pem

    name = _name(args.name, args.out)
    key = generate_signing_key()
    write_secret(args.out, signing_key_to_pem(key), _WHAT)
    print(_line(name, public_key_bytes(key)))
    print(
        f"wrote the signing key of {name} to {args.out} (mode 600); give the line above to "
        f"whoever keeps the consortium's roster (ldpem keys roster --add LINE)",
        file=sys.stderr,
    )
    return 0


def _read_roster(path: Path) -> Roster:
    # Imported here: `ldpem --help` and every other command need no cryptography.
    from ldpem.common.secagg.keys import Roster, RosterError

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise UserError(f"{path}: cannot read the roster ({reason})") from None
    try:
        return Roster.from_json(text)
    except RosterError as error:
        raise UserError(f"{path}: {error}") from None


def run_show(args: argparse.Namespace) -> int:
    # Imported here: `ldpem --help` and every other command need no cryptography.
    from ldpem.common.secagg.keys import public_key_bytes, signing_key_from_pem

    if args.roster is not None:
        if args.name is not None:
            raise UserError("--name goes with --key, not with --roster")
        roster = _read_roster(args.roster)
        print(f"roster digest {roster.digest}, {_holders(len(roster))}")
        for name in roster.names:
            print(_line(name, roster[name]))
        return 0
    name = _name(args.name, args.key)
    try:
        key = signing_key_from_pem(read_secret(args.key, _WHAT))
    except ValueError as error:
        raise UserError(f"{args.key}: {error}") from None
    print(_line(name, public_key_bytes(key)))
    return 0


def _parse_line(position: int, line: str) -> tuple[str, bytes]:
    """NAME and raw key of one --add; errors name the entry, never repeat the key."""
    # Imported here: `ldpem --help` and every other command need no cryptography.
    from ldpem.common.secagg.keys import check_holder_name, decode_public_key

    name, separator, text = line.partition("=")
    if not separator:
        raise UserError(f"--add number {position}: expected NAME=PUBKEY")
    try:
        check_holder_name(name)
    except ValueError as error:
        raise UserError(f"--add number {position}: the name is {error}") from None
    try:
        return name, decode_public_key(text)
    except ValueError as error:
        raise UserError(f"--add {name}: {error}") from None


def _write_atomically(path: Path, text: str) -> None:
    """Through a temporary file renamed into place: a holder never reads half a roster."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def run_roster(args: argparse.Namespace) -> int:
    # Imported here: `ldpem --help` and every other command need no cryptography.
    from ldpem.common.secagg.keys import Roster, RosterError

    roster = _read_roster(args.out) if args.out.exists() else Roster({})
    before = set(roster.names)
    for position, line in enumerate(args.add, start=1):
        name, public = _parse_line(position, line)
        try:
            roster = roster.with_holder(name, public)
        except RosterError as error:
            raise UserError(f"{args.out}: {error}") from None
    _write_atomically(args.out, roster.to_json())
    added = [n for n in roster.names if n not in before]
    print(f"roster digest {roster.digest}, {_holders(len(roster))}")
    print(
        f"wrote {args.out}: {_holders(len(roster))}, added "
        f"{', '.join(added) if added else 'none (all were there)'}",
        file=sys.stderr,
    )
    return 0
