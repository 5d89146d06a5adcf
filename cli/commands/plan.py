"""``ldpem plan``: what error each mechanism should reach on a federated problem, before any
data moves, and which mechanism to use."""

from __future__ import annotations

import argparse
import json
import math

from ldpem.common.core.errors import UserError
from ldpem.common.mechanisms import get_mechanism, mechanism_names
from ldpem.common.models import model_names
from ldpem.common.planning.executor import make_executor
from ldpem.common.planning.plan import DEFAULT_CROSSOVER_LIMIT, Plan, make_plan
from ldpem.common.planning.prediction import (
    DEFAULT_SEEDS,
    SEARCH_SEEDS,
    SENSITIVITY_SEEDS,
    SNR_FACTORS,
    Prediction,
    Problem,
    band_spread,
    predict,
    predict_many,
)
from ldpem.common.planning.schedule_search import DEFAULT_GRID, ScheduleSearch, search_schedule
from ldpem.common.planning.simulation_cache import SimulationCache
from ldpem.common.protocol.run_fields import DEFAULT_D, DEFAULT_MODEL
from ldpem.common.protocol.run_fields import RUN_DEFAULTS as RUN
from ldpem.options import (
    accounting_option,
    add_executor_arguments,
    from_options,
    missing_option,
    model_option_arguments,
    model_options_of,
)

__all__ = [
    "add_arguments",
    "format_plan",
    "parse_sizes",
    "problem_from_args",
]


