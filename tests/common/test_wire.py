from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from ldpem.common.wire import ReportIn, RunCreate, expected_round_count, report_digest
from tests.fedkit import run_request


@pytest.mark.parametrize("records", [5, 6, 7, 100, 20_003])
@pytest.mark.parametrize("rounds", [1, 3, 5])
def test_expected_round_count_matches_the_partition_sizes(records: int, rounds: int) -> None:
    sizes = [len(part) for part in np.array_split(np.arange(records), rounds)]
    assert [expected_round_count(records, rounds, t) for t in range(rounds)] == sizes


def test_expected_round_count_rejects_a_round_outside_the_run() -> None:
    with pytest.raises(ValueError, match=r"round must be in 0\.\.4"):
        expected_round_count(10, 5, 5)


def test_run_request_defaults() -> None:
    request = RunCreate.model_validate(run_request())
    assert request.mechanism == "local"
    assert request.eta == 1.0
    assert request.on_short == "extend"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"quorum": 4}, "quorum 4 exceeds the 3 enrolled hospitals"),
        ({"rounds": 200}, "hospital h0 has 100 records, fewer than the 200 rounds"),
        ({"beta0": [1.0, 2.0]}, "beta0 must have 4 entries, got 2"),
        ({"mechanism": "central-clip"}, "mechanism"),
        ({"sigma": -1.0}, "greater than 0"),
        ({"unknown": 1}, "Extra inputs are not permitted"),
        ({"missing": 0.2}, "only meaningful for model rmc"),
    ],
)
def test_run_request_validation(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RunCreate.model_validate(run_request(**change))


def test_hospital_names_must_be_unique() -> None:
    request = run_request()
    request["hospitals"] = [{"name": "a", "records": 10}, {"name": "a", "records": 10}]
    with pytest.raises(ValidationError, match="hospital names must be unique"):
        RunCreate.model_validate(request)


def _report(**change: object) -> ReportIn:
    values: dict[str, object] = {
        "hospital": "h0",
        "round": 2,
        "mechanism": "local",
        "count": 20,
        "total": [0.1, -2.5, 1e-300, 3.0],
        "noise_std": 1.5,
    }
    values.update(change)
    return ReportIn.model_validate(values)


def test_report_round_trips_floats_exactly() -> None:
    report = _report(total=[0.1 + 0.2, math.pi, -1e-310, 1.7976931348623157e308])
    again = ReportIn.model_validate_json(report.model_dump_json())
    assert again == report
    assert report_digest(again) == report_digest(report)


def test_report_digest_changes_with_any_field() -> None:
    base = report_digest(_report())
    assert report_digest(_report(total=[0.1, -2.5, 1e-300, 3.0000000000000004])) != base
    assert report_digest(_report(count=21)) != base
    assert report_digest(_report(noise_std=1.25)) != base


def test_report_schema_lets_non_finite_numbers_through_to_the_coordinator_check() -> None:
    # The coordinator rejects them with a message that names the coordinate.
    report = ReportIn.model_validate_json(
        '{"hospital":"h0","round":0,"mechanism":"local","count":1,'
        '"total":[NaN, Infinity],"noise_std":1}'
    )
    assert math.isnan(report.total[0]) and math.isinf(report.total[1])
