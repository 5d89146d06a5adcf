"""What makes a wrong Shamir share detectable and its sender nameable (issue 29): the
dealer's signature on every share it deals, and its commitment to its self-mask seed.

**Signed shares.** The dealer of a secret (its self-mask seed b, kind ``"b"``, or its
masking key s_sk, kind ``"s"``) signs each share it deals with its Ed25519 roster key,
over a binding of a domain tag, the run, the round, the dealer, the recipient, the kind,
the dealer's seed commitment of this round and the share's value. A share travels with
its signature, SIGNED_SHARE_BYTES bytes: value then signature. The recipient checks the
signature when it opens the share (so that it cannot be blamed for a share it was not
dealt), and reveals it with the signature in its unmasking response; the aggregator
checks it against the dealer's roster key. A responder cannot present another value, nor
a share dealt to someone else, of another round, of the other kind, or of an earlier
dealing of the same round (an agent restarted mid-round deals again under a new
advertisement, hence a new commitment): the signature would not verify, and the
responder is named.

**Committed seeds.** A holder's signed key advertisement carries SHA-256 over a domain tag,
its run, round, name and b (``seed_commitment``); s_sk is committed by its public key s_pk.
The aggregator checks each reconstructed secret against its commitment; t_min shares that
all carry the dealer's valid signature yet give another secret were dealt wrong by the
dealer, who is then named.

**What is dealt.** Shares live in GF(p), p = 2^255 − 19 (``shamir.py``), so each secret
is dealt as a field element below p, 32 big-endian bytes:

* the seed b is drawn uniformly below p (``new_seed``: ``secrets.randbelow(p)``), so it
  carries log2(p) ≈ 255 bits of entropy (2^255 − 19 values, against 2^256 for 32 free
  bytes: one bit less). It keys the self-mask's PRG through HKDF-SHA-256 (``masks.py``),
  whose key is 256 bits: the PRG's security rests on the seed being unpredictable, and
  255 bits is far beyond any search. Its commitment hides it (SHA-256 preimage
  resistance) as before.
* the masking key s_sk is an X25519 private key: any 32 bytes, which X25519 clamps
  (RFC 7748 §5) to the scalar 2^254 + 8·k with k the 251 bits 3 … 253 of the
  little-endian bytes; the other five bits are fixed and carry no secret. k < 2^251 < p is
  what is dealt (``masking_key_secret``), and the rebuilt key 2^254 | k << 3
  (``masking_key_from_secret``) is the clamped key, whose public key is the original's: X25519
  keys have 251 bits of secret whichever way they are stored.

The signatures carry nothing about a share beyond what the share itself does.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpem.common.secagg._encoding import binding
from ldpem.common.secagg.keys import Roster
from ldpem.common.secagg.shamir import PRIME, SECRET_BYTES, SHARE_BYTES, Share, split_secret

__all__ = [
    "COMMITMENT_BYTES",
    "KINDS",
    "SIGNED_SHARE_BYTES",
    "Kind",
    "ShareLabel",
    "deal",
    "masking_key_from_secret",
    "masking_key_secret",
    "new_seed",
    "open_pair",
    "seed_commitment",
    "share_value",
    "sign_share",
]

#: The secret a share is of: the self-mask seed b, or the masking key s_sk.
Kind = Literal["b", "s"]
#: The order of the two shares in a dealt pair.
KINDS: tuple[Kind, Kind] = ("b", "s")
#: An Ed25519 signature.
_SIGNATURE_BYTES = 64
#: A share as it is dealt and revealed: its value, then its dealer's signature.
SIGNED_SHARE_BYTES = SHARE_BYTES + _SIGNATURE_BYTES
#: A seed commitment (SHA-256).
COMMITMENT_BYTES = 32
#: The free bits of a clamped X25519 scalar 2^254 + 8·k (RFC 7748 §5).
_KEY_BITS = 251
#: The length of an X25519 private key.
_KEY_BYTES = 32
_SHARE = "ldpem secagg dealt share v1"
_COMMITMENT = "ldpem secagg seed commitment v1"


def new_seed() -> bytes:
    """A fresh self-mask seed b: uniform below the field's prime, SECRET_BYTES big-endian
    bytes (from ``secrets``)."""
    return secrets.randbelow(PRIME).to_bytes(SECRET_BYTES, "big")


def masking_key_secret(private_key: bytes) -> bytes:
    """The secret dealt for the X25519 private key ``private_key`` (32 bytes): its clamped
    scalar's free bits k = (key >> 3) mod 2^251 (key read little-endian), as SECRET_BYTES
    big-endian bytes."""
    if len(private_key) != _KEY_BYTES:
        raise ValueError(f"an X25519 private key is {_KEY_BYTES} bytes, got {len(private_key)}")
    k = (int.from_bytes(private_key, "little") >> 3) % (1 << _KEY_BITS)
    return k.to_bytes(SECRET_BYTES, "big")


def masking_key_from_secret(secret: bytes) -> bytes:
    """The clamped X25519 private key 2^254 | k << 3 (32 bytes, little-endian) of the
    dealt secret k; ValueError unless ``secret`` is SECRET_BYTES bytes holding k < 2^251."""
    k = int.from_bytes(secret, "big")
    if len(secret) != SECRET_BYTES or k >> _KEY_BITS:
        raise ValueError(f"a dealt masking key is {_KEY_BITS} bits in {SECRET_BYTES} bytes")
    return ((1 << 254) | k << 3).to_bytes(_KEY_BYTES, "little")


@dataclass(frozen=True, kw_only=True)
class ShareLabel:
    """What a dealt share is: of ``dealer``'s secret of ``kind``, dealt to ``recipient`` in
    round ``round_`` of run ``run_id``, in the dealing of ``dealer``'s seed ``commitment``
    (that of its advertisement of this round)."""

    run_id: str
    round_: int
    dealer: str
    recipient: str
    kind: Kind
    commitment: bytes

    def signed_bytes(self, value: bytes) -> bytes:
        """What the dealer signs: the binding of a domain tag, the label and ``value``."""
        return binding(
            _SHARE,
            self.run_id,
            self.round_,
            self.dealer,
            self.recipient,
            self.kind,
            self.commitment,
            value,
        )


def sign_share(key: Ed25519PrivateKey, value: bytes, label: ShareLabel) -> bytes:
    """The share ``value`` (SHARE_BYTES) followed by its dealer's signature over it, bound
    to its ``label``."""
    if len(value) != SHARE_BYTES:
        raise ValueError(f"a share's value is {SHARE_BYTES} bytes, got {len(value)}")
    return value + key.sign(label.signed_bytes(value))


def share_value(roster: Roster, signed: bytes, label: ShareLabel) -> bytes | None:
    """The value of the signed share ``signed`` if the roster key of ``label.dealer`` signed
    it with this ``label`` (run, round, recipient, kind and dealing); None otherwise (not
    SIGNED_SHARE_BYTES long, a dealer off the roster, an altered value or signature, a
    share dealt for another)."""
    if len(signed) != SIGNED_SHARE_BYTES or label.dealer not in roster:
        return None
    value, signature = signed[:SHARE_BYTES], signed[SHARE_BYTES:]
    return value if roster.verify(label.dealer, signature, label.signed_bytes(value)) else None


def seed_commitment(seed: bytes, *, run_id: str, round_: int, holder: str) -> bytes:
    """SHA-256 over a domain tag, the run, the round, ``holder`` and its seed b."""
    return hashlib.sha256(binding(_COMMITMENT, run_id, round_, holder, seed)).digest()


def deal(
    key: Ed25519PrivateKey,
    seed: bytes,
    masking_key: bytes,
    *,
    threshold: int,
    xs: dict[str, int],
    run_id: str,
    round_: int,
    dealer: str,
) -> dict[str, bytes]:
    """``dealer``'s fresh ``threshold``-of-n Shamir shares of its seed b (below the prime,
    ``new_seed``) and its masking key s_sk (the raw X25519 private key, dealt as
    ``masking_key_secret``) at the x-coordinates ``xs`` (name → roster position): for
    each name, its signed share of b then of s_sk (2 · SIGNED_SHARE_BYTES), what is
    sealed to it."""
    commitment = seed_commitment(seed, run_id=run_id, round_=round_, holder=dealer)
    names = list(xs)
    points = [xs[n] for n in names]
    seeds = split_secret(seed, threshold, points)
    keys = split_secret(masking_key_secret(masking_key), threshold, points)
    out = {}
    for name, *pair in zip(names, seeds, keys, strict=True):
        out[name] = b"".join(
            sign_share(
                key,
                share.y_bytes(),
                ShareLabel(
                    run_id=run_id,
                    round_=round_,
                    dealer=dealer,
                    recipient=name,
                    kind=kind,
                    commitment=commitment,
                ),
            )
            for share, kind in zip(pair, KINDS, strict=True)
        )
    return out


def open_pair(
    roster: Roster,
    plaintext: bytes,
    *,
    run_id: str,
    round_: int,
    dealer: str,
    recipient: str,
    commitment: bytes,
) -> tuple[bytes, bytes]:
    """The signed shares of b and of s_sk in a plaintext ``deal`` made for ``recipient``;
    ValueError unless both are field elements signed by ``dealer`` for it in this round's
    dealing (``commitment``: the seed commitment of ``dealer``'s advertisement)."""
    if len(plaintext) != 2 * SIGNED_SHARE_BYTES:
        raise ValueError(f"a pair of signed shares is {2 * SIGNED_SHARE_BYTES} bytes")
    pair = plaintext[:SIGNED_SHARE_BYTES], plaintext[SIGNED_SHARE_BYTES:]
    for signed, kind in zip(pair, KINDS, strict=True):
        label = ShareLabel(
            run_id=run_id,
            round_=round_,
            dealer=dealer,
            recipient=recipient,
            kind=kind,
            commitment=commitment,
        )
        value = share_value(roster, signed, label)
        if value is None:
            raise ValueError(f"the share of {kind} is not signed by {dealer!r} for this round")
        Share.from_bytes(roster.index(recipient), value)  # ShamirError: not a field element
    return pair
