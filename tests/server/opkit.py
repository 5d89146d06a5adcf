"""A run driven by honest reports, for the operator's tests (status pages, metrics, auth).

Each hospital holds synthetic GMM records and reports, per round, exactly what an agent at
the run's budget would (``holder_round`` with ``agent_mechanism``), so β moves as in a real
run and every report passes the coordinator's checks.

Also: reading /metrics, and a real run (coordinator and agents as processes) whose third
hospital starts after its round-0 deadline (``late_hospital_run``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from ldpem.client.trust import agent_mechanism
from ldpem.common.core.accounting import Budget
from ldpem.common.models import Records, get_model
from ldpem.common.planning.simulator import round_groups
from ldpem.common.protocol.rounds import holder_round
from ldpem.common.wire import PublicParameters
from ldpem.processes import Processes, start_agent, start_coordinator, wait_until
from tests.fedkit import (
    AGENT_BUDGET,
    TOKENS,
    admin_headers,
    hospital_headers,
    run_request,
    settled,
    write_gmm_data,
)

READ = "read-token-for-tests-0123456789abcdef"


def read_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {READ}"}


@dataclass
class Study:
    #: An ``httpx.Client`` on a live server, or FastAPI's ``TestClient`` (a subclass).
    client: httpx.Client
    run_id: str
    params: PublicParameters
    groups: list[list[Records]]

    def beta(self) -> list[float]:
        run = self.client.get(f"/v1/runs/{self.run_id}", headers=admin_headers())
        assert run.status_code == 200, run.text
        beta: list[float] = run.json()["beta"]
        return beta

    def report(self, i: int, t: int, *, delta: float | None = None) -> Any:
        """Hospital ``i``'s honest report for round t at the current β, posted; ``delta``:
        calibrated at that δ (an agent stricter than the run) instead of the run's."""
        mechanism = agent_mechanism(
            self.params,
            budget=Budget(
                epsilon=self.params.epsilon,
                delta=self.params.delta if delta is None else delta,
                accounting=self.params.accounting,
            ),
        )[0]
        report = holder_round(
            model=get_model(self.params.model),
            beta=np.asarray(self.beta()),
            records=self.groups[i][t],
            sigma=self.params.sigma,
            mechanism=mechanism,
            rng=np.random.default_rng([i, t]),
        )
        body = {
            "hospital": f"h{i}",
            "round": t,
            "mechanism": self.params.mechanism,
            "count": report.count,
            "total": [float(v) for v in report.total],
            "noise_std": mechanism.noise_std if mechanism.is_local else 0.0,
        }
        return self.client.post(
            f"/v1/runs/{self.run_id}/rounds/{t}/reports", json=body, headers=hospital_headers(i)
        )

    def round(self, t: int, hospitals: range | list[int]) -> None:
        for i in hospitals:
            response = self.report(i, t)
            assert response.status_code == 200, response.text


def start_run(
    client: httpx.Client,
    *,
    hospitals: int = 3,
    records: int = 2000,
    d: int = 4,
    rounds: int = 6,
    **extra: Any,
) -> Study:
    """Create a run of ``hospitals`` × ``records`` GMM records (admin token)."""
    request = run_request(hospitals=hospitals, records=records, d=d, rounds=rounds)
    request.update(extra)
    created = client.post("/v1/runs", json=request, headers=admin_headers())
    assert created.status_code == 201, created.text
    body = created.json()
    if request.get("forecast"):  # computed in the background: wait for it, as a reader would
        settled(client, body["run_id"], headers=admin_headers())
    params = PublicParameters.model_validate(body["params"])
    data, _ = get_model("gmm").generate(
        hospitals * records, d, snr=3.0, sigma=1.0, rng=np.random.default_rng(7)
    )
    groups = [
        round_groups(
            data.take(slice(i * records, (i + 1) * records)),
            rounds,
            reuse=False,
            rng=np.random.default_rng(100 + i),
        )
        for i in range(hospitals)
    ]
    assert len(TOKENS) >= hospitals
    return Study(client=client, run_id=body["run_id"], params=params, groups=groups)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: Any) -> Samples:
    """Every sample of /metrics by (sample name, sorted labels), parsed by
    prometheus_client.parser."""
    response = client.get("/metrics", headers=read_headers())
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def run_gauges(samples: Samples, run_id: str) -> dict[str, float]:
    """The ldpem_run_* samples of run ``run_id`` by name."""
    return {
        name: value
        for (name, labels), value in samples.items()
        if name.startswith("ldpem_run_") and labels == (("run", run_id),)
    }


