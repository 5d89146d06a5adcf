"""Coordinator capacity: durable reports per second and round turnaround with N agents.

    python benchmarks/bench_coordinator.py [--agents 10 100 1000] [--rounds 10] [--quick] [--json]

Issue 8, item 4. One ``ldpem coordinator`` process (SQLite, WAL, synchronous=FULL, as
deployed); in this process N asyncio agents, each with its own keep-alive connection and
bearer token, enrolled as N hospitals of one run. Each agent long-polls for the open round
(``GET /v1/runs/{id}/round?after=t&wait=…``), posts one valid report (the right count, a
total inside the honest range), waits for the acknowledgement (sent only after the commit)
and long-polls again. The agents speak HTTP/1.1 over raw asyncio streams so that this
process's own CPU (an HTTP client library costs ~1 ms per request) does not crowd out the
coordinator on a 2-core machine.

Per N it reports:
  reports_per_s   N·rounds / Σ_t (last ack of round t − first report of round t sent)
  round_s         closed_at − opened_at of each round (coordinator clock), p50 / p99
  broadcast_s     last report's ack of round t → an agent receives round t+1, over all agents
                  and rounds, p50 / p99; and the time until the LAST agent has it
  coordinator     VmRSS / VmHWM of the coordinator process after the run (KiB), and its CPU
                  per report (one POST and one long-poll answer), from /proc/PID/stat
  floor           an fsync of 4 KiB on the state file's disk (the cost of one durable commit)
Targets: ≥ 500 reports/s; 1,000 agents per round in ≤ 3 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import (
    Processes,
    cpu_seconds,
    create_run,
    machine,
    memory_kib,
    rounds,
    start_coordinator,
    summary,
)

from ldpem.common.wire import PublicParameters
from ldpem.server.coordinator import run_noise_std


class Connection:
    """One keep-alive HTTP/1.1 connection (requests in sequence, Content-Length bodies)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def request(
        self, method: str, path: str, token: str, body: bytes | None = None
    ) -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        await self.writer.drain()
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def agent(
    host: str,
    port: int,
    run_id: str,
    name: str,
    token: str,
    records: int,
    total_rounds: int,
    d: int,
    noise_std: float,
    log: dict[str, Any],
) -> None:
    """Follow the run; log per round: received (broadcast), sent, acked (perf_counter)."""
    connection = await Connection.open(host, port)
    try:
        after = -1
        while True:
            status, body = await connection.request(
                "GET", f"/v1/runs/{run_id}/round?after={after}&wait=60", token
            )
            received = time.perf_counter()
            if status != 200:
                raise RuntimeError(f"{name}: poll HTTP {status} {body[:200]!r}")
            info = json.loads(body)
            if info["status"] != "running":
                log.setdefault("received", {})[info["round"]] = received
                return
            t = int(info["round"])
            if t <= after:
                continue
            log.setdefault("received", {})[t] = received
            count = records // total_rounds + (1 if t < records % total_rounds else 0)
            report = {
                "hospital": name,
                "round": t,
                "mechanism": "local",
                "count": count,
                # A valid-range sum: what the coordinator checks (count, dimension, range).
                "total": [0.01 * ((i + t) % 7 - 3) for i in range(d)],
                # The run's own σ_r: the coordinator refuses less noise than its budget needs.
                "noise_std": noise_std,
            }
            sent = time.perf_counter()
            status, body = await connection.request(
                "POST",
                f"/v1/runs/{run_id}/rounds/{t}/reports",
                token,
                json.dumps(report).encode(),
            )
            acked = time.perf_counter()
            if status != 200:
                raise RuntimeError(f"{name}: report HTTP {status} {body[:200]!r}")
            log.setdefault("sent", {})[t] = sent
            log.setdefault("acked", {})[t] = acked
            after = t
    finally:
        connection.close()


