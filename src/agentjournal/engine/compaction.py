"""Compaction of a line: the snapshot a compaction reads, and the write that replaces
what it read (only while it is still the newest history) or the whole history.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentjournal.engine.items import ItemWrites, NoRun
from agentjournal.engine.line import Line
from agentjournal.engine.timeline import Clear, Entry, Key


class HistoryChanged(Exception):
    """A compaction snapshot's suffix is no longer the newest history: replace nothing."""


@dataclass(frozen=True)
class Snapshot:
    """The newest visible items of a session, as a compaction read them.

    Attributes:
        items: The items, oldest first.
        complete: Whether no visible item is older than ``items``.
        seen: Each item's key and exact text (what a replacement checks is unchanged).
    """

    items: list[dict[str, Any]]
    complete: bool
    seen: list[tuple[Key, str]]


async def snapshot(line: Line, limit: int) -> Snapshot:
    """The newest ``limit`` visible items, as a compaction reads them."""
    tree = line.tree
    async with tree.lock:
        await line.reader.refresh(max(limit, 0) + 1)
        window = tree.timeline.latest(max(limit, 0) + 1)
        complete = len(window) <= limit
        read = window[max(len(window) - limit, 0) :] if limit > 0 else []
        return Snapshot(
            [entry.item() for entry in read],
            complete,
            [(entry.key, entry.item_json) for entry in read],
        )


async def replace_suffix(
    line: Line,
    writes: ItemWrites,
    expected: list[tuple[Key, str]],
    output: list[Any],
    prune_prefix: Callable[[Any], bool] | None,
    *,
    trace: Mapping[str, str],
    speaker: str | None = None,
) -> bool:
    """Hide the items ``expected`` (and, with ``prune_prefix``, the oldest visible items
    before them it accepts) and append ``output``, in one atomic write, only if they
    are still the newest visible items; False (nothing written) otherwise."""

    async def hiding() -> list[Entry | Clear]:
        return await _suffix_to_hide(line, expected, prune_prefix)

    try:
        await writes.add(output, NoRun(speaker), trace=trace, hiding=hiding)
    except HistoryChanged:
        return False
    return True


async def replace_all(
    line: Line,
    writes: ItemWrites,
    items: list[Any],
    *,
    trace: Mapping[str, str],
    speaker: str | None = None,
) -> None:
    """Replace the whole visible history with ``items`` in one atomic write (``speaker``
    authors its assistant items)."""

    async def hiding() -> list[Entry | Clear]:
        await line.reader.refresh(0)
        if line.tree.heads.get(line.tree.stream, -1) < 0:
            return []  # no session yet: nothing to clear
        return [Clear(await line.reader.next_index() - 1)]

    await writes.add(items, NoRun(speaker), trace=trace, hiding=hiding)


async def _suffix_to_hide(
    line: Line,
    expected: list[tuple[Key, str]],
    prune_prefix: Callable[[Any], bool] | None,
) -> list[Entry | Clear]:
    """What a snapshot's replacement hides, read now (under the tree's lock).

    Raises:
        HistoryChanged: The newest visible items are no longer ``expected``.
    """
    tree = line.tree
    if prune_prefix is None:
        await line.reader.refresh(len(expected))
        visible = tree.timeline.latest(len(expected))
    else:
        visible = await line.reader.visible()
    if len(visible) < len(expected):
        raise HistoryChanged
    suffix = visible[len(visible) - len(expected) :]
    if [(entry.key, entry.item_json) for entry in suffix] != expected:
        raise HistoryChanged
    prefix: list[Entry] = []
    if prune_prefix is not None:
        for entry in visible[: len(visible) - len(expected)]:
            if not prune_prefix(entry.item()):
                break
            prefix.append(entry)
    hidden: list[Entry | Clear] = [*prefix, *suffix]
    whole = tree.timeline.complete and len(hidden) == len(tree.timeline.entries)
    if whole and all(entry.index >= 0 for entry in [*prefix, *suffix]):
        # Everything goes: one clear instead of a pop per item, and later reads stop there.
        return [Clear(await line.reader.next_index() - 1)]
    return hidden
