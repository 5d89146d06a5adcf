"""Cost of one holder round: hospital-level against local (docs/PERFORMANCE.md).

Both run the same per-record work (gradients, smoothed truncation, sum); local draws one
Gaussian of variance m·σ² for the sum, hospital one of variance σ². Interleaved repeats,
median of each; the ratio is what to read on a shared machine.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from ldpem.common.models import get_model
from ldpem.common.protocol import make_mechanism
from ldpem.common.protocol.rounds import holder_round


def main() -> None:
    model = get_model("gmm")
    rng = np.random.default_rng(0)
    m, d = 100_000, 10
    records, beta_star = model.generate(m, d, snr=3.0, sigma=1.0, missing=0.0, rng=rng)
    mechanisms = {
        name: make_mechanism(name, d=d, records_per_round=m, epsilon=1.0, delta=1e-6, tau=1.9)
        for name in ("local", "hospital")
    }
    times: dict[str, list[float]] = {name: [] for name in mechanisms}
    for _ in range(15):
        for name, mechanism in mechanisms.items():
            started = time.perf_counter()
            holder_round(
                model=model,
                beta=beta_star,
                records=records,
                sigma=1.0,
                mechanism=mechanism,
                rng=rng,
            )
            times[name].append(time.perf_counter() - started)
    local, hospital = (statistics.median(times[n]) for n in ("local", "hospital"))
    print(
        f"holder round, m = {m:,} records, d = {d}: local {local * 1e3:.1f} ms, "
        f"hospital {hospital * 1e3:.1f} ms, ratio hospital/local {hospital / local:.3f}"
    )


if __name__ == "__main__":
    main()
