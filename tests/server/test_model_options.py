"""A run's model options on the coordinator (issue 44): a request whose options the model
does not declare is refused with one line (422, never a 5xx, whatever the body), and a
run of a mixture sizes every check of β by its K·(d + 1) values, not by d."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from ldpem.common.models import get_model
from ldpem.common.protocol.run_fields import RUN_DEFAULTS
from ldpem.common.wire import PublicParameters
from ldpem.server.coordinator import run_noise_std
from tests.fedkit import admin_headers, hospital_headers, report_body, run_request

D, K = 4, 2
SIZE = K * (D + 1)


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        ("gmmk", {"components": 11}, "components must be an integer in [2, 10] for model gmmk"),
        ("lca", {"components": 1}, "components must be an integer in [2, 10] for model lca"),
        ("gmmk", {"classes": 3}, "model gmmk has no option classes (its options: components)"),
        ("gmm", {"components": 3}, "model gmm has no option components (its options: none)"),
        ("gmmk", {"components": "3"}, "model_options.components"),
        ("gmmk", {"components": True}, "model_options.components"),
        ("gmmk", {"components": 3.0}, "model_options.components"),
        ("gmmk", {"components": 2**70}, "components must be an integer in [2, 10]"),
        ("gmmk", {"components": [3]}, "model_options.components"),
        ("gmmk", [["components", 3]], "model_options"),
        ("gmmk", "components=3", "model_options"),
        ("gmmk", {f"o{i}": 3 for i in range(17)}, "model_options"),
        # β⁰ given with d values: a mixture's β has K·(d + 1).
        ("gmmk", {"components": K}, f"beta0 must have {SIZE} entries, got {D}"),
        # β would have 10·(100000 + 1) values: more than any report may carry.
        ("gmmk", {"components": 10}, "beta would have 1000010 values"),
    ],
)
def test_hostile_model_options_are_refused_in_one_line(
    client: TestClient, model: str, options: Any, message: str
) -> None:
    d = 100_000 if message.startswith("beta would") else D
    body = run_request(model=model, d=d, model_options=options)
    if message.startswith("beta0"):
        body["beta0"] = [0.1] * D
    response = client.post("/v1/runs", json=body, headers=admin_headers())
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    assert message in detail
    assert client.get("/v1/runs").json() == []


def test_a_mixture_run_publishes_its_options_and_checks_reports_by_its_beta_size(
    client: TestClient,
) -> None:
    body = run_request(model="gmmk", d=D, model_options={"components": K})
    response = client.post("/v1/runs", json=body, headers=admin_headers())
    assert response.status_code == 201, response.text
    created = response.json()
    run_id = created["run_id"]
    params = PublicParameters.model_validate(created["params"])
    assert params.model_options == {"components": K}
    assert len(client.get(f"/v1/runs/{run_id}").json()["beta"]) == SIZE
    url = f"/v1/runs/{run_id}/rounds/0/reports"
    noise = run_noise_std(params)
    # d values: the records' dimension is not the size of β.
    short = report_body(0, 0, total=[0.0] * D, noise_std=noise)
    refused = client.post(url, json=short, headers=hospital_headers(0))
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == f"total must have {SIZE} entries (the size of beta), got {D}"
    whole = report_body(0, 0, total=[0.0] * SIZE, noise_std=noise)
    assert client.post(url, json=whole, headers=hospital_headers(0)).status_code == 200
    page = client.get(f"/runs/{run_id}").text
    assert f"gmmk (components = {K}), d = {D}" in page
    assert "β₁₀" in page  # every coordinate of β is plotted, not the first d


def test_a_mixture_run_states_its_models_trivial_error_not_snr_sigma(client: TestClient) -> None:
    """The run's ``trivial_error`` is what the plan reads its rows against: the model's own
    trivial estimate (for lca, ‖β*‖ of K·d item logits at ±snr·σ/2, far from snr·σ)."""
    body = run_request(model="lca", d=D, model_options={"components": K})
    response = client.post("/v1/runs", json=body, headers=admin_headers())
    assert response.status_code == 201, response.text
    model = get_model("lca", {"components": K})
    snr = RUN_DEFAULTS.snr
    _, expected = model.trivial_estimate(D, snr=snr, sigma=body["sigma"])
    assert response.json()["trivial_error"] == expected
    assert expected > 1.25 * snr * body["sigma"]
