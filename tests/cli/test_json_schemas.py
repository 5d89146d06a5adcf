"""The ``--json`` outputs of ``simulate``, ``plan`` and ``audit`` follow their JSON Schemas
(docs/schemas/*.schema.json, docs/ARCHITECTURE.md "Machine-readable outputs"): each
schema is a valid Draft 2020-12 schema and real output of each command, in its main
variants, validates against it. The schemas forbid undocumented keys, so a key added to an
output without its schema fails here."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from ldpem.cli import main

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def _schema(command: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{command}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _output(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _errors(command: str, payload: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(_schema(command))
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(payload)]


SIMULATE = ["simulate", "--n", "3000", "--d", "2", "--rounds", "3"]


@pytest.mark.parametrize(
    "extra",
    [
        [],  # local DP: a scale and a smoothing
        ["--mechanism", "hospital", "--hospitals", "3"],  # per-hospital scales
        ["--mechanism", "local-clip"],  # a clip norm
        ["--mechanism", "secagg", "--hospitals", "4"],  # noise shares
        ["--mechanism", "none", "--schedule", "geometric:1.5", "--final", "average:2"],
    ],
)
def test_simulate_json_follows_its_schema(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    payload = _output(capsys, [*SIMULATE, *extra])
    assert _errors("simulate", payload) == []


def test_plan_json_follows_its_schema(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--n", "3000", "--d", "2", "--rounds", "3", "--hospitals", "2"]
    argv += ["--seeds", "2", "--workers", "1", "--crossover-limit", "6000"]
    argv += ["--search-schedule"]
    payload = _output(capsys, argv)
    assert "schedule_search" in payload
    assert _errors("plan", payload) == []


def test_audit_json_follows_its_schema(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["audit", "--mechanism", "local", "--accounting", "exact", "--d", "2"]
    payload = _output(capsys, [*argv, "--draws", "200", "--holder-draws", "100"])
    assert _errors("audit", payload) == []


def test_a_schema_refuses_what_it_does_not_document(capsys: pytest.CaptureFixture[str]) -> None:
    payload = _output(capsys, SIMULATE)
    assert _errors("simulate", {**payload, "undocumented": 1}) != []
    missing = {k: v for k, v in payload.items() if k != "error"}
    assert _errors("simulate", missing) != []
    assert _errors("simulate", {**payload, "n": "3000"}) != []
    # The optional confidence region has exactly its documented shape.
    region = {"level": 0.95, "low": [0.1], "high": [0.2], "radius": 0.1, "draws": 200}
    good = {**payload, "confidence": {**region, "method": "bootstrap"}}
    assert _errors("simulate", good) == []
    assert _errors("simulate", {**payload, "confidence": region}) != []
    # None asked for (--draws 0), or an end and the radius unbounded (draws that diverged).
    assert _errors("simulate", {**payload, "confidence": None}) == []
    unbounded = {**region, "method": "bootstrap", "low": [None], "radius": None}
    assert _errors("simulate", {**payload, "confidence": unbounded}) == []
    assert _errors("simulate", {**payload, "split": "elsewhere"}) != []
    assert math.isfinite(payload["error"])
