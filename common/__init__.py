"""The numerical core shared by coordinator, agent and simulator: pure functions on arrays.

Nothing here does I/O. Public surface:

* models: ``get_model``, ``Records``, ``model_names``, ``register_model``
* mechanisms: ``get_mechanism``, ``mechanism_names``, ``register_mechanism``,
  ``smoothed_truncation``, ``truncation_bound``, ``LocalTruncation``,
  ``HospitalTruncation``, ``CentralTruncation``, ``LocalClipped``, ``CentralClipped``,
  ``SecAggSkellam`` (common/secagg: its quantization, noise and accounting), ``NoPrivacy``,
  ``make_mechanism``
* accounting: ``noise_std_for``, ``epsilon_spent``, ``epsilon_tilde``
* protocol: study defaults, mechanisms from public parameters, the M-step
* rounds: ``holder_round``; simulation: ``run_gradient_em``
* study: ``Study``, ``run_study`` → ``StudyResult`` (a whole simulated study), ``Dataset``
"""

from __future__ import annotations

from ldpem.common.core.accounting import epsilon_spent, epsilon_tilde, noise_std_for
from ldpem.common.core.rounds import HolderReport, holder_round
from ldpem.common.core.truncation import TRUNCATION_BOUND, smoothed_truncation
from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.mechanisms import (
    CentralClipped,
    CentralTruncation,
    HospitalTruncation,
    LocalClipped,
    LocalTruncation,
    Mechanism,
    NoPrivacy,
    SecAggSkellam,
    get_mechanism,
    mechanism_names,
    register_mechanism,
)
from ldpem.common.models import Model, Records, get_model, model_names, register_model
from ldpem.common.planning.simulation import EMResult, run_gradient_em
from ldpem.common.planning.study import Dataset, Study, StudyResult, run_study
from ldpem.common.protocol import local_noise_std, make_mechanism, public_scale

__all__ = [
    "TRUNCATION_BOUND",
    "CentralClipped",
    "CentralTruncation",
    "Dataset",
    "EMResult",
    "HolderReport",
    "HospitalTruncation",
    "LocalClipped",
    "LocalTruncation",
    "Mechanism",
    "Model",
    "NoPrivacy",
    "Records",
    "SecAggSkellam",
    "Study",
    "StudyResult",
    "epsilon_spent",
    "epsilon_tilde",
    "get_mechanism",
    "get_model",
    "holder_round",
    "local_noise_std",
    "make_mechanism",
    "mechanism_names",
    "model_names",
    "noise_std_for",
    "public_scale",
    "register_mechanism",
    "register_model",
    "run_gradient_em",
    "run_study",
    "smoothed_truncation",
    "truncation_bound",
]
