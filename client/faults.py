"""Fault injection for the tests of the agent's crash safety (never set in production).

``LDPEM_AGENT_FAULT=POINT:T`` kills the agent with SIGKILL when it reaches ``POINT`` in
round T:

* ``kill-after-persist``: the round's report is committed to the ledger, nothing sent;
* ``kill-after-mask`` (secagg): the ledger marks the round masked, the masked input is
  made and not yet sent.
"""

from __future__ import annotations

import logging
import os
import signal

__all__ = ["FAULT_ENV", "inject"]

log = logging.getLogger("ldpem.client")

FAULT_ENV = "LDPEM_AGENT_FAULT"


def inject(point: str, t: int) -> None:
    """SIGKILL this process when ``FAULT_ENV`` names ``point`` in round ``t``."""
    if os.environ.get(FAULT_ENV, "") == f"{point}:{t}":
        log.warning("fault injection: killing the agent at %s of round %d", point, t)
        os.kill(os.getpid(), signal.SIGKILL)
