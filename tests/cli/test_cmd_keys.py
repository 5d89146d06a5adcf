"""``ldpem keys``: signing key files (mode 600, never overwritten), their roster lines, and
the roster file built from those lines; errors are one line and never show a key."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ldpem.cli import main
from ldpem.common.secagg.keys import (
    Roster,
    decode_public_key,
    encode_public_key,
    public_key_bytes,
    signing_key_from_pem,
)


def generate(tmp_path: Path, capsys: pytest.CaptureFixture[str], file: str, *extra: str) -> str:
    assert main(["keys", "generate", "--out", str(tmp_path / file), *extra]) == 0
    return capsys.readouterr().out.strip()


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_generate_writes_a_private_key_file_and_prints_its_roster_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = generate(tmp_path, capsys, "hospital-a.key")
    path = tmp_path / "hospital-a.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = signing_key_from_pem(path.read_text())
    assert line == f"hospital-a={encode_public_key(public_key_bytes(key))}"
    assert generate(tmp_path, capsys, "x.pem", "--name", "clinic-7").startswith("clinic-7=")


def test_generate_never_overwrites_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generate(tmp_path, capsys, "a.key")
    before = (tmp_path / "a.key").read_bytes()
    message = error_of(capsys, "keys", "generate", "--out", str(tmp_path / "a.key"))
    assert message.endswith("a.key: exists; refusing to overwrite a signing key")
    assert (tmp_path / "a.key").read_bytes() == before


def test_generate_refuses_a_name_that_is_not_a_holder_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    message = error_of(capsys, "keys", "generate", "--out", str(tmp_path / "k"), "--name", "a b")
    assert "--name: not a holder name" in message
    assert not (tmp_path / "k").exists()
    message = error_of(capsys, "keys", "generate", "--out", str(tmp_path / "-x.key"))
    assert "-x.key (use --name): not a holder name" in message


def test_show_prints_the_same_line_and_refuses_a_readable_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = generate(tmp_path, capsys, "hospital-a.key")
    path = tmp_path / "hospital-a.key"
    assert main(["keys", "show", "--key", str(path)]) == 0
    assert capsys.readouterr().out.strip() == line
    path.chmod(0o640)
    message = error_of(capsys, "keys", "show", "--key", str(path))
    assert "accessible to group or others (mode 640); chmod 600" in message


def test_show_refuses_a_file_that_is_not_a_signing_key_without_showing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "h.key"
    path.write_text("SECRET-LOOKING-CONTENT\n")
    path.chmod(0o600)
    message = error_of(capsys, "keys", "show", "--key", str(path))
    assert message.endswith("h.key: not an unencrypted PEM private key")
    assert "SECRET" not in message


def test_roster_builds_and_extends_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = generate(tmp_path, capsys, "hospital-a.key")
    b = generate(tmp_path, capsys, "clinic-b.key")
    c = generate(tmp_path, capsys, "registry-c.key")
    out = tmp_path / "roster.json"
    assert main(["keys", "roster", "--out", str(out), "--add", a, "--add", b]) == 0
    first = Roster.from_json(out.read_text())
    assert first.names == ("clinic-b", "hospital-a")
    assert capsys.readouterr().out.strip() == f"roster digest {first.digest}, 2 holders"
    assert main(["keys", "roster", "--out", str(out), "--add", c, "--add", a]) == 0
    roster = Roster.from_json(out.read_text())
    assert roster.names == ("clinic-b", "hospital-a", "registry-c")
    assert roster["registry-c"] == decode_public_key(c.partition("=")[2])
    assert capsys.readouterr().out.strip() == f"roster digest {roster.digest}, 3 holders"
    assert main(["keys", "show", "--roster", str(out)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown == [f"roster digest {roster.digest}, 3 holders", b, a, c]


def test_roster_refuses_another_key_for_a_known_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = generate(tmp_path, capsys, "hospital-a.key")
    other = generate(tmp_path, capsys, "other.key", "--name", "hospital-a")
    out = tmp_path / "roster.json"
    assert main(["keys", "roster", "--out", str(out), "--add", a]) == 0
    capsys.readouterr()
    before = out.read_text()
    message = error_of(capsys, "keys", "roster", "--out", str(out), "--add", other)
    assert message.endswith("roster: entry 'hospital-a' is already there with another key")
    assert out.read_text() == before


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("hospital-a", "--add number 1: expected NAME=PUBKEY"),
        ("a b=AAAA", "--add number 1: the name is not a holder name (1 to 64 letters, digits,"),
        ("hospital-a=AAAA", "--add hospital-a: the public key is not base64 text of 32 bytes"),
    ],
)
def test_roster_errors_name_the_entry_and_never_show_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    out = tmp_path / "roster.json"
    shown = error_of(capsys, "keys", "roster", "--out", str(out), "--add", line)
    assert message in shown
    assert "AAAA" not in shown
    assert not out.exists()


def test_a_roster_file_that_is_not_a_roster_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "roster.json"
    out.write_text('{"version": 1, "holders": {"a": "not a key"}}')
    message = error_of(capsys, "keys", "show", "--roster", str(out))
    assert message.endswith(
        "roster.json: roster: entry 'a': the public key is not base64 text of 32 bytes"
    )
    assert "not a key" not in message
