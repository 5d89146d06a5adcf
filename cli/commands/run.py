"""ldpem run: operator commands against a running coordinator.

    ldpem run create --coordinator URL --config run.json [--roster FILE] [--tokens-dir DIR]
                     [--secagg-topology auto|mesh|graph|expander]
                     [--admin-token-file FILE] [--ca-cert PEM] [--plan [--plan-seeds S]]
    ldpem run status --coordinator URL [RUN_ID] [--wait [--give-up SECONDS]] [--beta-star FILE]
                     [--token-file FILE | --admin-token-file FILE] [--ca-cert PEM]
    ldpem run cancel --coordinator URL RUN_ID --reason TEXT [--admin-token-file FILE]
    ldpem run resume --coordinator URL RUN_ID [--admin-token-file FILE]

"create" posts the run request (JSON, the fields of ldpem.common.wire.RunCreate) with the
admin token (LDPEM_ADMIN_TOKEN or --admin-token-file); a secagg run's roster file goes in
with --roster FILE, or as "roster": "FILE" in the request (relative to it), and a request
without "delta" is warned about with the default it got (ldpem.run.request). With
--tokens-dir DIR it writes each generated hospital token to DIR/<hospital>.token (mode
600) and prints which file goes to which hospital, with the run's budget the agents must
accept; without it, it prints the response as JSON: run id, public parameters, expected
error, warning and the tokens (shown once). The same is POST /v1/runs with "Authorization:
Bearer <admin token>". With --plan it first searches rounds, round schedule and reported
estimate for the run's model, d, hospitals, budget, snr and mechanism
(ldpem.common.planning.schedule_search, as ldpem plan --search-schedule), sets "rounds", "schedule"
and "final" of the request to the recommended setting (10 equal rounds and the last
iterate unless another gains clearly, seed by seed), says so on stderr and states it in
the "created" line (JSON: "plan").

"status" prints a run as JSON (without RUN_ID: the run created last). It reads with the
read token (LDPEM_READ_TOKEN or --token-file) or the admin token (LDPEM_ADMIN_TOKEN or
--admin-token-file); a coordinator started with --public-status needs neither. The run's
warning (a forecast that failed, …) also goes to stderr. --wait follows it, a line on
stderr each time a poll finds a new round, until it finished (exit 0) or failed (exit 2),
and then prints one line (--json: the JSON too) and the finished run's estimate with its
confidence intervals (once the coordinator computed them); --beta-star FILE (JSON from
ldpem generate --beta-star-out) also prints the estimation error of the run's beta
against beta*, next to the trivial error of beta = 0. A run that did not finish (failed,
or cancelled) ends --wait with exit 2. A coordinator that cannot be reached (a restart) is
retried for --give-up seconds, by default as long as the agents retry it
(ldpem.client.retry.GIVE_UP), and then --wait exits 75 (ldpem.run.watch.UNREACHABLE):
the run's outcome is unknown.

"cancel" ends a running run as "cancelled" with the reason given (admin token; POST
/v1/runs/RUN_ID/cancel): its agents stop with one line and exit 0, and the status page,
run status and /metrics show it cancelled. A run that ended already is refused (409).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ldpem.client.retry import GIVE_UP
from ldpem.common.core.errors import UserError
from ldpem.common.core.naming import natural_sorted
from ldpem.options import (
    ActionSpec,
    add_actions,
    admin_token_file_option,
    ca_cert_option,
    coordinator_option,
    model_option_arguments,
    model_options_of,
    token_file_option,
)
from ldpem.run.cancel import cancel, cancel_options, resume, resume_options
from ldpem.run.request import (
    default_delta_warning,
    describe_setting,
    planned_setting,
    read_request,
    requested_setting,
)
from ldpem.run.shared import admin_post
from ldpem.run.tokens import check_token_files, write_token_files
from ldpem.run.watch import UNREACHABLE, CoordinatorGone, RunReader
from ldpem.secretfiles import read_secret

__all__ = ["EXAMPLES", "HELP", "NAME", "add_arguments"]

#: Simulations per setting of ``run create --plan`` (``prediction.SEARCH_SEEDS``; not
#: imported: the command's parser is built without numpy).
_PLAN_SEEDS = 20


NAME = "run"
HELP = "create, inspect, cancel or resume runs on a coordinator"
EXAMPLES = (
    "ldpem run create --coordinator https://coord.example:8443 --ca-cert coord/ca.pem "
    "--admin-token-file coord/admin.token --config run.json --tokens-dir tokens",
    "ldpem run status --coordinator https://coord.example:8443 --ca-cert coord/ca.pem "
    "--token-file coord/read.token --wait",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_actions(
        parser,
        ActionSpec(
            "create",
            create_run,
            help="create a run (admin)",
            description=(
                "Create a run from a JSON request (model, d, sigma, rounds, mechanism, epsilon, "
                "delta, hospitals with their record counts: docs/FEDERATED.md) with the admin "
                "token, and hand out the hospitals' tokens: with --tokens-dir, one file per "
                "hospital; without, inside the JSON answer (shown once: the coordinator keeps "
                "only their hashes)."
            ),
            example_lines=(
                "ldpem run create --coordinator https://coord.example:8443 --ca-cert "
                "coord/ca.pem --admin-token-file coord/admin.token --config run.json "
                "--tokens-dir tokens",
                "LDPEM_ADMIN_TOKEN=... ldpem run create --coordinator http://127.0.0.1:8765 "
                "--config run.json --plan",
            ),
            options=_create_options,
        ),
        ActionSpec(
            "status",
            show_status,
            help="show a run, or follow it to its end",
            description=(
                "Print a run as JSON (and its warning, if any, on stderr). With --wait, follow "
                "it instead: a line on stderr each time a poll finds a new round (rounds that "
                "close between two polls share one) and the run's warning when one appears (a "
                "forecast that failed); at its end one line with its status and rounds, its "
                "forecast, and the estimate with its confidence intervals. Exit 0: finished; "
                "2: failed or cancelled; "
                f"{UNREACHABLE}: the coordinator could not be reached for --give-up seconds "
                "(retried meanwhile, as the agents retry it), so the outcome is unknown. "
                "Reads with the read token, else the admin token; a coordinator started with "
                "--public-status needs neither."
            ),
            example_lines=(
                "ldpem run status --coordinator https://coord.example:8443 --ca-cert "
                "coord/ca.pem --token-file coord/read.token --wait",
                "ldpem run status --coordinator http://127.0.0.1:8765 --wait --beta-star beta.json",
            ),
            options=_status_options,
        ),
        ActionSpec(
            "cancel",
            cancel,
            help="cancel a running run (admin)",
            description=(
                "End a running run as cancelled, with a reason, using the admin token: its "
                "agents stop (exit 0, one line; nothing more is charged) and the status page, "
                "run status and /metrics show it cancelled. A run that ended already is "
                "refused."
            ),
            example_lines=(
                "ldpem run cancel --coordinator https://coord.example:8443 --ca-cert "
                "coord/ca.pem --admin-token-file coord/admin.token 3f2a9c1b7d04 "
                '--reason "wrong delta"',
            ),
            options=cancel_options,
        ),
        ActionSpec(
            "resume",
            resume,
            help="resume a paused run (admin)",
            description=(
                "Set a paused run running again, using the admin token. A secure-"
                "aggregation run pauses after repeated rounds lost to out-of-range sums, "
                "which the masks keep anyone from pinning on a hospital (docs/SECAGG.md): "
                "check the hospitals' agents and logs first, or cancel the run instead. A "
                "run that is not paused is refused."
            ),
            example_lines=(
                "ldpem run resume --coordinator https://coord.example:8443 --ca-cert "
                "coord/ca.pem --admin-token-file coord/admin.token 3f2a9c1b7d04",
            ),
            options=resume_options,
        ),
    )


def _create_options(create: argparse.ArgumentParser) -> None:
    coordinator_option(create)
    create.add_argument(
        "--config", required=True, type=Path, metavar="FILE", help="the run request, JSON"
    )
    create.add_argument(
        "--roster",
        type=Path,
        metavar="FILE",
        help="secagg runs: the consortium's roster.json, put into the request as its "
        '"roster" (default: the request\'s own "roster", an object or a file name '
        "relative to the request file)",
    )
    create.add_argument(
        "--secagg-topology",
        choices=("auto", "mesh", "graph", "expander"),
        default=None,
        help="secagg runs: the full mesh, the SecAgg+ graph or its expander "
        '(docs/SECAGG_GRAPH.md), put into the request as its "secagg_topology" (default: '
        "the request's own, else auto: the coordinator picks the expander where its degree "
        "is at most K/2, else the mesh)",
    )
    model_option_arguments(create)
    create.add_argument(
        "--tokens-dir",
        type=Path,
        metavar="DIR",
        help="write each generated hospital token to DIR/<hospital>.token, mode 600, and "
        "print which file goes to whom (default: the tokens are in the JSON printed)",
    )
    admin_token_file_option(create)
    ca_cert_option(create)
    create.add_argument(
        "--plan",
        action="store_true",
        help="before creating the run, simulate a small grid of rounds, round schedule and "
        "reported estimate for its config (model, d, hospitals, epsilon, snr, mechanism; "
        "as ldpem plan --search-schedule) and set rounds, schedule and final of the "
        "request to the recommended setting (default: the request's own)",
    )
    create.add_argument(
        "--plan-seeds",
        type=int,
        default=_PLAN_SEEDS,
        metavar="S",
        help="with --plan, simulations per setting",
    )
    create.add_argument(
        "--workers",
        type=int,
        default=None,
        help="with --plan, processes that run the simulations (default: this machine's "
        "cores; 1: serial)",
    )


def _status_options(status: argparse.ArgumentParser) -> None:
    coordinator_option(status)
    status.add_argument(
        "run_id", nargs="?", metavar="RUN_ID", help="the run (default: the run created last)"
    )
    ca_cert_option(status)
    token_file_option(
        status, "--token-file", "read token", "LDPEM_READ_TOKEN, else the admin token"
    )
    admin_token_file_option(status)
    status.add_argument(
        "--wait", action="store_true", help="follow the run until it finished or failed"
    )
    status.add_argument(
        "--json",
        action="store_true",
        help="with --wait, also print the run's JSON before the final line",
    )
    status.add_argument(
        "--give-up",
        type=float,
        default=GIVE_UP,
        metavar="SECONDS",
        help="with --wait, how long a coordinator that cannot be reached (a restart, the "
        f"network) is retried before exiting {UNREACHABLE}: by default as long as the "
        "agents retry it (their --give-up)",
    )
    status.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="seconds between two polls of --wait",
    )
    status.add_argument(
        "--beta-star",
        type=Path,
        metavar="FILE",
        help="JSON with the true beta_star (ldpem generate --beta-star-out): also print the "
        "run's error (default: no error line)",
    )


def create_run(args: argparse.Namespace) -> int:
    request = read_request(args.config, args.roster)
    if args.secagg_topology is not None:
        request["secagg_topology"] = args.secagg_topology
    given = dict(model_options_of(args))
    if given:  # the request's own options, with these set
        known = request.get("model_options")
        request["model_options"] = {**(known if isinstance(known, dict) else {}), **given}
    planned: dict[str, Any] | None = None
    requested: dict[str, Any] | None = None
    if args.plan:
        from ldpem.run.plan import planned_request

        if isinstance(request, dict):
            requested = requested_setting(request)
        request = planned_request(request, seeds=args.plan_seeds, workers=args.workers)
        planned = planned_setting(request)
    if args.tokens_dir is not None:
        check_token_files(args.tokens_dir, request)
    # The coordinator answers at once (its forecast follows in the background).
    body = admin_post(
        args,
        "/v1/runs",
        request,
        timeout=60.0,
        expect=201,
        failed=f"{args.config}: run not created",
    )
    secagg = secagg_line(body["params"])
    if args.tokens_dir is None:
        json.dump(body if planned is None else {**body, "plan": planned}, sys.stdout, indent=2)
        print()
        if secagg is not None:  # stdout is the JSON alone
            print(secagg, file=sys.stderr)
    else:
        files = write_token_files(args.tokens_dir, body["tokens"], request)
        summary = _created_summary(body, files)
        if planned is not None:  # the first line: "run … created: …, with the planner's …"
            first, _, rest = summary.partition("\n")
            setting = describe_setting(planned, requested)
            summary = f"{first}, with the planner's setting: {setting}\n{rest}"
        print(summary)
    for warning in (body.get("warning"), default_delta_warning(request, body["params"])):
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    return 0


def _created_summary(body: dict[str, Any], files: dict[str, Path | None]) -> str:
    params = body["params"]
    lines = [
        f"run {body['run_id']} created: {params['model']}, d = {params['d']}, "
        f"{params['rounds']} rounds, mechanism {params['mechanism']}, "
        f"epsilon {params['epsilon']:g}, delta {params['delta']:g}"
    ]
    secagg = secagg_line(params)
    if secagg is not None:
        lines.append(secagg)
    lines.extend(forecast_lines(body))
    lines.append("token files (mode 600): send each to its hospital only")
    width = max(len(name) for name in files)
    for name in natural_sorted(files):
        path = files[name]
        where = "its token was given in the run request" if path is None else str(path)
        lines.append(f"  {name:<{width}}  {where}")
    lines.append(
        f"agents take part with --epsilon {params['epsilon']:g} --delta {params['delta']:g} "
        "or a larger budget (a hospital whose budget is smaller refuses the run)"
    )
    return "\n".join(lines)


def secagg_line(params: dict[str, Any]) -> str | None:
    """A secure-aggregation run's values as the coordinator published them (its public
    parameters: t_min, c, K and, on a graph, its degree and survivor floor): None for any
    other run. The topology is the published graph's (``SecAggGraph.topology``)."""
    from ldpem.common.wire import PublicParameters

    published = PublicParameters.model_validate(params)
    if published.t_min is None or published.holders is None:
        return None
    c = published.colluders or 0
    graph = published.graph
    topology = "mesh" if graph is None else graph.topology
    # The honest shares the noise is sized for: t_min - c on the mesh, the graph's h.
    honest = f"t_min - c = {published.t_min - c}" if graph is None else f"h = {graph.honest}"
    line = (
        f"secure aggregation over K = {published.holders} holders: t_min = {published.t_min} "
        f"(a round's sum needs that many holders' inputs), c = {c} (holders that may collude "
        f"with the coordinator; the noise shares are sized for {honest} honest holders), "
        f"topology {topology}"
    )
    if graph is not None:
        line += f" (k = {graph.neighbours} neighbours"
        line += f", survivor floor T = {graph.survivors})" if graph.survivors else ")"
    return line


