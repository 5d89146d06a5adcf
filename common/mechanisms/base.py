"""The mechanism contract (docs/MATH.md, sections 2, 5, 6; docs/EXTENDING.md).

Every mechanism is split the way a federated round is: the part a data holder runs on its
own records (``holder_sum``: the sum of its records' contributions, with the holder's noise
if there is any) and the part the aggregator adds once to the average of all holders' sums
(``aggregate_noise``: only when the noise is the aggregator's). The M-step then uses

    mean = Σ holder sums / Σ counts + aggregate_noise.

A mechanism's public values are its declared fields: every mechanism is a frozen dataclass
whose fields are the values a run publishes for it (``scale`` and ``smoothing`` when it
``needs`` a scale, ``clip`` when it needs a clip norm, ``t_min`` for noise shares) and its
``noise_std``; the registry (``ldpem.common.mechanisms.registry``) refuses a class that
does not declare what it needs. What one release costs a record is data
(``privacy_event``, ``ldpem.common.core.privacy_events``) that the accountant composes, and a
mechanism calibrates its own noise to a budget (``calibrated``; default: a Gaussian of the
σ_r its ``sensitivity`` needs).

Where the noise is added (``Mechanism.noise_site``):

* ``record``: on each record's report (the local model); a holder's sum carries one draw
  per record, drawn as one Gaussian of variance m·σ_r² per coordinate, which has exactly
  the distribution of the sum of m independent reports;
* ``holder``: once on a holder's sum (hospital-level: the holder is its own curator);
* ``aggregator``: once on the average, by the coordinator (the central model);
* ``shares``: each holder adds a share of the noise to its sum, and only the sum of all
  holders' reports is ever seen (secure aggregation): such a mechanism also implements
  ``ldpem.common.mechanisms.secagg_contract.SharedNoise`` (its t_min, its shares' calibration and
  its exact sum arithmetic); one holder's report is not private on its own
  (docs/SECAGG.md);
* ``nowhere``: no noise at all.

``privatize`` returns one report per record (the strict local-model view). Parameters are
keyword-only and validated once, at construction; every mechanism states the
per-coordinate bound of a record's contribution before noise (``record_bound``) and its L2
sensitivity (``sensitivity``), which is what the accounting and the coordinator's range
checks use.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from abc import ABC, abstractmethod
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpem.common.core.accounting import Budget, gaussian_noise_std
from ldpem.common.core.privacy_events import DpEvent, GaussianEvent, NonPrivateEvent

__all__ = [
    "NOISE_WHERE",
    "PUBLIC_FIELDS",
    "Mechanism",
    "Needs",
    "NoiseSite",
    "ScaleRule",
]

FloatArray = NDArray[np.float64]
NoiseSite = Literal["record", "holder", "aggregator", "shares", "nowhere"]
Needs = Literal["scale", "clip"] | None
ScaleRule = Literal["fourth-root", "square-root"]
#: Where ``noise_std`` is drawn, by noise site, as a log line says it after the std: one
#: draw per record only in the local model; hospital-level noise is ONE draw on the sum.
NOISE_WHERE: dict[NoiseSite, str] = {
    "record": "per record",
    "holder": "once on the holder's sum",
    "aggregator": "once on the average, by the coordinator",
    "shares": "as this holder's share of the sum's noise",
    "nowhere": "(no noise)",
}
#: The fields a mechanism declares for each public value it ``needs``.
PUBLIC_FIELDS: dict[Needs, tuple[str, ...]] = {
    "scale": ("scale", "smoothing"),
    "clip": ("clip",),
    None: (),
}


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

    A subclass is a ``@dataclass(frozen=True, kw_only=True)`` whose fields are its public
    values (``declared_fields``). It declares, as class attributes, its ``name``,
    where its noise is added (``noise_site``), the public value that fixes a record's
    contribution (``needs``) and, for a truncation scale, Algorithm 2's rule for it; it
    implements ``contributions``, ``record_bound`` and ``sensitivity``. The protocol builds
    every mechanism from a run's public values through ``from_values`` and ``calibrated``;
    the agent, the coordinator's report checks, the simulator, the planner and the audit
    ask these declarations instead of the name.
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
        """The mechanism with these public values and noise std: its declared fields
        (``scale`` and ``smoothing`` β_s when it ``needs`` a scale, ``clip`` when it needs a
        clip norm, ``t_min`` (the fewest holders of a sum) and ``colluders`` (c of them may
        collude: the noise is that of t_min − c shares) for noise shares, and
        ``noise_std``) from the values of the same names. ValueError, naming the value,
        when one it declares is missing."""
        given: dict[str, float | int | None] = {
            "noise_std": noise_std,
            "scale": scale,
            "smoothing": smoothing,
            "clip": clip,
            "t_min": t_min,
            "colluders": colluders,
        }
        values: dict[str, float | int] = {}
        for name in cls.declared_fields():
            value = given[name]
            if value is None:
                raise ValueError(f"mechanism {cls.name} needs a value for {name}")
            values[name] = value
        return cls(**values)

    @property
    def noise_where(self) -> str:
        """Where ``noise_std`` is drawn, in words (``NOISE_WHERE``): "per record" for the
        local model, "once on the holder's sum" for hospital-level noise, …"""
        return NOISE_WHERE[self.noise_site]

    @classmethod
    def declared_fields(cls) -> tuple[str, ...]:
        """The public values this mechanism is built from, in its declaration order: the
        fields of its ``needs``, ``t_min`` (and ``colluders`` when declared) for noise
        shares, and ``noise_std`` unless it adds no noise (the registry checks that the
        class declares each one it requires)."""
        return _declared_fields(cls)

    def with_noise(self, noise_std: float) -> Mechanism:
        """The same mechanism with another noise std (itself for one that adds no noise
        and ``noise_std`` 0; ValueError for any other)."""
        if "noise_std" not in self.declared_fields():
            if noise_std != 0.0:
                raise ValueError(f"mechanism {self.name} adds no noise, got {noise_std!r}")
            return self
        changed: Mechanism = dataclasses.replace(self, noise_std=noise_std)  # type: ignore[type-var]
        return changed

    def calibrated(self, d: int, budget: Budget, participations: int = 1) -> Mechanism:
        """This mechanism with the noise that makes ``participations`` of its releases in
        dimension ``d`` (ε, δ)-DP for each record under ``budget.accounting``:
        here a Gaussian whose σ_r follows from ``sensitivity`` (noise per record or per
        holder). The aggregator's noise is calibrated by the protocol on each round's
        count; a mechanism with another kind of noise overrides this."""
        b = budget
        noise = gaussian_noise_std(
            b.epsilon, b.delta, self.sensitivity(d), b.accounting, participations
        )
        return self.with_noise(noise)

    def privacy_event(self, d: int) -> DpEvent:
        """What one holder's report (one record alone, for noise per holder) costs a record
        in dimension ``d``: a ``GaussianEvent`` of ``sensitivity`` and ``noise_std`` for
        noise per record or per holder; ``NonPrivateEvent`` when the report is not private
        on its own (the aggregator's noise, or none). A mechanism with another kind of
        noise overrides this with its own event."""
        if not self.locally_private() or self.noise_std == 0.0:
            return NonPrivateEvent()
        return GaussianEvent(self.sensitivity(d), self.noise_std)

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

    def holder_sum(self, gradients: ArrayLike, rng: np.random.Generator) -> FloatArray:
        """What a data holder sends for a batch: Σ_i contribution_i + ``holder_noise``.

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
        total: FloatArray = self.contributions(g).sum(axis=0)
        return total + self.holder_noise(g.shape[0], g.shape[1], rng)

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
            reports += self.record_noise(reports.shape, rng)
        return reports

    def record_noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> FloatArray:
        """Independent noise of ``shape`` (n, d) for n reports of one record each: here
        N(0, σ_r²) per entry."""
        noise: FloatArray = rng.normal(0.0, self.noise_std, shape)
        return noise

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


@functools.cache
def _declared_fields(cls: type[Mechanism]) -> tuple[str, ...]:
    """``Mechanism.declared_fields`` of ``cls``, once per class (every report builds its
    mechanism, and a class's fields never change)."""
    wanted = set(PUBLIC_FIELDS[cls.needs])
    if cls.noise_site == "shares":
        wanted.update(("t_min", "colluders"))
    if cls.noise_site != "nowhere":
        wanted.add("noise_std")
    declared = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    return tuple(name for name in declared if name in wanted)
