"""Each benchmark runs with --quick --json and prints the fields its documentation names.

No timing is asserted here: speed targets live in the benchmarks and docs/PERFORMANCE.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
#: bench_secagg_http.py's LOAD_NICENESS: how far below the coordinator its load runs.
LOAD_NICENESS = 10


def run(script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", "--json", *args],
        capture_output=True,
        text=True,
        timeout=600,  # a quick run, but the machine may be busy
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    assert {"when", "nproc", "machine", "cpu", "loadavg"} <= result["machine"].keys()
    return result


def test_bench_federated_quick() -> None:
    overhead = run("bench_federated.py")["overhead"]
    assert {"inprocess_wall", "federated_wall", "ratio", "federated_round0"} <= overhead.keys()
    assert overhead["federated_later_rounds"]["n"] == overhead["rounds"] - 1
    assert {"numpy_floor", "holder_round"} <= overhead["floor_per_round"].keys()


def test_bench_coordinator_quick() -> None:
    result = run("bench_coordinator.py")
    assert result["fsync_floor_s"] > 0
    assert [row["agents"] for row in result["rows"]] == [5, 20]
    for row in result["rows"]:
        assert {"reports_per_s", "round_s", "broadcast_s", "coordinator_kib_after"} <= row.keys()
        assert {"median", "p99"} <= row["broadcast_s"].keys()
        assert row["round_s"]["n"] == row["rounds"]


def test_bench_memory_quick() -> None:
    result = run("bench_memory.py")
    assert {"peak_bytes", "vmhwm_kib", "chunk", "n"} <= result["agent"][0].keys()
    assert {"kib_after", "records"} <= result["coordinator"][0].keys()


def test_bench_scaling_quick(tmp_path: Path) -> None:
    result = run("bench_scaling.py", "--plots", str(tmp_path))
    for rows in (result["by_n"], result["by_d"]):
        assert {"floor_s", "agent_s", "coordinator_s", "agent_ratio"} <= rows[0].keys()
    assert (tmp_path / "scaling_n.png").stat().st_size > 0
    assert (tmp_path / "scaling_d.png").stat().st_size > 0


def test_bench_sources_quick() -> None:
    result = run("bench_sources.py")
    sources = result["sources"]
    assert {"csv", "npy", "parquet", "sqlite"} <= sources.keys()  # postgresql when installed
    for row in sources.values():
        assert row["n"] == result["rows"]
        assert {"kib_before", "kib_peak", "ratio_to_csv", "seconds"} <= row.keys()


def test_bench_timing_quick() -> None:
    result = run("bench_timing.py")
    cases = {"inliers", "outliers", "nonfinite", "subnormal"}
    for field in (
        "median_seconds",
        "median_cpu_seconds",
        "ratio_to_inliers",
        "cpu_ratio_to_inliers",
    ):
        assert set(result[field]) == cases
    assert result["ratio_to_inliers"]["inliers"] == 1.0
    assert result["records"] == 5_000 and result["repeats"] == 3


def test_bench_secagg_quick() -> None:
    result = run("bench_secagg.py")
    assert [row["holders"] for row in result["rows"]] == [10, 30]
    for row in result["rows"]:
        assert {"advertise", "share_keys", "masked_input", "unmask", "total"} <= row["cpu_s"].keys()
        assert row["sent_bytes"] > 0 and row["received_bytes"] > 0
        # gzip gives back most of base64's third (the coordinator's responses, app.py).
        assert 0.6 * row["received_bytes"] < row["received_gzip_bytes"] < row["received_bytes"]
        assert row["t_min"] > row["holders"] // 2


def test_bench_secagg_graph_quick() -> None:
    """One holder under SecAgg+ (--graph) on the real graph of a 300-holder roster."""
    result = run("bench_secagg.py", "--graph", "300")
    *full, graph = result["rows"]
    assert [row["mode"] for row in full] == ["full mesh", "full mesh"] and graph["mode"] == "graph"
    assert graph["holders"] == 300
    # k + 1 take part (the holder and its neighbours); the dropped leave t_k of them.
    assert graph["dropped"] >= 1 and graph["t_min"] + graph["dropped"] <= graph["neighbours"] + 1
    assert graph["t_min"] <= graph["neighbours"] < 299
    assert graph["survivors"] < 300 - graph["dropped"]  # others than its neighbours dropped too
    tau = graph["committee"][1]
    assert tau <= graph["request_signatures"] < graph["survivors"]
    assert {"graph", "share_keys", "unmask", "total"} <= graph["cpu_s"].keys()
    received = graph["received_by_message"]
    assert sum(received.values()) == graph["received_bytes"] > 0
    assert sum(graph["sent_by_message"].values()) == graph["sent_bytes"] > 0
    assert received["consistency_check"] < 120  # S as ⌈300/8⌉ bytes, not ~270 names
    zipped = graph["received_gzip_by_message"]
    assert sum(zipped.values()) == graph["received_gzip_bytes"] < graph["received_bytes"]
    assert zipped["consistency_check"] == received["consistency_check"]  # under the minimum
    assert zipped["share_bundle"] < 0.85 * received["share_bundle"]  # base64 of ciphertexts


def test_bench_secagg_http_quick() -> None:
    """The real coordinator and a load generator of Holder state machines, 6 holders, with
    nobody and one dropped: every round's sum checks and no 5xx."""
    result = run("bench_secagg_http.py")
    assert [(row["holders"], row["dropped"]) for row in result["rows"]] == [(6, 0), (6, 1)]
    for row in result["rows"]:
        assert row["status"] == "finished" and row["http_5xx"] == 0
        assert len(row["rounds"]) == 2 and all(r["sum_ok"] for r in row["rounds"])
        assert row["coordinator_peak_rss_kib"] > 0
        assert {"median", "max"} <= row["round_wall_s"].keys()
        # The load generator ran below the coordinator's priority (as far as nice goes).
        assert row["load_niceness"] == min(LOAD_NICENESS, 19 - os.nice(0)) > 0
    # One dropper a round (h6 in round 0, h5 in round 1); h6, not waited for in round 1,
    # sits it out when it advertises after the step closed, or joins it in time.
    first, second = (r["survivors"] for r in result["rows"][1]["rounds"])
    assert first == 5 and second in (4, 5)