def forecast_lines(body: dict[str, Any]) -> list[str]:
    """The forecast of a run (``RunCreated`` or ``RunSummary``): its mean and band, how
    many simulated runs it rests on, and what it becomes at other ‖β*‖/σ; or that it is
    still being computed."""
    forecast = body.get("forecast")
    if forecast is None and "forecast" in body.get("pending", []):
        return [
            "forecast pending: the coordinator simulates the run in the background; "
            "`ldpem run status` shows it when ready, or why there is none"
        ]
    if forecast is None:
        expected = body.get("expected_error")
        if expected is None:
            return []
        return [f"expected error {expected:.4g} (beta = 0: {body['trivial_error']:.4g})"]
    lines = [
        f"expected error {forecast['mean']:.4g}, 10-90% of {forecast['seeds']} simulated "
        f"runs in [{forecast['low']:.4g}, {forecast['high']:.4g}] (beta = 0: "
        f"{forecast['trivial_error']:.4g}, at the assumed snr {forecast['snr']:g})"
    ]
    others = [
        f"at snr {b['snr']:g}: "
        + ("diverges" if b["mean"] is None else f"{b['mean']:.4g}")
        + f" (beta = 0: {b['trivial_error']:.4g})"
        for b in forecast["sensitivity"]
    ]
    if others:
        lines.append("  if ‖β*‖/σ is not as assumed: " + "; ".join(others))
    return lines


