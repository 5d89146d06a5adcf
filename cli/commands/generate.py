"""ldpem generate: write synthetic records of one model, for demos, trials and tests.

    ldpem generate --model gmm --d 10 --n 20000 --seed 7 [--parts 3 --part 2]
                   --out a.csv [--beta-star-out beta_star.json]

--seed draws one synthetic study: beta* (of norm snr times sigma) and parts times n records
(ldpem.common.models.<model>.generate). The file holds part --part (1-based) of those
records, so hospitals that use the same seed, d, n and parts with different parts hold
disjoint records of one study with the same beta*. The output format follows the suffix:
.csv (header x1..xd, then y for mrm/rmc; a missing rmc covariate is nan) or .npy (for
mrm/rmc the last column is y), as ldpem client --data reads them. --beta-star-out writes
beta* as JSON, to measure a run's error against it (ldpem run status --beta-star).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ldpem.common.core.errors import UserError
from ldpem.common.models import get_model, model_names
from ldpem.common.protocol.run_fields import RUN_DEFAULTS
from ldpem.options import model_option_arguments, model_options_of

__all__ = ["EXAMPLES", "HELP", "NAME", "add_arguments"]

_FORMATS = (".csv", ".npy")


NAME = "generate"
HELP = "write synthetic records (one part of a seeded study)"
EXAMPLES = (
    "ldpem generate --model gmm --d 10 --n 20000 --seed 7 --parts 3 --part 1 "
    "--out records.csv --beta-star-out beta.json",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, choices=model_names(), help="the latent-variable model"
    )
    model_option_arguments(parser)
    parser.add_argument("--d", required=True, type=int, help="dimension")
    parser.add_argument("--n", required=True, type=int, help="records in this file")
    parser.add_argument("--seed", required=True, type=int, help="seed of the whole study")
    parser.add_argument("--parts", type=int, default=1, help="number of equal parts of the study")
    parser.add_argument("--part", type=int, default=1, help="which part to write, 1-based")
    parser.add_argument("--snr", type=float, default=RUN_DEFAULTS.snr, help="‖β*‖/σ")
    parser.add_argument("--sigma", type=float, default=RUN_DEFAULTS.sigma, help="noise std σ")
    parser.add_argument(
        "--missing", type=float, help="rmc: fraction of missing covariates (default: 0.1)"
    )
    parser.add_argument("--out", required=True, type=Path, help="output file, .csv or .npy")
    parser.add_argument(
        "--beta-star-out",
        type=Path,
        metavar="FILE",
        help="write β* here, as JSON (default: not written)",
    )
    parser.set_defaults(handler=run)


def _check(args: argparse.Namespace) -> None:
    for name in ("d", "n", "parts"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.seed < 0:
        raise UserError(f"--seed must be non-negative, got {args.seed}")
    if not 1 <= args.part <= args.parts:
        raise UserError(f"--part must be between 1 and --parts ({args.parts}), got {args.part}")
    if args.out.suffix.lower() not in _FORMATS:
        raise UserError(f"{args.out}: the output must end in .csv or .npy")
    if args.beta_star_out is not None and args.beta_star_out.suffix.lower() != ".json":
        raise UserError(
            f"{args.beta_star_out}: --beta-star-out writes JSON, so the file must end in .json"
        )
    if args.missing is not None and not get_model(args.model).allows_missing:
        raise UserError(f"--missing: model {args.model} allows no missing covariate")


def _atomic_write(path: Path, write: Any) -> None:
    """Write through a temporary file in the same folder and rename it into place, so a
    reader (an agent started meanwhile) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}{path.suffix}")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ldpem.common.models import get_model

    _check(args)
    try:
        model = get_model(args.model, dict(model_options_of(args)))
    except ValueError as error:
        raise UserError(str(error)) from None
    options: dict[str, float] = {"snr": args.snr, "sigma": args.sigma}
    if args.missing is not None:
        options["missing"] = args.missing
    records, beta_star = model.generate(
        args.parts * args.n, args.d, rng=np.random.default_rng(args.seed), **options
    )
    part = records.take(slice((args.part - 1) * args.n, args.part * args.n))
    columns = [f"x{j}" for j in range(1, args.d + 1)]
    table = part.x
    if part.y is not None:
        columns.append("y")
        table = np.column_stack([part.x, part.y])

    def write_table(path: Path) -> None:
        if path.suffix.lower() == ".npy":
            np.save(path, table)
        else:
            np.savetxt(
                path, table, delimiter=",", header=",".join(columns), comments="", fmt="%.17g"
            )

    _atomic_write(args.out, write_table)
    if args.beta_star_out is not None:
        description = {
            "model": model.name,
            **({"model_options": model.option_values()} if model.options else {}),
            "d": args.d,
            "seed": args.seed,
            "snr": args.snr,
            "sigma": args.sigma,
            "beta_star": [float(v) for v in beta_star],
        }
        _atomic_write(
            args.beta_star_out, lambda path: path.write_text(json.dumps(description) + "\n")
        )
    print(
        f"wrote {part.n} {model.name} records (d={args.d}, part {args.part}/{args.parts} "
        f"of study seed {args.seed}) to {args.out}",
        file=sys.stderr,
    )
    return 0
