"""Every report the coordinator must refuse: status code, message, and no change of state."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ldpem.common.core.accounting import Budget, noise_std_for
from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.protocol import local_noise_std
from ldpem.common.wire import PublicParameters
from ldpem.server.coordinator import implied_epsilon, noise_floor, run_noise_std
from tests.fedkit import TOKENS, admin_headers, hospital_headers, report_body, run_request

RECORDS = 103  # 5 rounds: groups of 21, 21, 21, 20, 20


def create(client: TestClient, **change: Any) -> dict[str, Any]:
    response = client.post(
        "/v1/runs", json=run_request(records=RECORDS, **change), headers=admin_headers()
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def report(i: int = 0, t: int = 0, **change: Any) -> dict[str, Any]:
    return report_body(i, t, records=RECORDS, **change)


def snapshot(client: TestClient, run_id: str) -> list[Any]:
    return [
        client.get(f"/v1/runs/{run_id}").json(),
        client.get(f"/v1/runs/{run_id}/rounds").json(),
        client.get(f"/v1/runs/{run_id}/participation").json(),
        client.get(f"/v1/runs/{run_id}/trajectory").json(),
    ]


def post(client: TestClient, run_id: str, t: int, body: Any, headers: dict[str, str]) -> Any:
    return client.post(f"/v1/runs/{run_id}/rounds/{t}/reports", json=body, headers=headers)


@pytest.fixture
def run_id(client: TestClient) -> str:
    run_id: str = create(client)["run_id"]
    # One accepted report, so that "no change" also covers existing reports.
    assert post(client, run_id, 0, report(1), hospital_headers(1)).status_code == 200
    return run_id


def refused(
    client: TestClient,
    run_id: str,
    status: int,
    message: str,
    *,
    t: int = 0,
    body: Any = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> None:
    before = snapshot(client, run_id)
    headers = hospital_headers(0) if headers is None else headers
    if raw is not None:
        response = client.post(
            f"/v1/runs/{run_id}/rounds/{t}/reports",
            content=raw,
            headers={**headers, "Content-Type": "application/json"},
        )
    else:
        response = post(client, run_id, t, report() if body is None else body, headers)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert message in (detail if isinstance(detail, str) else json.dumps(detail))
    assert snapshot(client, run_id) == before


def test_missing_token(client: TestClient, run_id: str) -> None:
    refused(client, run_id, 401, "missing bearer token", headers={})


def test_unknown_token(client: TestClient, run_id: str) -> None:
    refused(client, run_id, 401, "unknown token", headers={"Authorization": "Bearer not-a-token"})


def test_admin_token_cannot_report(client: TestClient, run_id: str) -> None:
    refused(client, run_id, 401, "unknown token", headers=admin_headers())


def test_report_for_another_hospital(client: TestClient, run_id: str) -> None:
    refused(client, run_id, 403, "the token belongs to hospital h0, not h2", body=report(2))


def test_token_of_another_run(client: TestClient, run_id: str) -> None:
    other = client.post(
        "/v1/runs",
        json=run_request(hospitals=1, records=RECORDS)
        | {"hospitals": [{"name": "h0", "records": RECORDS}]},
        headers=admin_headers(),
    ).json()
    token = other["tokens"][0]["token"]
    refused(
        client,
        run_id,
        403,
        f"the token is not enrolled in run '{run_id}'",
        headers={"Authorization": f"Bearer {token}"},
    )


def test_round_not_open_yet(client: TestClient, run_id: str) -> None:
    refused(client, run_id, 409, "round 1 is not open (the open round is 0)", t=1, body=report(t=1))


def wait_for_round(client: TestClient, run_id: str, t: int) -> None:
    deadline = time.monotonic() + 10
    while client.get(f"/v1/runs/{run_id}").json()["round"] < t:
        assert time.monotonic() < deadline, "the round did not close at its deadline"
        time.sleep(0.02)


def test_round_already_closed(client: TestClient) -> None:
    # Quorum 2 of 3: round 0 closes at its deadline without h2.
    run_id = create(client, quorum=2, round_deadline=0.3)["run_id"]
    for i in (0, 1):
        assert post(client, run_id, 0, report(i), hospital_headers(i)).status_code == 200
    wait_for_round(client, run_id, 1)
    refused(
        client,
        run_id,
        409,
        "round 0 is not open (the open round is 1)",
        body=report(2),
        headers=hospital_headers(2),
    )


def test_report_for_a_finished_run(client: TestClient) -> None:
    run_id = create(client, rounds=1, quorum=2, round_deadline=0.3)["run_id"]
    for i in (0, 1):
        body = report(i, count=RECORDS, noise_std=4.5)  # one round: the floor is 4.06
        assert post(client, run_id, 0, body, hospital_headers(i)).status_code == 200
    wait_for_round(client, run_id, 1)
    assert client.get(f"/v1/runs/{run_id}").json()["status"] == "finished"
    refused(
        client,
        run_id,
        409,
        "round 0 is not open (the run is finished)",
        body=report(2, count=RECORDS, noise_std=4.5),
        headers=hospital_headers(2),
    )


def test_same_report_twice_is_an_idempotent_success(client: TestClient, run_id: str) -> None:
    before = snapshot(client, run_id)
    response = post(client, run_id, 0, report(1), hospital_headers(1))
    assert response.status_code == 200
    assert response.json()["duplicate"] is True
    assert snapshot(client, run_id) == before


def test_same_round_twice_with_different_contents(client: TestClient, run_id: str) -> None:
    refused(
        client,
        run_id,
        409,
        "hospital h1 already reported round 0 with different contents",
        body=report(1, total=[0.5, -1.0, 2.0, 1e-9]),
        headers=hospital_headers(1),
    )


def test_wrong_dimension(client: TestClient, run_id: str) -> None:
    refused(
        client,
        run_id,
        422,
        "total must have 4 entries (the size of beta), got 3",
        body=report(total=[1.0, 2.0, 3.0]),
    )


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers(client: TestClient, run_id: str, literal: str) -> None:
    raw = json.dumps(report(), allow_nan=True).replace("-1.0", literal).encode()
    refused(client, run_id, 422, "total[1]: Input should be a finite number", raw=raw)


def test_non_finite_noise_std(client: TestClient, run_id: str) -> None:
    raw = json.dumps(report()).replace('"noise_std": 3.0', '"noise_std": Infinity').encode()
    refused(client, run_id, 422, "noise_std: Input should be a finite number", raw=raw)


@pytest.mark.parametrize("count", [0, 20, 22, RECORDS])
def test_count_that_does_not_match_enrolment(client: TestClient, run_id: str, count: int) -> None:
    refused(
        client,
        run_id,
        422,
        f"count {count} does not match enrolment: hospital h0 enrolled {RECORDS} records, "
        "21 in round 0",
        body=report(count=count),
    )


def test_outside_the_honest_range(client: TestClient, run_id: str) -> None:
    params = client.get(f"/v1/runs/{run_id}/round", headers=hospital_headers(0)).json()["params"]
    count, noise = 21, 3.0
    limit = (
        count * params["scale"] * truncation_bound(params["smoothing"])
        + 10 * math.sqrt(count) * noise
    )
    # Just inside is accepted by another hospital; just outside is refused.
    refused(
        client,
        run_id,
        422,
        "outside the range an honest client can produce",
        body=report(total=[0.0, limit * 1.001, 0.0, 0.0], noise_std=noise),
    )
    inside = post(
        client, run_id, 0, report(2, total=[0.0, -limit * 0.999, 0.0, 0.0]), hospital_headers(2)
    )
    assert inside.status_code == 200, inside.text


def test_local_report_without_noise(client: TestClient, run_id: str) -> None:
    refused(client, run_id, 422, "mechanism local needs noise_std > 0", body=report(noise_std=0.0))


def test_report_with_another_mechanism(client: TestClient, run_id: str) -> None:
    refused(
        client,
        run_id,
        422,
        "report uses mechanism none, the run uses local",
        body=report(mechanism="none", noise_std=0.0),
    )


def test_report_naming_another_round_than_its_path(client: TestClient, run_id: str) -> None:
    refused(
        client,
        run_id,
        422,
        "report names round 1 but was posted to round 0",
        body=report(t=1, count=21),
    )


def test_malformed_body(client: TestClient, run_id: str) -> None:
    refused(
        client,
        run_id,
        422,
        "mechanism: Field required (and 3 more errors)",
        body={"hospital": "h0", "round": 0},
    )


def test_body_too_large(client: TestClient, run_id: str) -> None:
    big = report(total=[0.0] * 300_000)
    refused(client, run_id, 413, "request body larger than the limit of 1048576 bytes", body=big)


def test_unknown_run(client: TestClient, run_id: str) -> None:
    response = post(client, "nope", 0, report(), hospital_headers(0))
    assert response.status_code == 403
    assert client.get("/v1/runs/nope").status_code == 404
    assert client.get("/v1/runs/nope").json()["detail"] == "no run 'nope'"


def test_creating_a_run_needs_the_admin_token(client: TestClient) -> None:
    assert client.post("/v1/runs", json=run_request()).status_code == 401
    response = client.post("/v1/runs", json=run_request(), headers=hospital_headers(0))
    assert response.status_code == 403
    assert response.json()["detail"] == "this token is not the admin token"
    assert client.get("/v1/runs").json() == []


def test_a_token_cannot_be_enrolled_twice(client: TestClient) -> None:
    create(client)
    response = client.post("/v1/runs", json=run_request(records=RECORDS), headers=admin_headers())
    assert response.status_code == 409
    assert response.json()["detail"] == "the token of hospital h0 is already in use"
    assert len(client.get("/v1/runs").json()) == 1


def test_long_poll_needs_a_token_of_the_run(client: TestClient, run_id: str) -> None:
    assert client.get(f"/v1/runs/{run_id}/round").status_code == 401
    assert client.get(f"/v1/runs/{run_id}/round", headers=hospital_headers(0)).status_code == 200
    assert client.get(f"/v1/runs/{run_id}/round", headers=admin_headers()).status_code == 200
    assert TOKENS


def test_streamed_body_too_large(client: TestClient, run_id: str) -> None:
    before = snapshot(client, run_id)

    def chunks() -> Iterator[bytes]:
        for _ in range(300):
            yield b" " * 4096  # no Content-Length: counted as it streams

    response = client.post(
        f"/v1/runs/{run_id}/rounds/0/reports",
        content=chunks(),
        headers={**hospital_headers(0), "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["detail"] == "request body larger than the limit of 1048576 bytes"
    assert snapshot(client, run_id) == before


def test_noise_std_beyond_the_ceiling(client: TestClient, run_id: str) -> None:
    # A huge stated σ_r would widen the honest range without bound (a σ_r of 1e300 would let
    # totals of 1e250 through); the coordinator accepts at most 10× the run's own σ_r.
    params = client.get(f"/v1/runs/{run_id}/round", headers=hospital_headers(0)).json()["params"]
    ceiling = 10 * run_noise_std(PublicParameters(**params))
    refused(
        client,
        run_id,
        422,
        "exceeds 10× the run's calibrated σ_r",
        body=report(noise_std=1e300, total=[1e250, 0.0, 0.0, 0.0]),
    )
    refused(client, run_id, 422, "exceeds 10×", body=report(noise_std=ceiling * 1.001))
    accepted = post(client, run_id, 0, report(2, noise_std=ceiling * 0.999), hospital_headers(2))
    assert accepted.status_code == 200, accepted.text


def run_params(client: TestClient, run_id: str, i: int = 0) -> PublicParameters:
    info = client.get(f"/v1/runs/{run_id}/round", headers=hospital_headers(i)).json()
    return PublicParameters(**info["params"])


def test_noise_std_below_the_floor(client: TestClient, run_id: str) -> None:
    # The run's (ε, δ) needs σ_r ≥ the floor; a report declaring less would count a sum less
    # private than the run's guarantee. Float slack: 1e-6 relative.
    floor = noise_floor("local", run_params(client, run_id), 21)
    assert floor == run_noise_std(run_params(client, run_id))  # the run uses exact accounting
    refused(client, run_id, 422, "below the σ_r", body=report(noise_std=1.0))
    refused(client, run_id, 422, "would spend epsilon", body=report(noise_std=floor * 0.9999))
    within = post(client, run_id, 0, report(noise_std=floor * (1 - 1e-7)), hospital_headers(0))
    assert within.status_code == 200, within.text
    rows = client.get(f"/v1/runs/{run_id}/participation").json()
    assert rows[0]["weaker"] is False and abs(rows[0]["epsilon"] - 1.0) < 1e-5


@pytest.mark.parametrize("literal", ["true", '"3.5"', "1e999", "null"])
def test_noise_std_must_be_a_finite_json_number(
    client: TestClient, run_id: str, literal: str
) -> None:
    raw = json.dumps(report()).replace('"noise_std": 3.0', f'"noise_std": {literal}').encode()
    refused(client, run_id, 422, "noise_std: Input should be a", raw=raw)


def test_a_paper_run_accepts_the_smaller_exact_sigma(client: TestClient) -> None:
    # The floor is the tight (exact) σ_r at the run's (ε, δ): an agent calibrating with the
    # exact accounting meets a run published with the paper's (larger σ_r) accounting.
    run_id = create(client, accounting="paper")["run_id"]
    params = run_params(client, run_id)
    exact = local_noise_std(
        scale=params.scale or 0.0,
        smoothing=params.smoothing or 0.0,
        d=params.d,
        budget=Budget(params.epsilon, params.delta),
    )
    assert exact < 0.9 * run_noise_std(params)
    assert exact == noise_floor("local", params, 21)
    accepted = post(client, run_id, 0, report(noise_std=exact), hospital_headers(0))
    assert accepted.status_code == 200, accepted.text
    refused(
        client,
        run_id,
        422,
        "below the σ_r",
        body=report(1, noise_std=exact * 0.999),
        headers=hospital_headers(1),
    )


def test_local_clip_floor_and_the_mechanisms_without_noise(client: TestClient) -> None:
    run_id = create(client, mechanism="local-clip")["run_id"]
    params = run_params(client, run_id)
    floor = noise_floor("local-clip", params, 21)
    assert floor == noise_std_for(epsilon=1.0, delta=params.delta, sensitivity=2.0)
    body = report(mechanism="local-clip", noise_std=floor / 2)
    refused(client, run_id, 422, "below the σ_r", body=body)
    body = report(mechanism="local-clip", noise_std=floor * 1.5)
    assert post(client, run_id, 0, body, hospital_headers(0)).status_code == 200
    for mechanism in ("central", "none"):
        assert noise_floor(mechanism, params.model_copy(update={"mechanism": mechanism}), 21) == 0


def test_a_run_allowing_weaker_reports_accepts_and_shows_them(client: TestClient) -> None:
    run_id = create(client, allow_weaker_reports=True)["run_id"]
    params = run_params(client, run_id)
    accepted = post(client, run_id, 0, report(noise_std=1.0), hospital_headers(0))
    assert accepted.status_code == 200, accepted.text
    rows = client.get(f"/v1/runs/{run_id}/participation").json()
    epsilon = implied_epsilon("local", params, 1.0, 21)
    assert epsilon is not None and epsilon > 2.0
    assert (rows[0]["noise_std"], rows[0]["epsilon"], rows[0]["weaker"]) == (1.0, epsilon, True)
    assert rows[1]["noise_std"] is None and rows[1]["weaker"] is False
    assert client.get(f"/v1/runs/{run_id}").json()["allow_weaker_reports"] is True
    page = client.get(f"/runs/{run_id}").text
    assert "declared σ_r" in page and f"{epsilon:.4g}" in page and "weaker than the run" in page
    # A σ_r so small that ε overflows float64 is no privacy at all: refused even here.
    for tiny in (1e-300, 5e-324):
        refused(
            client,
            run_id,
            422,
            "too small for any finite epsilon",
            body=report(1, noise_std=tiny),
            headers=hospital_headers(1),
        )
    # Another mechanism is refused even here.
    refused(
        client,
        run_id,
        422,
        "report uses mechanism none",
        body=report(1, mechanism="none", noise_std=0.0),
        headers=hospital_headers(1),
    )


def test_an_overflowing_m_step_fails_the_run_instead_of_storing_infinity(
    client: TestClient,
) -> None:
    # Mechanism none has no honest range: three finite totals of 1.5e308 sum to infinity.
    run_id = create(client, mechanism="none")["run_id"]
    for i in range(3):
        body = report(i, mechanism="none", noise_std=0.0, total=[1.5e308, 0.0, 0.0, 0.0])
        assert post(client, run_id, 0, body, hospital_headers(i)).status_code == 200
    summary = client.get(f"/v1/runs/{run_id}").json()
    assert summary["status"] == "failed" and "overflowed" in summary["reason"]
    for suffix in ("/rounds", "/participation", "/trajectory"):
        assert client.get(f"/v1/runs/{run_id}{suffix}").status_code == 200
    assert client.get(f"/runs/{run_id}").status_code == 200
    info = client.get(f"/v1/runs/{run_id}/round", headers=hospital_headers(0)).json()
    assert info["status"] == "failed" and all(math.isfinite(v) for v in info["beta"])
