"""Secure aggregation through the real HTTP coordinator with many holders: round wall time,
the coordinator's CPU per round and peak RSS, the load generator's CPU, and every HTTP
status the holders saw (a 5xx must never occur).

    python benchmarks/bench_secagg_http.py [--holders 100 200] [--dropped 0 0.1]
                                           [--rounds 3] [--workers 2] [--deadline 20]
                                           [--dimension 10] [--topology mesh|graph|expander]
                                           [--json] [--quick]

For each K and each dropped fraction, a fresh ``ldpem coordinator`` (``_fedkit``, on
127.0.0.1) gets a secagg run of K hospitals with a roster of K signing keys (t_min, the
modulus and the rest are the run's defaults). A load generator of ``--workers`` processes
(``multiprocessing``, spawn) plays the K holders, one thread per holder and round, each
through the agent's own code: ``client.secagg.load_secagg`` (the run's checks, the roster,
the key) and ``client.secagg.aggregate`` (the four steps over a ``CoordinatorLink``, the
real ``Holder`` state machine). So a change of the protocol or of its messages on the
agent's side is what this measures. After its round a holder long-polls the next round as
its agent does (``GET /v1/runs/{run}/round?after=t``, asked again when it times out; a
holder that dropped sends nothing). What an agent does besides is not played: no records
are read and no EM report computed; each holder's report is a fixed vector of small random
multiples of the run's grid γ (its "total"), and the coordinator's unmasked sum of each
round is checked against the survivors' totals (``sum_ok``).

A dropped holder advertises and shares its keys, then stops before its masked input (the
costliest dropout: the coordinator reconstructs its masking key and removes its masks from
every survivor's input). Round t's ⌈fraction·K⌉ droppers are the holders just before
round t − 1's (round 0's are the last ones), so that every round has holders dropping in
the middle of it. Round t − 1's droppers come back in round t, and start
``REJOIN_HEAD_START`` seconds before the others: the coordinator does not wait for holders
lost in round t − 1, so one that advertised after the last awaited holder would sit the
round out (409), and a round would then lose up to twice the fraction: more than the
SecAgg+ expander's survivor floor T = K − ⌊δK⌋ allows at δ = fraction (its masked step
would wait for inputs that never come). The masked step closes at its deadline
(``--deadline`` seconds after the bundles went out), which the round's wall time
includes.

Figures: round wall time from the coordinator (opened_at → closed_at, ``GET
/v1/runs/{id}/rounds``); the coordinator's CPU (/proc, user + system) between round
openings, so the M-step is in it; its peak RSS (VmHWM) at the end of the run; the load
generator's CPU (``resource.getrusage`` in each worker, summed) per round; the HTTP status
codes of every response the holders got (a counting ``httpx`` transport under each link;
the link would retry a 5xx silently, so they are counted below it), and the requests that
got no response at all (``no_response``: a connection reset, which the link retries). The
summaries are over rounds 1 … (round 0 includes the load generator's start-up: spawning,
imports and each holder's ``load_secagg``); every round is in ``rounds``. No timing is
asserted anywhere.

The load generator's processes run ``LOAD_NICENESS`` steps below the coordinator's
priority: on these two cores the K holders' CPU is ~15× the coordinator's, and a
coordinator preempted by its own load pays for the switches and the cold caches in its
CPU time, which a coordinator on a host of its own does not (``--same-priority`` measures
without it).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import queue
import resource
import secrets
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _fedkit import (
    ADMIN,
    Processes,
    cpu_seconds,
    create_run,
    machine,
    memory_kib,
    rounds,
    start_coordinator,
    summary,
)

from ldpem.client.link import KEEPALIVE_EXPIRY, CoordinatorLink
from ldpem.client.secagg import SecAggConfig, aggregate, load_secagg
from ldpem.common.secagg import Roster, generate_signing_key, public_key_bytes, signing_key_to_pem
from ldpem.common.secagg.runvalues import grid_of, run_shares_mechanism
from ldpem.common.wire import PublicParameters
from ldpem.server.settings import Settings

#: The agent's default ``wait`` (client/agent.py). Its secagg steps long-poll at least
#: ``client.secagg.STEP_WAIT`` (300 s; they used this 30 s before, and 5 s before that).
WAIT = 30.0


class _Dropped(Exception):
    """A holder leaving the round before its masked input (raised by ``_DroppingLink``)."""


#: How much lower the load generator's priority is than the coordinator's (os.nice).
LOAD_NICENESS = 10

#: The key under which requests that got no response at all are counted.
NO_RESPONSE = "no response"


class _CountingTransport(httpx.HTTPTransport):
    """Counts the status code of every response, and every request that got none (a
    connection reset or refused: the link retries both, so they are counted below it)."""

    def __init__(self, counts: Counter[str], lock: threading.Lock) -> None:
        # A transport given to the link brings its own pool: the agent's keep-alive expiry.
        super().__init__(limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY))
        self.counts, self.lock = counts, lock

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = super().handle_request(request)
        except httpx.TransportError:
            with self.lock:
                self.counts[NO_RESPONSE] += 1
            raise
        with self.lock:
            self.counts[str(response.status_code)] += 1
        return response


#: Seconds by which round t − 1's droppers start round t before the other holders.
REJOIN_HEAD_START = 1.0


class _DroppingLink(CoordinatorLink):
    """A link whose holder leaves the rounds ``drops`` when it is about to send its masked
    input."""

    drops: frozenset[int] = frozenset()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if method == "POST" and path.endswith("/secagg/masked"):
            t = int(path.split("/rounds/")[1].split("/")[0])
            if t in self.drops:
                raise _Dropped(path)
        return super().request(method, path, **kwargs)


class _Ledger:
    """What ``aggregate`` needs of the agent's ledger: the "masked" mark (not kept)."""

    def mark(self, run_id: str, t: int, status: str) -> None:
        del run_id, t, status


