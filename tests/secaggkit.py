"""A federated secagg run for the tests: signing keys, roster, a coordinator process that
can be killed and restarted on its state, the run created as an operator creates it, and
one ``ldpem client`` process per hospital (hospital i is ``h{i}``, with key ``h{i}.key``)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldpem.common.secagg import Roster, generate_signing_key, public_key_bytes, signing_key_to_pem
from ldpem.common.wire import PublicParameters
from ldpem.processes import Child, Processes, free_port, start_coordinator
from tests.fedkit import AGENT_BUDGET, cli_create_run, token_file

#: (kind, holder, body) of a stored secure-aggregation message, body parsed.
Message = tuple[str, str, dict[str, Any]]


def tokens(k: int) -> list[str]:
    return [f"secagg-token-{i:03d}-abcdefghijklmnop" for i in range(k)]


def keys_and_roster(directory: Path, k: int) -> tuple[list[Path], Path, dict[str, Any]]:
    """K signing key files (mode 600) of hospitals h0 … h{K-1} and their roster."""
    paths, public = [], {}
    for i in range(k):
        key = generate_signing_key()
        path = directory / f"h{i}.key"
        path.write_bytes(signing_key_to_pem(key))
        os.chmod(path, 0o600)
        paths.append(path)
        public[f"h{i}"] = public_key_bytes(key)
    roster = Roster(public)
    roster_path = directory / "roster.json"
    roster_path.write_text(roster.to_json())
    return paths, roster_path, json.loads(roster.to_json())


def hospitals(counts: list[int]) -> list[dict[str, Any]]:
    names = tokens(len(counts))
    return [{"name": f"h{i}", "records": c, "token": names[i]} for i, c in enumerate(counts)]


def start_agent(
    procs: Processes,
    tmp_path: Path,
    url: str,
    i: int,
    data: Path,
    key: Path,
    roster: Path,
    *extra: str,
    env: dict[str, str | None] | None = None,
) -> Child:
    return procs.start(
        f"agent{i}",
        "client",
        "--coordinator",
        url,
        "--token-file",
        str(token_file(tmp_path, tokens(i + 1)[i], f"agent{i}.token")),
        "--data",
        str(data),
        "--model",
        "gmm",
        "--state",
        str(tmp_path / f"agent{i}"),
        *AGENT_BUDGET,
        "--signing-key",
        str(key),
        "--roster",
        str(roster),
        "--min-honest",
        "2",
        "--wait",
        "5",
        "--give-up",
        "120",
        *extra,
        env=env,
    )


@dataclass
class SecAggRun:
    """One secagg run of ``counts`` records per hospital on a coordinator whose port and
    state file are fixed, so that it can be killed and restarted (``secagg_run``)."""

    procs: Processes
    tmp_path: Path
    counts: list[int]
    port: int = field(default_factory=free_port)
    coordinator: Child | None = None
    created: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def db(self) -> Path:
        return self.tmp_path / "coordinator.sqlite"

    @property
    def run_id(self) -> str:
        return str(self.created["run_id"])

    @property
    def params(self) -> PublicParameters:
        return PublicParameters.model_validate(self.created["params"])

    def start_coordinator(self, *, log_level: str = "warning") -> None:
        self.coordinator, _ = start_coordinator(
            self.procs,
            state=self.db,
            port=self.port,
            log_level=log_level,
            env={"LDPEM_TICK": "0.1"},
            timeout=120,
        )

    def kill_coordinator(self) -> None:
        """SIGKILL, as a crash: nothing of the process runs after it."""
        assert self.coordinator is not None
        self.coordinator.send_signal(signal.SIGKILL)
        self.coordinator.wait(30)

    def create(self, **request: Any) -> dict[str, Any]:
        """Keys and roster of K = len(counts) hospitals, then the run, through ``ldpem run
        create``; ``request`` adds fields (d, rounds, seed, t_min, round_deadline, …)."""
        _, _, roster = keys_and_roster(self.tmp_path, len(self.counts))
        self.created = cli_create_run(
            self.tmp_path,
            self.url,
            [],
            hospitals=hospitals(self.counts),
            epsilon=1.0,
            mechanism="secagg",
            roster=roster,
            forecast=False,
            **request,
        )
        return self.created

    def start_agents(
        self,
        data: list[Path],
        *,
        seeds: list[int] | None = None,
        env: dict[str, str | None] | None = None,
        faults: dict[str, str] | None = None,
    ) -> dict[str, Child]:
        """One agent per hospital, by name; ``seeds``: research seeds (reproducible noise,
        so that the run equals its simulation); ``faults``: hospital → its
        LDPEM_AGENT_FAULT (ldpem.client.faults)."""
        agents = {}
        for i, path in enumerate(data):
            extra = () if seeds is None else ("--seed", str(seeds[i]))
            fault = (faults or {}).get(f"h{i}")
            agents[f"h{i}"] = start_agent(
                self.procs,
                self.tmp_path,
                self.url,
                i,
                path,
                self.tmp_path / f"h{i}.key",
                self.tmp_path / "roster.json",
                *extra,
                env=env if fault is None else {**(env or {}), "LDPEM_AGENT_FAULT": fault},
            )
        return agents

    def stored(self) -> dict[int, list[Message]]:
        """Round → every message the coordinator stored, in order."""
        with sqlite3.connect(self.db) as connection:
            rows = connection.execute(
                "SELECT t, kind, holder, body FROM secagg_messages WHERE run_id = ? "
                "ORDER BY t, seq",
                (self.run_id,),
            ).fetchall()
        out: dict[int, list[Message]] = defaultdict(list)
        for t, kind, holder, body in rows:
            out[t].append((kind, holder, json.loads(body)))
        return out

    def reports(self, t: int) -> dict[str, str]:
        """Each agent's persisted report of round t (its ledger's bytes), by hospital."""
        out = {}
        for i in range(len(self.counts)):
            with sqlite3.connect(self.tmp_path / f"agent{i}" / "ledger.sqlite") as connection:
                row = connection.execute(
                    "SELECT body FROM rounds WHERE run_key = ? AND round = ?", (self.run_id, t)
                ).fetchone()
            if row is not None and row[0]:
                out[f"h{i}"] = bytes(row[0]).decode()
        return out


def secagg_run(procs: Processes, tmp_path: Path, counts: list[int], **request: Any) -> SecAggRun:
    """A coordinator started and a secagg run created on it (``SecAggRun.create``)."""
    run = SecAggRun(procs, tmp_path, counts)
    run.start_coordinator()
    run.create(**request)
    return run
