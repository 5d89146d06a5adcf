"""Known answer for the bytes a dealer signs over a share (``dealing.py``): computed with
the code of cee17d4 (``dealing._signed_bytes`` and ``dealing.sign_share`` taking the label's
six fields one by one) and pinned here, so that a change in how the label is passed cannot
change what is signed. A share signed by an agent of one version must verify at an
aggregator of the other (Ed25519 signatures are deterministic, RFC 8032: the same key and
message give the same signature). The pinned value is 66 bytes, a share of the old field
GF(2^521 − 1); shares are now 32 bytes (GF(2^255 − 19)) and are signed with the same
binding, which the second test spells out part by part."""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpem.common.secagg import Roster, dealing, public_key_bytes
from ldpem.common.secagg.shamir import SHARE_BYTES

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
#: A 66-byte value, as the shares of cee17d4's field were.
VALUE = bytes(range(100, 166))
LABEL = dealing.ShareLabel(
    run_id="run-7",
    round_=3,
    dealer="h00",
    recipient="h01",
    kind="s",
    commitment=hashlib.sha256(b"commitment").digest(),
)
#: The binding of the domain tag "ldpem secagg dealt share v1", run, round, dealer,
#: recipient, kind, commitment and value, each part prefixed with its 4-byte length.
SIGNED_BYTES = (
    "0000001b6c6470656d20736563616767206465616c742073686172652076310000000572756e2d3700"
    "0000013300000003683030000000036830310000000173000000206a19f0fb4be54511524bcd5b0c98"
    "b38da1ee049a39735c39311e10336024436f000000426465666768696a6b6c6d6e6f70717273747576"
    "7778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5"
)
#: VALUE, then KEY's signature over SIGNED_BYTES.
SIGNED_SHARE = (
    "6465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c"
    "8d8e8f909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5653d85a13a0ef71d5473e51f5e30a79f"
    "75efd49d502753be5faa670d3a71f9e54f6b3c347adcda5559f528b7b79bf5be7f24d47533ac511d07"
    "348834b8f30f08"
)


def test_the_signed_bytes_of_a_share_are_those_of_cee17d4() -> None:
    assert LABEL.signed_bytes(VALUE).hex() == SIGNED_BYTES
    assert (VALUE + KEY.sign(LABEL.signed_bytes(VALUE))).hex() == SIGNED_SHARE


def _part(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def test_a_share_of_todays_field_is_signed_over_the_same_binding() -> None:
    value = bytes(range(200, 200 + SHARE_BYTES))
    parts = (b"ldpem secagg dealt share v1", b"run-7", b"3", b"h00", b"h01", b"s")
    expected = b"".join(map(_part, (*parts, LABEL.commitment, value)))
    assert LABEL.signed_bytes(VALUE) == b"".join(map(_part, (*parts, LABEL.commitment, VALUE)))
    assert LABEL.signed_bytes(value) == expected
    signed = dealing.sign_share(KEY, value, LABEL)
    assert signed == value + KEY.sign(expected)
    roster = Roster({"h00": public_key_bytes(KEY)})
    assert dealing.share_value(roster, signed, LABEL) == value
