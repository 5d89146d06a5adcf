from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from ldpem.common.wire import (
    ReportIn,
    RunCreate,
    describe_errors,
    expected_round_count,
    report_digest,
)
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
        ({"missing": 0.2}, "only meaningful for models lca, rmc"),
    ],
)
def test_run_request_validation(change: dict[str, Any], message: str) -> None:
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


REPORT = '{"hospital":"h0","round":0,"mechanism":"local","count":1,"total":[1.5, 2],'


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        ('"noise_std": NaN}', "noise_std: Input should be a finite number"),
        ('"noise_std": Infinity}', "noise_std: Input should be a finite number"),
        ('"noise_std": 1e999}', "noise_std: Input should be a finite number"),
        ('"noise_std": true}', "noise_std: Input should be a valid number"),
        ('"noise_std": "1"}', "noise_std: Input should be a valid number"),
        ('"noise_std": 1, "extra": 1}', "unknown field 'extra'"),
    ],
)
def test_report_types_are_strict_and_errors_are_one_line(tail: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ReportIn.model_validate_json(REPORT + tail)
    described = describe_errors(caught.value.errors())
    assert described == message
    assert "\n" not in described


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("round", "1.0", "round"),
        ("round", "1.5", "round"),
        ("round", "true", "round"),
        ("round", '"1"', "round"),
        ("count", str(2**63), "count"),
        ("total", "[1, NaN]", "total[1]"),
        ("total", "[true]", "total[0]"),
        ("hospital", '"h0\\nX"', "hospital"),
    ],
)
def test_report_fields_refuse_coercion(field: str, value: str, where: str) -> None:
    values = {
        "hospital": '"h0"',
        "round": "0",
        "mechanism": '"local"',
        "count": "1",
        "total": "[1.0]",
        "noise_std": "1",
    }
    values[field] = value
    text = "{" + ",".join(f'"{k}": {v}' for k, v in values.items()) + "}"
    with pytest.raises(ValidationError) as caught:
        ReportIn.model_validate_json(text)
    assert describe_errors(caught.value.errors()).startswith(f"{where}: ")


def test_a_float_field_takes_a_json_integer() -> None:
    report = ReportIn.model_validate_json(REPORT + '"noise_std": 2}')
    assert report.noise_std == 2.0 and isinstance(report.noise_std, float)
    assert report.total == [1.5, 2.0] and isinstance(report.total[1], float)


def test_errors_never_show_the_input_and_escape_odd_keys() -> None:
    secret = "s3cr3t-value-that-must-not-come-back"
    with pytest.raises(ValidationError) as caught:
        ReportIn.model_validate_json(REPORT + f'"noise_std": "{secret}", "a\\nb": 1}}')
    described = describe_errors(caught.value.errors())
    assert secret not in described
    assert "\n" not in described
    assert described.endswith("(and 1 more error)")
    with pytest.raises(ValidationError) as caught:
        ReportIn.model_validate_json(REPORT + '"noise_std": 1, "' + "k" * 500 + '": 1}')
    described = describe_errors(caught.value.errors())
    assert len(described) < 80 and "…" in described
    assert describe_errors([]) == "invalid request"