def health_banner(page: str) -> str:
    """The text of a run page's health banner: its headline, then " | " and each point of
    attention below it."""
    found = re.search(r'<div id="health".*?</div>', page, re.S)
    assert found is not None, page[:500]
    return re.sub(r"<[^>]+>", "", found.group(0).replace("<li>", " | ")).strip()


@dataclass
class Seen:
    """A run page's health banner and the run's gauges, read one after the other."""

    banner: str
    gauges: dict[str, float]


@dataclass
class LateRun:
    url: str
    run_id: str
    #: While h2, not started, was late in round 0; once round 0 closed without it.
    late: Seen
    missing: Seen


#: Round 0's deadline: long enough for h0 and h1 to start and report with time to spare,
#: on a loaded machine, before h2 is late (1.5× their pace, at least 5 s).
LATE_DEADLINE = 30.0


def late_hospital_run(procs: Processes, tmp_path: Path, *, rounds: int = 4) -> LateRun:
    """A real ``ldpem coordinator`` and ``ldpem client`` agents: a run of 3 hospitals,
    quorum 2, whose h2 starts only after round 0 closed at its deadline without it.
    Returns once the three agents exited 0, with what the page and /metrics said meanwhile."""
    _, url = start_coordinator(
        procs, state=tmp_path / "coordinator.sqlite", env={"LDPEM_TICK": "0.1"}, timeout=120
    )
    with httpx.Client(base_url=url, timeout=30) as http:
        run_id, late, missing = _late_run(procs, tmp_path, http, url, rounds)
    return LateRun(url, run_id, late, missing)


def _late_run(
    procs: Processes, tmp_path: Path, http: httpx.Client, url: str, rounds: int
) -> tuple[str, Seen, Seen]:
    paths, _ = write_gmm_data(tmp_path, [300, 300, 300], 3)
    request = run_request(
        hospitals=3, records=300, d=3, rounds=rounds, quorum=2, round_deadline=LATE_DEADLINE
    )
    created = http.post("/v1/runs", json=request, headers=admin_headers())
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]

    def agent(i: int) -> Any:
        return start_agent(
            procs,
            f"h{i}",
            url=url,
            token=TOKENS[i],
            model="gmm",
            data=paths[i],
            state=tmp_path / f"agent{i}",
            args=[*AGENT_BUDGET, "--wait", "5", "--give-up", "120"],
        )

    def seen() -> Seen:
        banner = health_banner(http.get(f"/runs/{run_id}").text)
        return Seen(banner, run_gauges(scrape(http), run_id))

    agents = [agent(0), agent(1)]
    wait_until(
        lambda: "late in round t = 0: h2" in seen().banner,
        timeout=LATE_DEADLINE,
        what="h2 late in round 0",
        poll=0.2,
    )
    late = seen()
    wait_until(
        lambda: http.get(f"/v1/runs/{run_id}").json()["round"] >= 1,
        timeout=LATE_DEADLINE + 30,
        what="round 0 closed at its deadline",
        poll=0.2,
    )
    missing = seen()
    agents.append(agent(2))
    for process in agents:
        assert process.wait(180) == 0, procs.log(process)[-3000:]
    return run_id, late, missing
