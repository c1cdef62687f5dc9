"""The session catalog: one row per session tree, folded from the store's global order.

``agentjournal sessions`` lists every session without reading any session by
itself: the catalog is a projection (:mod:`agentjournal.read.projections`). A call
loads the saved state (one read of its trailer and chunks), folds only the
events written since the saved position, settles what the fold could not decide
alone (a checkpoint naming an older revision, a signature by a key trusted only
now: one point read each), returns the rows and saves the state again. The
first call on a store reads the whole global order once, in pages.

The fold (:class:`Catalog`) is pure: events in, JSON-serialisable state out. It
learns which session a stream belongs to from the events themselves (see
:mod:`agentjournal.read.catalog.fold`).

Each row says (see :class:`SessionRow`): the session's app, user and first
agent (``SessionStarted``); how many items ``get_items()`` would return (item
events, minus pops, reset by clears); subagents open, closed and failed;
guardrail blocks; authority refusals; tokens; first and last activity; and the
*cheap ledger check*: every event's chain hash is recomputed and its ``aj.prev``
links its stream's previous ``aj.hash``, and the newest checkpoint's signature
is valid under a trusted key over heads equal to what the projection saw.
``agentjournal verify`` remains the full check (twins, coverage, delegation,
containment).

Typical use::

    listing = await catalog.refresh(store, keys={key.key_id: key.public_key})
    for row in listing.rows:
        print(row.session_id, row.items, row.ledger)

- :mod:`.rows` — the rows a listing holds (a session, its branches).
- :mod:`.fold` — the fold: counts per session tree, stream heads, checkpoints seen.
- :mod:`.ledger` — the cheap ledger check: chain links, checkpoint heads, a row's status.
- :mod:`.responses` — a ``ModelResponded``'s agent and tokens, read with the least work.
- :mod:`.listing` — :func:`refresh`: load the saved fold, fold what is new, settle, save.
- :mod:`.parts` — a first fold in two processes: half the trees each, merged at one end.
- :mod:`.live` — the fold kept in memory by a long-lived reader (the viewer), with its
  content index: fold only what is new, save nothing.
- :mod:`.query` — one page of rows: a query's filters, search, order and cut (pure).
- :mod:`.search` — the content index: words of item events -> sessions (pure).
"""

from __future__ import annotations

from agentjournal.read.catalog.fold import Catalog
from agentjournal.read.catalog.listing import NAME, PAGE, Listing, refresh, sessions
from agentjournal.read.catalog.rows import BranchRow, SessionRow

__all__ = [
    "NAME",
    "PAGE",
    "BranchRow",
    "Catalog",
    "Listing",
    "SessionRow",
    "refresh",
    "sessions",
]
