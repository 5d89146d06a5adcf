"""``ldpem audit``: measure, by attack, a lower bound on the ε each mechanism really gives.

Each mechanism is audited as two constructions build it: the simulator's
(``protocol.make_mechanism``) and, for the mechanisms of a federated run, the agent's — the
run's public parameters as the coordinator publishes them (``server.policy
.usable_parameters``), then ``client.agent.agent_mechanism`` at the run's budget, the call
an agent makes before its first report. A noise error on only one of the two paths fails
the audit. Under ``central`` the agent adds no noise: its row audits the agent's
contributions with the noise the coordinator adds (``protocol.central_noise``). Under
noise shares (``secagg``) the audited release is the sum of ``--t-min`` holders' reports,
the one holding the record and t_min − 1 without records: what a round releases with
exactly t_min honest holders (docs/SECAGG.md).

Every row also checks the declarations the noise is calibrated from
(``common.audit.empirical.declaration_failure``): the worst pair the row measured may not be farther
apart than the declared ``sensitivity``, nor a contribution beyond ``record_bound``; a row
that fails them fails, with its one-line ``declaration_failure`` as the reason.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ldpem.common.core.accounting import ACCOUNTING_MODES, Budget
from ldpem.common.core.errors import UserError
from ldpem.common.mechanisms import Mechanism, get_mechanism, mechanism_names
from ldpem.common.models import get_model, model_names
from ldpem.common.protocol import central_noise, make_mechanism, study_tau
from ldpem.common.protocol.run_fields import DEFAULT_D, DEFAULT_MODEL, RUN_DEFAULTS
from ldpem.common.wire import RunCreate, describe_errors
from ldpem.options import model_option_arguments, model_options_of

__all__ = [
    "DEFAULT_T_MIN",
    "add_arguments",
    "agent_built",
    "agent_built_mechanism",
    "audited",
    "run_audit",
]

#: Honest holders of an audited release under noise shares: more than one, so that the
#: audit sees the shares being summed.
DEFAULT_T_MIN = 3


def audited() -> tuple[str, ...]:
    """Every registered mechanism that claims a privacy guarantee (noise somewhere)."""
    return tuple(n for n in mechanism_names() if get_mechanism(n).noise_site != "nowhere")


def agent_built() -> tuple[str, ...]:
    """The audited mechanisms an agent can run, hence also audited as the agent builds
    them: not the simulator-only ones (``central-clip``: no federated run publishes it),
    and not those whose guarantee is a sum of shares (``secagg``): one agent's share is not
    the mechanism, t_min of them are, and a run of them needs a roster of holders; their
    sum is audited on the simulator's path."""
    return tuple(
        name
        for name in audited()
        if get_mechanism(name).federated and get_mechanism(name).noise_site != "shares"
    )


