"""Secure aggregation: one holder's CPU time and bytes per round, for K holders.

    python benchmarks/bench_secagg.py [--holders 10 100 1000] [--fractions 0.51 0.9]
                                      [--dimension 11] [--bits 48] [--dropped 0.1]
                                      [--repeats 3] [--json] [--quick]

For each K and each t_min = max(⌊K/2⌋ + 1, ⌈fraction·K⌉), one holder (ldpem.common.secagg
.Holder) runs the four steps of a round for real: advertise, share keys (t_min-of-K shares
of two secrets, K − 1 sealed ciphertexts), masked input (K − 1 ciphertexts opened, K − 1
pairwise masks) and unmasking, with ⌈dropped·K⌉ holders dropped. Its K − 1 peers are made
in-process, only as far as the measured holder can see them: real signed advertisements
and ciphertexts sealed to it with their real encryption keys, holding random field
elements as shares (the holder cannot tell them from real shares and does the same work);
so K = 1000 costs seconds, not the 1000 holders' minutes.

cpu_s is time.process_time() of the holder's four calls only (median of --repeats);
sent/received are the bytes of the messages' JSON (to_dict, compact), as the
coordinator's HTTP API will carry them, without HTTP overhead. No timing is asserted
anywhere; the issue's goal is under 1 s of CPU per holder and round at K = 1000.
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from _fedkit import machine
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.secagg import (
    Holder,
    ParticipantList,
    Roster,
    RoundParameters,
    ShareBundle,
    UnmaskRequest,
    generate_signing_key,
    public_key_bytes,
)
from ldpem.common.secagg.channel import channel_secret, seal
from ldpem.common.secagg.messages import KeyAdvertisement, sign_advertisement
from ldpem.common.secagg.shamir import PRIME, SHARE_BYTES

RUN = "bench"
ME = "h0000"
T = TypeVar("T")


def _x25519() -> tuple[X25519PrivateKey, bytes]:
    key = X25519PrivateKey.from_private_bytes(secrets.token_bytes(32))
    return key, key.public_key().public_bytes_raw()


def _size(message: Any) -> int:
    return len(json.dumps(message.to_dict(), separators=(",", ":")))


def _timed(call: Callable[[], T]) -> tuple[T, float]:
    start = time.process_time()
    result = call()
    return result, time.process_time() - start


def holder_round_cost(
    k: int, t_min: int, *, dimension: int = 11, bits: int = 48, dropped: int = 0
) -> dict[str, Any]:
    """One holder's CPU seconds (per step and in all) and bytes sent and received in one
    round among ``k`` holders, ``dropped`` of which drop before their masked input."""
    names = [f"h{i:04d}" for i in range(k)]  # ME is the first
    signing = {n: generate_signing_key() for n in names}
    roster = Roster({n: public_key_bytes(key) for n, key in signing.items()})
    parameters = RoundParameters(RUN, 0, k, t_min, bits)
    holder = Holder(ME, roster, signing[ME], parameters, min_honest=1)

    peers: dict[str, X25519PrivateKey] = {}  # encryption keys of the other holders
    adverts: list[KeyAdvertisement] = []
    for name in names[1:]:
        (encryption, c_pk), (_, s_pk) = _x25519(), _x25519()
        peers[name] = encryption
        adverts.append(
            sign_advertisement(signing[name], name, parameters, roster.digest, c_pk, s_pk)
        )

    own, t_advertise = _timed(holder.advertise)
    participants = ParticipantList(RUN, 0, (own, *adverts))
    shares, t_share = _timed(lambda: holder.share_keys(participants))

    def sealed_to_me(name: str) -> bytes:
        plaintext = b"".join(secrets.randbelow(PRIME).to_bytes(SHARE_BYTES, "big") for _ in "bs")
        secret = channel_secret(peers[name], own.encryption_key)
        return seal(secret, plaintext, run_id=RUN, round_=0, sender=name, recipient=ME)

    bundle = ShareBundle(ME, RUN, 0, {name: sealed_to_me(name) for name in names[1:]})
    values = [secrets.randbelow(2**bits) for _ in range(dimension)]
    masked, t_mask = _timed(lambda: holder.masked_input(bundle, values))
    gone = names[k - dropped :]
    request = UnmaskRequest(RUN, 0, tuple(names[: k - dropped]), tuple(gone))
    response, t_unmask = _timed(lambda: holder.unmask(request))
    return {
        "holders": k,
        "t_min": t_min,
        "dropped": dropped,
        "cpu_s": {
            "advertise": t_advertise,
            "share_keys": t_share,
            "masked_input": t_mask,
            "unmask": t_unmask,
            "total": t_advertise + t_share + t_mask + t_unmask,
        },
        "sent_bytes": sum(_size(m) for m in (own, shares, masked, response)),
        "received_bytes": sum(_size(m) for m in (participants, bundle, request)),
    }


def row(k: int, fraction: float, args: argparse.Namespace) -> dict[str, Any]:
    t_min = max(k // 2 + 1, math.ceil(fraction * k))
    dropped = min(math.ceil(args.dropped * k), k - t_min)
    runs = [
        holder_round_cost(k, t_min, dimension=args.dimension, bits=args.bits, dropped=dropped)
        for _ in range(args.repeats)
    ]
    out = runs[0]
    out["cpu_s"] = {
        step: statistics.median(r["cpu_s"][step] for r in runs) for step in out["cpu_s"]
    }
    out["repeats"] = args.repeats
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--holders", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.51, 0.9])
    parser.add_argument("--dimension", type=int, default=11, help="values per masked input")
    parser.add_argument("--bits", type=int, default=48, help="residues modulo 2^bits")
    parser.add_argument("--dropped", type=float, default=0.1, help="fraction dropped")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke)")
    args = parser.parse_args(argv)
    if args.quick:
        args.holders, args.fractions, args.repeats = [10, 30], [0.51], 1

    rows = []
    for k in args.holders:
        for fraction in args.fractions:
            result = row(k, fraction, args)
            rows.append(result)
            if not args.json:
                cpu = result["cpu_s"]
                print(
                    f"K={k:>5} t_min={result['t_min']:>4} dropped={result['dropped']:>3}  "
                    f"cpu {cpu['total']:6.3f}s (share {cpu['share_keys']:.3f}, mask "
                    f"{cpu['masked_input']:.3f}, unmask {cpu['unmask']:.3f})  "
                    f"sent {result['sent_bytes'] / 1024:8.1f} KiB  "
                    f"received {result['received_bytes'] / 1024:8.1f} KiB",
                    flush=True,
                )
    if args.json:
        info = {
            "machine": machine(),
            "dimension": args.dimension,
            "bits": args.bits,
            "dropped_fraction": args.dropped,
            "rows": rows,
        }
        json.dump(info, sys.stdout, indent=2)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
