"""A run driven by honest reports, for the operator's tests (status pages, metrics, auth).

Each hospital holds synthetic GMM records and reports, per round, exactly what an agent at
the run's budget would (``holder_round`` with ``agent_mechanism``), so β moves as in a real
run and every report passes the coordinator's checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from ldpem.client.trust import agent_mechanism
from ldpem.common.models import Records, get_model
from ldpem.common.rounds import holder_round
from ldpem.common.simulation import round_groups
from ldpem.common.wire import PublicParameters
from tests.fedkit import TOKENS, admin_headers, hospital_headers, run_request

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
            epsilon=self.params.epsilon,
            delta=self.params.delta if delta is None else delta,
            accounting=self.params.accounting,
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