NAME = "plan"
HELP = "expected error of each mechanism for a consortium, and a recommendation"
DESCRIPTION = (
    "Simulate the run in-process (seeded, synthetic data of the model at the given "
    "SNR, split over the hospitals) for each mechanism, report the expected final "
    "error with its 10-90% band, and at half and twice the assumed SNR; the trivial "
    "estimate (beta = 0; for gmmk and lca the better of beta = 0 and the public start) "
    "and its error; the smallest n at which local DP beats it (mean error at "
    "most half of its), with the sizes at which 10% and 90% of runs do; and "
    "which mechanism to use. The consortium is --hospitals-sizes, or --n records "
    "over --hospitals equal hospitals."
)
EXAMPLES = (
    "ldpem plan --hospitals-sizes 40000,25000,12000 --d 10 --epsilon 1",
    "ldpem plan --model gmmk --components 3 --d 5 --n 200000 --hospitals 4 --search-schedule",
)
#: The mechanism --search-schedule searches when the plan recommends none: the per-record
#: one, as a run request's default.
SEARCH_MECHANISM = "local"
#: The comparison row of the schedule search: non-private EM at the recommended setting.
COMPARED = "none"
_GRID_TEXT = " × ".join(
    "{" + ", ".join(str(v) for v in dict.fromkeys(getattr(s, part) for s in DEFAULT_GRID)) + "}"
    for part in ("rounds", "schedule", "final")
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--model", choices=model_names(), default=DEFAULT_MODEL, help="the latent-variable model")
    add("--d", type=int, default=DEFAULT_D, help="dimension")
    add("--sigma", type=float, default=RUN.sigma, help="noise level σ of the model")
    add("--epsilon", type=float, default=RUN.epsilon, help="ε per record")
    add("--delta", type=float, default=RUN.delta, help="δ per record (default: n^-1.1)")
    add("--rounds", type=int, default=RUN.rounds, help="EM rounds T")
    add(
        "--snr",
        type=float,
        default=RUN.snr,
        help="assumed ‖β*‖/σ (β = 0 has error snr·σ); gmmk: the means' separation in σ, "
        "lca: the gap of the item logits",
    )
    add("--tau", type=float, default=RUN.tau, help="second-moment bound τ (default: from snr·σ)")
    add("--zeta", type=float, default=RUN.zeta, help="failure probability ζ")
    accounting_option(parser, default=RUN.accounting)
    missing_option(parser, default=RUN.missing)
    model_option_arguments(parser)
    add("--clip", type=float, default=RUN.clip, help="C for local-clip")
    add(
        "--hospitals-sizes",
        default=None,
        metavar="N1,N2,...",
        help="records per hospital (default: --n over --hospitals)",
    )
    add("--n", type=int, default=None, help="records in all, with --hospitals (default: none)")
    add(
        "--hospitals",
        type=int,
        default=None,
        metavar="K",
        help="K equal hospitals, with --n (default: none)",
    )
    add(
        "--seeds",
        type=int,
        default=None,
        help=f"simulations behind each band (default {DEFAULT_SEEDS}: a band then covers 80%% "
        f"± {100 * band_spread(DEFAULT_SEEDS):.0f}%% of new runs; for means that are only "
        f"compared, {SENSITIVITY_SEEDS} at other SNRs, {SEARCH_SEEDS} at other sizes and in "
        "--search-schedule); their seeds, from 10^9 on, are drawn from the problem",
    )
    add(
        "--crossover-limit",
        type=int,
        default=DEFAULT_CROSSOVER_LIMIT,
        help="largest n the local crossover search tries",
    )
    add(
        "--search-schedule",
        action="store_true",
        help="also predict each setting of a small grid of rounds, round schedule and "
        f"reported estimate (T × schedule × final: {_GRID_TEXT}; --rounds is then "
        "searched) with --seeds simulations each, and recommend, with its band, the lowest "
        "that beats the first setting by more than 2 standard errors of its per-seed gain, "
        "or else the first (default: off)",
    )
    add(
        "--search-mechanism",
        choices=mechanism_names(federated=True),
        default=None,
        help="the mechanism --search-schedule simulates (default: the one the plan "
        f"recommends, else {SEARCH_MECHANISM})",
    )
    add_executor_arguments(parser)
    add("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=handle)


def parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UserError(
            f"--hospitals-sizes must be comma-separated integers, got {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise UserError(f"--hospitals-sizes must be integers >= 1, got {text!r}")
    return sizes


def problem_from_args(args: argparse.Namespace) -> Problem:
    if args.hospitals_sizes is not None:
        if args.n is not None or args.hospitals is not None:
            raise UserError("give either --hospitals-sizes or --n with --hospitals, not both")
        sizes = parse_sizes(args.hospitals_sizes)
    else:
        if args.n is None or args.hospitals is None:
            raise UserError("give --hospitals-sizes, or --n and --hospitals")
        if args.hospitals < 1:
            raise UserError(f"--hospitals must be >= 1, got {args.hospitals}")
        if args.n < args.hospitals:
            raise UserError(f"--n must be at least --hospitals ({args.hospitals}), got {args.n}")
        base, extra = divmod(args.n, args.hospitals)
        sizes = tuple(base + (1 if i < extra else 0) for i in range(args.hospitals))
    for name in ("epsilon", "sigma", "snr", "clip"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"--{name} must be > 0, got {value}")
    if args.seeds is not None and args.seeds < 1:
        raise UserError(f"--seeds must be >= 1, got {args.seeds}")
    if args.delta is not None and not 0 < args.delta < 1:
        raise UserError(f"--delta must be in (0, 1), got {args.delta}")
    try:
        return from_options(Problem, args, sizes=sizes, model_options=model_options_of(args))
    except ValueError as error:
        raise UserError(str(error)) from None


def _label(mechanism: str, clip: float) -> str:
    kind = get_mechanism(mechanism)
    return kind.label + (f", C = {clip:g}" if kind.needs == "clip" else "")


def _band(prediction: Prediction) -> str:
    return f"{prediction.mean:.3g} [{prediction.low:.3g}, {prediction.high:.3g}]"


def format_plan(plan: Plan) -> str:
    """The plan as text: the table (with the SNR sensitivity), the verdict at the planned
    n, the crossover line (the same predictions: they cannot disagree) and the
    recommendation."""
    p = plan.problem
    first = plan.predictions[0].first_seed
    others = [p.snr * f for f in SNR_FACTORS]
    options = "".join(f", {name} = {value}" for name, value in p.model_options)
    size = f" ({p.parameter_dim} parameters)" if p.parameter_dim != p.d else ""
    lines = [
        f"{p.model}{options}, d = {p.d}{size}, σ = {p.sigma:g}, snr {p.snr:g}, ε = {p.epsilon:g}, "
        f"δ = {p.resolved_delta:.3g}, {p.rounds} rounds, {len(p.sizes)} hospital(s), "
        f"n = {p.n:,}",
        split_line(p.sizes),
        f"expected final error ‖β − β*‖: mean [10–90% band] over {plan.seeds} simulations "
        f"(seeds {first}–{first + plan.seeds - 1})",
        band_line(plan.seeds, _whatif_seeds(plan)),
        f"  {'‖β*‖/σ =':<42}{f'{p.snr:g} (assumed)':<26}"
        + "".join(f"{f'if {snr:g}':>10}" for snr in others),
    ]
    for o in plan.outlooks:
        e = o.prediction
        lines.append(
            f"  {_label(e.mechanism, p.clip):<42}{_band(e):<26}"
            + "".join(f"{s.mean:>10.3g}" for s in o.sensitivity)
        )
    trivial = f"trivial estimate, {p.trivial_name}"
    lines.append(
        f"  {trivial:<42}{p.trivial_error:<26.3g}"
        + "".join(f"{p.at_snr(snr).trivial_error:>10.3g}" for snr in others)
    )
    lines.append(
        f"  (other ‖β*‖/σ: the same run, its τ and bound B those of the assumed {p.snr:g})"
    )
    # The crossover's mechanism (local DP: ``planning.crossover_mechanism``) at the planned n.
    crossing = get_mechanism(plan.crossover.mechanism).label
    baseline = {e.mechanism: e for e in plan.predictions}.get(plan.crossover.mechanism)
    if baseline is not None:
        verdict = "does" if plan.beats(baseline) else "does NOT"
        relation = "≤" if plan.beats(baseline) else ">"
        lines.append(
            f"at n = {p.n:,} {crossing} {verdict} beat {p.trivial_name}: mean error "
            f"{baseline.mean:.3g} {relation} {plan.crossover.threshold:.3g} (half of "
            f"{p.trivial_name}'s)"
        )
    lines.append(plan.crossover.describe(crossing, p.trivial_name))
    lines.append(f"recommendation: {plan.recommendation}")
    lines.extend(FOOTER)
    return "\n".join(lines)


def band_line(seeds: int, whatif_seeds: int | None = None) -> str:
    """What a band of ``seeds`` simulations promises: 80% of new runs on average, give or
    take its own spread (``prediction.band_spread``); and how many simulations each mean of
    the 'if' columns rests on, when there are any."""
    whatif = "" if whatif_seeds is None else f"; each 'if' is a mean of {whatif_seeds}"
    return (
        f"  (a band from {seeds} simulations holds 80% of new runs on average, "
        f"± {band_spread(seeds):.0%} from one problem to another{whatif}; more: --seeds)"
    )


def _whatif_seeds(plan: Plan) -> int | None:
    """Simulations behind each mean at the other SNRs (None: the plan has none)."""
    for outlook in plan.outlooks:
        if outlook.sensitivity:
            return outlook.sensitivity[0].seeds
    return None


def split_line(sizes: tuple[int, ...]) -> str:
    """Which split of the records the plan simulates, and how ``ldpem simulate`` runs the
    same one (its --hospitals alone draws a random split instead)."""
    shown = ",".join(str(s) for s in sizes)
    if len(set(sizes)) == 1:
        kind = f"{len(sizes)} equal hospital(s) of {sizes[0]:,} records"
    else:
        kind = f"hospitals of {', '.join(f'{s:,}' for s in sizes)} records"
    return (
        f"split: {kind} (the same split in `ldpem simulate --hospitals-sizes {shown}`; "
        "its --hospitals K alone draws random sizes)"
    )


#: What the figures mean, in plain words (docs/RESULTS.md, "Reading a plan").
FOOTER = (
    "what the figures mean:",
    "  ‖β*‖/σ (snr) is how large the true parameter β* is against the noise σ of one "
    "record: the signal-to-noise ratio. The error is reported in the units of β, and "
    "β = 0 is off by ‖β*‖ = snr·σ (gmmk and lca: snr is the separation of the "
    "components, and the trivial estimate is the better of β = 0 and the run's random "
    "start, its error up to a relabelling of the components; docs/MATH.md §7).",
    "  The assumed snr is a guess the plan rests on: no one knows β* before the run. The "
    "'if' columns show the same run (same τ and scale) if the truth were half or twice "
    "it. To choose it for your data: ‖β̂‖/σ̂ from a published or pilot estimate of the "
    "same model, or from a non-private fit on a small sample you may use; when unsure, "
    "the lower end: a smaller snr makes the plan pessimistic.",
)


def handle(args: argparse.Namespace) -> int:
    problem = problem_from_args(args)
    if args.crossover_limit < 1000:
        raise UserError(f"--crossover-limit must be >= 1000, got {args.crossover_limit}")
    seeds = DEFAULT_SEEDS if args.seeds is None else args.seeds
    compared_seeds = SEARCH_SEEDS if args.seeds is None else args.seeds
    search: ScheduleSearch | None = None
    compared: Prediction | None = None
    # One run per seed for the whole command: the search's first setting is the plan's row
    # of its mechanism, and the plan's runs also record the grid's other reported estimates.
    finals = tuple(dict.fromkeys(s.final for s in DEFAULT_GRID)) if args.search_schedule else ()
    cache = SimulationCache(finals=finals)
    with make_executor(args.scheduler, workers=args.workers) as executor:
        plan = make_plan(
            problem,
            seeds=seeds,
            crossover_limit=args.crossover_limit,
            executor=executor,
            cache=cache,
        )
        if args.search_schedule:
            # The mechanism the plan recommends, unless told: the search is advice for it.
            searched = args.search_mechanism or plan.mechanism or SEARCH_MECHANISM
            # The comparison row at every setting, in the search's batch: on the records the
            # search draws for each seed, a few ms a run, whichever setting is recommended.
            fitting = [s.applied(problem) for s in DEFAULT_GRID if s.fits(problem, searched)]
            cases = [(p, m) for p in fitting for m in (searched, COMPARED)]
            predict_many(cases, seeds=compared_seeds, executor=executor, cache=cache)
            search = search_schedule(
                problem, searched, seeds=compared_seeds, executor=executor, cache=cache
            )
            # Non-private EM with the same setting: the row the recommendation is read against.
            compared = predict(
                search.setting.applied(problem),
                COMPARED,
                seeds=search.seeds,
                executor=executor,
                cache=cache,
            )
    if args.json:
        payload = plan.as_dict()
        if search is not None and compared is not None:
            payload["schedule_search"] = {
                **search.as_dict(),
                "compared": {"mechanism": COMPARED, **compared.summary()},
            }
        print(json.dumps(payload))
    else:
        print(format_plan(plan))
        if search is not None and compared is not None:
            print(format_search(search, compared, chosen_by_plan=args.search_mechanism is None))
    return 0


def format_search(search: ScheduleSearch, compared: Prediction, *, chosen_by_plan: bool) -> str:
    """The search's table, why its mechanism, the comparison row at the same setting, and
    what the gain column means."""
    why = "the plan's recommendation" if chosen_by_plan else "--search-mechanism"
    return "\n".join(
        [
            f"schedule search for {search.mechanism} ({why}):",
            search.format(),
            f"  for comparison, at the same setting ({search.setting.label}): "
            f"{_label(COMPARED, 1.0)} {_band(compared)}",
            "  gain: how much lower a setting's error is than the first setting's on the same "
            "simulated runs (same seeds), averaged, ± its standard error; a setting is "
            "recommended over the first only when its gain exceeds 2 standard errors.",
        ]
    )
