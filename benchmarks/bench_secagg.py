"""Secure aggregation: one holder's CPU time and bytes per round, for K holders; or the
wall time of a round with K agent processes on this machine (--processes K).

    python benchmarks/bench_secagg.py [--holders 10 100 1000] [--fractions 0.51 0.9]
                                      [--dimension 11] [--bits 48] [--dropped 0.1]
                                      [--repeats 3] [--graph 10000 ...] [--expander 10000 ...]
                                      [--json] [--quick]
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
coordinator's HTTP API will carry them, without HTTP overhead; received_gzip_bytes are
the same responses as they travel to a client that accepts gzip (the coordinator gzips a
secagg answer of at least GZIP_MINIMUM_BYTES, Huffman-only: ldpem.server.compression). No
timing is asserted anywhere; the issue's goal is under 1 s of CPU per holder and round at K = 1000.

--graph K … (``graph_row``): one holder under SecAgg+ (docs/SECAGG_GRAPH.md) at the default
parameters for K (``graph_parameters``: k neighbours, threshold t_k, committee (m, τ)), on
the real graph: a roster of K holders, RoundParameters with the graph's fields, and the
holder's own round (its graph and committee built in its constructor, timed as
``graph``). Its k neighbours' advertisements, sealed shares and signatures are made
in-process as above; ⌈dropped·k⌉ of the neighbours and as many of the other holders
in proportion drop before their masked input; the consistency check names S over all K
(a bitmap), and the unmasking request carries what ``Aggregator.unmask_requests`` gives
a holder: the signatures of its masking neighbours and of τ committee members, and its
dropped neighbours. Bytes are the messages' compact JSON, each message also on its own
(``sent_by_message``, ``received_by_message``, ``received_gzip_by_message``). The
roster's lookups are built before the timing (once per agent process;
``roster_warm_up_cpu_s``). Not measured: the
coordinator's side, and any HTTP overhead.

--expander K …: the same on the expander (``expander_parameters``: k/2 random cycles, the
survivor floor T); the holder's distinct neighbours (``distinct_neighbours``, at most k)
are its peers, and no more holders drop than T allows.

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
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
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
from ldpem.common.secagg.graph.expander import expander_parameters
from ldpem.common.secagg.graph.parameters import graph_parameters
from ldpem.common.secagg.messages import KeyAdvertisement, sign_advertisement
from ldpem.common.secagg.shamir import PRIME, SHARE_BYTES
from ldpem.processes import start_agent
from ldpem.server.compression import gzip_answer

RUN = "bench"
ME = "h000000"
T = TypeVar("T")


def _x25519() -> tuple[X25519PrivateKey, bytes]:
    key = X25519PrivateKey.from_private_bytes(secrets.token_bytes(32))
    return key, key.public_key().public_bytes_raw()


def _size(message: Any) -> int:
    return len(json.dumps(message.to_dict(), separators=(",", ":")))


def _gzip_size(message: Any) -> int:
    """The bytes of ``message``'s compact JSON as the coordinator's secure-aggregation
    answers carry it (``ldpem.server.compression.gzip_answer``: Huffman-only gzip from
    GZIP_MINIMUM_BYTES up, else as it is)."""
    return len(gzip_answer(json.dumps(message.to_dict(), separators=(",", ":")).encode()))


def _timed(call: Callable[[], T]) -> tuple[T, float]:
    start = time.process_time()
    result = call()
    return result, time.process_time() - start


def _sealed_to_me(
    dealer: str,
    signing: Ed25519PrivateKey,
    commitment: bytes,
    encryption: X25519PrivateKey,
    own: KeyAdvertisement,
) -> bytes:
    """What ``dealer`` seals to ME: its signed shares of random secrets, one of each kind,
    under the channel of its ``encryption`` key and ME's advertised one."""
    plaintext = b"".join(
        sign_share(
            signing,
            secrets.randbelow(PRIME).to_bytes(SHARE_BYTES, "big"),
            ShareLabel(
                run_id=RUN,
                round_=0,
                dealer=dealer,
                recipient=ME,
                kind=kind,
                commitment=commitment,
            ),
        )
        for kind in KINDS
    )
    secret = channel_secret(encryption, own.encryption_key)
    return seal(secret, plaintext, run_id=RUN, round_=0, sender=dealer, recipient=ME)


