"""One session line's parts: its store, facts, tree, reader and writer, as every operation
on the line receives them.

:class:`Line` owns no state of its own: the tree changes through its own methods, the
reader and writer through theirs. The session engine's modules (items, lines, usage,
grants, checkpoints, compaction) are functions of a :class:`Line`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentjournal.engine.plan import SessionFacts, WritePlan
from agentjournal.engine.plan_control import plan_control
from agentjournal.engine.reader import Reader
from agentjournal.engine.tree import SessionTree
from agentjournal.engine.writer import Writer
from agentjournal.errors import BranchDeleted, StreamNotFound
from agentjournal.ledger.chain import HASH_KEY
from agentjournal.streams import MAIN_BRANCH, branches_stream


@dataclass(frozen=True, slots=True)
class Line:
    """What an operation on one line works through.

    Attributes:
        store: The event store.
        facts: What the session adds to every write.
        tree: What is known of the line's streams (shared per session id and line).
        reader: Reads the line through ``tree``.
        writer: Writes plans on the line through ``tree``.
    """

    store: Any
    facts: SessionFacts
    tree: SessionTree
    reader: Reader
    writer: Writer

    @classmethod
    def of(
        cls, store: Any, facts: SessionFacts, tree: SessionTree, *, use_model: bool = True
    ) -> Line:
        """The line of ``facts`` on ``tree``, with its reader and writer."""
        reader = Reader(
            store,
            tree,
            facts.session_id,
            use_model=use_model,
            branch=facts.branch,
            authority=facts.authority_stream,
        )
        return cls(store, facts, tree, reader, Writer(store, tree, reader))

    def check_live(self) -> None:
        """Refuse to act on a line that was deleted or cleared (under the tree's lock).

        Raises:
            BranchDeleted: ``agentjournal.BranchDeleted`` is on the line's top stream.
        """
        if self.tree.deleted is not None:
            raise BranchDeleted(
                self.facts.session_id, self.facts.branch or MAIN_BRANCH, self.tree.deleted
            )

    async def write_on_top(
        self, type_: str, checked: Callable[[], Awaitable[bytes]], trace: Mapping[str, str]
    ) -> None:
        """Write one control event at the head of the line's top stream: ``checked`` runs in
        every plan, after the line is read again, and gives the event's data (or raises, and
        nothing is written), so what it checks holds at the head the write expects."""
        tree = self.tree

        async def build() -> WritePlan:
            await self.reader.refresh(0)
            self.check_live()
            data = await checked()
            return plan_control(
                tree,
                self.facts,
                self.facts.stream,
                type_,
                data,
                next_index=await self.reader.next_index(),
                metadata=trace,
            )

        async with tree.lock:
            await self.writer.write(build)

    async def registry_head(self) -> tuple[int, str]:
        """The head (revision, ``aj.hash``) of the session's branch registry ((-1, ""): none)."""
        try:
            tail = await self.store.read(
                branches_stream(self.facts.session_id), backwards=True, limit=1
            )
        except StreamNotFound:
            tail = []
        return (tail[0].revision, tail[0].metadata.get(HASH_KEY, "")) if tail else (-1, "")