NAME = "audit"
HELP = "empirical lower bound on epsilon for each mechanism, by distinguishing attack"
DESCRIPTION = (
    "Run each mechanism many times on a worst-case pair of neighbouring records, "
    "apply a likelihood-ratio threshold test, and turn its error rates into a "
    "95%-confidence lower bound on epsilon (Clopper-Pearson). Passes when the lower "
    "bound does not exceed the claimed epsilon and the noise is at least an "
    "independently computed reference. Every mechanism a federated run can use is "
    "audited twice: as the simulator builds it and as the agent does."
)
EXAMPLES = (
    "ldpem audit --mechanism local --draws 200000",
    "ldpem audit --epsilon 0.5 --delta 1e-6 --json",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mechanism", choices=[*audited(), "all"], default="all", help="the mechanism audited"
    )
    parser.add_argument(
        "--accounting",
        choices=[*ACCOUNTING_MODES, "all"],
        default="all",
        help="the accounting whose calibration is audited",
    )
    parser.add_argument("--epsilon", type=float, default=RUN_DEFAULTS.epsilon, help="the claimed ε")
    parser.add_argument("--delta", type=float, default=1e-5, help="the claimed δ")
    parser.add_argument("--draws", type=int, default=1_000_000, help="draws per input")
    parser.add_argument(
        "--holder-draws",
        type=int,
        default=None,
        help="draws per input through the agent's round function (default: draws/100)",
    )
    parser.add_argument(
        "--model",
        choices=model_names(),
        default=DEFAULT_MODEL,
        help="the model whose gradients are released",
    )
    parser.add_argument("--d", type=int, default=DEFAULT_D, help="the records' dimension")
    model_option_arguments(parser)
    parser.add_argument(
        "--records-per-round",
        type=int,
        default=10_000,
        help="records per round, which set the truncation scale",
    )
    parser.add_argument(
        "--t-min",
        type=int,
        default=DEFAULT_T_MIN,
        help="secagg: the honest holders whose noise shares are summed in the release",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the draws")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=handle)


def agent_built_mechanism(
    name: str,
    *,
    model_name: str,
    d: int,
    records_per_round: int,
    epsilon: float,
    delta: float,
    tau: float,
    accounting: str,
    model_options: Mapping[str, int] | None = None,
) -> tuple[Mechanism, float | None]:
    """The mechanism an agent runs in a one-round run of ``name`` where it is the only
    holder, enrolled with ``records_per_round`` records, at the run's budget; and for
    ``central`` the σ_r the coordinator adds to the average of those records (else None).

    The run is requested as an operator would (τ given; ζ and the clip norm C left at the
    defaults of ``RunCreate``, which are ``make_mechanism``'s) and its public parameters
    are derived by the coordinator's own function; then ``agent_mechanism``, as the agent
    calls it, builds the mechanism. With one round and one holder, m — and for
    ``hospital`` the holder's m_k — is ``records_per_round``, as on the simulator's path.
    """
    # Imported here: the agent pulls in httpx and the ledger, the coordinator's policy its
    # store; no other command needs them.
    from pydantic import ValidationError

    from ldpem.client.trust import agent_mechanism
    from ldpem.server.policy import usable_parameters
    from ldpem.server.refusals import Invalid

    if name not in agent_built():
        raise ValueError(f"mechanism must be one of {agent_built()} for an agent, got {name!r}")
    try:
        request = RunCreate.model_validate(
            {
                "model": model_name,
                "model_options": dict(model_options or {}),
                "d": d,
                "sigma": 1.0,
                "rounds": 1,
                "mechanism": name,
                "epsilon": epsilon,
                "delta": delta,
                "accounting": accounting,
                "tau": tau,
                "hospitals": [{"name": "audit", "records": records_per_round}],
                "forecast": False,
            }
        )
        params = usable_parameters(request)
    except ValidationError as error:
        reason = describe_errors(error.errors())
        raise UserError(
            f"no federated run of mechanism {name} has these values: {reason}"
        ) from None
    except Invalid as error:
        raise UserError(f"no federated run of mechanism {name} has these values: {error}") from None
    mechanism, _ = agent_mechanism(
        params,
        budget=Budget(epsilon=epsilon, delta=delta, accounting=accounting),
        records=records_per_round,
    )
    coordinator = central_noise(params)
    return mechanism, None if coordinator is None else coordinator.std(params.records_per_round)


def run_audit(
    *,
    mechanisms: tuple[str, ...],
    accountings: tuple[str, ...],
    epsilon: float,
    delta: float,
    draws: int,
    holder_draws: int,
    model_name: str,
    d: int,
    records_per_round: int,
    seed: int,
    t_min: int = DEFAULT_T_MIN,
    model_options: tuple[tuple[str, int], ...] = (),
) -> list[dict[str, Any]]:
    """One result per (mechanism, accounting, construction, path); see ``ldpem audit --help``.

    ``built_by`` is ``simulator`` (``make_mechanism``) or ``agent``
    (``agent_built_mechanism``). Rows of the agent's construction always compare the noise
    with the reference σ_r, on the mechanism path as well as on the holder_round path.
    The mechanisms release β's p = ``parameter_dim(d)`` coordinates (K·(d + 1) for a
    mixture, with its ``model_options``), and are built and checked for p, by the
    simulator and (for the agent's mechanisms) by the agent's construction.
    """
    # Imported here: it pulls in scipy.stats (~1 s), which every other command (and every
    # `ldpem client` process, whose parser registers this one) would otherwise pay for.
    from ldpem.common.audit.empirical import (
        audit_holder_round,
        audit_mechanism,
        declaration_failure,
        noise_is_sufficient,
        reference_noise_std,
    )

    if draws < 100:
        raise UserError(f"--draws must be at least 100, got {draws}")
    if holder_draws < 100:
        raise UserError(f"--holder-draws must be at least 100, got {holder_draws}")
    if t_min < 1:
        raise UserError(f"--t-min must be at least 1, got {t_min}")
    try:
        model = get_model(model_name, dict(model_options))
    except ValueError as error:
        raise UserError(str(error)) from None
    size = model.parameter_dim(d)
    rng = np.random.default_rng(seed)
    tau = study_tau(model, tau=None, beta_bound=3.0, sigma=1.0, d=d)
    results = []
    for name in mechanisms:
        for accounting in accountings:
            # What the simulator and the agent are both given to build the mechanism: the
            # size of β, which the agent's run derives from the model and d.
            setting: dict[str, Any] = {
                "d": size,
                "records_per_round": records_per_round,
                "epsilon": epsilon,
                "delta": delta,
                "tau": tau,
                "accounting": accounting,
            }
            simulated = make_mechanism(name, **setting, t_min=t_min)
            builds: list[tuple[str, Mechanism, float | None]] = [("simulator", simulated, None)]
            if name in agent_built():
                built, coordinator_std = agent_built_mechanism(
                    name,
                    model_name=model_name,
                    model_options=dict(model_options),
                    **{**setting, "d": d},
                )
                builds.append(("agent", built, coordinator_std))
            for built_by, mechanism, aggregate_std in builds:
                paths = [("mechanism", draws)]
                if mechanism.is_local:
                    paths.append(("holder_round", holder_draws))
                for path, n in paths:
                    reference: float | None = None
                    if path == "holder_round" or built_by == "agent":
                        # The noise is compared with a σ computed apart from the calibration
                        # (analytic Gaussian mechanism), so a wrong σ formula is caught too;
                        # central: the σ of the average of m records, sensitivity Δ/m.
                        release = 1 if mechanism.is_local else records_per_round
                        reference = reference_noise_std(
                            epsilon=epsilon,
                            delta=delta,
                            sensitivity=mechanism.sensitivity(size) / release,
                        )
                    if path == "mechanism":
                        outcome, distance = audit_mechanism(
                            mechanism,
                            d=size,
                            records_per_round=records_per_round,
                            delta=delta,
                            draws=n,
                            rng=rng,
                            reference_noise_std=reference,
                            aggregate_noise_std=aggregate_std,
                        )
                    else:
                        outcome, distance = audit_holder_round(
                            model,
                            mechanism,
                            d=d,
                            sigma=1.0,
                            delta=delta,
                            draws=n,
                            rng=rng,
                            reference_noise_std=reference,
                        )
                    noise_ok = noise_is_sufficient(outcome.noise_ratio)
                    failure = declaration_failure(mechanism, d=size, distance=distance)
                    results.append(
                        {
                            "mechanism": name,
                            "accounting": accounting,
                            "built_by": built_by,
                            "path": path,
                            "claimed_epsilon": epsilon,
                            "delta": delta,
                            "lower_bound": outcome.lower_bound,
                            "passed": outcome.lower_bound <= epsilon
                            and noise_ok
                            and failure is None,
                            "declaration_failure": failure,
                            "declared_sensitivity": mechanism.sensitivity(size),
                            "declared_record_bound": mechanism.record_bound(size),
                            "noise_std_ratio": outcome.noise_ratio,
                            "reference_noise_std": reference,
                            "tightness": outcome.lower_bound / epsilon,
                            "draws": outcome.draws,
                            "pair_distance": distance,
                            "false_positive_rate": outcome.false_positive_rate,
                            "false_negative_rate": outcome.false_negative_rate,
                        }
                    )
    return results


def handle(args: argparse.Namespace) -> int:
    if not (args.epsilon > 0 and math.isfinite(args.epsilon)):
        raise UserError(f"--epsilon must be > 0, got {args.epsilon}")
    if not 0 < args.delta < 1:
        raise UserError(f"--delta must be in (0, 1), got {args.delta}")
    started = time.perf_counter()
    mechanisms = audited() if args.mechanism == "all" else (args.mechanism,)
    results = run_audit(
        mechanisms=mechanisms,
        accountings=ACCOUNTING_MODES if args.accounting == "all" else (args.accounting,),
        epsilon=args.epsilon,
        delta=args.delta,
        draws=args.draws,
        holder_draws=args.holder_draws or max(args.draws // 100, 100),
        model_name=args.model,
        d=args.d,
        records_per_round=args.records_per_round,
        seed=args.seed,
        t_min=args.t_min,
        model_options=model_options_of(args),
    )
    passed = all(r["passed"] for r in results)
    simulator_only = [name for name in mechanisms if name not in agent_built()]
    if args.json:
        print(
            json.dumps(
                {
                    "passed": passed,
                    "results": results,
                    "simulator_only": simulator_only,
                    "seconds": time.perf_counter() - started,
                }
            )
        )
    else:
        header = f"{'mechanism':<13}{'accounting':<11}{'built by':<10}{'path':<14}{'claimed':>8}"
        print(f"{header}{'lower bound':>13}  verdict")
        for r in results:
            verdict = "pass" if r["passed"] else "FAIL"
            print(
                f"{r['mechanism']:<13}{r['accounting']:<11}{r['built_by']:<10}{r['path']:<14}"
                f"{r['claimed_epsilon']:>8.3f}{r['lower_bound']:>13.3f}  {verdict}"
                f" ({100 * r['tightness']:.0f}% of claim, {r['draws']} draws"
                + (
                    f"; noise/σ_ref in [{r['noise_std_ratio'][0]:.3f}, "
                    f"{r['noise_std_ratio'][1]:.3f}])"
                    if r["noise_std_ratio"]
                    else ")"
                )
            )
        for reason in dict.fromkeys(r["declaration_failure"] for r in results):
            if reason is not None:
                print(f"FAIL: {reason}")
        for name in simulator_only:
            print(f"{name}: built by the simulator only (no federated run publishes it)")
    return 0 if passed else 1
