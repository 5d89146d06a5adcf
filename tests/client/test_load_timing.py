"""The CSV loader's time does not depend on the values (docs/PRIVACY.md, "Timing").

A statistical test, not a timing assertion: loads of a complete file and of files with one
blank cell at 1%, 50% and 99% of the rows are interleaved in a seeded random order, and the
Kruskal–Wallis test must find no difference between the four groups (p > 0.001), nor may
any group's median stray from the complete file's by more than the run-to-run spread (the
pooled interquartile range). A positive control runs the same statistic on a loader that
reads a file with a blank twice, as the old parser did, and must flag it: the test has the
power to fail.

The times are the process's CPU time (user + system), not the wall clock: the work the
loader does is what could depend on a value, and the wall clock adds whatever other
processes on a shared machine do meanwhile, in bursts that one group of the shuffled order
can catch more of than another. The wall clock, end to end, is benchmarks/
bench_load_timing.py's (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kruskal

from ldpem.client.data import load_records

pytestmark = pytest.mark.slow

ROWS, D, REPEATS, SEED = 8_000, 10, 9, 2026
POSITIONS = {"complete": None, "1%": 0.01, "50%": 0.50, "99%": 0.99}


def write_files(directory: Path) -> dict[str, Path]:
    """Four rmc files (covariates may be missing) identical but for one blank cell."""
    rng = np.random.default_rng(SEED)
    table = rng.normal(size=(ROWS, D + 1))
    header = ",".join([*(f"x{j}" for j in range(D)), "y"])
    lines = [",".join(repr(float(v)) for v in row) for row in table]
    files = {}
    for name, position in POSITIONS.items():
        body = list(lines)
        if position is not None:
            row = int(position * (ROWS - 1))
            cells = body[row].split(",")
            cells[3] = ""
            body[row] = ",".join(cells)
        path = directory / f"{name.rstrip('%')}.csv"
        path.write_text("\n".join([header, *body]) + "\n")
        files[name] = path
    return files


def timings(files: dict[str, Path], load: Callable[[Path], object]) -> dict[str, list[float]]:
    order = [name for name in files for _ in range(REPEATS)]
    np.random.default_rng(SEED).shuffle(order)
    load(files["complete"])  # warm the page cache and the imports
    seconds: dict[str, list[float]] = {name: [] for name in files}
    for name in order:
        started = time.process_time()
        load(files[name])
        seconds[name].append(time.process_time() - started)
    return seconds


def differs(seconds: dict[str, list[float]]) -> tuple[bool, str]:
    """Whether the groups' times differ: Kruskal–Wallis p < 0.001, or a median farther
    from the complete file's than the pooled interquartile range."""
    p = float(kruskal(*seconds.values()).pvalue)
    pooled = np.concatenate(list(seconds.values()))
    spread = float(np.subtract(*np.percentile(pooled, [75, 25])))
    base = float(np.median(seconds["complete"]))
    gaps = {name: float(np.median(v)) - base for name, v in seconds.items()}
    summary = f"p = {p:.3g}, IQR = {spread * 1e3:.2f} ms, median gaps (ms) = " + ", ".join(
        f"{name}: {gap * 1e3:+.2f}" for name, gap in gaps.items()
    )
    return p < 1e-3 or max(abs(g) for g in gaps.values()) > spread, summary


def test_the_load_time_does_not_depend_on_where_a_blank_is(tmp_path: Path) -> None:
    files = write_files(tmp_path)
    found, summary = differs(timings(files, lambda path: load_records(path, "rmc")))
    print(summary)
    assert not found, summary


def test_the_statistic_flags_a_loader_that_reads_a_file_with_a_blank_twice(
    tmp_path: Path,
) -> None:
    files = write_files(tmp_path)

    def two_pass(path: Path) -> object:
        records = load_records(path, "rmc")
        if np.isnan(records.x).any():  # the old parser's slow second pass
            load_records(path, "rmc")
        return records

    found, summary = differs(timings(files, two_pass))
    print(summary)
    assert found, summary
