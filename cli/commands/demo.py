"""``ldpem demo``: see a federated local-DP run work, end to end, in under a minute."""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import Any

from ldpem.common.mechanisms import get_mechanism, mechanism_names
from ldpem.common.models import model_names
from ldpem.demo.runner import BASELINES, DemoConfig, run_demo
from ldpem.options import from_options, model_option_arguments, model_options_of

__all__ = ["EXAMPLES", "HELP", "NAME", "add_arguments"]


NAME = "demo"
HELP = "run a coordinator and K hospital agents on 127.0.0.1 and compare with baselines"
DESCRIPTION = (
    "Start a coordinator and K hospital agents as separate processes on 127.0.0.1, "
    "each hospital with its own synthetic records (unequal sizes), run federated "
    "gradient EM under local differential privacy, and compare the result with "
    "non-private and clipped gradient EM on the same records. Writes result.json and "
    "convergence.svg to the work directory."
)
EXAMPLES = (
    "ldpem demo",
    "ldpem demo --hospitals 3 --model mrm --epsilon 0.5",
)


def demo_mechanisms() -> list[str]:
    """The registered federated mechanisms whose reports are private on their own
    (``Mechanism.locally_private``): the agents run them with no key, roster or trust
    flag, as the demo starts them."""
    return [n for n in mechanism_names(federated=True) if get_mechanism(n).locally_private()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = DemoConfig()
    parser.add_argument(
        "--hospitals",
        type=int,
        default=defaults.hospitals,
        metavar="K",
        help="hospital agents, each its own process",
    )
    parser.add_argument(
        "--records", type=int, default=defaults.records, metavar="N", help="records in all"
    )
    parser.add_argument(
        "--model",
        choices=model_names(),
        default=defaults.model,
        help="the latent-variable model",
    )
    model_option_arguments(parser)
    parser.add_argument("--d", type=int, default=defaults.d, help="dimension")
    parser.add_argument(
        "--rounds", type=int, default=defaults.rounds, metavar="T", help="EM rounds T"
    )
    parser.add_argument(
        "--epsilon", type=float, default=defaults.epsilon, help="ε per record of the run"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=defaults.seed,
        help="seed of the records and of the agents' research --seed (replayable: a demo, "
        "not a private run)",
    )
    parser.add_argument(
        "--mechanism",
        choices=demo_mechanisms(),
        default=defaults.mechanism,
        help="any registered mechanism whose reports are private on their own: noise per "
        "record (local DP) or one draw per hospital sum (hospital-level DP)",
    )
    parser.add_argument(
        "--workdir", type=Path, help="empty directory for state, logs and results (default: temp)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    config = from_options(DemoConfig, args, model_options=model_options_of(args))
    result = run_demo(config, main=args.main, quiet=args.json)
    if args.json:
        print(json.dumps(result))
    else:
        print_summary(result, sys.stdout)
    # Everything is written and every child reaped. The interpreter's exit would walk the
    # heap of numpy, SciPy, httpx and pydantic once more in its final collections (~70 ms,
    # a thirtieth of the demo, docs/PERFORMANCE.md "The demo's CPU, fourth pass"); frozen,
    # they are left to the OS.
    gc.freeze()
    return 0


def _radius(confidence: dict[str, Any] | None) -> str:
    """Beside the federated error: the coordinator's confidence radius of its estimate
    (‖β − β̂‖ ≤ r at the level), which the error should not exceed that often."""
    if confidence is None:
        return "  (no confidence region)"
    radius = confidence["radius"]
    shown = "unbounded" if radius is None else f"{radius:.3f}"
    return (
        f"  {100 * confidence['level']:g}% confidence radius {shown} "
        f"({confidence['draws']} bootstrap draws)"
    )


def print_summary(result: dict[str, Any], out: Any) -> None:
    print(file=out)
    print(
        f"final error ‖β − β*‖ after {result['rounds']} rounds ({result['model']}, "
        f"n={result['n']}, d={result['d']}):",
        file=out,
    )
    rows = [
        (
            f"federated, {get_mechanism(result['mechanism']).label} (ε={result['epsilon']:g})",
            result["error"],
        ),
        *((label, result["baselines"][name]) for name, label in BASELINES),
        ("trivial estimate β = 0", result["trivial_error"]),
    ]
    forecast = result.get("forecast")
    confidence = result.get("confidence")
    for i, (label, value) in enumerate(rows):
        print(f"  {label:<52}{value:>8.3f}" + (_radius(confidence) if i == 0 else ""), file=out)
        if i == 0 and forecast is not None:
            # The coordinator's forecast for the federated run, right under it: where its
            # final error should land (with several baselines below, "it" must be next).
            label = f"  its forecast ({forecast['seeds']} simulated runs)"
            print(
                f"  {label:<52}{forecast['mean']:>8.3f}  "
                f"10–90%: {forecast['low']:.3f}–{forecast['high']:.3f}",
                file=out,
            )
    print(file=out)
    print(f"  {'hospital':<10}{'records':>9}{'rounds':>8}{'ε spent':>10}", file=out)
    for h in result["hospitals"]:
        print(
            f"  {h['name']:<10}{h['records']:>9}{h['rounds_reported']:>8}"
            f"{h['epsilon_spent']:>10.3f}",
            file=out,
        )
    print(file=out)
    print(
        f"wall time {result['seconds']:.1f} s; results in {result['workdir']}/result.json, "
        f"plot {result['plot']}",
        file=out,
    )
