"""conftest for the SDK's own session tests, run against agentjournal.

Copied next to the tests extracted from the openai-agents sdist (see
``tests/test_sdk_session_suite.py``). It swaps ``agents.SQLiteSession`` for
:class:`JournalSQLiteSession` before the test modules import it, so every
``SQLiteSession(session_id, db_path, session_settings=...)`` in those tests
builds an agentjournal session on an embedded store at ``db_path``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import agents
import agents.memory
from agents import set_tracing_disabled

from agentjournal.sdk.session import JournalSession
from agentjournal.store.sqlite import SQLiteEventStore

set_tracing_disabled(True)


class JournalSQLiteSession(JournalSession):
    """``SQLiteSession``'s constructor and ``close()`` around a JournalSession."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        self._owned_store = SQLiteEventStore.connect(os.fspath(db_path))
        super().__init__(self._owned_store, session_id, session_settings=session_settings)

    def close(self) -> None:
        super().close()  # every later call raises RuntimeError("... SQLiteSession is closed")
        self._owned_store.close_sync()


agents.SQLiteSession = JournalSQLiteSession  # type: ignore[misc,assignment]
agents.memory.SQLiteSession = JournalSQLiteSession  # type: ignore[misc,assignment]