def _read_headers(token_file: Path | None, admin_token_file: Path | None) -> dict[str, str]:
    """Authorization for reading run state: the read token, else the admin token, else
    none (a coordinator with --public-status)."""

    def read(path: Path | None, what: str) -> str:
        return "" if path is None else read_secret(path, what)

    token = (
        os.environ.get("LDPEM_READ_TOKEN", "")
        or read(token_file, "read token")
        or os.environ.get("LDPEM_ADMIN_TOKEN", "")
        or read(admin_token_file, "admin token")
    )
    return {"Authorization": f"Bearer {token}"} if token else {}


def _beta_star(path: Path) -> list[float]:
    try:
        data = json.loads(path.read_text())
        beta_star = [float(v) for v in data["beta_star"]]
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path}: expected JSON with a beta_star list ({error})") from None
    return beta_star


def _error_line(run: dict[str, Any], path: Path) -> str:
    import numpy as np

    from ldpem.common.models import get_model

    beta_star = np.array(_beta_star(path))
    beta = np.array(run["beta"], dtype=float)
    if beta_star.shape != beta.shape:
        raise UserError(f"{path}: beta_star has {beta_star.size} entries, the run d={beta.size}")
    try:
        model = get_model(run["model"], run.get("model_options") or {})
        error = model.error(beta, beta_star)
    except ValueError as refused:
        raise UserError(f"{path}: {refused}") from None
    expected, band = run.get("expected_error"), run.get("forecast")
    forecast = f", forecast {expected:.4f}" if expected is not None else ""
    if band is not None:
        forecast += f" [10-90%: {band['low']:.4f}, {band['high']:.4f}]"
    return (
        f"run {run['run_id']}: final error {error:.4f} after {run['round']} rounds "
        f"(trivial error of beta = 0: {float(np.linalg.norm(beta_star)):.4f}{forecast})"
    )


