"""``ldpem experiment``: reproduce the paper's figures (CSV + PNG per figure)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ldpem.experiment.runner import FIGURES, run_experiments
from ldpem.options import add_executor_arguments

__all__ = ["EXAMPLES", "HELP", "NAME", "add_arguments"]


NAME = "experiment"
HELP = "reproduce the paper's experiments (central and local model)"
DESCRIPTION = (
    "Reproduce Figures 1-8 of the paper and a robustness study (fig9), each in the "
    "central and the local model; write a CSV and a PNG per figure."
)
EXAMPLES = (
    "ldpem experiment --figure all --seeds 10",
    "ldpem experiment --figure fig5 --scheduler tcp://10.0.0.5:8786",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--figure",
        default="all",
        help=f"the figure to reproduce, {', '.join(FIGURES)}, or all",
    )
    parser.add_argument("--seeds", type=int, default=10, help="seeds per point")
    parser.add_argument(
        "--out", type=Path, default=Path("docs/results"), metavar="DIR", help="output folder"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the pipeline")
    parser.add_argument("--no-plot", action="store_true", help="write the CSVs only")
    add_executor_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    names = list(FIGURES) if args.figure == "all" else [args.figure]
    written = run_experiments(
        names,
        seeds=args.seeds,
        out=args.out,
        quick=args.quick,
        plot=not args.no_plot,
        scheduler=args.scheduler,
        workers=args.workers,
    )
    for path in written:
        print(path)
    return 0