def test_bench_secagg_processes_quick() -> None:
    """The wall time of a round with agent processes (--processes), on 4 of them."""
    result = run("bench_secagg.py", "--processes", "50")
    assert (result["processes"], result["rounds"], result["status"]) == (4, 3, "finished")
    assert result["round_s"]["n"] == 2 and result["t_min"] == 3
    assert result["coordinator_cpu_later_rounds_s"] > 0 and result["agents_cpu_s"] > 0


def test_bench_load_timing_quick() -> None:
    result = run("bench_load_timing.py")
    files = {"complete", "1%", "50%", "99%"}
    groups = [result["in_process"]["wall"], result["in_process"]["cpu"]]
    groups += [result["end_to_end"]["current"][key] for key in ("start_to_me", "me_to_poll")]
    for stats in groups:
        assert 0.0 <= stats["kruskal_p"] <= 1.0
        assert set(stats["files"]) == files
        for row in stats["files"].values():
            assert {"median", "q25", "q75", "iqr", "ratio_to_complete"} <= row.keys()
    assert result["end_to_end"]["current"]["model_flag"] is True
    assert result["rows"] == 2_000 and result["agent_repeats"] == 2


def test_bench_versions_quick() -> None:
    # The same checkout and interpreter on both sides.
    root, python = str(BENCHMARKS.parent), sys.executable
    sides = ["--before", root, "--after", root, "--before-python", python]
    result = run("bench_versions.py", *sides, "--after-python", python, "--runs", "1")
    ratios = result["ratio"]
    assert set(ratios) == {
        "mechanism_per_floor",
        "agent_round_per_floor",
        "agent_round_cpu",
        "coordinator_round_cpu",
        "simulate_cpu",
    }
    assert all(value > 0 for value in ratios.values())
    assert len(result["runs"]["before"]) == len(result["runs"]["after"]) == 1


def test_confidence_coverage_quick() -> None:
    result = run("confidence_coverage.py")
    rows = result["rows"]
    assert [(r["model"], r["mechanism"], r["n"]) for r in rows] == [
        ("gmm", "local", 2000),
        ("gmm", "hospital", 2000),
        ("gmm", "central", 2000),
    ]
    for row in rows:
        assert row["runs"] == 20 and row["draws"] == 19
        assert 0 <= row["radius_coverage"] <= 1 and 0 <= row["coordinate_coverage"] <= 1
        assert row["mean_radius"] > 0 and row["mean_width"] > 0


def test_bench_predictions_quick() -> None:
    result = run("bench_predictions.py")
    assert result["n"] == 20_000
    simulation = result["simulation"]
    assert {"floor", "fast", "run_study"} <= simulation["cpu_s"].keys()
    assert simulation["fast_over_floor"] > 0
    assert result["bootstrap"]["wall_s"] > 0 and result["bootstrap"]["floor_s"] > 0
    assert {"forecast", "floor", "forecast_ready"} <= result["create"]["wall_s"].keys()
    assert result["plan"]["values"] > 0 and result["plan"]["floor_s"] > 0
    demo = result["demo"]
    assert demo["demo_over_floor"] > 0 and demo["demo_over_floor_shown"] > 0
    # The job's floor truncates each value with T (~40 array passes) where the earlier
    # floor clipped each record's norm (~3): the same values, so it takes longer.
    assert demo["floor_over_gaussian"] > demo["floor_clip_over_gaussian"] > 0
    assert demo["demo_over_floor_clip"] > demo["demo_over_floor"]


def test_bench_secagg_graph_round_quick() -> None:
    """A whole SecAgg+ round in one process at K = 100 (k = 44), 10 dropped: the sum checks."""
    result = run("bench_secagg_graph_round.py")
    assert (result["holders"], result["neighbours"], result["dropped"]) == (100, 44, 10)
    assert result["sum_ok"] and result["survivors"] == 90
    assert result["aggregator_cpu_s"] > 0 and "result" in result["cpu_s"]


def test_bench_secagg_graph_round_quick_mesh() -> None:
    """The same round on the full mesh at the study defaults: t_min = 90 of K = 100."""
    result = run("bench_secagg_graph_round.py", "--mesh")
    assert (result["mesh"], result["neighbours"], result["t_k"]) == (True, 99, 90)
    assert result["sum_ok"] and result["survivors"] == 90
