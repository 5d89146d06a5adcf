"""Identity keys and the roster: parsing, canonical digest, errors that never show a key."""

from __future__ import annotations

import hashlib
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ldpem.common.secagg.keys import (
    HOLDER_NAME_PATTERN,
    Roster,
    RosterError,
    decode_public_key,
    encode_public_key,
    generate_signing_key,
    public_key_bytes,
    signing_key_from_pem,
    signing_key_to_pem,
)
from ldpem.common.wire import HOSPITAL_NAME_PATTERN

KEY_A = bytes(range(32))
KEY_B = bytes(range(32, 64))


def test_holder_names_are_the_coordinators_hospital_names() -> None:
    assert HOLDER_NAME_PATTERN == HOSPITAL_NAME_PATTERN


def test_the_digest_is_sha256_of_the_canonical_json() -> None:
    roster = Roster({"b-clinic": KEY_B, "a-hospital": KEY_A})
    canonical = (
        '{"holders":{"a-hospital":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",'
        '"b-clinic":"ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="},"version":1}'
    )
    assert roster.canonical_json() == canonical.encode()
    assert roster.digest == hashlib.sha256(canonical.encode()).hexdigest()


def test_the_digest_does_not_depend_on_layout_or_order() -> None:
    roster = Roster({"a-hospital": KEY_A, "b-clinic": KEY_B})
    text = json.dumps(
        {
            "holders": {
                "b-clinic": encode_public_key(KEY_B),
                "a-hospital": encode_public_key(KEY_A),
            },
            "version": 1,
        },
        indent=7,
    )
    parsed = Roster.from_json(text)
    assert parsed == roster
    assert parsed.digest == roster.digest == Roster.from_json(roster.to_json()).digest
    assert Roster({"a-hospital": KEY_A}).digest != roster.digest


def test_names_are_sorted_and_indexed_from_one() -> None:
    roster = Roster({"c": KEY_A, "a": KEY_B, "B": bytes(32)})
    assert roster.names == ("B", "a", "c")  # code-point order
    assert [roster.index(n) for n in roster.names] == [1, 2, 3]
    assert list(roster) == list(roster.names) and len(roster) == 3
    with pytest.raises(KeyError):
        roster.index("d")


def test_verify_takes_the_named_holders_key_only() -> None:
    key, other = generate_signing_key(), generate_signing_key()
    roster = Roster({"a": public_key_bytes(key), "b": public_key_bytes(other)})
    signature = key.sign(b"message")
    assert roster.verify("a", signature, b"message")
    assert not roster.verify("a", signature, b"another message")
    assert not roster.verify("b", signature, b"message")
    assert not roster.verify("not-there", signature, b"message")


def test_with_holder_adds_keeps_and_refuses_a_key_change() -> None:
    roster = Roster({"a": KEY_A})
    grown = roster.with_holder("b", KEY_B)
    assert grown.names == ("a", "b") and roster.names == ("a",)
    assert grown.with_holder("b", KEY_B) is grown
    with pytest.raises(RosterError, match="entry 'b' is already there with another key"):
        grown.with_holder("b", bytes(32))
    with pytest.raises(RosterError, match="entries 'a' and 'c' have the same public key"):
        grown.with_holder("c", KEY_A)


def test_a_signing_key_survives_its_pem_file() -> None:
    key = generate_signing_key()
    pem = signing_key_to_pem(key)
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    again = signing_key_from_pem(pem.decode().strip())
    assert public_key_bytes(again) == public_key_bytes(key)


def test_a_pem_that_is_not_an_ed25519_key_is_refused_without_its_content() -> None:
    ec_key = ec.generate_private_key(ec.SECP256R1())
    pem = ec_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(ValueError, match="not an Ed25519 key"):
        signing_key_from_pem(pem)
    with pytest.raises(ValueError, match="not an unencrypted PEM private key") as caught:
        signing_key_from_pem("garbage SECRETSTUFF")
    assert "SECRETSTUFF" not in str(caught.value)


def test_public_key_text_is_strict_base64_of_32_bytes() -> None:
    text = encode_public_key(KEY_A)
    assert decode_public_key(text) == KEY_A and len(text) == 44
    for bad in (text[:-1], text + "=", text.replace("A", "*"), encode_public_key(KEY_A)[:40], 7):
        with pytest.raises(ValueError, match="the public key is not base64 text of 32 bytes"):
            decode_public_key(bad)


def roster_text(holders: object) -> str:
    return json.dumps({"version": 1, "holders": holders})


SECRET_LOOKING = encode_public_key(KEY_B)
ENTRY_A = "roster: entry 'a'"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "roster: not JSON (line 1)"),
        ("[]", 'roster: expected an object with "version" and "holders"'),
        (json.dumps({"version": 2, "holders": {}}), "roster: version must be 1"),
        (json.dumps({"version": True, "holders": {}}), "roster: version must be 1"),
        (roster_text({}), 'roster: "holders" must be a non-empty object'),
        (roster_text({"a": SECRET_LOOKING[:-4]}), f"{ENTRY_A}: the public key is not base64"),
        (roster_text({"a": 5}), f"{ENTRY_A}: the public key is not base64"),
        (roster_text({"a": SECRET_LOOKING, SECRET_LOOKING: "x"}), "roster: entry 2: the name"),
        (
            f'{{"version": 1, "holders": {{"a": "{SECRET_LOOKING}", '
            f'"a": "{encode_public_key(KEY_A)}"}}}}',
            "roster: entry 'a' appears twice",
        ),
        (
            roster_text({"a": SECRET_LOOKING, "b": SECRET_LOOKING}),
            "roster: entries 'a' and 'b' have the same public key",
        ),
    ],
)
def test_roster_errors_name_the_entry_and_never_show_a_key(text: str, message: str) -> None:
    with pytest.raises(RosterError) as caught:
        Roster.from_json(text)
    shown = str(caught.value)
    assert shown.startswith(message)
    assert "\n" not in shown
    assert SECRET_LOOKING not in shown and SECRET_LOOKING[:20] not in shown