def _holder_round(
    link: CoordinatorLink, session: Any, run_id: str, t: int, body: bytes, outcome: dict[str, str]
) -> None:
    """One holder's round t, as its agent plays it: the secure aggregation, then the
    long-poll of the next round (``Agent._follow``: asked again when it times out), which a
    holder that dropped never sends."""
    name = session.name
    try:
        aggregate(session, link, _Ledger(), run_id, t, body, WAIT)  # type: ignore[arg-type]
        while True:
            info = link.poll(run_id, t)
            if info.status != "running" or info.round > t:
                break
        outcome[name] = "done"
    except _Dropped:
        outcome[name] = "dropped"
    except Exception as error:  # reported and counted, never hidden
        outcome[name] = f"error: {type(error).__name__}: {error}"[:300]


def _worker(job: dict[str, Any], results: Any) -> None:
    """Play ``job["holders"]`` for every round of the run; put one dict per round."""
    os.nice(job["niceness"])
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    workdir = Path(job["workdir"])
    roster_path = workdir / "roster.json"
    links: dict[str, CoordinatorLink] = {}
    sessions: dict[str, Any] = {}
    params = None
    for name, token, drops in job["holders"]:
        dropping = _DroppingLink(
            job["url"],
            token,
            give_up=600.0,
            wait=WAIT,
            transport=_CountingTransport(counts, lock),
        )
        dropping.drops = frozenset(drops)
        links[name] = dropping
    first = next(iter(links.values()))
    t = 0
    while t < job["rounds"]:
        info = first.poll(job["run_id"], t - 1)
        if info.status != "running":
            break
        if info.round < t:
            continue
        t = info.round
        if params is None:
            params = info.params
            mechanism = run_shares_mechanism(params)
            grid = grid_of(mechanism)
            for name, _, _ in job["holders"]:
                # The hospitals assume the c the run declares (the consortium agreed on it).
                config = SecAggConfig(
                    workdir / f"{name}.key",
                    roster_path,
                    min_honest=2,
                    max_colluders=params.colluders or 0,
                )
                sessions[name] = load_secagg(config, params, name, mechanism)
        outcome: dict[str, str] = {}
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        threads = [
            threading.Thread(
                target=_holder_round,
                args=(
                    links[name],
                    sessions[name],
                    job["run_id"],
                    t,
                    json.dumps({"total": [v * grid for v in job["totals"][name]]}).encode(),
                    outcome,
                ),
                daemon=True,
            )
            for name, _, _ in job["holders"]
        ]
        # Holders that dropped in round t − 1 start first: they are alive again and their
        # advertisements must be in before the step closes, which the coordinator does as
        # soon as the holders it waits for (not those lost in t − 1) have advertised.
        rejoining = [t - 1 in drops for _, _, drops in job["holders"]]
        for thread, first_in in zip(threads, rejoining, strict=True):
            if first_in:
                thread.start()
        if any(rejoining):
            time.sleep(REJOIN_HEAD_START)
        for thread, first_in in zip(threads, rejoining, strict=True):
            if not first_in:
                thread.start()
        for thread in threads:
            thread.join()
        after = resource.getrusage(resource.RUSAGE_SELF)
        with lock:
            status_counts = dict(counts)
            counts.clear()
        results.put(
            {
                "round": t,
                "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
                "wall_s": time.perf_counter() - started,
                "outcomes": dict(Counter(v.split(":")[0] for v in outcome.values())),
                "errors": sorted({v for v in outcome.values() if v.startswith("error")})[:5],
                "status_counts": status_counts,
                "maxrss_kib": after.ru_maxrss,
                "niceness": os.nice(0),
            }
        )
        t += 1
    for link in links.values():
        link.close()


