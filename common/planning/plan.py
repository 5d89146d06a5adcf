"""``ldpem plan``: what accuracy a federated run can expect, and which mechanism to use.

The figures are ``ldpem.common.planning.prediction``'s, the same function as the forecast of
``run create`` (``ldpem.server.forecast``) and the warning of ``ldpem simulate --data``:
for each mechanism a prediction (mean and 10–90% band over the prediction seeds) at the
assumed ‖β*‖/σ and at half and twice it, and, for local DP, the crossover n from which it
beats β = 0 (``ldpem.common.planning.crossover``), found on the same predictions: the planner's
statement about the planned n and its crossover line come from the same numbers. The
trivial estimate β = 0 has error ‖β*‖ = snr·σ (for gmmk and lca the trivial estimate is
the better of β = 0 and the public start, ``Problem.trivial``, docs/MATH.md §7); a
mechanism "beats β = 0" when its mean final error is at most half of the trivial
estimate's (``BEAT_FRACTION``, ``Problem.useful_error``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from ldpem.common.mechanisms import get_mechanism, mechanism_names
from ldpem.common.planning.crossover import Crossover, find_crossover
from ldpem.common.planning.executor import Executor, make_executor
from ldpem.common.planning.prediction import (
    BEAT_FRACTION,
    DEFAULT_SEEDS,
    SEARCH_SEEDS,
    Outlook,
    Prediction,
    Problem,
    outlooks,
    predict,
)
from ldpem.common.planning.simulation_cache import SimulationCache
from ldpem.common.planning.study import StudyResult

__all__ = [
    "BEAT_FRACTION",
    "DEFAULT_CROSSOVER_LIMIT",
    "WARNING_SEEDS",
    "Plan",
    "Problem",
    "beta_zero_warning",
    "crossover_mechanism",
    "make_plan",
    "recommendation",
    "recommended",
]

#: Simulations behind the warning of a study on records without a known β* (a mean only:
#: it warns when that is far from beating β = 0, and `ldpem plan` gives the band).
WARNING_SEEDS = 4
#: The largest n the crossover search tries by default. Each size costs ``seeds``
#: simulations of that many records (~3 µs a record), so a search that reaches 10⁶ with 20
#: seeds simulates about 4·10⁷ records: about a minute on 2 cores.
DEFAULT_CROSSOVER_LIMIT = 1_000_000


@dataclass(frozen=True)
class Plan:
    """The planner's answer for ``problem``: each mechanism's outlook (prediction at the
    assumed SNR and at ``SNR_FACTORS`` times it), local DP's crossover and the
    recommendation."""

    problem: Problem
    outlooks: tuple[Outlook, ...]
    crossover: Crossover
    recommendation: str

    @property
    def predictions(self) -> tuple[Prediction, ...]:
        """Each mechanism's prediction at the planned n and assumed SNR."""
        return tuple(o.prediction for o in self.outlooks)

    @property
    def mechanism(self) -> str | None:
        """The recommended mechanism's name (``recommended``), None if none."""
        chosen = recommended(self.problem, self.predictions)
        return None if chosen is None else chosen.mechanism

    @property
    def seeds(self) -> int:
        """Simulations behind each mechanism's band at the assumed SNR."""
        return self.predictions[0].seeds if self.predictions else self.crossover.seeds

    def beats(self, prediction: Prediction) -> bool:
        """Whether ``prediction``'s mean beats β = 0 (the crossover's criterion)."""
        return prediction.mean <= self.crossover.threshold

    def as_dict(self) -> dict[str, object]:
        p = self.problem
        return {
            "model": p.model,
            "d": p.d,
            "sigma": p.sigma,
            "epsilon": p.epsilon,
            "delta": p.resolved_delta,
            "rounds": p.rounds,
            "snr": p.snr,
            "tau": p.resolved_tau,
            "hospital_sizes": list(p.sizes),
            "n": p.n,
            "seeds": self.seeds,
            "first_seed": self.predictions[0].first_seed if self.predictions else None,
            "mechanisms": {
                o.prediction.mechanism: {
                    **o.prediction.summary(),
                    "errors": list(o.prediction.errors),
                    "snr_sensitivity": [s.summary() for s in o.sensitivity],
                }
                for o in self.outlooks
            },
            "trivial_error": p.trivial_error,
            "beat_threshold": p.useful_error,
            "beats_trivial": {
                o.prediction.mechanism: self.beats(o.prediction) for o in self.outlooks
            },
            "local_crossover_n": self.crossover.n,
            "local_crossover": self.crossover.as_dict(),
            "crossover_limit": self.crossover.limit,
            "recommendation": self.recommendation,
            "recommended_mechanism": self.mechanism,
        }


