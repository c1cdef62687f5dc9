"""``settled``: what a block settles is out of the collector's reach until the block ends,
then back in it (an error too), and a cycle dropped meanwhile is collected after."""

from __future__ import annotations

import gc
import weakref

import pytest

from agentjournal._gc import settled


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_what_a_block_settles_is_frozen_until_it_ends_then_collected() -> None:
    assert gc.get_freeze_count() == 0
    with settled() as settle:
        first, second = _Node(), _Node()
        first.other, second.other = second, first  # a cycle
        gone = weakref.ref(first)
        settle()
        assert gc.get_freeze_count() > 0
        del first, second
        gc.collect()
        assert gone() is not None  # frozen: no collection reaches it
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None


def _fail_settled() -> None:
    with settled() as settle:
        settle()
        raise RuntimeError("failed")


def test_a_block_that_fails_unfreezes_too() -> None:
    with pytest.raises(RuntimeError):
        _fail_settled()
    assert gc.get_freeze_count() == 0
