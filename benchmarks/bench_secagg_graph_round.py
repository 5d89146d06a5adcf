"""Secure aggregation under SecAgg+: one whole round in one process, K real holders and the
real aggregator at the default graph parameters for K; the aggregator's CPU per step.

    python benchmarks/bench_secagg_graph_round.py [--holders 1000] [--dropped 0.1]
                                                  [--dimension 11] [--mesh] [--json] [--quick]

``graph_parameters(K)`` (docs/SECAGG_GRAPH.md) gives k, t_k, the committee (m, τ) and h;
with ``--mesh`` the round is the full mesh at the study defaults t_min = K − ⌊K/10⌋ and c
(``study_t_min``, ``study_colluders``), every holder sharing with the K − 1 others;
every holder (``ldpem.common.secagg.Holder``) advertises, shares with its neighbours,
masks, signs S and answers its own unmasking request; ⌊dropped·K⌋ holders stop before
their masked input. The round's sum is checked against the survivors' inputs. cpu_s is
time.process_time() of the aggregator's calls only, per method (no HTTP, no store): the
coordinator's protocol work for one round. The holders' CPU is in ``all_cpu_s``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from _fedkit import machine

from ldpem.common.protocol.defaults import study_colluders, study_t_min
from ldpem.common.secagg import (
    Aggregator,
    Holder,
    Roster,
    RoundParameters,
    generate_signing_key,
    public_key_bytes,
)
from ldpem.common.secagg.graph.parameters import graph_parameters

RUN = "bench-graph"


def round_parameters(holders: int, *, mesh: bool) -> RoundParameters:
    """The graph's derived parameters for K, or the full mesh's study defaults."""
    if mesh:
        t_min = study_t_min(None, holders)
        return RoundParameters(RUN, 0, holders, t_min, 48, study_colluders(None, holders, t_min))
    g = graph_parameters(holders)
    if g.full_mesh:
        raise SystemExit(f"K = {holders} gives the full mesh; take a larger K or --mesh")
    return RoundParameters(
        RUN, 0, holders, g.threshold, 48, g.threat.colluders, neighbours=g.k,
        committee=g.committee.size, committee_threshold=g.committee.threshold,
        honest=g.honest_shares,
    )  # fmt: skip


def graph_round(
    holders: int, dropped_fraction: float, dimension: int, *, mesh: bool = False
) -> dict[str, Any]:
    parameters = round_parameters(holders, mesh=mesh)
    keys = {f"h{i:05d}": generate_signing_key() for i in range(holders)}
    roster = Roster({name: public_key_bytes(key) for name, key in keys.items()})
    started_all = time.process_time()
    holder = {n: Holder(n, roster, k, parameters, min_honest=1) for n, k in keys.items()}
    aggregator = Aggregator(roster, parameters, dimension=dimension)
    cpu: dict[str, float] = {}

    def timed(step: str, call: Callable[[], Any]) -> Any:
        start = time.process_time()
        result = call()
        cpu[step] = cpu.get(step, 0.0) + time.process_time() - start
        return result

    inputs = {n: [secrets.randbelow(2**32) for _ in range(dimension)] for n in keys}
    dropped = set(sorted(keys)[: int(dropped_fraction * holders)])
    for h in holder.values():
        advert = h.advertise()
        timed("advertisements", partial(aggregator.receive_advertisement, advert))
    lists = timed("participant_lists", aggregator.participant_lists)
    for n, h in holder.items():
        shares = h.share_keys(lists[n])
        timed("shares", partial(aggregator.receive_shares, shares))
    bundles = timed("share_bundles", aggregator.share_bundles)
    for n, h in holder.items():
        masked = h.masked_input(bundles[n], inputs[n])
        if n not in dropped:
            timed("masked_inputs", partial(aggregator.receive_masked_input, masked))
    check = timed("consistency_check", aggregator.consistency_check)
    for n in check.survivors:
        signature = holder[n].sign_survivors(check)
        timed("signatures", partial(aggregator.receive_signature, signature))
    requests = timed("unmask_requests", aggregator.unmask_requests)
    for n, request in requests.items():
        response = holder[n].unmask(request)
        timed("responses", partial(aggregator.receive_unmask_response, response))
    total = [int(v) for v in timed("result", aggregator.result)]
    all_cpu = time.process_time() - started_all
    expected = [sum(inputs[n][j] for n in check.survivors) % 2**48 for j in range(dimension)]
    return {
        "holders": holders,
        "mesh": mesh,
        "neighbours": parameters.neighbours if parameters.graph else holders - 1,
        "t_k": parameters.t_min,
        "committee": [parameters.committee, parameters.committee_threshold],
        "honest_shares": parameters.honest_shares,
        "dropped": len(dropped),
        "survivors": len(check.survivors),
        "sum_ok": total == expected,
        "aggregator_cpu_s": sum(cpu.values()),
        "cpu_s": cpu,
        "all_cpu_s": all_cpu,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--holders", type=int, default=1000)
    parser.add_argument("--dropped", type=float, default=0.1)
    parser.add_argument("--dimension", type=int, default=11)
    parser.add_argument("--mesh", action="store_true", help="the full mesh, study defaults")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="K = 100 (smoke)")
    args = parser.parse_args(argv)
    holders = 100 if args.quick else args.holders
    result = {
        "machine": machine(),
        **graph_round(holders, args.dropped, args.dimension, mesh=args.mesh),
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(
        f"K={holders} {'mesh' if args.mesh else 'graph'} k={result['neighbours']} "
        f"t={result['t_k']} (m, tau)="
        f"{tuple(result['committee'])} h={result['honest_shares']} dropped={result['dropped']}: "
        f"sum ok {result['sum_ok']}; aggregator CPU {result['aggregator_cpu_s']:.2f}s "
        f"({', '.join(f'{k} {v:.2f}' for k, v in result['cpu_s'].items())}); all "
        f"{result['all_cpu_s']:.1f}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