def _stored_sum(state: Path, run_id: str, t: int) -> dict[str, Any] | None:
    with sqlite3.connect(f"file:{state}?mode=ro", uri=True) as db:
        row = db.execute(
            "SELECT body FROM secagg_messages WHERE run_id = ? AND t = ? AND kind = 'sum'",
            (run_id, t),
        ).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def _wait(
    url: str,
    run_id: str,
    processes: Processes,
    *,
    until: int | None,
    timeout: float,
    alive: Callable[[], bool] = lambda: True,
) -> dict[str, Any]:
    """Long-poll (admin token) until the run ends or round ``until`` opens, as
    ``_fedkit.wait_finished`` does, except that a coordinator too busy to answer within a
    request's timeout is waited for and said on stderr, not an error (at K = 1000 the full
    mesh keeps its event loop busy for minutes)."""
    end = time.monotonic() + timeout
    after = -1
    headers = {"Authorization": f"Bearer {ADMIN}"}
    limits = httpx.Timeout(30.0, read=600.0)
    with httpx.Client(base_url=url, headers=headers, timeout=limits) as client:
        while True:
            problem = processes.failed()
            if problem is not None:
                raise RuntimeError(problem)
            if not alive():  # nobody is left to send anything: say so, do not wait it out
                raise RuntimeError("every load-generator worker exited (its error is above)")
            if time.monotonic() > end:
                raise RuntimeError(f"run {run_id} did not finish within {timeout:.0f} s")
            try:
                response = client.get(
                    f"/v1/runs/{run_id}/round", params={"after": after, "wait": 1.0}
                )
            except httpx.TransportError as error:
                print(
                    f"the coordinator did not answer ({type(error).__name__}); waiting",
                    file=sys.stderr,
                    flush=True,
                )
                time.sleep(1.0)
                continue
            info: dict[str, Any] = response.json()
            if info["status"] != "running" or (until is not None and info["round"] >= until):
                return info
            after = max(after, int(info["round"]))