def fsync_floor(directory: Path, repeats: int = 50) -> float:
    """Median seconds of write(4 KiB) + fsync on ``directory``'s file system."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    times = []
    try:
        for _ in range(repeats):
            started = time.perf_counter()
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times)


def bench(agents: int, total_rounds: int, d: int, workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True)
    processes = Processes(workdir / "logs")
    records = 10 * total_rounds
    try:
        coordinator, url = start_coordinator(processes, workdir / "coordinator.sqlite")
        tokens = {f"h{i:04d}": f"bench-token-{i:06d}-{os.getpid()}" for i in range(agents)}
        request = {
            "model": "gmm",
            "d": d,
            "sigma": 1.0,
            "rounds": total_rounds,
            "mechanism": "local",
            "epsilon": 1.0,
            "forecast": False,
            "hospitals": [
                {"name": name, "records": records, "token": token} for name, token in tokens.items()
            ],
        }
        created = create_run(url, request)
        run_id = created["run_id"]
        noise_std = run_noise_std(PublicParameters.model_validate(created["params"]))
        before = memory_kib(coordinator.pid)
        split = urlsplit(url)
        host, port = split.hostname or "127.0.0.1", split.port or 80
        logs: dict[str, dict[str, Any]] = {name: {} for name in tokens}

        async def everyone() -> None:
            await asyncio.gather(
                *(
                    agent(
                        host,
                        port,
                        run_id,
                        name,
                        token,
                        records,
                        total_rounds,
                        d,
                        noise_std,
                        logs[name],
                    )
                    for name, token in tokens.items()
                )
            )

        coordinator_cpu = cpu_seconds(coordinator.pid)
        client_cpu = time.process_time()
        started = time.perf_counter()
        asyncio.run(asyncio.wait_for(everyone(), timeout=1800))
        elapsed = time.perf_counter() - started
        client_cpu = time.process_time() - client_cpu
        coordinator_cpu = cpu_seconds(coordinator.pid) - coordinator_cpu
        table = rounds(url, run_id)
        after = memory_kib(coordinator.pid)
    finally:
        processes.stop()
    busy, broadcast, last_broadcast = [], [], []
    for t in range(total_rounds):
        first_sent = min(log["sent"][t] for log in logs.values())
        last_ack = max(log["acked"][t] for log in logs.values())
        busy.append(last_ack - first_sent)
        nxt = [log["received"][t + 1] - last_ack for log in logs.values()]
        broadcast.extend(nxt)
        last_broadcast.append(max(nxt))
    durations = [r["closed_at"] - r["opened_at"] for r in table]
    return {
        "agents": agents,
        "rounds": total_rounds,
        "d": d,
        "reports_per_s": agents * total_rounds / sum(busy),
        "round_s": summary(durations),
        "ingest_s": summary(busy),
        "broadcast_s": summary(broadcast),
        "last_broadcast_s": summary(last_broadcast),
        "elapsed_s": elapsed,
        # CPU over the rounds: the coordinator's per report (one POST + one long-poll
        # answer), and the simulated agents' (they share the 2 cores with it).
        "coordinator_cpu_ms_per_report": 1e3 * coordinator_cpu / (agents * total_rounds),
        "agents_cpu_s": client_cpu,
        "coordinator_cpu_s": coordinator_cpu,
        "coordinator_kib_before": before,
        "coordinator_kib_after": after,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--agents", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.rounds = [5, 20], 3
    before = machine()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ldpem-bench-coord-") as tmp:
        root = Path(tmp)
        floor = fsync_floor(root)
        for agents in args.agents:
            row = bench(agents, args.rounds, args.d, root / f"n{agents}")
            rows.append(row)
            if not args.json:
                print(
                    f"N={agents:>5}  {row['reports_per_s']:7.0f} reports/s  round p50 "
                    f"{row['round_s']['median']:.3f}s p99 {row['round_s']['p99']:.3f}s  "
                    f"last report -> broadcast p50 {row['broadcast_s']['median'] * 1e3:.1f}ms "
                    f"p99 {row['broadcast_s']['p99'] * 1e3:.1f}ms (all agents p50 "
                    f"{row['last_broadcast_s']['median'] * 1e3:.1f}ms)  coordinator "
                    f"VmHWM {row['coordinator_kib_after'].get('VmHWM', 0) / 1024:.0f} MiB; "
                    f"coordinator CPU {row['coordinator_cpu_ms_per_report']:.2f} ms/report, "
                    f"agents' CPU {row['agents_cpu_s']:.1f}s of {row['elapsed_s']:.1f}s",
                    flush=True,
                )
    result = {
        "machine": before,
        "load_after": machine()["loadavg"],
        "fsync_floor_s": floor,
        "rows": rows,
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(
            f"fsync floor {floor * 1e3:.2f} ms (≤ {1 / floor:.0f} commits/s one at a time); "
            f"load {before['loadavg']} -> {result['load_after']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
