"""docs/EXTENDING.md's answers to a plugin author's questions (issue 43, finding 17), each
an example this file runs as the guide shows it: declarations as ``ClassVar`` (a field is
refused), a subclass's own ``@dataclass`` when it adds a field (refused without), where
``ScaleRule`` comes from, what ``sensitivity(d)`` means under the holder's noise
(tests/examples/hospital_box.py, shown verbatim), and where a run's forecast shows now that
the coordinator computes it in the background."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ldpem.cli import main
from ldpem.common.core import plugins
from ldpem.common.core.accounting import Budget
from ldpem.common.mechanisms import LocalTruncation, get_mechanism, mechanism_names
from ldpem.common.mechanisms import registry as mechanism_registry
from ldpem.server.app import create_app
from tests.dockit import ROOT, exec_block, fenced_blocks
from tests.examples.local_box import LocalBox
from tests.fedkit import admin_headers, run_request, settings

GUIDE = (ROOT / "docs" / "EXTENDING.md").read_text()
EXAMPLE = "tests.examples.hospital_box"


def guide_blocks() -> list[tuple[str, str | None]]:
    """Each ```python block, with the ```text block right after it (its expected error,
    one blank line below) if any."""
    found = fenced_blocks(GUIDE, "docs/EXTENDING.md")
    pairs = []
    for block, after in zip(found, [*found[1:], None], strict=True):
        if block.language != "python":
            continue
        shown = after is not None and after.language == "text" and after.line == block.end + 2
        pairs.append((block.text, after.text.removesuffix("\n") if shown and after else None))
    return pairs


def block_with(text: str) -> tuple[str, str | None]:
    (found,) = [b for b in guide_blocks() if text in b[0]]
    return found


def run_block(code: str) -> dict[str, Any]:
    """The guide's block run as a module of its own, named so that no other test imports
    it."""
    return exec_block(code, filename="docs/EXTENDING.md", module="extending_guide_example")


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """What a test registers is gone after it; the example module is imported afresh."""
    monkeypatch.setattr(mechanism_registry, "_MECHANISMS", dict(mechanism_registry._MECHANISMS))
    monkeypatch.setattr(plugins, "_REGISTERED", list(plugins._REGISTERED))
    monkeypatch.delitem(sys.modules, EXAMPLE, raising=False)
    yield


def hospital_box() -> type[LocalBox]:
    module = __import__(EXAMPLE, fromlist=["HospitalBox"])
    cls: type[LocalBox] = module.HospitalBox
    return cls


def test_the_refused_examples_fail_with_the_line_the_guide_shows() -> None:
    refused = [(code, error) for code, error in guide_blocks() if error]
    assert {re.search(r"class (\w+)", code)[1] for code, _ in refused} == {  # type: ignore[index]
        "WideBox",
        "ShrunkBox",
    }
    for code, error in refused:
        with pytest.raises(Exception) as caught:
            run_block(code)
        assert f"{type(caught.value).__name__}: {caught.value}" == error
    assert "wide-box" not in mechanism_names() and "shrunk-box" not in mechanism_names()


def test_a_subclass_that_adds_a_field_registers_with_its_own_dataclass() -> None:
    code, error = block_with("class ShrunkLocal")
    assert error is None
    shrunk = run_block(code)["ShrunkLocal"]
    assert get_mechanism("local-shrunk") is shrunk
    assert shrunk.scale_rule == "fourth-root" and shrunk.declared_fields() == (
        "scale",
        "smoothing",
        "noise_std",
    )
    built = shrunk.from_values(noise_std=1.0, scale=2.0, smoothing=1.0)
    local = LocalTruncation.from_values(noise_std=1.0, scale=2.0, smoothing=1.0)
    assert vars(built)["shrink"] == 0.5  # its own field, at its default
    assert built.sensitivity(4) == pytest.approx(0.5 * local.sensitivity(4))
    budget = Budget(epsilon=1.0, delta=1e-6)
    assert built.calibrated(4, budget).noise_std == pytest.approx(
        0.5 * local.calibrated(4, budget).noise_std
    )


def test_the_guide_shows_the_hospital_example_file_verbatim() -> None:
    source = (ROOT / "tests" / "examples" / "hospital_box.py").read_text()
    assert (source, None) in guide_blocks()


def test_the_holders_noise_is_one_draw_of_the_records_sigma() -> None:
    """The same sensitivity as LocalBox's, so the same σ, but one draw on a holder's sum:
    its std is σ whatever the count, where LocalBox's sum of 400 reports carries 20σ."""
    box = hospital_box()
    built, local = box.from_values(noise_std=1.0, clip=2.0), LocalBox(clip=2.0, noise_std=1.0)
    assert built.sensitivity(3) == local.sensitivity(3) == 4.0 * math.sqrt(3)
    budget = Budget(epsilon=1.0, delta=1e-6)
    assert built.calibrated(3, budget).noise_std == local.calibrated(3, budget).noise_std
    assert (built.noise_where, local.noise_where) == ("once on the holder's sum", "per record")
    d = 20_000  # coordinates: the std's relative standard error is 1/√(2d) = 0.5%
    one = built.holder_noise(400, d, np.random.default_rng(1)).std()
    many = local.holder_noise(400, d, np.random.default_rng(2)).std()
    assert one == pytest.approx(1.0, rel=0.03) and many == pytest.approx(20.0, rel=0.03)


