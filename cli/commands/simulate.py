"""``ldpem simulate``: run the whole gradient EM in one process and report the accuracy.

The study is ``ldpem.common.planning.study.run_study``'s; this module reads the command line, loads
records given with ``--data`` and writes the outcome (``ldpem.simulate_outcome.outcome``: the
``--json`` fields).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

import numpy as np
from numpy.typing import NDArray

from ldpem.commands.client import add_source_arguments, source_from_args
from ldpem.commands.plan import parse_sizes
from ldpem.common.core.errors import UserError
from ldpem.common.mechanisms import get_mechanism, mechanism_names
from ldpem.common.models import get_model, model_names
from ldpem.common.planning.confidence import (
    DEFAULT_DRAWS,
    DEFAULT_LEVEL,
    Bootstrap,
    check_bootstrap,
    region_lines,
)
from ldpem.common.planning.plan import beta_zero_warning
from ldpem.common.planning.study import Dataset, RoundCallback, Study, run_study
from ldpem.options import (
    accounting_option,
    add_executor_arguments,
    from_options,
    missing_option,
    model_option_arguments,
    model_options_of,
)
from ldpem.simulate_outcome import SPLITS, outcome

__all__ = [
    "add_arguments",
    "outcome",
    "parse_schedule",
    "progress_reporter",
    "simulate",
    "study_from_args",
    "summary",
]

_DEFAULTS = Study()
_BAR_WIDTH = 30


NAME = "simulate"
HELP = "simulate a private gradient EM run in one process"
DESCRIPTION = (
    "Run the whole federated gradient EM in one process (each simulated hospital "
    "runs the same round code as the agent) and report the estimate and its error: "
    "what accuracy a budget buys before anything is deployed. Without --data the "
    "records are synthetic, drawn from --model at --snr."
)
EXAMPLES = (
    "ldpem simulate --model gmm --mechanism local --n 200000 --d 10 --epsilon 1",
    "ldpem simulate --mechanism secagg --n 200000 --hospitals 1000 --dropout 0.1",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--model", choices=model_names(), default=_DEFAULTS.model, help="the latent-variable model")
    add(
        "--mechanism",
        choices=mechanism_names(),
        default=_DEFAULTS.mechanism,
        help="privacy mechanism: local DP per record, hospital-level, central, clipped, "
        "distributed DP over secure aggregation (secagg), none",
    )
    add("--n", type=int, default=_DEFAULTS.n, help="records in all")
    add("--d", type=int, default=_DEFAULTS.d, help="dimension")
    add("--epsilon", type=float, default=_DEFAULTS.epsilon, help="ε per record")
    add("--delta", type=float, default=None, help="δ per record (default: n^-1.1)")
    add("--rounds", type=int, default=_DEFAULTS.rounds, help="EM rounds T")
    add(
        "--schedule",
        default=_DEFAULTS.schedule,
        metavar="RULE",
        help="records per round: equal, geometric:G (round t's share grows as G^t) or T "
        "comma-separated fractions summing to 1 (default: equal)",
    )
    add(
        "--final",
        default=_DEFAULTS.final,
        metavar="RULE",
        help="the reported estimate: last (the last iterate) or average:K (the last K "
        "iterates, weighted by inverse noise variance; no privacy cost) (default: last)",
    )
    add("--clip", type=float, default=_DEFAULTS.clip, help="C for the clipped baselines")
    add("--snr", type=float, default=_DEFAULTS.snr, help="‖β*‖/σ of the synthetic data")
    add("--sigma", type=float, default=_DEFAULTS.sigma, help="noise level σ of the model")
    missing_option(parser, default=None)
    model_option_arguments(parser)
    accounting_option(parser, default=_DEFAULTS.accounting)
    add("--reuse", action="store_true", help="use every record in every round (budget split)")
    add("--hospitals", type=int, default=_DEFAULTS.hospitals, help="data holders K")
    add(
        "--hospitals-sizes",
        default=None,
        metavar="N1,N2,...",
        help="explicit records per hospital, summing to n (default: a random split of n "
        "over --hospitals)",
    )
    add(
        "--seed",
        type=int,
        default=_DEFAULTS.seed,
        help="seed of the synthetic data, the split and the noise",
    )
    add(
        "--tau",
        type=float,
        default=None,
        help="second-moment bound τ (default: from B, σ and d)",
    )
    add(
        "--beta-bound",
        type=float,
        default=None,
        help="declared bound B on ‖β‖ (default: snr·σ)",
    )
    add("--zeta", type=float, default=_DEFAULTS.zeta, help="failure probability ζ")
    add("--eta", type=float, default=_DEFAULTS.eta, help="step size η")
    add(
        "--outliers",
        type=float,
        default=_DEFAULTS.outliers,
        help="share of records made gross outliers",
    )
    add(
        "--t-min",
        type=int,
        default=None,
        help="secagg: the fewest hospitals whose reports make a round's sum (default: "
        "K - floor(K/10): 10%% may drop out)",
    )
    add(
        "--colluders",
        type=int,
        default=None,
        help="secagg: c, the most of them that may collude with the coordinator; the noise "
        "is sized for t-min - c honest shares (default: the largest c <= K/3 with "
        "c < 2 t-min - K)",
    )
    add(
        "--secagg-topology",
        choices=("auto", "mesh", "graph", "expander"),
        default="auto",
        help="secagg: the full mesh, the SecAgg+ graph or its expander "
        "(docs/SECAGG_GRAPH.md), whose noise is sized for their h honest shares as in a "
        "federated run on them; auto (default): the expander where its degree is at most "
        "K/2, else the mesh, as a run's coordinator resolves it",
    )
    add(
        "--dropout-share",
        type=float,
        default=None,
        help="secagg graph or expander: the share of hospitals that may drop out of a "
        "round, which the graph's degree tolerates (default 0.1)",
    )
    add(
        "--min-honest-shares",
        type=int,
        default=None,
        help="secagg graph or expander: h, the least honest noise shares in any sum the "
        "coordinator can learn (default 2; a larger h buys accuracy with more neighbours)",
    )
    add(
        "--dropout",
        type=float,
        default=_DEFAULTS.dropout,
        help="probability that a hospital misses a round (a round with fewer reports than "
        "t-min is not released)",
    )
    # Records instead of synthetic data: a file, or a database with --query (as `client`).
    add_source_arguments(parser, required=False)
    add("--level", type=float, default=DEFAULT_LEVEL, help="the confidence region's level")
    add(
        "--draws",
        type=int,
        default=DEFAULT_DRAWS,
        help="parametric bootstrap draws behind the confidence region: reruns of the whole "
        f"study on synthetic data at the estimate (default: {DEFAULT_DRAWS}; 0: no region)",
    )
    add(
        "--bootstrap-seed",
        type=int,
        default=None,
        help="seed of the bootstrap draws, to replay a region (default: from the OS)",
    )
    add_executor_arguments(parser)
    add("--json", action="store_true", help="print one JSON object instead of a summary")
    parser.set_defaults(handler=run)


def parse_schedule(text: str) -> str | tuple[float, ...]:
    """``--schedule``: a named rule as it is, or comma-separated fractions as a tuple."""
    if "," not in text and not text.replace(".", "", 1).isdigit():
        return text
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise UserError(f"--schedule fractions must be numbers, got {text[:80]!r}") from None


def study_from_args(args: argparse.Namespace) -> Study:
    """The study of ``simulate``'s options, its secagg topology "auto" resolved as a run's
    coordinator resolves it (``runvalues.resolve_topology``, K the hospitals)."""
    sizes = None if args.hospitals_sizes is None else parse_sizes(args.hospitals_sizes)
    topology = args.secagg_topology
    if topology == "auto":
        from ldpem.common.secagg.runvalues import is_shared, resolve_topology

        topology = resolve_topology(
            args.hospitals if sizes is None else len(sizes),
            args.colluders,
            args.dropout_share,
            args.min_honest_shares,
            shares=is_shared(args.mechanism),
            t_min=args.t_min,
        )
    return from_options(
        Study,
        args,
        sizes=sizes,
        schedule=parse_schedule(args.schedule),
        secagg_topology=topology,
        model_options=model_options_of(args),
    )


def progress_reporter(rounds: int, stream: TextIO) -> RoundCallback:
    """A callback drawing a bar on a terminal, or writing one line per round elsewhere."""
    interactive = stream.isatty()

    def on_round(t: int, beta: NDArray[np.float64], error: float | None) -> None:
        shown = "" if error is None else f"  error {error:.4g}"
        if interactive:
            filled = round(_BAR_WIDTH * t / rounds)
            bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
            end = "\n" if t == rounds else ""
            stream.write(f"\r[{bar}] round {t}/{rounds}{shown}{end}")
        else:
            stream.write(f"round {t}/{rounds}{shown}\n")
        stream.flush()

    return on_round


#: ``simulate``'s default: no confidence region (the command asks for one).
NO_BOOTSTRAP = Bootstrap()


def simulate(
    study: Study,
    *,
    data: Dataset | None = None,
    on_round: RoundCallback | None = None,
    bootstrap: Bootstrap = NO_BOOTSTRAP,
) -> dict[str, Any]:
    """Run ``study`` (on ``data`` when given) and return its ``outcome``, with the
    confidence region ``bootstrap`` asks for; ``seconds`` is the study's alone."""
    started = time.perf_counter()
    result = run_study(study, data=data, on_round=on_round)
    warning = beta_zero_warning(result)
    seconds = time.perf_counter() - started
    confidence = bootstrap.summary_of(result)
    return outcome(result, warning=warning, seconds=seconds, confidence=confidence)


