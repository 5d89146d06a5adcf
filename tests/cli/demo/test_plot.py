"""The demo's convergence figure: a standalone SVG document with every series it names."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ldpem.demo.plot import convergence_svg, plot_convergence
from ldpem.demo.runner import BASELINES

SVG = "{http://www.w3.org/2000/svg}"


def _result() -> dict[str, object]:
    rounds = 6
    return {
        "model": "gmm",
        "n": 30_000,
        "d": 10,
        "mechanism": "local",
        "epsilon": 1.0,
        "errors": [2.0 / (t + 1) for t in range(rounds)],
        "baseline_errors": {
            name: [0.5 / (t + 1) / (i + 1) for t in range(rounds)]
            for i, (name, _) in enumerate(BASELINES)
        },
        "trivial_error": 3.0,
    }


def test_the_figure_is_an_svg_document_with_each_series_and_beta_zero(tmp_path: Path) -> None:
    path = tmp_path / "convergence.svg"
    assert plot_convergence(_result(), path, BASELINES) == str(path)
    root = ET.fromstring(path.read_text(encoding="utf-8"))  # well-formed, or it raises
    assert root.tag == f"{SVG}svg"
    lines = root.findall(f".//{SVG}polyline")
    names = [line.findtext(f"{SVG}title") for line in lines]
    assert names == ["federated, local DP (per record) (ε=1.0)", *(label for _, label in BASELINES)]
    # Every series has a point per round; the baselines are dashed, the federated run not.
    for line in lines:
        assert len(line.attrib["points"].split()) == 6
    assert "stroke-dasharray" not in lines[0].attrib
    assert all("stroke-dasharray" in line.attrib for line in lines[1:])
    legend = [g.findtext(f"{SVG}text") for g in root.findall(f".//{SVG}g[@class='legend']")]
    assert legend == [*names, "β = 0"]
    assert root.find(f".//{SVG}line[@class='reference']") is not None


def test_a_larger_error_is_drawn_higher_on_the_log_axis() -> None:
    root = ET.fromstring(convergence_svg(_result(), BASELINES))
    federated = root.find(f".//{SVG}polyline")
    assert federated is not None
    heights = [float(p.split(",")[1]) for p in federated.attrib["points"].split()]
    # The errors fall 2/(t+1): each point is lower on the page (a larger y) than the last,
    # and on a log axis the step from round 1 to 2 (×1/2) spans more than 5 to 6 (×5/6).
    assert heights == sorted(heights)
    assert heights[1] - heights[0] > heights[5] - heights[4] > 0


def test_the_legend_has_room_for_the_longest_label() -> None:
    root = ET.fromstring(convergence_svg(_result(), BASELINES))
    width = float(root.attrib["width"])
    for text in root.findall(f".//{SVG}g[@class='legend']/{SVG}text"):
        # At 11 px, sans-serif letters average under 0.6 em.
        right = float(text.attrib["x"]) + 0.6 * 11 * len(text.text or "")
        assert right <= width, text.text
