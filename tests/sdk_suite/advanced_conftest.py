"""conftest for the SDK's own ``AdvancedSQLiteSession`` tests, run against agentjournal.

Copied next to the tests extracted from the openai-agents sdist (see
``tests/test_sdk_advanced_suite.py``). It swaps ``AdvancedSQLiteSession`` for
:class:`JournalAdvancedSQLiteSession` before the test module imports it, so every
``AdvancedSQLiteSession(session_id=..., db_path=..., ...)`` in those tests builds an
agentjournal session on an embedded event store at ``db_path`` (``:memory:``: a store of
its own, as the SDK's in-memory database is).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import agents.extensions.memory
import agents.extensions.memory.advanced_sqlite_session as advanced_module
from agents import set_tracing_disabled

from agentjournal.sdk.session import JournalSession
from agentjournal.store.sqlite import SQLiteEventStore

set_tracing_disabled(True)


class JournalAdvancedSQLiteSession(JournalSession):
    """``AdvancedSQLiteSession``'s keyword constructor and ``close()`` around a
    JournalSession (its table names and ``create_tables`` mean nothing to an event
    store and are ignored)."""

    def __init__(
        self,
        *,
        session_id: str,
        db_path: str | Path = ":memory:",
        create_tables: bool = False,
        logger: logging.Logger | None = None,
        session_settings: Any = None,
        **kwargs: Any,
    ) -> None:
        self._owned_store = SQLiteEventStore.connect(os.fspath(db_path))
        super().__init__(
            self._owned_store, session_id, session_settings=session_settings, logger=logger
        )

    def close(self) -> None:
        super().close()  # every later call raises RuntimeError("... SQLiteSession is closed")
        self._owned_store.close_sync()


agents.extensions.memory.AdvancedSQLiteSession = JournalAdvancedSQLiteSession  # type: ignore[misc,assignment]
advanced_module.AdvancedSQLiteSession = JournalAdvancedSQLiteSession  # type: ignore[misc,assignment]
