"""Bulk decodes without the cyclic garbage collector."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """No cyclic garbage collection inside the block; the collector's state comes back after.

    For a synchronous block that creates many acyclic objects that outlive it (a whole
    stream's events, their items): the collector would otherwise scan them again and again
    as they pile up (about half of a cold full read's time). Reference counting still frees
    everything the block drops; only cycles wait for the next collection. Never hold it
    across an ``await``. Nested or concurrent uses (the store's thread) are safe: only a
    block that found collection on turns it back on, and none turns it off after.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def settled() -> Iterator[Callable[[], None]]:
    """A block that keeps what it makes until its end (an export folding a store page by
    page), given ``settle``: called where what was made so far stays, it moves every object
    the collector tracks out of its reach (``gc.freeze``), so the collections between the
    pages never scan those objects again (they were most of an export's collections). On
    leaving, they come back, to the oldest generation (``gc.unfreeze``); a cycle dropped in
    between waits until then. For a command's one pass, not for a library call: the freeze
    is of the whole process.
    """
    try:
        yield gc.freeze
    finally:
        gc.unfreeze()
