"""The mechanism base class and registry (docs/MATH.md, sections 2, 5, 6; docs/EXTENDING.md).

Every mechanism is split the way a federated round is: the part a data holder runs on its
own records (``holder_sum``: the sum of its records' contributions, with the holder's noise
if there is any) and the part the aggregator adds once to the average of all holders' sums
(``aggregate_noise``: only when the noise is the aggregator's). The M-step then uses

    mean = Σ holder sums / Σ counts + aggregate_noise.

A holder's sum is accumulated chunk by chunk (``empty_sum``, ``partial_sum``) and finished
once (``finish_sum``: the holder's noise, and for noise shares the quantization), so a
mechanism may sum in its own arithmetic (exact integers for ``shares``).

Where the noise is added (``Mechanism.noise_site``):

* ``record``: on each record's report (the local model); a holder's sum carries one draw
  per record, drawn as one Gaussian of variance m·σ_r² per coordinate, which has exactly
  the distribution of the sum of m independent reports;
* ``holder``: once on a holder's sum (hospital-level: the holder is its own curator);
* ``aggregator``: once on the average, by the coordinator (the central model);
* ``shares``: each holder adds a share of the noise to its sum, and only the sum of all
  holders' reports is ever seen (secure aggregation): any ``honest_holders`` shares
  together make the noise of the sum; one holder's report is not private on its own
  (docs/SECAGG.md);
* ``nowhere``: no noise at all.

``privatize`` returns one report per record (the strict local-model view). Parameters are
keyword-only and validated once, at construction; every mechanism states the
per-coordinate bound of a record's contribution before noise (``record_bound``) and its L2
sensitivity (``sensitivity``), which is what the accounting and the coordinator's range
checks use.

Registry: ``register_mechanism`` (a class decorator) makes a class available by its name;
the CLI's choices, the wire's validation, the protocol, the coordinator's policy, the agent,
the planner and the audit take their mechanisms from ``get_mechanism`` /
``mechanism_names`` and never compare a name with a literal.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal, TypeVar, get_args

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "Mechanism",
    "Needs",
    "NoiseSite",
    "ScaleRule",
    "get_mechanism",
    "mechanism_names",
    "register_mechanism",
]

FloatArray = NDArray[np.float64]
NoiseSite = Literal["record", "holder", "aggregator", "shares", "nowhere"]
Needs = Literal["scale", "clip"] | None
ScaleRule = Literal["fourth-root", "square-root"]


def _as_gradients(gradients: ArrayLike) -> FloatArray:
    array = np.asarray(gradients, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"gradients must be an (n, d) array, got shape {array.shape}")
    # NaN and ±inf are accepted: every bounded mechanism maps them to a bounded contribution.
    return array


def _check_noise_std(value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"noise_std must be a finite number >= 0, got {value!r}")
    return value


class Mechanism(ABC):
    """What a mechanism does to a batch of per-record gradients g_i ∈ R^d, and what the
    rest of ldpem needs to know to build, account and check it (docs/EXTENDING.md).

    A subclass declares, as class attributes, its ``name``, where its noise is added
    (``noise_site``), the public value that fixes a record's contribution (``needs``) and,
    for a truncation scale, Algorithm 2's rule for it; it implements ``contributions``,
    ``record_bound`` and ``sensitivity``. The protocol builds every mechanism from a run's
    public values through ``from_values``; the agent, the coordinator's report checks, the
    simulator, the planner and the audit ask these declarations instead of the name.
    """

    #: Name used on the command line, on the wire and in the ledger.
    name: ClassVar[str]
    #: How the planner and the demo name it.
    label: ClassVar[str]
    #: Where the noise is added (module docstring).
    noise_site: ClassVar[NoiseSite]
    #: The public value that fixes each record's contribution: a truncation "scale", a
    #: "clip" norm, or None.
    needs: ClassVar[Needs] = None
    #: For ``needs == "scale"``: Algorithm 2's rule, "fourth-root" (the local model's
    #: s ∝ m^¼) or "square-root" (the central model's s ∝ √m).
    scale_rule: ClassVar[ScaleRule | None] = None
    #: Each holder truncates at its own scale from its enrolled count (unless the run fixes
    #: one), so the run publishes none.
    per_holder_scale: ClassVar[bool] = False
    #: Whether a federated run may use it (False: simulator and audit only).
    federated: ClassVar[bool] = True
    #: Per-coordinate noise std of one record's report (record), of a holder's sum
    #: (holder), of the average (aggregator) or of one holder's share (shares).
    noise_std: float

    @classmethod
    def from_values(
        cls,
        *,
        noise_std: float,
        scale: float | None = None,
        smoothing: float | None = None,
        clip: float | None = None,
        t_min: int | None = None,
        colluders: int = 0,
    ) -> Mechanism:
        """The mechanism with these public values and noise std: ``scale`` and
        ``smoothing`` β_s when it ``needs`` a scale, ``clip`` when it needs a clip norm,
        ``t_min`` (the fewest holders of a sum) and ``colluders`` (c of them may collude:
        the noise is that of t_min − c shares) when its noise is ``shares``. ValueError,
        naming the value, when one it needs is missing."""
        values: dict[str, float | int] = {}
        if cls.needs == "scale":
            if scale is None or smoothing is None:
                raise ValueError(f"mechanism {cls.name} needs a scale and a smoothing")
            values.update(scale=scale, smoothing=smoothing)
        if cls.needs == "clip":
            if clip is None:
                raise ValueError(f"mechanism {cls.name} needs a clip norm")
            values.update(clip=clip)
        if cls.noise_site == "shares":
            if t_min is None:
                raise ValueError(f"mechanism {cls.name} needs t_min, the honest holders")
            values.update(t_min=t_min, colluders=colluders)
        if not values:
            return cls()
        return cls(noise_std=noise_std, **values)  # type: ignore[call-arg]

    def with_noise(self, noise_std: float) -> Mechanism:
        """The same mechanism with another noise std."""
        return self.from_values(
            noise_std=noise_std,
            scale=getattr(self, "scale", None),
            smoothing=getattr(self, "smoothing", None),
            clip=getattr(self, "clip", None),
            t_min=getattr(self, "t_min", None),
            colluders=getattr(self, "colluders", 0),
        )

    @property
    def is_local(self) -> bool:
        """Whether the noise (if any) is added by each data holder, not by the aggregator."""
        return self.noise_site != "aggregator"

    @classmethod
    def locally_private(cls) -> bool:
        """Whether what a holder sends is private on its own (noise per record or per
        holder): the agent refuses a run of a mechanism that is not, unless allowed."""
        return cls.noise_site in ("record", "holder")

    @classmethod
    def noise_draws(cls, count: int) -> int:
        """Independent draws in the noise of a holder's sum of ``count`` records: one per
        record, one per holder (its own noise or its share), or none."""
        if count == 0:
            return 0
        return {"record": count, "holder": 1, "shares": 1}.get(cls.noise_site, 0)

    @property
    def honest_holders(self) -> int:
        """The fewest holders' reports whose sum is private: 1, or for noise ``shares``
        the t_min honest holders whose shares together make the noise. A round with
        fewer reports is not released."""
        return 1

    def shared_noise_std(
        self, d: int, *, epsilon: float, delta: float, participations: int = 1
    ) -> float:
        """For noise ``shares``: the std of one holder's share such that any
        ``honest_holders`` shares make each record (ε, δ)-DP over ``participations``
        rounds, in dimension ``d``. The protocol calls it to calibrate such a mechanism;
        every other mechanism is calibrated from its ``sensitivity``."""
        raise NotImplementedError(f"mechanism {self.name} has no noise shares")

    @abstractmethod
    def contributions(self, gradients: FloatArray) -> FloatArray:
        """Each record's contribution before noise.

        Parameters
        ----------
        gradients : array of shape (n, d)
            Per-record gradients g_i.

        Returns
        -------
        contributions : array of shape (n, d)
        """

    @abstractmethod
    def record_bound(self, d: int) -> float:
        """Largest |coordinate| of one record's contribution before noise (inf if none), for
        contributions of dimension ``d``."""

    @abstractmethod
    def sensitivity(self, d: int) -> float:
        """L2 distance between two records' contributions of dimension ``d``, at most
        (replace-one)."""

    def holder_noise(self, count: int, d: int, rng: np.random.Generator) -> FloatArray:
        """Noise of a holder's sum of ``count`` records, shape (d,): N(0, k·σ_r² I_d) with
        k = ``noise_draws(count)``.

        For noise per record this has exactly the distribution of the sum of ``count``
        independent per-record noises, so the summed report is as private as the reports
        it stands for; noise per holder is one draw whatever ``count``.

        Parameters
        ----------
        count : int
            Records in the sum (≥ 0; zeros for 0, and for central mechanisms).
        d : int
            Dimension.
        rng : numpy.random.Generator
            The holder's noise stream.

        Returns
        -------
        noise : array of shape (d,)
        """
        draws = self.noise_draws(count)
        if draws == 0 or self.noise_std == 0.0:
            return np.zeros(d)
        return rng.normal(0.0, self.noise_std * math.sqrt(draws), d)

    def empty_sum(self, d: int) -> NDArray[Any]:
        """The sum of no contributions in this mechanism's arithmetic, shape (d,)."""
        return np.zeros(d)

    def partial_sum(self, gradients: FloatArray) -> NDArray[Any]:
        """Σ of a chunk's contributions in this mechanism's arithmetic (floats; exact
        integers for noise ``shares``): (n, d) gradients → (d,)."""
        total: FloatArray = self.contributions(gradients).sum(axis=0)
        return total

    def finish_sum(self, total: NDArray[Any], count: int, rng: np.random.Generator) -> FloatArray:
        """What a holder sends for the sum ``total`` (from ``partial_sum``) of ``count``
        records: here ``total`` + ``holder_noise``, shape (d,)."""
        finished: FloatArray = total + self.holder_noise(count, total.shape[0], rng)
        return finished

    def holder_sum(self, gradients: ArrayLike, rng: np.random.Generator) -> FloatArray:
        """What a data holder sends for a batch: Σ_i contribution_i + local noise (for
        noise shares: the quantized sum plus the holder's share).

        Parameters
        ----------
        gradients : array-like of shape (n, d)
            The batch's per-record gradients.
        rng : numpy.random.Generator
            The holder's noise stream.

        Returns
        -------
        total : array of shape (d,)
        """
        g = _as_gradients(gradients)
        return self.finish_sum(self.empty_sum(g.shape[1]) + self.partial_sum(g), g.shape[0], rng)

    def privatize(self, gradients: ArrayLike, rng: np.random.Generator) -> FloatArray:
        """One report per record: contribution_i + N(0, σ_r² I_d) for local mechanisms, (n, d).

        For central mechanisms and ``none`` the reports are the contributions themselves.

        Parameters
        ----------
        gradients : array-like of shape (n, d)
            Per-record gradients.
        rng : numpy.random.Generator
            The noise stream.

        Returns
        -------
        reports : array of shape (n, d)
        """
        g = _as_gradients(gradients)
        reports = self.contributions(g)
        if self.is_local and self.noise_std > 0.0:
            reports += rng.normal(0.0, self.noise_std, reports.shape)
        return reports

    def aggregate_noise(
        self, d: int, rng: np.random.Generator, draws: int | None = None
    ) -> FloatArray:
        """Noise the aggregator adds to the average of all contributions (zeros for local
        mechanisms).

        Parameters
        ----------
        d : int
            Dimension.
        rng : numpy.random.Generator
            The aggregator's noise stream.
        draws : int, optional
            Independent draws to return at once (used by the privacy audit).

        Returns
        -------
        noise : array of shape (d,), or (draws, d) when ``draws`` is given
        """
        shape = (d,) if draws is None else (draws, d)
        if self.is_local or self.noise_std == 0.0:
            return np.zeros(shape)
        return rng.normal(0.0, self.noise_std, shape)


