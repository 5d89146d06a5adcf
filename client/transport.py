"""How the agent's persisted reports reach the coordinator, chosen once when it joins a
run: ``PlainReports`` posts each report as it is; in a run of noise shares
``ldpem.client.secagg.SecAggReports`` masks it and takes part in the round's secure
aggregation. The agent makes, charges and persists a report the same way for both
(client/agent.py) and then hands it to its transport."""

from __future__ import annotations

import logging
from typing import Protocol

from ldpem.client.ledger import Ledger
from ldpem.client.link import CoordinatorLink
from ldpem.client.trust import AgentError
from ldpem.common.wire import API_PREFIX, ReportAck

__all__ = ["PlainReports", "ReportTransport"]

log = logging.getLogger("ldpem.client")


class ReportTransport(Protocol):
    """What the agent asks of the way its reports travel."""

    #: The ε a round is charged at the least whatever the coordinator does (recorded in the
    #: ledger beside the round's ε); None when a report is charged as made.
    fallback_epsilon: float | None

    def charged(self, t: int, epsilon: float) -> None:
        """Round ``t`` was charged ``epsilon``: say what the charge assumes, if anything."""

    def deliver(self, t: int, body: bytes) -> None:
        """Send round ``t``'s persisted report ``body`` (JSON of a ``ReportIn``)."""

    def restarted(self, t: int) -> None:
        """Round ``t`` left in a form the agent cannot repeat before it restarted (a masked
        input): tell the coordinator, if that helps the round."""


class PlainReports:
    """Each report posted as it is (``POST …/rounds/{t}/reports``)."""

    fallback_epsilon: float | None = None

    def __init__(self, link: CoordinatorLink, ledger: Ledger, run_id: str) -> None:
        self.link = link
        self.ledger = ledger
        self.run_id = run_id

    def charged(self, t: int, epsilon: float) -> None:
        """Nothing to add: the round's ε is the report's."""

    def restarted(self, t: int) -> None:
        """Nothing to tell: a plain report is resent as persisted."""

    def deliver(self, t: int, body: bytes) -> None:
        response = self.link.request(
            "POST",
            f"{API_PREFIX}/runs/{self.run_id}/rounds/{t}/reports",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        detail = self.link.detail(response)
        if response.status_code == 200:
            ack = self.link.answer(ReportAck, response, f"the report of round {t}")
            self.ledger.mark(self.run_id, t, "acknowledged")
            log.info("round %d: report accepted%s", t, " (again)" if ack.duplicate else "")
            return
        if response.status_code == 409 and "is not open" in detail:
            self.ledger.mark(self.run_id, t, "late")
            log.warning("round %d closed before this report arrived: %s", t, detail)
            return
        raise AgentError(
            f"the coordinator rejected the report of round {t}: HTTP {response.status_code} "
            f"{detail}"
        )
