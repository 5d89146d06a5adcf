"""Finding, fixed: the honest-range check used to trust the σ_r a report declares, so an
enrolled hospital claiming a huge σ_r could send any finite total and have it counted. The
coordinator now refuses a σ_r above max_noise_factor × the run's own σ_r."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from ldpem.server.app import create_app
from tests.fedkit import TOKENS, admin_headers, report_body, run_request, settings


def test_a_huge_claimed_noise_std_does_not_widen_the_honest_range(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        created = client.post(
            "/v1/runs", json=run_request(records=100, d=4), headers=admin_headers()
        )
        run_id = created.json()["run_id"]
        response = client.post(
            f"/v1/runs/{run_id}/rounds/0/reports",
            json=report_body(0, total=[1e250, -1e250, 1e250, 0.0], noise_std=1e300),
            headers={"Authorization": f"Bearer {TOKENS[0]}"},
        )
        assert response.status_code == 422, response.text
        assert "exceeds 10× the run's calibrated σ_r" in response.json()["detail"]