def show_status(args: argparse.Namespace) -> int:
    try:
        return _show_status(args)
    except CoordinatorGone as gone:
        print(f"ldpem run: {gone}", file=sys.stderr)
        return UNREACHABLE


def _show_status(args: argparse.Namespace) -> int:
    import time

    from ldpem.client.link import tls_context

    if args.give_up <= 0:
        raise UserError("--give-up must be > 0")
    headers = _read_headers(args.token_file, args.admin_token_file)
    reader = RunReader(
        args.coordinator, tls_context(args.ca_cert), headers, args.give_up if args.wait else 0.0
    )
    base = f"{args.coordinator.rstrip('/')}/v1/runs"
    run_id = args.run_id
    if run_id is None:
        runs = reader.get(base, "runs")
        if not runs:
            raise UserError(f"no run on {args.coordinator} yet")
        run_id = max(runs, key=lambda r: r["created_at"])["run_id"]

    def fetch() -> Any:
        return reader.get(f"{base}/{run_id}", f"run {run_id}")

    run = fetch()
    shown: tuple[int, str] = (-1, "")
    warned: set[str] = set()
    while args.wait:
        if (run["round"], run["status"]) != shown:
            shown = (run["round"], run["status"])
            line = f"run {run_id}: {run['status']}, round {run['round']}/{run['rounds']}"
            if run["status"] == "paused":  # the operator's to resume or cancel: keep waiting
                line += f" ({run.get('reason')})"
            print(line, file=sys.stderr)
        _print_new_warning(run, warned)
        if run["status"] not in ("running", "paused"):
            break
        time.sleep(args.interval)
        run = fetch()
    if args.wait and run["status"] == "finished":
        from ldpem.run.estimate import await_confidence

        run = await_confidence(run, fetch, args.interval)
    # Following a run ends with one line, not the whole JSON above it (--json asks for it).
    if args.json or not args.wait:
        json.dump(run, sys.stdout, indent=2)
        print()
    if args.beta_star is not None:
        print(_error_line(run, args.beta_star), flush=True)
    elif args.wait:
        print(f"run {run_id}: {run['status']} after {run['round']} of {run['rounds']} rounds")
    if args.wait and not args.json:
        for line in forecast_lines(run):
            print(f"run {run_id}: {line}")
    if not args.wait:
        _print_new_warning(run, warned)
    if args.wait and run["status"] != "finished":
        raise UserError(f"run {run_id} {run['status']}: {run.get('reason')}")
    if args.wait:
        from ldpem.run.estimate import estimate_lines

        print("\n".join(estimate_lines(run)))
    return 0


def _print_new_warning(run: dict[str, Any], shown: set[str]) -> None:
    """The run's ``warning`` (a forecast that failed or predicts no gain, …) on stderr, the
    first time it is seen: the JSON carries it, the lines of --wait would not."""
    warning = run.get("warning")
    if warning and warning not in shown:
        shown.add(warning)
        print(f"run {run['run_id']}: warning: {warning}", file=sys.stderr, flush=True)
