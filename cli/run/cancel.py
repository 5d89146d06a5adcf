"""``ldpem run cancel``: end a running (or paused) run as cancelled, with the operator's
reason; ``ldpem run resume``: set a paused run running again.

The coordinator stores the run as ``cancelled`` (a restart keeps it so); its agents learn it
from their next poll and stop with one line and exit 0. A run that ended already is a 409.
"""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from ldpem.options import admin_token_file_option, ca_cert_option, coordinator_option
from ldpem.run.shared import admin_post

__all__ = ["cancel", "cancel_options", "resume", "resume_options"]


def cancel_options(cancel: argparse.ArgumentParser) -> None:
    """RUN_ID, --reason and how to reach the coordinator as its admin."""
    coordinator_option(cancel)
    cancel.add_argument("run_id", metavar="RUN_ID", help="the run to cancel")
    cancel.add_argument(
        "--reason", required=True, metavar="TEXT", help="why, in one line (shown with the run)"
    )
    admin_token_file_option(cancel)
    ca_cert_option(cancel)


def cancel(args: argparse.Namespace) -> int:
    """POST /v1/runs/RUN_ID/cancel with the admin token; one line: the run, its rounds and
    the reason."""
    run = _admin_post(args, "cancel", {"reason": args.reason}, "not cancelled")
    print(
        f"run {run['run_id']} cancelled after {run['round']} of {run['rounds']} rounds "
        f"({run['reason']})"
    )
    return 0


def resume_options(resume: argparse.ArgumentParser) -> None:
    """RUN_ID and how to reach the coordinator as its admin."""
    coordinator_option(resume)
    resume.add_argument("run_id", metavar="RUN_ID", help="the paused run to resume")
    admin_token_file_option(resume)
    ca_cert_option(resume)


def resume(args: argparse.Namespace) -> int:
    """POST /v1/runs/RUN_ID/resume with the admin token; one line: the run and its round."""
    run = _admin_post(args, "resume", None, "not resumed")
    print(f"run {run['run_id']} resumed at round {run['round']} of {run['rounds']}")
    return 0


def _admin_post(
    args: argparse.Namespace, action: str, body: dict[str, Any] | None, failed: str
) -> dict[str, Any]:
    """POST /v1/runs/RUN_ID/``action`` with the admin token: the run's summary, or the
    one-line UserError of an unreachable coordinator or a refusal (``run … failed``)."""
    run_id = urllib.parse.quote(args.run_id, safe="")
    return admin_post(
        args,
        f"/v1/runs/{run_id}/{action}",
        body,
        timeout=30.0,
        expect=200,
        failed=f"run {args.run_id} {failed}",
    )
