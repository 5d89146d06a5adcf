"""Known answer for the bytes a dealer signs over a share (``dealing.py``): computed with
the code of cee17d4 (``dealing._signed_bytes`` and ``dealing.sign_share`` taking the label's
six fields one by one) and pinned here, so that a change in how the label is passed cannot
change what is signed. A share signed by an agent of one version must verify at an
aggregator of the other (Ed25519 signatures are deterministic, RFC 8032: the same key and
message give the same signature)."""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpem.common.secagg import Roster, dealing, public_key_bytes
from ldpem.common.secagg.shamir import SHARE_BYTES

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
VALUE = bytes(range(100, 100 + SHARE_BYTES))
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


def test_a_share_is_signed_and_opened_as_by_cee17d4() -> None:
    signed = dealing.sign_share(KEY, VALUE, LABEL)
    assert signed.hex() == SIGNED_SHARE
    roster = Roster({"h00": public_key_bytes(KEY)})
    assert dealing.share_value(roster, bytes.fromhex(SIGNED_SHARE), LABEL) == VALUE