def test_simulate_and_audit_take_the_hospital_example(capsys: pytest.CaptureFixture[str]) -> None:
    hospital_box()
    argv = ["simulate", "--mechanism", "hospital-box", "--clip", "2", "--n", "20000"]
    assert main([*argv, "--d", "3", "--hospitals", "4", "--seed", "1", "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["mechanism"] == "hospital-box" and math.isfinite(outcome["error"])
    audit = ["audit", "--mechanism", "hospital-box", "--accounting", "exact", "--d", "2"]
    assert main([*audit, "--draws", "4000", "--holder-draws", "200", "--json"]) == 0
    report: Any = json.loads(capsys.readouterr().out)
    assert report["passed"] and {r["built_by"] for r in report["results"]} == {
        "simulator",
        "agent",
    }


def test_the_guide_reads_a_plugins_forecast_once_the_coordinator_has_it(
    tmp_path: Path,
) -> None:
    hospital_box()
    code, _ = block_with("def forecast_of")
    forecast_of: Callable[[Any, str], dict[str, Any] | None] = run_block(code)["forecast_of"]
    request = run_request(
        records=2000, d=3, rounds=3, mechanism="hospital-box", clip=2.0, forecast=True
    )
    with TestClient(create_app(settings(tmp_path))) as client:
        created = client.post("/v1/runs", json=request, headers=admin_headers())
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        forecast = forecast_of(client, run_id)
        page = client.get(f"/runs/{run_id}").text
    assert forecast is not None, "the forecast failed"
    assert forecast["low"] <= forecast["mean"] <= forecast["high"]
    assert f"forecast: {forecast['mean']:.3g}" in page


OLD_CONTRACT = """
import math

import numpy as np

from ldpem.common.mechanisms import Mechanism, register_mechanism


@register_mechanism
class LocalBox(Mechanism):
    name = "local-box"
    label = "local DP, coordinates clipped"
    noise_site = "record"
    needs = "clip"

    def __init__(self, *, clip, noise_std):
        self.clip, self.noise_std = clip, noise_std

    def contributions(self, gradients):
        return np.clip(np.nan_to_num(gradients, nan=0.0), -self.clip, self.clip)

    def record_bound(self, d):
        return self.clip

    def sensitivity(self, d):
        return 2.0 * self.clip * math.sqrt(d)
"""


def test_a_plugin_of_the_old_init_contract_is_refused_as_the_changelog_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CHANGELOG's migration note quotes the line such a plugin now stops with."""
    # The name is free (tests.examples.local_box holds it): the contract is what refuses.
    monkeypatch.delitem(mechanism_registry._MECHANISMS, "local-box", raising=False)
    with pytest.raises(TypeError) as caught:
        run_block(OLD_CONTRACT)
    note = (ROOT / "CHANGELOG.md").read_text().split("### Migrating a mechanism plugin")[1]
    quoted = " ".join(note.split("\n- ")[0].split())
    assert f"`{caught.value}`" in quoted
