"""Fault injection for the tests of crash safety (never set in production).

``LDPEM_AGENT_FAULT=ACTION-POINT:T`` acts on the agent when it reaches ``POINT`` in round
T. ``ACTION`` is ``kill`` (SIGKILL: a crash) or ``stop`` (SIGSTOP: the agent stands still
at that point until the test sends it SIGCONT, so that the test can act on the coordinator
while the round cannot move past this agent). The points:

* ``after-persist``: the round's report is committed to the ledger, nothing sent;
* ``after-mask`` (secagg): the ledger marks the round masked, the masked input is made and
  not yet sent;
* ``before-sign`` (secagg): the masked input was sent and the survivor set received, not
  yet signed (a survivor that never signs, unless restarted: issue 41, finding 3).
"""

from __future__ import annotations

import logging
import os
import signal

__all__ = ["FAULT_ENV", "inject"]

log = logging.getLogger("ldpem.client")

FAULT_ENV = "LDPEM_AGENT_FAULT"
_ACTIONS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}


def inject(point: str, t: int) -> None:
    """SIGKILL or SIGSTOP this process when ``FAULT_ENV`` names that action at ``point``
    in round ``t``."""
    action, _, where = os.environ.get(FAULT_ENV, "").partition("-")
    if action in _ACTIONS and where == f"{point}:{t}":
        log.warning("fault injection: %s at %s of round %d", action, point, t)
        os.kill(os.getpid(), _ACTIONS[action])
