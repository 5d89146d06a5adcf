"""``ldpem simulate``: run the whole gradient EM in one process and report the accuracy."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from numpy.typing import NDArray

from ldpem.cli import examples
from ldpem.cmd_client import add_source_arguments, source_from_args
from ldpem.cmd_plan import parse_sizes
from ldpem.common.accounting import ACCOUNTING_MODES
from ldpem.common.calibration import DEFAULT_ZETA
from ldpem.common.errors import UserError
from ldpem.common.mechanisms import get_mechanism, mechanism_names
from ldpem.common.models import model_names
from ldpem.simulate import Dataset, RoundCallback, SimulationConfig, SimulationOutcome, simulate

__all__ = ["config_from_args", "progress_reporter", "register", "summary"]

_DEFAULTS = SimulationConfig()
_BAR_WIDTH = 30


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate a private gradient EM run in one process",
        description=(
            "Run the whole federated gradient EM in one process (each simulated hospital "
            "runs the same round code as the agent) and report the estimate and its error: "
            "what accuracy a budget buys before anything is deployed. Without --data the "
            "records are synthetic, drawn from --model at --snr."
        ),
        epilog=examples(
            "ldpem simulate --model gmm --mechanism local --n 200000 --d 10 --epsilon 1",
            "ldpem simulate --model mrm --data records.csv --epsilon 1 --hospitals 4",
        ),
    )
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
    add("--clip", type=float, default=_DEFAULTS.clip, help="C for the clipped baselines")
    add("--snr", type=float, default=_DEFAULTS.snr, help="‖β*‖/σ of the synthetic data")
    add("--sigma", type=float, default=_DEFAULTS.sigma, help="noise level σ of the model")
    add(
        "--missing",
        type=float,
        default=None,
        help="rmc: share of missing covariates (default: 0.1 for rmc)",
    )
    add(
        "--accounting",
        choices=ACCOUNTING_MODES,
        default=_DEFAULTS.accounting,
        help="privacy accounting: exact (tight Gaussian DP) or the paper's",
    )
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
    add("--zeta", type=float, default=DEFAULT_ZETA, help="failure probability ζ")
    add("--eta", type=float, default=_DEFAULTS.eta, help="step size η")
    add("--outliers", type=float, default=0.0, help="share of records made gross outliers")
    add(
        "--t-min",
        type=int,
        default=None,
        help="secagg: honest hospitals whose noise shares make the noise (default: "
        "max(2, ceil(K/2)), at most K)",
    )
    add(
        "--dropout",
        type=float,
        default=0.0,
        help="probability that a hospital misses a round (a round with fewer reports than "
        "t-min is not released)",
    )
    # Records instead of synthetic data: a file, or a database with --query (as `client`).
    add_source_arguments(parser, required=False)
    add("--json", action="store_true", help="print one JSON object instead of a summary")
    parser.set_defaults(handler=run)


def config_from_args(args: argparse.Namespace) -> SimulationConfig:
    return SimulationConfig(
        model=args.model,
        mechanism=args.mechanism,
        n=args.n,
        d=args.d,
        epsilon=args.epsilon,
        delta=args.delta,
        rounds=args.rounds,
        clip=args.clip,
        snr=args.snr,
        sigma=args.sigma,
        missing=args.missing,
        accounting=args.accounting,
        reuse=args.reuse,
        hospitals=args.hospitals,
        seed=args.seed,
        tau=args.tau,
        beta_bound=args.beta_bound,
        zeta=args.zeta,
        eta=args.eta,
        outliers=args.outliers,
        t_min=args.t_min,
        dropout=args.dropout,
        # A database is no Path: `run` reads every source through ldpem.client.sources.
        data=Path(args.data) if args.data is not None and "://" not in args.data else None,
        sizes=None if args.hospitals_sizes is None else parse_sizes(args.hospitals_sizes),
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


def summary(outcome: SimulationOutcome) -> str:
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
        lines.insert(1, f"{len(sizes)} hospitals of {', '.join(map(str, sizes))} records")
    if "t_min" in outcome:
        lines.append(
            f"noise shares: any {outcome['t_min']} honest hospitals make the noise of the sum "
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
        lines.append(
            f"error ‖β − β*‖ = {outcome['error']:.4g} (from {outcome['initial_error']:.4g} at β⁰)"
        )
    lines.append(f"took {outcome['seconds']:.2f} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    dataset = None
    if args.data is not None:
        dataset = Dataset(source_from_args(args).load(config.model))
    elif args.query or args.columns or args.target or args.password_file:
        raise UserError("--query, --columns, --target and --password-file need --data")
    if args.json:
        print(json.dumps(simulate(config, dataset=dataset)))
        return 0
    outcome = simulate(
        config, on_round=progress_reporter(config.rounds, sys.stderr), dataset=dataset
    )
    print(summary(outcome))
    if outcome.get("warning"):
        print(f"warning: {outcome['warning']}", file=sys.stderr)
    return 0
