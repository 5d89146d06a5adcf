"""The parametric bootstrap's regions hold the true β* at their level, on runs they did not
use (issue 31): GMM, d = 10, ε = 1, T = 10, n = 2·10⁴, with the local, hospital (4
hospitals of 10/20/30/40%) and central mechanisms; 200 independent studies each (seeds
10⁴ …), each with its own region from B = 19 draws whose seeds derive from the study's
index (``confidence.bootstrap_seeds``), never the study's.

B = 19 is the fewest draws at level 0.9 (``least_draws``): the order statistics make the
coverage exactly 0.9 for any B when the pivot holds, so a small B tests the calibration
at a fraction of the default's cost (a larger B only steadies the widths). The band
[0.85, 0.95] is the issue's: ±2.4 standard errors of a coverage of 0.9 over 200 runs
(√(0.9·0.1/200) = 0.021). Measured (2026-11-26, benchmarks/confidence_coverage.py with
these seeds): radius 0.925 / 0.925 / 0.885, per coordinate 0.859 / 0.908 / 0.914 for
local / hospital / central. The same cases at
n = 2·10⁵, and mrm and rmc, are benchmarks/confidence_coverage.py's (docs/RESULTS.md):
too costly for CI.
"""

from __future__ import annotations

import numpy as np
import pytest

from ldpem.common.planning.confidence import confidence_region
from ldpem.common.planning.executor import PoolExecutor
from ldpem.common.planning.study import Study, run_study

pytestmark = pytest.mark.slow

N = 20_000
RUNS = 200
DRAWS = 19
LEVEL = 0.9
SIZES = {"hospital": (2_000, 4_000, 6_000, 8_000)}


@pytest.mark.parametrize("mechanism", ["local", "hospital", "central"])
def test_regions_hold_the_true_beta_at_their_level(mechanism: str) -> None:
    inside = []
    covered = []
    with PoolExecutor(2) as executor:
        for i in range(RUNS):
            study = Study(mechanism=mechanism, n=N, sizes=SIZES.get(mechanism), seed=10_000 + i)
            result = run_study(study)
            region = confidence_region(result, level=LEVEL, draws=DRAWS, seed=i, executor=executor)
            assert result.beta_star is not None and region.draws == DRAWS
            beta_star = result.beta_star
            if beta_star @ result.estimate < 0:  # gmm: β* up to sign
                beta_star = -beta_star
            inside.append(np.linalg.norm(beta_star - result.estimate) <= region.radius)
            low, high = np.array(region.low), np.array(region.high)
            covered.append(np.mean((low <= beta_star) & (beta_star <= high)))
    assert 0.85 <= np.mean(inside) <= 0.95, f"radius covers {np.mean(inside):.3f}"
    assert 0.85 <= np.mean(covered) <= 0.95, f"coordinates cover {np.mean(covered):.3f}"
