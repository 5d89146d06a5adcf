"""The wire's named field types: a registered model or federated mechanism, a run's status,
its accounting, a schedule and a final rule; re-exported by ``ldpem.common.wire``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from ldpem.common.core.accounting import Accounting
from ldpem.common.mechanisms import mechanism_names
from ldpem.common.models import model_names

__all__ = [
    "INT_LIMIT",
    "AccountingName",
    "FederatedMechanism",
    "FinalRule",
    "ModelName",
    "RunStatus",
    "ScheduleSpec",
]


def _registered_model(name: str) -> str:
    if name not in model_names():
        raise ValueError(f"model must be one of {', '.join(model_names())}")
    return name


def _federated_mechanism(name: str) -> str:
    names = mechanism_names(federated=True)
    if name not in names:
        raise ValueError(f"mechanism must be one of {', '.join(names)}")
    return name


#: A registered model's name (``ldpem.common.models``).
ModelName = Annotated[str, AfterValidator(_registered_model)]
#: A registered mechanism a federated run may use (``ldpem.common.mechanisms``).
FederatedMechanism = Annotated[str, AfterValidator(_federated_mechanism)]
#: A run ends finished, failed, or cancelled by the operator (``POST …/cancel``).
RunStatus = Literal["running", "paused", "finished", "failed", "cancelled"]
#: An accounting of the core (``ldpem.common.core.accounting``).
AccountingName = Accounting
#: Integers are stored as SQLite INTEGER (signed 64-bit): larger ones are refused up front.
INT_LIMIT = 2**63


#: A round schedule: ``"equal"``, ``"geometric:G"`` or T fractions (> 0, summing to 1).
ScheduleSpec = (
    Annotated[str, Field(max_length=40)]
    | Annotated[list[float], Field(min_length=1, max_length=10_000)]
)
#: The reported estimate: ``"last"`` or ``"average:K"``.
FinalRule = Annotated[str, Field(max_length=40)]
