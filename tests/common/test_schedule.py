"""Round schedules and the reported estimate (``ldpem.common.protocol.schedule``,
``ldpem.common.protocol.estimate``)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from pydantic import ValidationError

from ldpem.common.core.errors import UserError
from ldpem.common.models import Records
from ldpem.common.planning.simulator import round_groups
from ldpem.common.planning.study import Study, run_study
from ldpem.common.protocol import (
    check_noise_shares,
    final_estimate,
    final_iterates,
    least_records,
    round_records,
    round_sizes,
    schedule_weights,
)
from ldpem.common.wire import HospitalEnrolment, RunCreate


@pytest.mark.parametrize(("n", "rounds"), [(10, 10), (103, 5), (4501, 7), (200_000, 12)])
def test_equal_rounds_are_the_array_split_sizes_and_partition(n: int, rounds: int) -> None:
    expected = [len(part) for part in np.array_split(np.arange(n), rounds)]
    assert list(round_sizes(n, rounds)) == expected
    records = Records(np.arange(n, dtype=np.float64)[:, None])
    # The partition of a run without a schedule is what it was: numpy.array_split.
    order = np.random.default_rng(7).permutation(n)
    before = [np.sort(part) for part in np.array_split(order, rounds)]
    groups = round_groups(records, rounds, reuse=False, rng=np.random.default_rng(7))
    assert [g.x[:, 0].astype(int).tolist() for g in groups] == [p.tolist() for p in before]
    assert round_records(n, rounds) == (max(1, n // rounds),) * rounds


def test_a_geometric_schedule_grows_and_deals_every_record_once() -> None:
    sizes = round_sizes(200_000, 12, "geometric:1.3")
    assert sum(sizes) == 200_000 and list(sizes) == sorted(sizes)
    weights = schedule_weights("geometric:1.3", 12)
    assert math.isclose(math.fsum(weights), 1.0)
    for size, weight in zip(sizes, weights, strict=True):
        assert abs(size - 200_000 * weight) < 1  # the largest remainder
    assert all(math.isclose(b / a, 1.3, rel_tol=1e-3) for a, b in itertools.pairwise(sizes))
    # Each round's m_t is its own size (the scale rule per round).
    assert round_records(200_000, 12, "geometric:1.3") == sizes
    records = Records(np.arange(1000, dtype=np.float64)[:, None])
    groups = round_groups(
        records, 5, reuse=False, rng=np.random.default_rng(1), schedule="geometric:1.3"
    )
    assert [g.n for g in groups] == list(round_sizes(1000, 5, "geometric:1.3"))
    used = np.concatenate([g.x[:, 0] for g in groups])
    assert sorted(used.tolist()) == list(range(1000))


def test_fractions_are_dealt_by_the_largest_remainder() -> None:
    assert round_sizes(10, 3, [0.25, 0.25, 0.5]) == (3, 2, 5)  # ties: the earlier round
    assert round_sizes(100, 4, (0.1, 0.2, 0.3, 0.4)) == (10, 20, 30, 40)


@pytest.mark.parametrize(
    ("schedule", "rounds", "message"),
    [
        ("geometric:x", 3, "must be a number"),
        ("geometric:0", 3, "finite and > 0"),
        ("linear:2", 3, "'equal', 'geometric:G' or a list"),
        ([0.5, 0.5], 3, "2 fractions for 3 rounds"),
        ([0.5, 0.6], 2, "sum to 1"),
        ([1.0, 0.0], 2, "finite and > 0"),
        ("geometric:1e-300", 3, "gives a round no share"),
    ],
)
def test_bad_schedules_are_one_line_errors(
    schedule: str | list[float], rounds: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        schedule_weights(schedule, rounds)


def test_a_schedule_that_leaves_a_round_empty_is_refused() -> None:
    with pytest.raises(ValueError, match="round 0 would hold no record"):
        round_sizes(12, 5, "geometric:3")
    least = least_records(5, "geometric:3")
    assert min(round_sizes(least, 5, "geometric:3")) >= 1
    assert least_records(5) == 5


def test_final_rules() -> None:
    assert final_iterates("last", 10) == 1
    assert final_iterates("average:3", 10) == 3
    for bad in ("average:0", "average:11", "average:", "mean:3", "average:-1"):
        with pytest.raises(ValueError):
            final_iterates(bad, 10)


def test_the_average_weighs_by_inverse_noise_variance_and_aligns_signs() -> None:
    betas = np.array([[9.0, 9.0], [1.0, 0.0], [-2.0, 0.0], [4.0, 2.0]])
    variances = [5.0, 1.0, 3.0]  # β³ gets 1/3, β² gets 1/1 (relative)
    last = final_estimate(betas, variances, final="last", sign_invariant=True)
    assert last.beta.tolist() == [4.0, 2.0] and last.weights == (1.0,)
    plain = final_estimate(betas, variances, final="average:2", sign_invariant=False)
    assert plain.iterates == (2, 3) and plain.weights == (0.75, 0.25)
    assert np.allclose(plain.beta, 0.75 * betas[2] + 0.25 * betas[3])
    aligned = final_estimate(betas, variances, final="average:2", sign_invariant=True)
    assert aligned.signs == (-1.0, 1.0)  # β² points away from β³: flipped
    assert np.allclose(aligned.beta, -0.75 * betas[2] + 0.25 * betas[3])
    # Without privacy noise there is no variance to weigh by: equal weights.
    flat = final_estimate(betas, [0.0, 0.0, 0.0], final="average:3", sign_invariant=False)
    assert flat.weights == (1 / 3, 1 / 3, 1 / 3)


@pytest.mark.parametrize(
    ("schedule", "final"), [("geometric:1.3", "last"), ("equal", "average:2"), ((0.5, 0.5), "last")]
)
def test_noise_shares_refuse_a_schedule_or_an_average(
    schedule: str | tuple[float, ...], final: str
) -> None:
    # Secure aggregation calibrates, quantizes and bounds its shares with the run's one
    # scale, and its reports declare no noise: only equal rounds and the last iterate.
    message = "mechanism secagg runs only with --schedule equal and --final last"
    with pytest.raises(ValueError, match=message):
        check_noise_shares("secagg", schedule, final)
    check_noise_shares("secagg", "equal", "last")
    check_noise_shares("local", schedule, final)
    hospitals = [HospitalEnrolment(name=f"h{k}", records=100) for k in range(3)]
    with pytest.raises(ValidationError, match=message):
        RunCreate(
            model="gmm",
            d=2,
            sigma=1.0,
            rounds=2,
            mechanism="secagg",
            hospitals=hospitals,
            schedule=list(schedule) if isinstance(schedule, tuple) else schedule,
            final=final,
        )
    study = Study(mechanism="secagg", n=400, d=2, rounds=2, hospitals=3)
    with pytest.raises(UserError, match=message):
        run_study(replace(study, schedule=schedule, final=final))
