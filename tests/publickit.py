"""A run's public parameters as the coordinator publishes them, for tests that play the
coordinator (a fake ``/v1/me`` or round answer) or check what an agent does with them.

One factory, so that a field added to ``PublicParameters`` is added here once rather than
in every test that pastes the object.
"""

from __future__ import annotations

import json
from typing import Any

from ldpem.common.core.calibration import smoothing_precision
from ldpem.common.models import get_model, model_names
from ldpem.common.models.base import DEFAULT_START
from ldpem.common.secagg import Roster
from ldpem.common.wire import HospitalEnrolment, RunCreate


def published_params(**change: Any) -> dict[str, Any]:
    """The JSON object of ``PublicParameters``' required fields for a small local-DP GMM run
    (d = 3, T = 2, 20 records a round, ε = 1, δ = 1e-5), with ``change`` applied.

    Unless ``change`` gives them, the model's start rule is published as the coordinator
    does (``Model.start_rule``), and the smoothing precision is the one the agent checks,
    √log(p/ζ) for the size p of the run's β (d, or K·(d + 1) for a mixture's
    ``model_options``) and ζ (``smoothing_precision``); where p or ζ leaves that
    undefined (d < 1, ζ outside (0, 1), options the model refuses: values a test sends to
    be refused) it stays the default run's. Values are not checked: a test may send what
    the schema refuses."""
    params: dict[str, Any] = {
        "model": "gmm",
        "d": 3,
        "sigma": 1.0,
        "rounds": 2,
        "eta": 1.0,
        "mechanism": "local",
        "epsilon": 1.0,
        "delta": 1e-5,
        "accounting": "exact",
        "tau": 1.0,
        "zeta": 0.1,
        "scale": 1.0,
        "smoothing": smoothing_precision(3, 0.1),
        "clip": None,
        "records_per_round": 20,
    }
    params.update(change)
    d, zeta = params["d"], params["zeta"]
    defined = isinstance(d, int) and d >= 1 and isinstance(zeta, float) and 0 < zeta < 1
    if "smoothing" not in change and defined:
        try:
            size = get_model(params["model"], params.get("model_options")).parameter_dim(d)
        except (ValueError, TypeError):
            size = d
        params["smoothing"] = smoothing_precision(size, zeta)
    if "start" not in change and params["model"] in model_names():
        start = get_model(params["model"]).start_rule
        if start != DEFAULT_START:  # a model of its own start rule publishes it
            params["start"] = start
    return params


def secagg_request(roster: Roster, **change: Any) -> RunCreate:
    """The request creating a secagg GMM run of every hospital of ``roster`` (40 records
    each, with tokens): d = 3, T = 2, ε = 1, δ = 1e-5, with ``change`` applied."""
    fields: dict[str, Any] = {
        "model": "gmm",
        "d": 3,
        "sigma": 1.0,
        "rounds": 2,
        "mechanism": "secagg",
        "epsilon": 1.0,
        "delta": 1e-5,
        "roster": json.loads(roster.to_json()),
        "hospitals": [
            HospitalEnrolment(name=n, records=40, token=f"token-{n}-abcdefghijklmnop")
            for n in roster.names
        ],
    }
    return RunCreate(**{**fields, **change})
