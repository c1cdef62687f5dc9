"""The tools of the JIRA sample agents (bound by name: ``--tools samples/manifests/tools.py``).

Offline they answer from a small table. When the invocation's ``config`` names a
``jira_base_url`` they call that JIRA-like API instead, through the runner's
instrumented client (every request carries ``traceparent``/``tracestate``) with
``config["jira_token"]`` as the bearer token — which never appears in any output.
"""

from __future__ import annotations

import re
from typing import Any

from agentjournal.runner import http_client, invocation_config

_TICKETS = {
    "PROJ-123": {"status": "In Progress", "assignee": "dana", "summary": "Checkout times out"},
    "PROJ-124": {"status": "Done", "assignee": "lee", "summary": "Typo on the pricing page"},
}


def get_ticket_details(ticket_id: str) -> dict[str, Any]:
    """The status, assignee and summary of a ticket."""
    config = invocation_config()
    base = config.get("jira_base_url")
    if isinstance(base, str):
        token = str(config.get("jira_token", ""))
        with http_client(base_url=base, timeout=5) as client:
            reply = client.get(
                f"/rest/api/2/issue/{ticket_id}", headers={"Authorization": f"Bearer {token}"}
            )
            reply.raise_for_status()
            found: dict[str, Any] = reply.json()
            return found
    return _TICKETS.get(ticket_id, {"error": f"no ticket {ticket_id}"})


def create_project(name: str, lead: str = "admin") -> dict[str, str]:
    """Create a project; its key is its name's first letters, upper case."""
    key = re.sub(r"[^A-Z]", "", name.upper())[:4] or "PRJ"
    return {"key": key, "name": name, "lead": lead}
