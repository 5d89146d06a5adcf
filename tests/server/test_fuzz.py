"""API fuzzing of every endpoint from the coordinator's OpenAPI schema (schemathesis).

A live coordinator (uvicorn on 127.0.0.1, in a thread) holds a run with one accepted
report. Every operation of /openapi.json gets cases generated from its schema, positive
(valid by the schema) and negative (violating it), each under a caller drawn at random:
no token, a bogus token, a hospital token of the run or the admin token, with the run id
random or the real one. The admin's valid run creations are not fuzzed (the admin is
trusted; a valid request may ask for d = 10⁵ and 1,000 hospitals). Whatever arrives:
never a 5xx, and a refused request (4xx) leaves the run (summary, rounds, participation,
trajectory) exactly as it was.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from ldpem.server.app import create_app
from tests.fedkit import ADMIN, TOKENS, admin_headers, live_server, report_body, run_request
from tests.fedkit import settings as app_settings

CALLERS: dict[str, str | None] = {
    "none": None,
    "bogus": "Bearer not-a-token-of-anything-0000000000",
    "hospital": f"Bearer {TOKENS[0]}",
    "admin": f"Bearer {ADMIN}",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("fuzz")
    # Long-polls are capped at 0.2 s so that a fuzzed ?wait= cannot stall the test.
    app = create_app(app_settings(tmp, max_wait=0.2, forecast_seeds=1))
    with live_server(app) as url:
        created = httpx.post(
            f"{url}/v1/runs", json=run_request(records=100, d=4), headers=admin_headers()
        )
        assert created.status_code == 201, created.text
        run_id: str = created.json()["run_id"]
        accepted = httpx.post(
            f"{url}/v1/runs/{run_id}/rounds/0/reports",
            json=report_body(1),
            headers={"Authorization": f"Bearer {TOKENS[1]}"},
        )
        assert accepted.status_code == 200, accepted.text
        yield url, run_id


def snapshot(url: str, run_id: str) -> list[Any]:
    """The run's stored state as the read API answers it; the summary's health is left out,
    as it reads the clock (a hospital absent long enough becomes late)."""
    answers = [
        httpx.get(f"{url}/v1/runs/{run_id}{suffix}", timeout=30).json()
        for suffix in ("", "/rounds", "/participation", "/trajectory")
    ]
    for field in ("health", "health_line"):
        answers[0].pop(field, None)
    return answers


POSITIVE_EXAMPLES = 40  # per operation
NEGATIVE_EXAMPLES = 60  # per operation that has a query or body to violate
# Only these have inputs a negative case can violate (path strings and headers cannot be):
# for the others hypothesis proves negative generation unsatisfiable, slowly.
NEGATIVE = {
    "POST /v1/runs",
    "GET /v1/runs/{run_id}/round",
    "POST /v1/runs/{run_id}/rounds/{t}/reports",
}


def test_fuzz_every_operation(server: tuple[str, str]) -> None:
    url, run_id = server
    before = snapshot(url, run_id)
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # an operation the schema fails to describe
        operations.append(result.ok())
    assert len(operations) >= 9
    statuses: Counter[int] = Counter()
    problems: list[str] = []
    blocks = 0
    for operation in operations:
        label = f"{operation.method.upper()} {operation.path}"
        modes = [GenerationMode.POSITIVE]
        if label in NEGATIVE:
            modes.append(GenerationMode.NEGATIVE)
        for mode in modes:
            strategy = operation.as_strategy(generation_mode=mode)
            if "{run_id}" in operation.path:  # the real run id as often as random ones
                strategy = st.one_of(
                    strategy,
                    operation.as_strategy(generation_mode=mode, path_parameters={"run_id": run_id}),
                )
            examples = POSITIVE_EXAMPLES if mode is GenerationMode.POSITIVE else NEGATIVE_EXAMPLES
            trusted = label == "POST /v1/runs" and mode is GenerationMode.POSITIVE
            accepted = _fuzz(
                url, strategy, examples, label, mode.value, trusted, statuses, problems
            )
            blocks += 1
            after = snapshot(url, run_id)
            if accepted == 0 and after != before:
                problems.append(f"{label} [{mode.value}]: rejected requests changed the run")
            before = after
    assert not problems, problems[:10]
    total = sum(statuses.values())
    assert total >= 400, statuses
    print(f"fuzz: {total} requests in {blocks} blocks, statuses {dict(sorted(statuses.items()))}")


def _fuzz(
    url: str,
    strategy: Any,
    examples: int,
    label: str,
    mode: str,
    trusted: bool,
    statuses: Counter[int],
    problems: list[str],
) -> int:
    """Run ``examples`` cases, each under a caller drawn at random; returns the number of
    POSTs accepted (2xx)."""
    callers = [c for c in CALLERS if not (trusted and c == "admin")]
    accepted = [0]

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy, caller=st.sampled_from(callers))
    def run_case(case: Any, caller: str) -> None:
        headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        authorization = CALLERS[caller]
        if authorization is not None:
            headers["Authorization"] = authorization
        case.headers = headers
        response = case.call(base_url=url, timeout=30)
        statuses[response.status_code] += 1
        if response.status_code >= 500:
            problems.append(f"{label} [{mode}, {caller}]: {response.status_code} {response.text}")
        if case.method.upper() == "POST" and response.status_code < 300:
            accepted[0] += 1

    run_case()
    return accepted[0]


def test_schema_lists_every_route(server: tuple[str, str], tmp_path: Path) -> None:
    url, _ = server
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    for path in (
        "/v1/me",
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/v1/runs/{run_id}/round",
        "/v1/runs/{run_id}/rounds",
        "/v1/runs/{run_id}/rounds/{t}/reports",
        "/v1/runs/{run_id}/trajectory",
        "/v1/runs/{run_id}/participation",
        "/healthz",
    ):
        assert path in paths