MechanismT = TypeVar("MechanismT", bound=type[Mechanism])

_MECHANISMS: dict[str, type[Mechanism]] = {}
#: A name is a CLI choice, a JSON value and a ledger key: plain, short, lower case.
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def register_mechanism(cls: MechanismT) -> MechanismT:
    """Class decorator: make the ``Mechanism`` subclass ``cls`` available by its ``name``.
    Its declarations are checked here, once; another class under a taken name is an error,
    the same class again (a module imported twice) is not."""
    if not (isinstance(cls, type) and issubclass(cls, Mechanism)):
        raise TypeError(f"a mechanism must be a Mechanism subclass, got {cls!r}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"mechanism name must match {_NAME.pattern}, got {name!r}")
    if getattr(cls, "noise_site", None) not in get_args(NoiseSite):
        raise ValueError(f"mechanism {name}: noise_site must be one of {get_args(NoiseSite)}")
    if cls.needs not in ("scale", "clip", None):
        raise ValueError(f"mechanism {name}: needs must be 'scale', 'clip' or None")
    if (cls.needs == "scale") != (cls.scale_rule in get_args(ScaleRule)):
        raise ValueError(f"mechanism {name}: a scale_rule goes with needs = 'scale'")
    if cls.noise_site == "shares" and cls.shared_noise_std is Mechanism.shared_noise_std:
        raise ValueError(f"mechanism {name}: noise shares need a shared_noise_std")
    known = _MECHANISMS.get(name)
    if known is not None and known.__qualname__ != cls.__qualname__:
        raise ValueError(f"mechanism name {name!r} is taken by {known.__name__}")
    _MECHANISMS[name] = cls
    return cls


def get_mechanism(name: str) -> type[Mechanism]:
    """The mechanism class registered as ``name``."""
    try:
        return _MECHANISMS[name]
    except KeyError:
        raise ValueError(f"mechanism must be one of {mechanism_names()}, got {name!r}") from None


def mechanism_names(*, federated: bool | None = None) -> tuple[str, ...]:
    """The registered mechanisms' names in registration order; ``federated``: only those a
    federated run may (True) or may not (False) use."""
    return tuple(
        name for name, cls in _MECHANISMS.items() if federated is None or cls.federated == federated
    )