#: A mechanism of the same trust boundary replaces the one registered before it only with
#: this fraction of its error or less (a clear gain, not seed noise).
CLEAR_GAIN = 0.8
#: Noise shares add a trust assumption (at most c colluding holders): recommended only
#: with this fraction of the error of every useful mechanism of the hospitals' own noise.
SHARES_GAIN = 0.5


def _registry_order(predictions: Sequence[Prediction]) -> list[Prediction]:
    order = mechanism_names()
    return sorted(predictions, key=lambda p: order.index(p.mechanism))


def crossover_mechanism(mechanisms: Sequence[str]) -> str:
    """The mechanism whose crossover the plan states: the first of ``mechanisms`` (else of
    the registry) whose noise is added to each record's report — the local model, the
    strictest trust boundary and the one that needs the most records."""
    for name in (*mechanisms, *mechanism_names(federated=True)):
        if get_mechanism(name).noise_site == "record":
            return name
    raise ValueError("no registered federated mechanism adds its noise per record")


def recommended(problem: Problem, predictions: Sequence[Prediction]) -> Prediction | None:
    """The prediction of the mechanism to use among those whose noise is added on the
    hospitals' machines, from their declarations in the registry; None when none reaches
    ``problem.useful_error``.

    A mechanism whose reports are private on their own (``locally_private``: noise per
    record or per holder, the same trust boundary) is chosen when its mean beats β = 0; one
    registered later replaces it only for a clear gain (``CLEAR_GAIN``). A mechanism of
    noise ``shares`` (secure aggregation) is chosen only for a larger gain over all of
    those (``SHARES_GAIN``), because it assumes at most c colluding holders; one whose
    noise is the aggregator's (it trusts the coordinator) or nowhere never is."""
    useful = problem.useful_error
    ordered = _registry_order(predictions)
    own = [p for p in ordered if get_mechanism(p.mechanism).locally_private()]
    shares = [p for p in ordered if get_mechanism(p.mechanism).noise_site == "shares"]
    rivals = [p for p in own if p.mean <= useful]
    for shared in sorted(shares, key=lambda p: p.mean):
        if shared.mean <= useful and all(shared.mean < SHARES_GAIN * e.mean for e in rivals):
            # Many small holders, where a holder's own noise truncates each small sum
            # hard; a few large hospitals gain little.
            return shared
    best: Prediction | None = None
    for candidate in rivals:
        if best is None or candidate.mean < CLEAR_GAIN * best.mean:
            best = candidate
    return best


def recommendation(
    problem: Problem, predictions: Sequence[Prediction], crossover: Crossover
) -> str:
    """One line: the ``recommended`` mechanism, its expected error against the others' and
    β = 0's, and the crossover of the mechanism the plan states it for."""
    trivial, useful = problem.trivial_error, problem.useful_error
    zero = problem.trivial_name
    crossing = get_mechanism(crossover.mechanism).label
    need = (
        f"{crossing} needs about n ≈ {crossover.n:,} records to beat {zero}"
        if crossover.n is not None
        else f"{crossing} does not beat {zero} even at n = {crossover.limit:,}"
    )
    own = [p for p in _registry_order(predictions) if get_mechanism(p.mechanism).locally_private()]
    chosen = recommended(problem, predictions)
    if chosen is not None:
        cls = get_mechanism(chosen.mechanism)
        if cls.noise_site == "shares":
            others = ", ".join(f"{e.mean:.3g} for {e.mechanism}" for e in own)
            return (
                f"use {cls.label} (--mechanism {cls.name}, c < 2·t_min − K): expected error "
                f"{chosen.mean:.3g} against {others} and {trivial:.3g} for {zero}, if at "
                f"most c of the holders collude with the coordinator; {need}"
            )
        against = [f"{e.mean:.3g} for {e.mechanism}" for e in own if e is not chosen]
        text = (
            f"use {cls.label} (--mechanism {cls.name}): expected error {chosen.mean:.3g} "
            f"against {', '.join([*against, f'{trivial:.3g} for {zero}'])}"
        )
        return text if chosen.mechanism == crossover.mechanism else f"{text}; {need}"
    return (
        f"no private mechanism reaches error {useful:.3g} (half of {zero}'s {trivial:.3g}) at "
        f"ε = {problem.epsilon:g} "
        f"with {problem.n:,} records: more records, a larger ε or fewer rounds; {need}"
    )


