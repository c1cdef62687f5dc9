"""A ``trace export --follow`` state as a follower from before lines saved it (DESIGN §14.1)."""

from __future__ import annotations

import json

from agentjournal.read.traces import Projector
from agentjournal.records import Record


def pre_lines_state(session_id: str, records: list[Record], top: str) -> tuple[bytes, int]:
    """What a follower from before lines saved just after the fork of the branch whose top
    stream is ``top`` (its projector dropped every branch event and kept no line fields),
    and how many of ``records`` (in global order) it had read then."""
    fork_at = next(n for n, r in enumerate(records) if r.stream == top)  # BranchStarted
    old = Projector(session_id)
    for record in records[: fork_at + 1]:
        if not record.stream.startswith("AgentBranch"):
            old.feed(record)
    state = json.loads(old.dump())
    del state["line"]
    state["streams"] = {k: v for k, v in state["streams"].items() if "@" not in k}
    state["trees"] = {k: v for k, v in state["trees"].items() if "@" not in k}
    for tree in state["trees"].values():
        for key in ("line", "top", "parent", "cut", "fork", "runs"):
            tree.pop(key, None)
    return json.dumps(state).encode(), fork_at + 1
