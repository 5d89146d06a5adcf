"""ldpem: federated gradient EM under local differential privacy.

Subpackages: ``ldpem.common`` (numerical core), ``ldpem.server`` (coordinator),
``ldpem.client`` (hospital agent). This package holds the ``ldpem`` command, and names the
library's surface for use from Python::

    from ldpem import Study, run_study

    result = run_study(Study(model="gmm", n=20_000, d=5, epsilon=1.0, hospitals=3))
    print(result.final_error)

The names below are imported on first use, not with the package: every ``ldpem`` command
imports this package, and ``ldpem client`` should not pay for numpy before it needs it
(docs/PERFORMANCE.md, start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ldpem.common.core.lazy import lazy_names

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ldpem.common.models import Records, model_names
    from ldpem.common.planning.confidence import Confidence, confidence_region
    from ldpem.common.planning.plan import Plan, make_plan
    from ldpem.common.planning.prediction import Problem
    from ldpem.common.planning.study import Dataset, Study, StudyResult, run_study

__all__ = [
    "Confidence",
    "Dataset",
    "Plan",
    "Problem",
    "Records",
    "Study",
    "StudyResult",
    "__version__",
    "confidence_region",
    "make_plan",
    "model_names",
    "run_study",
]

#: Where each name of the library's surface is defined.
_SURFACE = {
    "Confidence": "ldpem.common.planning.confidence",
    "confidence_region": "ldpem.common.planning.confidence",
    "Records": "ldpem.common.models",
    "model_names": "ldpem.common.models",
    "Plan": "ldpem.common.planning.plan",
    "Problem": "ldpem.common.planning.prediction",
    "make_plan": "ldpem.common.planning.plan",
    "Dataset": "ldpem.common.planning.study",
    "Study": "ldpem.common.planning.study",
    "StudyResult": "ldpem.common.planning.study",
    "run_study": "ldpem.common.planning.study",
}


__getattr__, __dir__ = lazy_names(__name__, _SURFACE, globals())
