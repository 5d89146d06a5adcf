"""Secure aggregation: one holder's CPU time and bytes per round, for K holders; or the
wall time of a round with K agent processes on this machine (--processes K).

    python benchmarks/bench_secagg.py [--holders 10 100 1000] [--fractions 0.51 0.9]
                                      [--dimension 11] [--bits 48] [--dropped 0.1]
                                      [--repeats 3] [--graph 10000 ...] [--json] [--quick]
    python benchmarks/bench_secagg.py --processes 50 [--rounds 5] [--records 100]
                                      [--dimension 11] [--json] [--quick]

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

--graph K … (``graph_row``): one holder under SecAgg+ (docs/SECAGG_GRAPH.md) at the default
parameters for K (``graph_parameters``: k neighbours, threshold t_k): the same four library
calls with a roster of K holders of which only the holder and its k neighbours take part
(RoundParameters with K = k + 1 and t_min = t_k, ⌈dropped·k⌉ of them dropped), which is
what a holder computes and sends under the graph with today's messages. The roster's
lookups are built before the timing (once per agent process; ``roster_warm_up_cpu_s``).
What the graph's integration adds and the library does not do yet is ``extras``: building
the graph and the committee (measured), verifying τ committee signatures and k signed
masked-with sets (measured: that many Ed25519 verifications), and their bytes (computed:
the survivor set as K bits, τ signatures, k attestations, in base64 JSON). Not measured:
the coordinator's side, and any HTTP overhead.

--processes K (``processes_round``): a real ``ldpem coordinator`` and K ``ldpem client``
processes on 127.0.0.1 (signing keys, a roster, --min-honest), each with --records GMM
records, run a secagg run of --rounds rounds (t_min = ⌊K/2⌋ + 1, nobody dropped). Round
wall times are the coordinator's (opened_at → closed_at, ``GET /v1/runs/{id}/rounds``);
round 0 includes the agents' start-up, so the figure is the median of rounds 1 …; the
coordinator's CPU seconds (/proc) are counted from the run's creation to its end, and from
the opening of round 1 (per later round), and the agents' from their launch to their exit
(start-up included, all K together).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from _fedkit import (
    Processes,
    cpu_seconds,
    create_run,
    machine,
    rounds,
    start_coordinator,
    summary,
    wait_finished,
    write_hospital_files,
)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldpem.common.models import get_model
from ldpem.common.secagg import (
    ConsistencyCheck,
    Holder,
    ParticipantList,
    Roster,
    RoundParameters,
    ShareBundle,
    UnmaskRequest,
    generate_signing_key,
    public_key_bytes,
    signing_key_to_pem,
)
from ldpem.common.secagg.channel import channel_secret, seal
from ldpem.common.secagg.consistency import sign_survivors
from ldpem.common.secagg.dealing import KINDS, ShareLabel, sign_share
from ldpem.common.secagg.graph import NeighbourGraph, committee, graph_seed
from ldpem.common.secagg.graph_parameters import GraphParameters, graph_parameters
from ldpem.common.secagg.messages import KeyAdvertisement, sign_advertisement
from ldpem.common.secagg.shamir import PRIME, SHARE_BYTES
from ldpem.processes import start_agent

RUN = "bench"
ME = "h000000"
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
    k: int,
    t_min: int,
    *,
    dimension: int = 11,
    bits: int = 48,
    dropped: int = 0,
    roster_size: int | None = None,
) -> dict[str, Any]:
    """One holder's CPU seconds (per step and in all) and bytes sent and received in one
    round among ``k`` holders, ``dropped`` of which drop before their masked input. With
    ``roster_size`` > k the roster holds that many holders and only ``k`` (the holder and
    its k − 1 graph neighbours) take part: a holder's round under SecAgg+."""
    size = k if roster_size is None else roster_size
    names = [f"h{i:06d}" for i in range(size)][:k]  # ME is the first
    signing = {n: generate_signing_key() for n in names}
    idle = [public_key_bytes(generate_signing_key()) for _ in range(size - k)]
    roster = Roster(
        {
            **{n: public_key_bytes(key) for n, key in signing.items()},
            **{f"h{i:06d}": key for i, key in enumerate(idle, start=k)},
        }
    )
    parameters = RoundParameters(RUN, 0, k, t_min, bits)
    holder = Holder(ME, roster, signing[ME], parameters, min_honest=1)
    # The roster's lookups (positions, decoded public keys) are built on first use, once
    # per agent process, not per round: under the graph they are taken out of the timing.
    warm_up = 0.0
    if size > k:
        _, warm_up = _timed(lambda: (roster.index(ME), roster.verify(ME, bytes(64), b"")))

    peers: dict[str, X25519PrivateKey] = {}  # encryption keys of the other holders
    adverts: list[KeyAdvertisement] = []
    commitments = {n: secrets.token_bytes(32) for n in names}  # the holder does not open them
    for name in names[1:]:
        (encryption, c_pk), (_, s_pk) = _x25519(), _x25519()
        peers[name] = encryption
        adverts.append(
            sign_advertisement(
                signing[name],
                name,
                parameters,
                roster.digest,
                c_pk,
                s_pk,
                seed_commitment=commitments[name],
            )
        )

    own, t_advertise = _timed(holder.advertise)
    participants = ParticipantList(RUN, 0, (own, *adverts))
    shares, t_share = _timed(lambda: holder.share_keys(participants))

    def sealed_to_me(name: str) -> bytes:
        plaintext = b"".join(
            sign_share(
                signing[name],
                secrets.randbelow(PRIME).to_bytes(SHARE_BYTES, "big"),
                ShareLabel(
                    run_id=RUN,
                    round_=0,
                    dealer=name,
                    recipient=ME,
                    kind=kind,
                    commitment=commitments[name],
                ),
            )
            for kind in KINDS
        )
        secret = channel_secret(peers[name], own.encryption_key)
        return seal(secret, plaintext, run_id=RUN, round_=0, sender=name, recipient=ME)

    bundle = ShareBundle(ME, RUN, 0, {name: sealed_to_me(name) for name in names[1:]})
    values = [secrets.randbelow(2**bits) for _ in range(dimension)]
    masked, t_mask = _timed(lambda: holder.masked_input(bundle, values))
    gone = names[k - dropped :]
    survivors = tuple(names[: k - dropped])
    check = ConsistencyCheck(RUN, 0, survivors)
    signature, t_sign = _timed(lambda: holder.sign_survivors(check))
    others = [sign_survivors(signing[n], n, RUN, 0, survivors) for n in survivors[1:t_min]]
    request = UnmaskRequest(RUN, 0, survivors, tuple(gone), (signature, *others))
    response, t_unmask = _timed(lambda: holder.unmask(request))
    return {
        "holders": k,
        "roster": size,
        "roster_warm_up_cpu_s": warm_up,
        "t_min": t_min,
        "dropped": dropped,
        "cpu_s": {
            "advertise": t_advertise,
            "share_keys": t_share,
            "masked_input": t_mask,
            "sign_survivors": t_sign,
            "unmask": t_unmask,
            "total": t_advertise + t_share + t_mask + t_sign + t_unmask,
        },
        "sent_bytes": sum(_size(m) for m in (own, shares, masked, signature, response)),
        "received_bytes": sum(_size(m) for m in (participants, bundle, check, request)),
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
    out["mode"] = "full mesh"
    return out


def graph_extras(holders: int, p: GraphParameters, repeats: int) -> dict[str, Any]:
    """What the SecAgg+ integration adds to a holder's round beyond today's four library
    calls (docs/SECAGG_GRAPH.md, "Integration"), measured where it is computation and
    computed where it is bytes: building the graph and the committee from the seed (K
    names); verifying τ committee signatures over the survivor set S and the k signed
    masked-with sets of its neighbours (Ed25519); receiving S as a bitmap over the roster
    (K bits), the τ signatures and the k attestations (a k-bit bitmap and a signature
    each), and sending its own attestation (and, if on the committee, its signature)."""
    names = [f"h{i:06d}" for i in range(holders)]
    key = generate_signing_key()
    public = Ed25519PublicKey.from_public_bytes(public_key_bytes(key))
    message = secrets.token_bytes(96)
    signature = key.sign(message)
    seed = graph_seed(RUN, 0, "ab" * 32)
    cpu_graph, cpu_verify = [], []
    for _ in range(repeats):
        _, t_graph = _timed(
            lambda: (
                NeighbourGraph(names, p.k, seed).neighbours(ME),
                committee(names, p.committee_size, seed),
            )
        )
        _, t_verify = _timed(
            lambda: [public.verify(signature, message) for _ in range(p.committee_threshold + p.k)]
        )
        cpu_graph.append(t_graph)
        cpu_verify.append(t_verify)

    def b64(n: int) -> int:
        return 4 * math.ceil(n / 3)

    signed_entry = len('{"holder":"h000000","signature":""},') + b64(64)
    attestation = signed_entry + len('"masked_with":"",') + b64(math.ceil(p.k / 8))
    return {
        "cpu_s": {
            "graph_and_committee": statistics.median(cpu_graph),
            "signatures": statistics.median(cpu_verify),
        },
        "received_bytes": b64(math.ceil(holders / 8))
        + p.committee_threshold * signed_entry
        + p.k * attestation,
        "sent_bytes": attestation + signed_entry,
    }


def graph_row(holders: int, args: argparse.Namespace) -> dict[str, Any]:
    """One holder's round under SecAgg+ at the default parameters for K = ``holders``: the
    library with a roster of K holders of which only the holder's k neighbours take part
    (t_k-of-(k + 1) shares), plus ``graph_extras``."""
    p = graph_parameters(holders)
    dropped = min(math.ceil(args.dropped * p.k), p.k + 1 - p.threshold)
    runs = [
        holder_round_cost(
            p.k + 1,
            p.threshold,
            dimension=args.dimension,
            bits=args.bits,
            dropped=dropped,
            roster_size=holders,
        )
        for _ in range(args.repeats)
    ]
    out = runs[0]
    out["cpu_s"] = {
        step: statistics.median(r["cpu_s"][step] for r in runs) for step in out["cpu_s"]
    }
    extras = graph_extras(holders, p, args.repeats)
    out.update(
        mode="graph",
        holders=holders,
        neighbours=p.k,
        committee=[p.committee_size, p.committee_threshold],
        honest_shares=p.honest_shares,
        repeats=args.repeats,
        extras=extras,
        total_cpu_s=out["cpu_s"]["total"] + sum(extras["cpu_s"].values()),
        total_sent_bytes=out["sent_bytes"] + extras["sent_bytes"],
        total_received_bytes=out["received_bytes"] + extras["received_bytes"],
    )
    return out


def processes_round(
    k: int, *, rounds_: int, records: int, dimension: int, workdir: Path
) -> dict[str, Any]:
    """A secagg run of ``rounds_`` rounds with a coordinator and ``k`` agent processes."""
    data, _ = get_model("gmm").generate(
        k * records, dimension, snr=3.0, sigma=1.0, rng=np.random.default_rng(1)
    )
    hospitals = write_hospital_files(workdir, data.x, [records] * k)
    keys = {name: generate_signing_key() for name, _, _ in hospitals}
    roster = Roster({name: public_key_bytes(key) for name, key in keys.items()})
    (workdir / "roster.json").write_text(roster.to_json())
    for name, key in keys.items():
        path = workdir / f"{name}.key"
        path.write_bytes(signing_key_to_pem(key))
        os.chmod(path, 0o600)
    tokens = {name: f"bench-{name}-" + secrets.token_urlsafe(16) for name, _, _ in hospitals}
    request = {
        "model": "gmm",
        "d": dimension,
        "sigma": 1.0,
        "rounds": rounds_,
        "epsilon": 1.0,
        "delta": 1e-5,
        "seed": 1,
        "forecast": False,
        "mechanism": "secagg",
        # ⌊K/2⌋ + 1, as the figures in docs/SECAGG.md were taken (the run default is now
        # K − ⌊K/10⌋; nobody drops here, so the round's work is the same).
        "t_min": k // 2 + 1,
        "round_deadline": 600.0,  # a slow machine closes steps by quorum, not deadline
        "roster": json.loads(roster.to_json()),
        "hospitals": [{"name": n, "records": m, "token": tokens[n]} for n, _, m in hospitals],
    }
    with Processes(workdir / "logs") as processes:
        coordinator, url = start_coordinator(processes, workdir / "coordinator.sqlite")
        created = create_run(url, request)
        cpu_before = cpu_seconds(coordinator.pid)
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        agents = [
            start_agent(
                processes,
                name,
                url=url,
                token=tokens[name],
                model="gmm",
                data=path,
                state=path.parent / "state",
                args=[
                    *("--epsilon", "1", "--delta", "1e-5", "--seed", str(i + 1)),
                    *("--signing-key", str(workdir / f"{name}.key")),
                    *("--roster", str(workdir / "roster.json"), "--min-honest", "2"),
                    *("--wait", "5", "--give-up", "600"),
                ],
            )
            for i, (name, path, _) in enumerate(hospitals)
        ]
        # Round 1 opens once the agents are up: the coordinator's CPU of the later rounds.
        info = wait_finished(url, created["run_id"], processes, timeout=3600.0, until=1)
        cpu_round1 = cpu_seconds(coordinator.pid)
        info = wait_finished(url, created["run_id"], processes, timeout=3600.0)
        run_wall = time.perf_counter() - started
        coordinator_cpu = cpu_seconds(coordinator.pid) - cpu_before
        later_cpu = cpu_seconds(coordinator.pid) - cpu_round1
        for agent in agents:
            agent.wait(120)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        table = rounds(url, created["run_id"])
    agents_cpu = (children.ru_utime + children.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    walls = [r["closed_at"] - r["opened_at"] for r in table]
    return {
        "processes": k,
        "t_min": created["params"]["t_min"],
        "modulus_bits": created["params"]["modulus_bits"],
        "records_per_agent": records,
        "dimension": dimension,
        "rounds": rounds_,
        "status": info["status"],
        "round0_s": walls[0],
        "round_s": summary(walls[1:]),
        "run_wall_s": run_wall,
        "coordinator_cpu_s": coordinator_cpu,
        "coordinator_cpu_later_rounds_s": later_cpu,
        "coordinator_cpu_per_later_round_s": later_cpu / (rounds_ - 1),
        "agents_cpu_s": agents_cpu,
    }


def main_processes(args: argparse.Namespace) -> int:
    before = machine()
    with tempfile.TemporaryDirectory(prefix="bench-secagg-") as directory:
        result = processes_round(
            args.processes,
            rounds_=args.rounds,
            records=args.records,
            dimension=args.dimension,
            workdir=Path(directory),
        )
    result["machine"], result["load_after"] = before, machine()["loadavg"]
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    rounds_s = result["round_s"]
    print(
        f"{result['processes']} agent processes, t_min {result['t_min']}, "
        f"{result['modulus_bits']} bits, d={result['dimension']}: round 0 (start-up) "
        f"{result['round0_s']:.2f}s; rounds 1-{result['rounds'] - 1}: median "
        f"{rounds_s['median']:.2f}s (min {rounds_s['min']:.2f}, max {rounds_s['max']:.2f}); "
        f"coordinator CPU {result['coordinator_cpu_s']:.2f}s "
        f"(rounds 1-: {result['coordinator_cpu_per_later_round_s']:.2f}s per round); agents' CPU "
        f"{result['agents_cpu_s']:.1f}s in all; run {result['run_wall_s']:.1f}s; load "
        f"{before['loadavg']} -> {result['load_after']}",
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--holders", type=int, nargs="*", default=[10, 100, 1000])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.51, 0.9])
    parser.add_argument("--dimension", type=int, default=11, help="values per masked input")
    parser.add_argument("--bits", type=int, default=48, help="residues modulo 2^bits")
    parser.add_argument("--dropped", type=float, default=0.1, help="fraction dropped")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--graph",
        type=int,
        nargs="*",
        default=[],
        help="also one holder under SecAgg+ for each of these K (default parameters)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke)")
    parser.add_argument(
        "--processes", type=int, help="a real run with this many agent processes instead"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds (with --processes)")
    parser.add_argument(
        "--records", type=int, default=100, help="records per agent (with --processes)"
    )
    args = parser.parse_args(argv)
    if args.processes is not None:
        if args.quick:
            args.processes, args.rounds = min(args.processes, 4), 3
        return main_processes(args)
    if args.quick:
        args.holders, args.fractions, args.repeats = [10, 30], [0.51], 1
        args.graph = [300] if args.graph else []

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
    for holders in args.graph:
        result = graph_row(holders, args)
        rows.append(result)
        if not args.json:
            cpu, extras = result["cpu_s"], result["extras"]
            print(
                f"K={holders:>6} graph k={result['neighbours']} t_k={result['t_min']} "
                f"dropped={result['dropped']:>3}  library cpu {cpu['total']:6.3f}s (share "
                f"{cpu['share_keys']:.3f}, mask {cpu['masked_input']:.3f}, unmask "
                f"{cpu['unmask']:.3f}) sent {result['sent_bytes'] / 1024:6.1f} KiB received "
                f"{result['received_bytes'] / 1024:6.1f} KiB; with the integration's extras "
                f"(graph {extras['cpu_s']['graph_and_committee']:.3f}s, signatures "
                f"{extras['cpu_s']['signatures']:.3f}s): cpu {result['total_cpu_s']:.3f}s, "
                f"sent {result['total_sent_bytes'] / 1024:.1f} KiB, received "
                f"{result['total_received_bytes'] / 1024:.1f} KiB",
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