def summary(outcome: dict[str, Any]) -> str:
    """A short human-readable account of a run."""
    privacy = (
        "no privacy"
        if get_mechanism(outcome["mechanism"]).noise_site == "nowhere"
        else f"ε = {outcome['epsilon']:g}, δ = {outcome['delta']:.3g} per record"
    )
    beta = ", ".join(f"{v:.3f}" for v in outcome["beta"])
    lines = [
        f"{outcome['model']} with mechanism {outcome['mechanism']}: n = {outcome['n']}, "
        f"d = {outcome['d']}, {outcome['rounds']} rounds, {privacy}",
        f"final β = [{beta}]",
    ]
    sizes = outcome["hospital_sizes"]
    if len(sizes) > 1:
        how = SPLITS.get(outcome["split"], outcome["split"])
        lines.insert(1, f"{len(sizes)} hospitals of {', '.join(map(str, sizes))} records ({how})")
    if "t_min" in outcome:
        lines.append(
            f"noise shares ({outcome['secagg_topology']}): a sum holds at least "
            f"{outcome['t_min']} hospitals, of whom {outcome['honest_shares']} honest ones "
            "make its noise "
            f"(ε = {outcome['sum_epsilon']:.4g}); one hospital's own share alone gives "
            f"ε = {outcome['fallback_epsilon']:.4g} (fallback); {outcome['modulus_bits']}-bit "
            "aggregation"
        )
    if outcome.get("skipped_rounds"):
        lines.append(
            f"rounds not released (too few reports): {len(outcome['skipped_rounds'])} of "
            f"{outcome['rounds']}"
        )
    if outcome["error"] is not None:
        symmetry = get_model(outcome["model"]).error_symmetry
        lines.append(
            f"error ‖β − β*‖{' ' + symmetry if symmetry else ''} = {outcome['error']:.4g} "
            f"(from {outcome['initial_error']:.4g} at β⁰)"
        )
    if outcome.get("confidence") is not None:
        lines.extend(region_lines(outcome["confidence"], outcome["beta"]))
    lines.append(f"took {outcome['seconds']:.2f} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    study = study_from_args(args)
    data = None
    if args.data is not None:
        data = Dataset(source_from_args(args).load(study.model))
    elif args.query or args.columns or args.target or args.password_file:
        raise UserError("--query, --columns, --target and --password-file need --data")
    if args.draws:
        check_bootstrap(args.level, args.draws)
    bootstrap = from_options(Bootstrap, args, seed=args.bootstrap_seed)
    if args.json:
        print(json.dumps(simulate(study, data=data, bootstrap=bootstrap)))
        return 0
    shown = simulate(
        study,
        data=data,
        on_round=progress_reporter(study.rounds, sys.stderr),
        bootstrap=bootstrap,
    )
    print(summary(shown))
    if shown["warning"]:
        print(f"warning: {shown['warning']}", file=sys.stderr)
    return 0
