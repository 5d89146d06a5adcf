"""The round protocol of a federated run: one place for each of its ideas.

The coordinator (``ldpem.server.coordinator``), the hospital agent (``ldpem.client.agent``),
the in-process simulator (``ldpem.common.planning.simulator``, ``ldpem simulate``), the planner and
the forecast stated at run creation (``ldpem.common.planning.plan``, ``ldpem.server.forecast``)
and the tests' offline replay all call the functions below; none derives these quantities
itself (``tests/test_one_protocol.py`` checks the code for copies). So the simulator is the
exact model of the deployment: given the same records, seeds and partition it reproduces a
federated run's trajectory bit for bit (``tests/cli/test_simulate_equals_federated.py``).

One module per idea:

* ``defaults``: the study defaults (δ, B, τ, m, β⁰);
* ``streams``: the random streams of a run (partition, each report's noise, central noise);
* ``schedule``: the round schedule (how many records each round takes, and its m_t);
* ``construction``: every mechanism object, from public values (holder and coordinator) or
  from a study's budget (simulator), asking each mechanism class's declarations;
* ``public``: a run's public parameters from its request;
* ``reports``: what a holder's report declares (σ_r) and spends (μ);
* ``mstep``: the aggregate and the M-step;
* ``estimate``: the reported estimate (the last iterate, or a weighted average of the last k);
* ``parameters``: the read-only views of a run the core takes (the wire's schemas fit them).
"""

from __future__ import annotations

from ldpem.common.protocol import defaults
from ldpem.common.protocol.construction import (
    CentralNoise,
    central_noise,
    central_noise_for,
    holder_contribution,
    holder_mechanism,
    holder_noise_std,
    holder_scale,
    local_noise_std,
    make_mechanism,
    public_budget,
    public_scale,
    published_scales,
    report_sensitivity,
    round_scales,
    study_mechanism,
)
from ldpem.common.protocol.defaults import *  # noqa: F403  (its __all__, added below)
from ldpem.common.protocol.estimate import (
    LAST,
    FinalEstimate,
    check_final,
    check_noise_shares,
    final_estimate,
    final_iterates,
    round_noise_variance,
)
from ldpem.common.protocol.mstep import Step, aggregate, m_step
from ldpem.common.protocol.parameters import Enrolment, PublicValues, RunRequest
from ldpem.common.protocol.public import GIVEN_START, derive_public_values
from ldpem.common.protocol.reports import privacy_ratio, report_noise_std
from ldpem.common.protocol.schedule import (
    EQUAL,
    Schedule,
    check_schedule,
    is_equal,
    least_records,
    round_index,
    round_records,
    round_size,
    round_sizes,
    schedule_weights,
)
from ldpem.common.protocol.streams import (
    FederatedStreams,
    SharedStream,
    Streams,
    central_rng,
    noise_rng,
    partition_rng,
    run_digest,
)

__all__ = [
    "EQUAL",
    "GIVEN_START",
    "LAST",
    "CentralNoise",
    "Enrolment",
    "FederatedStreams",
    "FinalEstimate",
    "PublicValues",
    "RunRequest",
    "Schedule",
    "SharedStream",
    "Step",
    "Streams",
    "aggregate",
    "central_noise",
    "central_noise_for",
    "central_rng",
    "check_final",
    "check_noise_shares",
    "check_schedule",
    "derive_public_values",
    "final_estimate",
    "final_iterates",
    "holder_contribution",
    "holder_mechanism",
    "holder_noise_std",
    "holder_scale",
    "is_equal",
    "least_records",
    "local_noise_std",
    "m_step",
    "make_mechanism",
    "noise_rng",
    "partition_rng",
    "privacy_ratio",
    "public_budget",
    "public_scale",
    "published_scales",
    "report_noise_std",
    "report_sensitivity",
    "round_index",
    "round_noise_variance",
    "round_records",
    "round_scales",
    "round_size",
    "round_sizes",
    "run_digest",
    "schedule_weights",
    "study_mechanism",
]

# The study defaults are re-exported whole: one list of them, in ``defaults``.
__all__ += defaults.__all__