def run_setting(
    holders: int, dropped_fraction: float, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """One run of ``args.rounds`` rounds with ``holders`` holders through a fresh
    coordinator; its figures."""
    names = [f"h{i + 1:05d}" for i in range(holders)]
    keys = {name: generate_signing_key() for name in names}
    roster = Roster({name: public_key_bytes(key) for name, key in keys.items()})
    (workdir / "roster.json").write_text(roster.to_json())
    for name, key in keys.items():
        path = workdir / f"{name}.key"
        path.write_bytes(signing_key_to_pem(key))
        os.chmod(path, 0o600)
    tokens = {name: f"bench-{name}-" + secrets.token_urlsafe(16) for name in names}
    dropped = math.ceil(dropped_fraction * holders)  # each round: see the module's docstring
    drops: dict[str, list[int]] = {name: [] for name in names}
    for t in range(args.rounds) if dropped else ():
        for i in range(holders - dropped * (t + 1), holders - dropped * t):
            drops[names[i % holders]].append(t)
    totals = {
        name: [secrets.randbelow(2001) - 1000 for _ in range(args.dimension)] for name in names
    }
    request = {
        "model": "gmm",
        "d": args.dimension,
        "sigma": 1.0,
        "rounds": args.rounds,
        "epsilon": 1.0,
        "delta": 1e-5,
        "seed": 1,
        "forecast": False,
        "mechanism": "secagg",
        "round_deadline": args.deadline,
        "roster": json.loads(roster.to_json()),
        "hospitals": [{"name": n, "records": 100, "token": tokens[n]} for n in names],
    }
    request["secagg_topology"] = args.topology
    if args.dropout_share is not None:
        request["dropout_share"] = args.dropout_share
    if args.topology == "mesh":
        # ⌊K/2⌋ + 1, as docs/PERFORMANCE.md's figures were taken (the run's default,
        # K − ⌊K/10⌋, would leave a round with more dropped short).
        request["t_min"] = holders // 2 + 1
    # Otherwise the SecAgg+ graph or expander at the run's defaults (c = ⌊K/3⌋, 10%
    # dropouts, h ≥ 2): k, t_k, the committee (and T) derived by the coordinator, checked
    # by every holder.
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    with Processes(workdir / "logs") as processes:
        # The coordinator as deployed: its default deadline tick (the other benchmarks'
        # 0.05 s is for closing plain rounds promptly, which a secagg run's steps do alone).
        tick = Settings.model_fields["tick"].default
        coordinator, url = start_coordinator(processes, workdir / "coordinator.sqlite", tick=tick)
        created = create_run(url, request)
        run_id = created["run_id"]
        jobs = [
            {
                "url": url,
                "run_id": run_id,
                "rounds": args.rounds,
                "workdir": str(workdir),
                "holders": [(n, tokens[n], drops[n]) for n in names[w :: args.workers]],
                "totals": {n: totals[n] for n in names[w :: args.workers]},
                "niceness": 0 if args.same_priority else LOAD_NICENESS,
            }
            for w in range(args.workers)
        ]
        # Daemons: an error here (or a kill) takes the load generator down with it.
        workers = [
            context.Process(target=_worker, args=(job, results), daemon=True) for job in jobs
        ]
        for worker in workers:
            worker.start()
        started = time.monotonic()
        coordinator_cpu = [cpu_seconds(coordinator.pid)]
        info: dict[str, Any] = {}
        finished = False
        try:
            for t in range(1, args.rounds + 1):
                until = t if t < args.rounds else None
                info = _wait(
                    url,
                    run_id,
                    processes,
                    until=until,
                    timeout=args.timeout,
                    alive=lambda: any(w.is_alive() for w in workers),
                )
                coordinator_cpu.append(cpu_seconds(coordinator.pid))
                print(
                    f"K={holders}: round {t - 1} over after {time.monotonic() - started:.0f} s; "
                    f"coordinator CPU {coordinator_cpu[-1] - coordinator_cpu[-2]:.1f} s, "
                    f"RSS {memory_kib(coordinator.pid)}",
                    file=sys.stderr,
                    flush=True,
                )
                if info["status"] != "running" and t < args.rounds:
                    break
            peak = memory_kib(coordinator.pid)
            table = rounds(url, run_id)
            reports: list[dict[str, Any]] = []
            deadline = time.monotonic() + 120.0
            while len(reports) < args.workers * len(table) and time.monotonic() < deadline:
                try:
                    reports.append(results.get(timeout=5.0))
                except queue.Empty:
                    if not any(w.is_alive() for w in workers):
                        break
            finished = True
        finally:
            for worker in workers:
                worker.join(60.0 if finished else 0.0)
                if worker.is_alive():
                    worker.kill()
        sums = [_stored_sum(workdir / "coordinator.sqlite", run_id, r["round"]) for r in table]
    per_round = []
    for row, stored, cpu_before, cpu_after in zip(
        table, sums, coordinator_cpu, coordinator_cpu[1:], strict=False
    ):
        mine = [r for r in reports if r["round"] == row["round"]]
        statuses: Counter[str] = Counter()
        outcomes: Counter[str] = Counter()
        for r in mine:
            statuses.update(r["status_counts"])
            outcomes.update(r["outcomes"])
        survivors = stored["survivors"] if stored else []
        expected = [sum(totals[n][i] for n in survivors) for i in range(args.dimension)]
        grid = grid_of(run_shares_mechanism(PublicParameters.model_validate(created["params"])))
        per_round.append(
            {
                "round": row["round"],
                "wall_s": row["closed_at"] - row["opened_at"],
                "coordinator_cpu_s": cpu_after - cpu_before,
                "loadgen_cpu_s": sum(r["cpu_s"] for r in mine),
                "loadgen_wall_s": max((r["wall_s"] for r in mine), default=0.0),
                "survivors": len(survivors),
                "sum_ok": stored is not None
                and [round(v / grid) for v in stored["total"]] == expected,
                "outcomes": dict(outcomes),
                "errors": sorted({e for r in mine for e in r["errors"]}),
                "http_status": dict(sorted(statuses.items())),
                "http_5xx": sum(n for code, n in statuses.items() if code.startswith("5")),
                "no_response": statuses[NO_RESPONSE],
            }
        )
    later = per_round[1:]  # round 0 includes the load generator's start-up
    return {
        "holders": holders,
        "dropped": dropped,
        "topology": args.topology,
        "dropout_share": args.dropout_share,
        "graph": created["params"].get("graph"),
        "t_min": created["params"]["t_min"],
        "modulus_bits": created["params"]["modulus_bits"],
        "dimension": args.dimension,
        "deadline_s": args.deadline,
        "workers": args.workers,
        # Below the coordinator's (this process's, which it inherited), as run.
        "load_niceness": min((r["niceness"] for r in reports), default=0) - os.nice(0),
        "status": info.get("status"),
        "round_wall_s": summary([r["wall_s"] for r in later]),
        "coordinator_cpu_per_round_s": summary([r["coordinator_cpu_s"] for r in later]),
        "loadgen_cpu_per_round_s": summary([r["loadgen_cpu_s"] for r in later]),
        "coordinator_peak_rss_kib": peak.get("VmHWM"),
        "http_5xx": sum(r["http_5xx"] for r in per_round),
        "no_response": sum(r["no_response"] for r in per_round),
        "rounds": per_round,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--holders", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--dropped", type=float, nargs="+", default=[0.0, 0.1])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="load generator processes")
    parser.add_argument("--deadline", type=float, default=20.0, help="the run's round_deadline")
    parser.add_argument("--dimension", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument(
        "--topology",
        choices=("mesh", "graph", "expander"),
        default="mesh",
        help="the run's secagg_topology (graph, expander: docs/SECAGG_GRAPH.md, at the run's "
        "defaults; the expander needs a few hundred holders)",
    )
    parser.add_argument(
        "--dropout-share",
        type=float,
        default=None,
        help="graph, expander: the run's dropout_share δ (default the run's, 0.1); on the "
        "expander a round needs T = K - floor(δK) survivors",
    )
    parser.add_argument(
        "--same-priority",
        action="store_true",
        help="run the load generator at the coordinator's priority (default: LOAD_NICENESS lower)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke)")
    args = parser.parse_args(argv)
    if args.quick:
        # The graph needs K = 16 to be sparser than the mesh at its defaults, the expander
        # K = 200 (``runvalues.run_expander``).
        smallest = {"graph": 16, "expander": 200}.get(args.topology, 6)
        args.holders, args.dropped, args.rounds, args.deadline = [smallest], [0.0, 0.1], 2, 5.0
    before = machine()
    rows = []
    for holders in args.holders:
        for fraction in args.dropped:
            with tempfile.TemporaryDirectory(prefix="bench-secagg-http-") as directory:
                result = run_setting(holders, fraction, args, Path(directory))
            rows.append(result)
            if not args.json:
                wall, cpu = result["round_wall_s"], result["coordinator_cpu_per_round_s"]
                print(
                    f"K={holders} {args.topology} dropped={result['dropped']} "
                    f"t_min={result['t_min']} "
                    f"({result['status']}): round wall median {wall.get('median', math.nan):.2f}s "
                    f"(max {wall.get('max', math.nan):.2f}); coordinator CPU per round median "
                    f"{cpu.get('median', math.nan):.2f}s, peak RSS "
                    f"{(result['coordinator_peak_rss_kib'] or 0) / 1024:.0f} MiB; load "
                    f"generator CPU per round median "
                    f"{result['loadgen_cpu_per_round_s'].get('median', math.nan):.1f}s; 5xx "
                    f"{result['http_5xx']}, requests without a response (retried) "
                    f"{result['no_response']}; sums ok "
                    f"{all(r['sum_ok'] for r in result['rounds'])}",
                    flush=True,
                )
                for r in result["rounds"]:
                    print(
                        f"  round {r['round']}: wall {r['wall_s']:.2f}s, coordinator CPU "
                        f"{r['coordinator_cpu_s']:.2f}s, load generator CPU "
                        f"{r['loadgen_cpu_s']:.2f}s, survivors {r['survivors']}, "
                        f"outcomes {r['outcomes']}, HTTP {r['http_status']}"
                        + (f", errors {r['errors']}" if r["errors"] else ""),
                        flush=True,
                    )
    if args.json:
        json.dump(
            {"machine": before, "load_after": machine()["loadavg"], "rows": rows},
            sys.stdout,
            indent=2,
        )
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
