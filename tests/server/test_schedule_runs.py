"""A run with a round schedule and an averaged final estimate, as the coordinator sees it:
each round's count, noise floor and range, the reported estimate, the status page; and a
run without them published exactly as before."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from ldpem.common.mechanisms import get_mechanism
from ldpem.common.protocol import final_estimate, round_noise_variance, round_sizes
from ldpem.common.wire import PublicParameters, RunCreate, public_parameters
from ldpem.server.coordinator import run_noise_std
from tests.fedkit import admin_headers, hospital_headers, run_request

RECORDS, ROUNDS = 103, 5
SCHEDULE = "geometric:1.3"
SIZES = round_sizes(RECORDS, ROUNDS, SCHEDULE)


def create(client: TestClient, **change: Any) -> tuple[str, PublicParameters]:
    request = run_request(records=RECORDS, rounds=ROUNDS, **change)
    response = client.post("/v1/runs", json=request, headers=admin_headers())
    assert response.status_code == 201, response.text
    body = response.json()
    return body["run_id"], PublicParameters.model_validate(body["params"])


def report(i: int, t: int, params: PublicParameters, **change: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "hospital": f"h{i}",
        "round": t,
        "mechanism": "local",
        "count": SIZES[t],
        "total": [0.5 * (t + 1) * (1 if i else -1), 0.25, 0.0, -0.125],
        "noise_std": run_noise_std(params, RECORDS, t),
    }
    body.update(change)
    return body


def post(client: TestClient, run_id: str, body: dict[str, Any]) -> Any:
    i = int(body["hospital"][1:])
    url = f"/v1/runs/{run_id}/rounds/{body['round']}/reports"
    return client.post(url, json=body, headers=hospital_headers(i))


def test_a_run_without_a_schedule_is_published_as_before() -> None:
    params = public_parameters(RunCreate.model_validate(run_request()))
    published = json.loads(params.model_dump_json())
    # Older agents refuse unknown fields, and an agent's ledger binds these bytes.
    assert not {"schedule", "scales", "final"} & set(published)
    assert PublicParameters.model_validate(published) == params
    assert (params.schedule, params.scales, params.final) == ("equal", None, "last")


def test_each_round_has_its_own_count_noise_and_the_estimate_is_the_average(
    client: TestClient,
) -> None:
    run_id, params = create(client, schedule=SCHEDULE, final="average:3")
    assert params.scales is not None and params.scale is None
    assert params.scales == sorted(params.scales) and params.scales[0] < params.scales[-1]
    assert list(SIZES) == sorted(SIZES) and sum(SIZES) == RECORDS
    # Round 0 holds the schedule's count, not the equal one.
    wrong = post(client, run_id, report(0, 0, params, count=RECORDS // ROUNDS + 1))
    assert wrong.status_code == 422 and f"{SIZES[0]} in round 0" in wrong.json()["detail"]
    noise = [run_noise_std(params, RECORDS, t) for t in range(ROUNDS)]
    assert noise == sorted(noise) and noise[0] < noise[-1]  # s_t grows with m_t
    for t in range(ROUNDS):
        if t == ROUNDS - 1:
            # Round 0's σ_r is below the last round's floor (a larger s_t needs more noise).
            low = post(client, run_id, report(0, t, params, noise_std=noise[0]))
            assert low.status_code == 422 and "below the σ_r" in low.json()["detail"]
        for i in range(3):
            accepted = post(client, run_id, report(i, t, params))
            assert accepted.status_code == 200, accepted.text
    run = client.get(f"/v1/runs/{run_id}").json()
    trajectory = client.get(f"/v1/runs/{run_id}/trajectory").json()
    assert run["status"] == "finished" and len(trajectory["betas"]) == ROUNDS + 1
    # The estimate, recomputed from the trajectory and the reports' declared noise.
    variances = [
        round_noise_variance(
            get_mechanism(params.mechanism), [SIZES[t]] * 3, [run_noise_std(params, RECORDS, t)] * 3
        )
        for t in range(ROUNDS)
    ]
    expected = final_estimate(
        trajectory["betas"], variances, final="average:3", sign_invariant=True
    )
    assert run["beta"] == trajectory["estimate"] == [float(v) for v in expected.beta]
    assert trajectory["weights"] == list(expected.weights) and trajectory["final"] == "average:3"
    assert run["beta"] != trajectory["betas"][-1]
    page = client.get(f"/runs/{run_id}").text
    assert "reported estimate β̂" in page and "average:3: Σ w_t·β^t over t = 3 … 5" in page
    assert "β̂₁ (reported)" in page and f"{SCHEDULE} (records per round)" in page


def test_a_schedule_that_leaves_a_hospitals_round_empty_is_refused(client: TestClient) -> None:
    request = run_request(records=12, rounds=5, schedule="geometric:3")
    response = client.post("/v1/runs", json=request, headers=admin_headers())
    assert response.status_code == 422
    assert "round 0 would hold no record" in response.text
    bad = run_request(records=100, rounds=5, final="average:6")
    response = client.post("/v1/runs", json=bad, headers=admin_headers())
    assert response.status_code == 422 and "K must be in 1..5" in response.text
