"""The library shared by coordinator, agent and simulator, in layers (docs/ARCHITECTURE.md).

``core`` (with the plugin packages ``models``, ``mechanisms``, ``protocol``) and ``infra``
at the bottom, then ``secagg``, ``wire``, ``planning`` and ``audit``; a layer imports only
those below it (tests/test_layers.py). This package names the surface below and imports
each name on first use, so that importing a core module (which runs this file first)
loads neither pydantic nor the planner. Public surface:

* models: ``get_model``, ``Records``, ``model_names``, ``register_model``
* mechanisms: ``get_mechanism``, ``mechanism_names``, ``register_mechanism``,
  ``smoothed_truncation``, ``truncation_bound``, ``LocalTruncation``,
  ``HospitalTruncation``, ``CentralTruncation``, ``LocalClipped``, ``CentralClipped``,
  ``SecAggSkellam`` (its quantization, noise and accounting in common/core/), ``NoPrivacy``,
  ``make_mechanism``
* accounting: ``noise_std_for``, ``epsilon_spent``, ``epsilon_tilde``
* protocol: study defaults, mechanisms from public parameters, the M-step
* rounds: ``holder_round``; simulation: ``run_gradient_em``, ``every_round``
* study: ``Study``, ``run_study`` → ``StudyResult`` (a whole simulated study), ``Dataset``
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ldpem.common.core.lazy import lazy_names

if TYPE_CHECKING:
    from ldpem.common.core.accounting import epsilon_spent, epsilon_tilde, noise_std_for
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
    from ldpem.common.planning.simulator import EMResult, every_round, run_gradient_em
    from ldpem.common.planning.study import Dataset, Study, StudyResult, run_study
    from ldpem.common.protocol import local_noise_std, make_mechanism, public_scale
    from ldpem.common.protocol.rounds import HolderReport, holder_round

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
    "every_round",
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

#: Where each name of the surface lives, imported on first use.
_SURFACE = {
    "epsilon_spent": "ldpem.common.core.accounting",
    "epsilon_tilde": "ldpem.common.core.accounting",
    "noise_std_for": "ldpem.common.core.accounting",
    "HolderReport": "ldpem.common.protocol.rounds",
    "holder_round": "ldpem.common.protocol.rounds",
    "TRUNCATION_BOUND": "ldpem.common.core.truncation",
    "smoothed_truncation": "ldpem.common.core.truncation",
    "truncation_bound": "ldpem.common.core.truncation_bound",
    "CentralClipped": "ldpem.common.mechanisms",
    "CentralTruncation": "ldpem.common.mechanisms",
    "HospitalTruncation": "ldpem.common.mechanisms",
    "LocalClipped": "ldpem.common.mechanisms",
    "LocalTruncation": "ldpem.common.mechanisms",
    "Mechanism": "ldpem.common.mechanisms",
    "NoPrivacy": "ldpem.common.mechanisms",
    "SecAggSkellam": "ldpem.common.mechanisms",
    "get_mechanism": "ldpem.common.mechanisms",
    "mechanism_names": "ldpem.common.mechanisms",
    "register_mechanism": "ldpem.common.mechanisms",
    "Model": "ldpem.common.models",
    "Records": "ldpem.common.models",
    "get_model": "ldpem.common.models",
    "model_names": "ldpem.common.models",
    "register_model": "ldpem.common.models",
    "EMResult": "ldpem.common.planning.simulator",
    "every_round": "ldpem.common.planning.simulator",
    "run_gradient_em": "ldpem.common.planning.simulator",
    "Dataset": "ldpem.common.planning.study",
    "Study": "ldpem.common.planning.study",
    "StudyResult": "ldpem.common.planning.study",
    "run_study": "ldpem.common.planning.study",
    "local_noise_std": "ldpem.common.protocol",
    "make_mechanism": "ldpem.common.protocol",
    "public_scale": "ldpem.common.protocol",
}


__getattr__, __dir__ = lazy_names(__name__, _SURFACE, globals())
