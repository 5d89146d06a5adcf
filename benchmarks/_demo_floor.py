"""The floor ``ldpem demo`` is measured against: its job in one interpreter, nothing else.

The demo fits a two-component GMM (d = 10, ‖β*‖ = 3, σ = 1) to 2·10⁵ records held by 3
hospitals of unequal sizes, in 10 rounds, under the local mechanism: each record's
gradient truncated by the smoothed truncation T (docs/MATH.md (2.2)) with the run's
scale s and smoothing β_s, Gaussian noise of the run's standard deviation added to each
value, the hospitals' sums added and the M-step taken. ``JOB_FLOOR`` does exactly that
arithmetic in one process: it imports numpy and the truncation kernel, draws the records
as the model does (a label ±1 times β* plus Gaussian noise), and runs the 10 rounds over
the hospitals' rows. No HTTP, no processes, no ledger, no checks, no forecast, no
confidence region, no baselines: what is left of the demo once everything but the job is
taken away.

T is evaluated by ``ldpem.common.core.truncation.smoothed_truncation``, the kernel each
agent runs: 35 ms for the demo's 2·10⁶ values on the development machine, where the
paper's closed form written in bare numpy (truncated-normal moments, two Φ and two
exponentials a value) takes 101 ms (2026-11-27, docs/PERFORMANCE.md). The faster kernel
makes the floor lower, so the demo's ratio to it higher: the conservative choice.

``CLIP_FLOOR`` is the floor of the earlier passes (docs/PERFORMANCE.md, "Predictions in
seconds"): the same number of values with a norm clip in place of T, x ~ N(0, I) with no
labels and one hospital. It is not the demo's job (the clip costs ~3 array passes a value
where T costs ~40), and it is reported beside the job's floor for continuity.

Both take, after their own arguments, optionally the number of studies and of processes
sharing them (default 1 and 1: the floor itself). Study 0 is the job; each other one costs
what the simulation's floor does, one Gaussian per value (``floor_shown``: for scale, the
studies whose results the demo shows).
"""

from __future__ import annotations

import sys

import numpy as np

from ldpem.common.mechanisms.local import LocalTruncation
from ldpem.common.protocol import holder_mechanism, public_budget, report_noise_std
from ldpem.common.wire import RunCreate, public_parameters
from ldpem.demo.runner import DemoConfig, demo_hospital_sizes, demo_request

__all__ = ["CLIP_FLOOR", "JOB_FLOOR", "clip_floor_command", "job_floor_command"]

_SHARE_OUT = """
share, children = 0, []
for w in range(1, workers):
    pid = os.fork()
    if pid == 0:
        share, children = w, []
        break
    children.append(pid)
for seed in range(share, studies, workers):
    if seed == 0:
        study(seed)
    else:
        np.random.default_rng(seed).standard_normal((n, 10))
if share:
    os._exit(0)
for pid in children:
    os.waitpid(pid, 0)
"""

#: argv: n, s, β_s, the noise's standard deviation, the hospitals' sizes (comma-separated),
#: then optionally the studies and the processes sharing them.
JOB_FLOOR = (
    """
import os
import sys
import numpy as np
from ldpem.common.core.truncation import smoothed_truncation
n = int(sys.argv[1])
s, beta_s, noise = (float(v) for v in sys.argv[2:5])
sizes = [int(v) for v in sys.argv[5].split(",")]
studies, workers = (int(a) for a in sys.argv[6:8]) if len(sys.argv) > 6 else (1, 1)
d, rounds, sigma = 10, 10, 1.0
def study(seed):
    rng = np.random.default_rng(seed)
    star = rng.standard_normal(d)
    star *= 3.0 / np.linalg.norm(star)
    labels = rng.integers(0, 2, n) * 2.0 - 1.0
    y = labels[:, None] * star + sigma * rng.standard_normal((n, d))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    beta = rng.standard_normal(d)
    for t in range(rounds):
        total = np.zeros(d)
        for k, size in enumerate(sizes):
            m = size // rounds
            part = y[starts[k] + t * m : starts[k] + (t + 1) * m]
            gradients = np.tanh(part @ beta / sigma**2)[:, None] * part - beta
            reports = smoothed_truncation(gradients, s, beta_s)
            reports += noise * rng.standard_normal(reports.shape)
            total += reports.sum(axis=0)
        beta = beta + total / (n // rounds)
"""
    + _SHARE_OUT
)

#: argv: n, then optionally the studies and the processes sharing them.
CLIP_FLOOR = (
    """
import os
import sys
import numpy as np
n = int(sys.argv[1])
studies, workers = (int(a) for a in sys.argv[2:4]) if len(sys.argv) > 2 else (1, 1)
def study(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 10))
    beta = rng.standard_normal(10)
    for t in range(10):
        part = x[t * (n // 10) : (t + 1) * (n // 10)]
        weights = np.tanh(part @ beta)
        gradients = weights[:, None] * part - beta
        norms = np.maximum(np.linalg.norm(gradients, axis=1), 1.0)
        noisy = gradients / norms[:, None] + rng.standard_normal(part.shape)
        beta = beta + noisy.mean(axis=0)
"""
    + _SHARE_OUT
)


def demo_job(n: int, *, hospitals: int = 3, rounds: int = 10, seed: int = 0) -> list[str]:
    """The demo's run as ``JOB_FLOOR``'s arguments: n; the scale s, smoothing β_s and
    noise standard deviation of the mechanism its first agent runs (the coordinator's
    ``public_parameters`` of the demo's request, then the agent's ``holder_mechanism`` at
    the run's budget); the hospitals' sizes the demo draws with ``seed``."""
    config = DemoConfig(hospitals=hospitals, records=n, rounds=rounds, seed=seed)
    sizes = demo_hospital_sizes(n, hospitals, rounds, np.random.default_rng(seed))
    names = [f"h{k + 1}" for k in range(hospitals)]
    tokens = [f"floor-token-{k:020d}" for k in range(hospitals)]
    params = public_parameters(RunCreate.model_validate(demo_request(config, sizes, names, tokens)))
    local = holder_mechanism(
        params,
        records=sizes[0],
        budget=public_budget(params),
    )
    assert isinstance(local, LocalTruncation)
    constants = (local.scale, local.smoothing, report_noise_std(local))
    return [str(n), *(repr(float(c)) for c in constants), ",".join(map(str, sizes))]


def job_floor_command(n: int, studies: int = 1, workers: int = 1) -> list[str]:
    """The command of the demo's floor at n records (with ``studies`` over ``workers``)."""
    return [sys.executable, "-c", JOB_FLOOR, *demo_job(n), str(studies), str(workers)]


def clip_floor_command(n: int, studies: int = 1, workers: int = 1) -> list[str]:
    """The command of the earlier passes' floor (``CLIP_FLOOR``)."""
    return [sys.executable, "-c", CLIP_FLOOR, str(n), str(studies), str(workers)]
