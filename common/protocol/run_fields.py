"""One run description: the public fields of a run and their defaults, declared once.

``RunFields`` lists what a run publishes and a study, a prediction and an operator choose
alike: the model's noise σ, the budget (ε, δ, accounting), T, the assumed SNR, the bounds
τ and B, ζ, the missing share, the clip C, η, the scale s, the round schedule, the
reported estimate, how the noise is shared and the model's options. Every consumer reads
its defaults here:

* ``Study`` (``ldpem.common.planning.study``) and ``Problem``
  (``ldpem.common.planning.problem``) inherit the fields themselves;
* the run request ``RunCreate`` (``ldpem.common.wire``) states each default as
  ``RUN_DEFAULTS.<field>``, where pydantic needs its own declaration;
* the commands' options (``ldpem simulate``, ``plan``, ``generate``, ``demo``) take
  theirs from ``RUN_DEFAULTS`` or from the dataclass they fill.

``tests/common/test_run_fields.py`` checks that every one of them agrees with this
declaration. Adding a run parameter is one field here, plus the code that uses it
(docs/EXTENDING.md, "Adding a run parameter").

Only the core is imported: the wire (pydantic) and the planner import this module, never
the other way.
"""

from __future__ import annotations

from dataclasses import dataclass

from ldpem.common.core.accounting import DEFAULT_ACCOUNTING, Accounting
from ldpem.common.core.calibration import DEFAULT_ZETA
from ldpem.common.protocol.estimate import LAST
from ldpem.common.protocol.schedule import EQUAL

__all__ = [
    "DEFAULT_D",
    "DEFAULT_MECHANISM",
    "DEFAULT_MODEL",
    "RUN_DEFAULTS",
    "RunFields",
]

#: The model of a study or a command that names none (a run request must name its own).
DEFAULT_MODEL = "gmm"
#: The mechanism of a study, a run request or a command that names none.
DEFAULT_MECHANISM = "local"
#: The dimension d of a study or a command that names none (a run request must state it).
DEFAULT_D = 10


@dataclass(frozen=True, kw_only=True)
class RunFields:
    """The public fields of a run, with their defaults. ``None`` means "the documented
    default, resolved from the run's size": ``delta`` n^-1.1 (``protocol.study_delta``);
    ``tau`` the model's ``default_tau`` of B (``protocol.study_tau``); ``beta_bound``, the
    declared bound B on ‖β‖₂, snr·σ; ``missing`` 0.1 for a model that allows missing
    covariates (rmc), else 0; ``scale`` Algorithm 2's rule.

    ``schedule``: records per round (``protocol.round_sizes``: ``"equal"``,
    ``"geometric:g"`` or T fractions); ``final``: the reported estimate (``"last"`` or
    ``"average:k"``, ``protocol.final_estimate``).

    How the noise is shared (secagg): ``t_min``, the fewest holders of a sum (None:
    ``protocol.study_t_min``); ``colluders``, c, the most of them that may collude with the
    coordinator (None: ``protocol.study_colluders``); ``secagg_topology``, the full mesh,
    or the SecAgg+ graph or expander (docs/SECAGG_GRAPH.md) with its dropout share δ and
    least honest shares h (None: ``runvalues`` defaults), whose t_k (T on the expander)
    and h size the noise as in a federated run of that topology (``ldpem simulate``
    resolves its default "auto" with ``runvalues.resolve_topology`` before it makes the
    study).

    Keyword-only, so that a class that inherits them keeps its own positional fields
    first. The order is part of a prediction's seeds (``Problem.seed_key``): add a field
    at the end (``model_options`` is left out of the key while empty, so a problem without
    options keeps its seeds).
    """

    sigma: float = 1.0
    epsilon: float = 1.0
    delta: float | None = None
    rounds: int = 10
    snr: float = 3.0
    tau: float | None = None
    beta_bound: float | None = None
    zeta: float = DEFAULT_ZETA
    accounting: Accounting = DEFAULT_ACCOUNTING
    missing: float | None = None
    clip: float = 1.0
    eta: float = 1.0
    scale: float | None = None
    schedule: str | tuple[float, ...] = EQUAL
    final: str = LAST
    t_min: int | None = None
    colluders: int | None = None
    secagg_topology: str = "mesh"
    dropout_share: float | None = None
    min_honest_shares: int | None = None
    #: (name, value) pairs of the model's declared options (``Model.options``, such as a
    #: mixture's components; the others at their defaults): what configures the model
    #: (``ldpem.common.protocol.configured_model``). Empty for a model that declares none.
    model_options: tuple[tuple[str, int], ...] = ()


#: Every field at its default: what a consumer that cannot inherit ``RunFields`` (the
#: wire's pydantic schema, a command's option) reads its default from.
RUN_DEFAULTS = RunFields()