def make_plan(
    problem: Problem,
    *,
    mechanisms: Sequence[str] | None = None,
    seeds: int = DEFAULT_SEEDS,
    crossover_limit: int = DEFAULT_CROSSOVER_LIMIT,
    executor: Executor | None = None,
    cache: SimulationCache | None = None,
) -> Plan:
    """Outlooks for ``mechanisms`` (default: every mechanism a federated run may use, from
    the registry), local DP's crossover and the recommendation, on ``executor`` (default:
    this machine's cores): ``seeds`` simulations behind each band at the planned n and
    assumed SNR, at most ``SENSITIVITY_SEEDS`` at half and twice the SNR and at most
    ``SEARCH_SEEDS`` at the crossover's other sizes (means that are only compared);
    ``cache``: runs to share with later predictions (``predict_many``)."""
    if mechanisms is None:
        mechanisms = mechanism_names(federated=True)
    if executor is None:
        with make_executor() as own:
            return make_plan(
                problem,
                mechanisms=mechanisms,
                seeds=seeds,
                crossover_limit=crossover_limit,
                executor=own,
                cache=cache,
            )
    found = tuple(outlooks(problem, mechanisms, seeds=seeds, executor=executor, cache=cache))
    crossover = find_crossover(
        problem,
        crossover_mechanism(mechanisms),
        threshold=problem.useful_error,
        seeds=min(seeds, SEARCH_SEEDS),
        limit=crossover_limit,
        executor=executor,
        known=[o.prediction for o in found],
    )
    line = recommendation(problem, [o.prediction for o in found], crossover)
    return Plan(problem, found, crossover, line)


def beta_zero_warning(result: StudyResult, *, max_records: int = 200_000) -> str | None:
    """For a study on records without a known β*: what the predictions expect for its size,
    budget and declared bound ‖β‖ ≤ B, and a warning when its mechanism cannot beat β = 0
    there (``ldpem plan``). None when it can, or when β* is known (the error itself then
    says it)."""
    if result.beta_star is not None:
        return None
    study = result.study
    # The study's own values, with what its records resolved: their d and dealing, δ, τ
    # and the bound B as ‖β*‖; and the model's default share of missing covariates.
    values = {f.name: getattr(study, f.name) for f in fields(Problem)}
    resolved = {
        "d": result.d,
        "sizes": result.hospital_sizes,
        "delta": result.delta,
        "tau": result.tau,
        "snr": result.beta_bound / study.sigma,
        "missing": None,
    }
    problem = Problem(**{**values, **resolved})
    expected = predict(problem, study.mechanism, seeds=WARNING_SEEDS, max_records=max_records).mean
    if expected <= problem.useful_error:
        return None
    return (
        f"on synthetic {study.model} data of this size with ‖β*‖ = {result.beta_bound:g}, "
        f"mechanism {study.mechanism} reaches a mean error of {expected:.3g} over "
        f"{WARNING_SEEDS} simulations, not below half the error of the trivial estimate "
        f"β = 0 ({problem.trivial_error:.3g}): this estimate is probably no better than "
        "β = 0; see `ldpem plan` for what would be"
    )