def holder_round_cost(
    k: int,
    t_min: int,
    *,
    dimension: int = 11,
    bits: int = 48,
    dropped: int = 0,
) -> dict[str, Any]:
    """One holder's CPU seconds (per step and in all) and bytes sent and received in one
    full-mesh round among ``k`` holders, ``dropped`` of which drop before their masked
    input."""
    names = [f"h{i:06d}" for i in range(k)]  # ME is the first
    signing = {n: generate_signing_key() for n in names}
    roster = Roster({n: public_key_bytes(key) for n, key in signing.items()})
    parameters = RoundParameters(RUN, 0, k, t_min, bits)
    holder = Holder(ME, roster, signing[ME], parameters, min_honest=1)

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

    sealed = {n: _sealed_to_me(n, signing[n], commitments[n], peers[n], own) for n in names[1:]}
    bundle = ShareBundle(ME, RUN, 0, sealed)
    values = [secrets.randbelow(2**bits) for _ in range(dimension)]
    masked, t_mask = _timed(lambda: holder.masked_input(bundle, values))
    gone = names[k - dropped :]
    survivors = tuple(names[: k - dropped])
    order = roster.names
    check = ConsistencyCheck(RUN, 0, survivors, order)
    signature, t_sign = _timed(lambda: holder.sign_survivors(check))
    others = [sign_survivors(signing[n], n, RUN, 0, survivors, order) for n in survivors[1:t_min]]
    request = UnmaskRequest(RUN, 0, survivors, tuple(gone), (signature, *others), order)
    response, t_unmask = _timed(lambda: holder.unmask(request))
    return {
        "holders": k,
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
        "received_gzip_bytes": sum(_gzip_size(m) for m in (participants, bundle, check, request)),
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


def _graph_parameters(holders: int, bits: int, family: str) -> RoundParameters:
    """The round's parameters at the defaults for K: the Harary graph's
    (``graph_parameters``) or the expander's (``expander_parameters``, with its survivor
    floor T)."""
    if family == "expander":
        try:
            x = expander_parameters(holders)
        except ValueError as error:
            raise SystemExit(str(error)) from None
        return RoundParameters(
            RUN, 0, holders, x.threshold, bits, x.threat.colluders, neighbours=x.k,
            committee=x.committee.size, committee_threshold=x.committee.threshold,
            honest=x.honest_shares, survivors=x.survivors,
        )  # fmt: skip
    g = graph_parameters(holders)
    if g.full_mesh:
        raise SystemExit(f"K = {holders} gives the full mesh (k = K - 1); take a larger K")
    return RoundParameters(
        RUN, 0, holders, g.threshold, bits, g.threat.colluders, neighbours=g.k,
        committee=g.committee.size, committee_threshold=g.committee.threshold,
        honest=g.honest_shares,
    )  # fmt: skip


def _certificate(
    masking: set[str], committee: frozenset[str], tau: int, signed: list[str]
) -> list[str]:
    """The signers whose signatures ``Aggregator.unmask_requests`` sends one holder: its
    masking neighbours that signed, and committee members (in name order) up to τ."""
    certifying = len(masking & committee)
    more = [n for n in signed if n in committee and n not in masking]
    return sorted(masking | set(more[: max(tau - certifying, 0)]))


def graph_holder_round_cost(
    holders: int, *, dimension: int, bits: int, dropped_fraction: float, family: str = "graph"
) -> dict[str, Any]:
    """One holder's CPU seconds and bytes in one SecAgg+ round among ``holders`` = K
    holders at the ``family``'s default parameters for K (module docstring, --graph and
    --expander)."""
    parameters = _graph_parameters(holders, bits, family)
    t_k = parameters.t_min
    names = [f"h{i:06d}" for i in range(holders)]
    signing = {n: generate_signing_key() for n in names}
    roster = Roster({n: public_key_bytes(key) for n, key in signing.items()})
    # The roster's lookups (positions, decoded public keys) are built on first use, once
    # per agent process, not per round: they are taken out of the timing.
    _, warm_up = _timed(lambda: (roster.index(ME), roster.verify(ME, bytes(64), b"")))
    holder, t_graph = _timed(lambda: Holder(ME, roster, signing[ME], parameters, min_honest=1))
    assert holder.graph is not None
    neighbours = sorted(holder.graph.neighbours(ME))
    k = len(neighbours)  # on the expander, repeats across cycles merge: at most the degree
    committee = holder.graph.committee

    channels: dict[str, X25519PrivateKey] = {}
    adverts: dict[str, KeyAdvertisement] = {}
    commitments = {n: secrets.token_bytes(32) for n in neighbours}
    for name in neighbours:
        (encryption, c_pk), (_, s_pk) = _x25519(), _x25519()
        channels[name] = encryption
        adverts[name] = sign_advertisement(
            signing[name], name, parameters, roster.digest, c_pk, s_pk,
            seed_commitment=commitments[name],
        )  # fmt: skip

    own, t_advertise = _timed(holder.advertise)
    listed = tuple(sorted((own, *adverts.values()), key=lambda a: a.holder))
    participants = ParticipantList(RUN, 0, listed)
    shares, t_share = _timed(lambda: holder.share_keys(participants))

    sealed = {n: _sealed_to_me(n, signing[n], commitments[n], channels[n], own) for n in neighbours}
    bundle = ShareBundle(ME, RUN, 0, sealed)
    values = [secrets.randbelow(2**bits) for _ in range(dimension)]
    masked, t_mask = _timed(lambda: holder.masked_input(bundle, values))

    dropped = min(math.ceil(dropped_fraction * k), k + 1 - t_k)
    gone_neighbours = neighbours[k - dropped :]
    others = [n for n in names[1:] if n not in set(neighbours)]
    # The others dropped: about the same fraction, and on the expander no more than the
    # floor allows (|S| >= T).
    most = holders - parameters.survivors - dropped if parameters.expander else len(others)
    wanted = min(math.ceil(dropped_fraction * len(others)), most)
    step = max(1, math.ceil(len(others) / max(1, wanted)))
    gone = set(gone_neighbours) | set(others[::step][:wanted])
    survivors = tuple(n for n in names if n not in gone)
    order = roster.names
    check = ConsistencyCheck(RUN, 0, survivors, order)
    signature, t_sign = _timed(lambda: holder.sign_survivors(check))
    masking = set(neighbours) - gone
    signers = _certificate(masking, committee, parameters.committee_threshold, list(survivors))
    signatures = [
        signature if n == ME else sign_survivors(signing[n], n, RUN, 0, survivors, order)
        for n in sorted({*signers, ME} & set(survivors))
    ]
    request = UnmaskRequest(RUN, 0, survivors, tuple(gone_neighbours), tuple(signatures), order)
    response, t_unmask = _timed(lambda: holder.unmask(request))
    sent = {"advertisement": own, "encrypted_shares": shares, "masked_input": masked,
            "survivor_signature": signature, "unmask_response": response}  # fmt: skip
    received = {"participant_list": participants, "share_bundle": bundle,
                "consistency_check": check, "unmask_request": request}  # fmt: skip
    cpu = {
        "graph": t_graph,
        "advertise": t_advertise,
        "share_keys": t_share,
        "masked_input": t_mask,
        "sign_survivors": t_sign,
        "unmask": t_unmask,
    }
    return {
        "holders": holders,
        "roster_warm_up_cpu_s": warm_up,
        "family": family,
        "neighbours": parameters.neighbours,
        "distinct_neighbours": k,
        "t_min": t_k,
        "survivor_floor": parameters.survivors,
        "committee": [parameters.committee, parameters.committee_threshold],
        "honest_shares": parameters.honest,
        "dropped": dropped,
        "survivors": len(survivors),
        "request_signatures": len(signatures),
        "cpu_s": {**cpu, "total": sum(cpu.values())},
        "sent_bytes": sum(_size(m) for m in sent.values()),
        "received_bytes": sum(_size(m) for m in received.values()),
        "sent_by_message": {name: _size(m) for name, m in sent.items()},
        "received_by_message": {name: _size(m) for name, m in received.items()},
        "received_gzip_bytes": sum(_gzip_size(m) for m in received.values()),
        "received_gzip_by_message": {name: _gzip_size(m) for name, m in received.items()},
    }


def graph_row(holders: int, args: argparse.Namespace, family: str = "graph") -> dict[str, Any]:
    """One holder's round under SecAgg+ at the default parameters for K = ``holders``
    (``graph_holder_round_cost``), CPU the median of --repeats."""
    runs = [
        graph_holder_round_cost(
            holders,
            dimension=args.dimension,
            bits=args.bits,
            dropped_fraction=args.dropped,
            family=family,
        )
        for _ in range(args.repeats)
    ]
    out = runs[0]
    out["cpu_s"] = {
        step: statistics.median(r["cpu_s"][step] for r in runs) for step in out["cpu_s"]
    }
    out.update(mode=family, repeats=args.repeats)
    return out


def _graph_line(result: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Print one SecAgg+ row (unless --json) and return it."""
    if not args.json:
        cpu = result["cpu_s"]
        parts = result["received_by_message"].items()
        zipped = result["received_gzip_by_message"].items()
        print(
            f"K={result['holders']:>6} {result['family']} k={result['neighbours']} "
            f"(distinct {result['distinct_neighbours']}) t_k={result['t_min']} "
            f"(m, tau)={tuple(result['committee'])} dropped={result['dropped']:>3}  cpu "
            f"{cpu['total']:6.3f}s (graph {cpu['graph']:.3f}, share "
            f"{cpu['share_keys']:.3f}, mask {cpu['masked_input']:.3f}, unmask "
            f"{cpu['unmask']:.3f})  sent {result['sent_bytes'] / 1024:6.1f} KiB  "
            f"received {result['received_bytes'] / 1024:6.1f} KiB "
            f"({', '.join(f'{k} {v / 1024:.1f}' for k, v in parts)}); gzip "
            f"{result['received_gzip_bytes'] / 1024:6.1f} KiB "
            f"({', '.join(f'{k} {v / 1024:.1f}' for k, v in zipped)})",
            flush=True,
        )
    return result


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
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0], allow_abbrev=False
    )
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
    parser.add_argument(
        "--expander",
        type=int,
        nargs="*",
        default=[],
        help="also one holder on the SecAgg+ expander for each of these K (default parameters)",
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
        args.expander = [300] if args.expander else []

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
                    f"received {result['received_bytes'] / 1024:8.1f} KiB "
                    f"(gzip {result['received_gzip_bytes'] / 1024:.1f})",
                    flush=True,
                )
    for family, sizes in (("graph", args.graph), ("expander", args.expander)):
        for holders in sizes:
            rows.append(_graph_line(graph_row(holders, args, family), args))
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
