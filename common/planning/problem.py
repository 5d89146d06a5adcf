"""The public description of a run that a prediction simulates (``Problem``).

Its own module so that what shares simulations between predictions
(``ldpem.common.planning.simulation_cache``) and the predictions themselves
(``ldpem.common.planning.prediction``, which re-exports it) both use it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ldpem.common.core._validation import check_count, check_positive
from ldpem.common.models import Model, get_model
from ldpem.common.planning.study import Study
from ldpem.common.protocol import (
    least_records,
    study_beta_bound,
    study_delta,
    study_tau,
)
from ldpem.common.protocol.run_fields import RunFields

__all__ = ["BEAT_FRACTION", "Problem"]

#: A mean final error at most this fraction of ‖β*‖ counts as beating β = 0. Not ‖β*‖
#: itself: runs start at a random β⁰ of norm σ, as the coordinator's do, whose error is
#: already about ‖β*‖, so an error just below it only says the EM did not move. At half,
#: the estimate points within ~30° of β*.
BEAT_FRACTION = 0.5


@dataclass(frozen=True)
class Problem(RunFields):
    """The public description of a run: its model, dimension and hospitals' sizes, and
    its public fields (``RunFields``, with their defaults and what ``None`` means, as
    ``protocol.study_delta`` and ``protocol.study_tau`` resolve them)."""

    model: str
    d: int
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        get_model(self.model, dict(self.model_options))
        check_count("d", self.d)
        check_count("rounds", self.rounds)
        check_positive("sigma", self.sigma)
        check_positive("epsilon", self.epsilon)
        check_positive("snr", self.snr)
        if not self.sizes:
            raise ValueError("sizes must list at least one hospital")
        for size in self.sizes:
            if size < self.rounds:
                raise ValueError(
                    f"every hospital needs at least rounds = {self.rounds} records, got {size}"
                )

    @property
    def n(self) -> int:
        return sum(self.sizes)

    @property
    def resolved_delta(self) -> float:
        return study_delta(self.delta, self.n)

    @property
    def resolved_bound(self) -> float:
        """The declared bound B on ‖β‖₂: ``beta_bound``, else snr·σ."""
        return study_beta_bound(self.beta_bound, snr=self.snr, sigma=self.sigma)

    @property
    def resolved_tau(self) -> float:
        return study_tau(
            self.configured_model,
            tau=self.tau,
            beta_bound=self.resolved_bound,
            sigma=self.sigma,
            d=self.d,
        )

    @property
    def configured_model(self) -> Model:
        """The model with its ``model_options`` set (``Model.configured``)."""
        return get_model(self.model, dict(self.model_options))

    @property
    def parameter_dim(self) -> int:
        """p, the size of β: d, or K·(d + 1) for a mixture (``Model.parameter_dim``)."""
        return self.configured_model.parameter_dim(self.d)

    @property
    def trivial(self) -> tuple[str, float]:
        """The estimate that ignores the data and its error against the β* the
        simulations draw (``Model.trivial_estimate``): β = 0 with ‖β*‖ = snr·σ for gmm,
        mrm and rmc; for gmmk and lca the better of β = 0 and the public start
        (docs/MATH.md §7, "The trivial estimate")."""
        return self.configured_model.trivial_estimate(self.d, snr=self.snr, sigma=self.sigma)

    @property
    def trivial_name(self) -> str:
        """How the plan names the trivial estimate ("β = 0", "the start β⁰")."""
        return self.trivial[0]

    @property
    def trivial_error(self) -> float:
        """The trivial estimate's error (``trivial``)."""
        return self.trivial[1]

    @property
    def useful_error(self) -> float:
        """The mean error below which a mechanism beats the trivial estimate
        (``BEAT_FRACTION`` of its error)."""
        return BEAT_FRACTION * self.trivial_error

    @property
    def seed_key(self) -> str:
        """What the prediction seeds are drawn from: every field but those a schedule
        search varies (rounds, schedule, final), as text: the problem's own fields, then
        the run's (``RunFields``, in their declared order). The model's options are left
        out while there are none, so the problems made before they were a run field keep
        their seeds."""
        skip = {"rounds", "schedule", "final"}
        if not self.model_options:
            skip.add("model_options")
        shared = [f.name for f in fields(RunFields)]
        names = [f.name for f in fields(self) if f.name not in shared] + shared
        return repr([(name, getattr(self, name)) for name in names if name not in skip])

    def study(self, mechanism: str, seed: int) -> Study:
        """The simulated study of this problem with ``mechanism`` and ``seed``: synthetic
        data of the model (its ``draw_parameter`` at snr·σ), dealt to hospitals of
        ``sizes`` records. Every field of a problem is one of a study's."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return Study(mechanism=mechanism, n=self.n, seed=seed, **values)

    def with_records(self, n: int) -> Problem:
        """The same problem with ``n`` records split in the same proportions."""
        total = self.n
        least = least_records(self.rounds, self.schedule)
        sizes = [max(least, round(s * n / total)) for s in self.sizes]
        return replace(self, sizes=tuple(sizes))

    def at_snr(self, snr: float) -> Problem:
        """The same run if ‖β*‖/σ were ``snr``: the data change, the run's public
        parameters do not (its bound B, hence τ and the scale, stay those of the assumed
        SNR, as a run created under that assumption publishes them)."""
        return replace(self, snr=snr, beta_bound=self.resolved_bound)
