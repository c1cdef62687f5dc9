"""``trace export --all``'s two parts, driven from a test: every span of a store as the
command exports it (:func:`every_tree`), and a child that already sent its part (:class:`Sent`).
"""

from __future__ import annotations

from typing import Any

from agentjournal.cli import _trace_all
from agentjournal.store import open_store


async def every_tree(uri: str, second: Any, output: Any = _trace_all._as_is) -> list[Any]:
    """Every span of every tree of the store at ``uri``, in one process (``second`` None) or in
    two, ``second`` the other part's child, each span as ``output`` makes it."""
    store = await open_store(uri, create=False)
    try:
        return await _trace_all._every_tree(store, second, output)
    finally:
        await store.close()


class Sent:
    """A child whose result was read before a writer appended: what it sent then."""

    def __init__(self, sent: Any) -> None:
        self.sent = sent

    def result(self) -> Any:
        return self.sent
