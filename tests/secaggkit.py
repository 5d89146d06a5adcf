"""A federated secagg run for the tests: signing keys, roster, a coordinator process that
can be killed and restarted on its state, the run created as an operator creates it, and
one ``ldpem client`` process per hospital (hospital i is ``h{i}``, with key ``h{i}.key``).

And a FAKE coordinator for the security tests (tests/security/test_secagg_coordinator.py
on the mesh, test_secagg_graph_coordinator.py on the SecAgg+ graph): the run ``FAKE_RUN``
of a ``FakeConsortium``, the endpoints an agent calls (``fake_coordinator``) played by a
fake that may lie (``FakeSteps``), and the real ``ldpem client`` h0 run against it
(``attack``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

from fastapi import FastAPI, Request, Response

from ldpem.client.ledger import Ledger
from ldpem.common.secagg import (
    Holder,
    Roster,
    RoundParameters,
    generate_signing_key,
    public_key_bytes,
    signing_key_to_pem,
)
from ldpem.common.secagg.runvalues import grid_of, run_shares_mechanism, to_residues
from ldpem.common.wire import HospitalEnrolment, PublicParameters, RunCreate, public_parameters
from ldpem.common.wire.secagg import SECAGG_ANSWER_HEADER
from ldpem.processes import Child, Processes, free_port, start_coordinator
from tests.fedkit import (
    AGENT_BUDGET,
    CreatedRun,
    cli_create_run,
    live_server,
    process_manager,
    token_file,
)
from tests.security.test_malicious_coordinator import agent_argv, gmm_data, write_csv

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
    model: str = "gmm",
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
        model,
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
class SecAggRun(CreatedRun):
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
        model: str = "gmm",
        flags: tuple[str, ...] = (),
    ) -> dict[str, Child]:
        """One agent per hospital, by name; ``seeds``: research seeds (reproducible noise,
        so that the run equals its simulation); ``faults``: hospital → its
        LDPEM_AGENT_FAULT (ldpem.client.faults); ``model`` and ``flags`` (its options,
        ``--components K``): what each agent pins."""
        agents = {}
        # The hospitals assume what the run declares (the consortium agreed on c): a run
        # of small t_min hides an input from fewer than a third of the roster.
        assumed = ("--max-colluders", str(self.params.colluders or 0))
        for i, path in enumerate(data):
            extra = assumed + flags + (() if seeds is None else ("--seed", str(seeds[i])))
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
                model=model,
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

    def report(self, name: str, t: int) -> str | None:
        """Agent ``name``'s (h{i}'s) persisted report of round t (its ledger's bytes), if
        it persisted one."""
        ledger = self.tmp_path / f"agent{int(name[1:])}" / "ledger.sqlite"
        with contextlib.closing(sqlite3.connect(ledger)) as connection:
            row = connection.execute(
                "SELECT body FROM rounds WHERE run_key = ? AND round = ?", (self.run_id, t)
            ).fetchone()
        return bytes(row[0]).decode() if row is not None and row[0] else None

    def reports(self, t: int) -> dict[str, str]:
        """Each agent's persisted report of round t, by hospital."""
        found = {f"h{i}": self.report(f"h{i}", t) for i in range(len(self.counts))}
        return {name: body for name, body in found.items() if body is not None}

    def residues(self, report: str) -> list[int]:
        """The (D,) residues mod 2^modulus_bits a persisted report's total was masked as
        (grid units of the run's shares mechanism)."""
        bits = self.params.modulus_bits
        assert bits is not None
        grid = grid_of(run_shares_mechanism(self.params))
        return [int(v) for v in to_residues(json.loads(report)["total"], grid, bits)]


def secagg_run(procs: Processes, tmp_path: Path, counts: list[int], **request: Any) -> SecAggRun:
    """A coordinator started and a secagg run created on it (``SecAggRun.create``)."""
    run = SecAggRun(procs, tmp_path, counts)
    run.start_coordinator()
    run.create(**request)
    return run


#: The fake coordinator's run: its id, the prefix of its hospitals' tokens, d, T and each
#: hospital's records.
FAKE_RUN = "run-secagg-under-attack"
FAKE_TOKEN = "secagg-token-under-attack-abcdefgh"
FAKE_D, FAKE_ROUNDS, FAKE_RECORDS = 3, 2, 40


@dataclass
class FakeConsortium:
    """The signing keys and roster of the fake's hospitals (the agent is h0) and the public
    parameters of their secagg run ``FAKE_RUN``."""

    keys: dict[str, Any]
    roster: Roster
    params: PublicParameters
    #: The hospitals of the run (the roster may name more).
    enrolled: tuple[str, ...] = ()

    @classmethod
    def make(cls, names: Sequence[str], *, roster_size: int = 0, **request: Any) -> Self:
        """Hospitals ``names`` of ``FAKE_RECORDS`` records in a gmm run at ε = 1, δ = 1e-5;
        ``request`` adds the run request's share fields (t_min, the graph's, …). The roster
        names ``names`` and, up to ``roster_size``, more hospitals h{i} not in the run."""
        more = [f"h{i}" for i in range(roster_size) if f"h{i}" not in names]
        keys = {n: generate_signing_key() for n in [*names, *more]}
        roster = Roster({n: public_key_bytes(k) for n, k in keys.items()})
        run = RunCreate(
            model="gmm",
            d=FAKE_D,
            sigma=1.0,
            rounds=FAKE_ROUNDS,
            mechanism="secagg",
            epsilon=1.0,
            delta=1e-5,
            roster=json.loads(roster.to_json()),
            hospitals=[
                HospitalEnrolment(name=n, records=FAKE_RECORDS, token=f"{FAKE_TOKEN}-{n}")
                for n in names
            ],
            **request,
        )
        return cls(keys, roster, public_parameters(run), tuple(names))

    def others(self, parameters: RoundParameters) -> dict[str, Holder]:
        """The in-process holders of a round of ``parameters``: every hospital but h0."""
        return {
            n: Holder(n, self.roster, key, parameters, min_honest=1)
            for n, key in self.keys.items()
            if n != "h0" and n in self.enrolled
        }


class FakeSteps(Protocol):
    """A fake coordinator's side of what the agent h0 asks (``fake_coordinator``)."""

    @property
    def consortium(self) -> FakeConsortium: ...

    @property
    def posts(self) -> list[tuple[int, str]]:
        """(round, step) of every secure-aggregation message h0 posted, in order."""
        ...

    def published(self, t: int | None) -> dict[str, Any]:
        """The run's params as JSON sent with ``/v1/me`` (None) or with round t."""
        ...

    def take(self, t: int, step: str, body: dict[str, Any]) -> None:
        """h0's message of round t's ``step``, parsed JSON (the other holders' follow)."""
        ...

    def send(self, t: int, what: str) -> Any:
        """The message (``to_dict``) h0 gets for round t's ``what``."""
        ...


def fake_coordinator(fake: FakeSteps) -> FastAPI:
    """The endpoints an agent calls, played by ``fake``: ``/v1/me`` (h0 of ``FAKE_RUN``),
    the round long-poll (round after + 1, running until ``FAKE_ROUNDS``, no deadline) and
    the secure-aggregation steps (POST recorded in ``fake.posts``)."""
    app = FastAPI()

    @app.get("/v1/me")
    def me() -> dict[str, Any]:
        params = fake.published(None)
        return {"run_id": FAKE_RUN, "hospital": "h0", "records": FAKE_RECORDS, "params": params}

    @app.get("/v1/runs/{run}/round")
    def round_(run: str, after: int = -1) -> dict[str, Any]:
        t = after + 1
        return {
            "run_id": FAKE_RUN,
            "status": "running" if t < FAKE_ROUNDS else "finished",
            "round": t,
            "beta": [0.5, -0.5, 0.25],
            "deadline": None,
            "params": fake.published(t),
        }

    @app.post("/v1/runs/{run}/rounds/{t}/secagg/{step}")
    async def post(run: str, t: int, step: str, request: Request) -> Response:
        fake.posts.append((t, step))
        fake.take(t, step, json.loads(await request.body()))
        then = request.query_params.get("then")
        if then is None:
            return Response(json.dumps({"status": "accepted"}), media_type="application/json")
        # As the real coordinator answers a post that waits for its step's answer: the
        # lies reach the agent this way first (a GET only when none is named).
        return answer(t, then, {SECAGG_ANSWER_HEADER: then})

    @app.get("/v1/runs/{run}/rounds/{t}/secagg/{what}")
    def get(run: str, t: int, what: str) -> Response:
        return answer(t, what, {})

    def answer(t: int, what: str, headers: dict[str, str]) -> Response:
        sent = fake.send(t, what)
        return Response(json.dumps(sent.to_dict()), media_type="application/json", headers=headers)

    return app


@dataclass
class Outcome:
    code: int
    log: str
    posts: list[tuple[int, str]]


def attack(
    tmp_path: Path,
    fake: FakeSteps,
    *,
    budget: tuple[str, ...] = ("--epsilon", "100", "--delta", "0.5"),
    min_honest: int = 3,
    max_colluders: int | None = 0,
    envs: tuple[dict[str, str | None], ...] = ({},),
) -> Outcome:
    """Run the agent h0 (``--min-honest min_honest``, ``--max-colluders max_colluders``:
    the fakes' small runs hide an input from no colluder, so 0 unless a test says; None:
    the agent's default, a third of the roster) against ``fake``, once per environment in
    ``envs`` (a restart each), on one state directory; the last run's exit code, every
    run's log."""
    write_csv(tmp_path, gmm_data(FAKE_RECORDS, FAKE_D))
    (tmp_path / "h0.key").write_bytes(signing_key_to_pem(fake.consortium.keys["h0"]))
    (tmp_path / "h0.key").chmod(0o600)
    (tmp_path / "roster.json").write_text(fake.consortium.roster.to_json())
    extra: tuple[str, ...] = (
        "--signing-key",
        "h0.key",
        "--roster",
        "roster.json",
        "--min-honest",
        str(min_honest),
    )
    if max_colluders is not None:
        extra += ("--max-colluders", str(max_colluders))
    code, logs = 0, []
    with live_server(fake_coordinator(fake)) as url, process_manager(tmp_path) as procs:
        token_file(tmp_path, FAKE_TOKEN, "hospital.token")
        for env in envs:
            argv = agent_argv(url, "gmm", list(budget), extra)
            process = procs.start(f"agent-{time.monotonic_ns()}", *argv, env=env)
            code = process.wait(120)
            logs.append(procs.log(process))
    return Outcome(code, "".join(logs), list(fake.posts))


def refused(outcome: Outcome, words: str) -> str:
    """Exit 2 with one error line naming ``words``, no traceback; the line."""
    assert outcome.code == 2, outcome.log[-3000:]
    lines = [line for line in outcome.log.splitlines() if words in line]
    assert lines and "Traceback" not in outcome.log, outcome.log[-3000:]
    return lines[-1]


def refused_before_anything(tmp_path: Path, outcome: Outcome, words: str) -> str:
    """``refused``, and nothing posted, nothing charged and nothing bound; the line."""
    line = refused(outcome, words)
    assert outcome.posts == []
    ledger = Ledger(tmp_path / "state")
    try:
        assert ledger.entries() == [] and ledger.binding(FAKE_RUN) is None
    finally:
        ledger.close()
    return line
