"""The bundle: a session tree in one JSON file a verifier can check offline (pure).

A bundle is one JSON object::

    {"format": "agentjournal-bundle", "version": 2, "session_id": "...",
     "exported_at": "...", "redacted": false,
     "streams": [{"name": "AgentSession-...", "events": [
         {"revision": 0, "id": "...", "type": "...", "data": "<UTF-8 text or null>",
          "data_sha256": "...", "metadata": {...}, "view": null}, ...]}, ...]}

Streams: the session tree as :func:`agentjournal.walk.read_tree` reads it —
the session stream, every subsession a handoff opened, the authority log
``AgentAuthority-{id}``, the checkpoint stream ``AgentLedger-{id}`` and the
journal's key rotations ``AgentKeys``, each when it exists; and every branch line
(DESIGN, "Branches"): each ``AgentBranch-{id}@{key}`` with its subsessions and
continuations, each branch's ``AgentAuthority-{id}@{key}``, the registry
``AgentBranches-{id}``.

A bundle of a session with branches is version 3, so a verifier that knows only
version 2 refuses it with its version message instead of failing it on streams it
does not know; a session without branches is still written as version 2, which
every verifier since 0.2 reads.

With ``redact=True`` no conversation leaves the store
(:mod:`agentjournal.ledger.redaction`): the data of every event is withheld
(``data`` null, its digest kept, so the chain still verifies) except for what
holds none; events that mix conversation with what a verifier needs carry their
committed ``view`` instead.

An eval run (DESIGN §20) is bundled the same way in a format of its own,
``agentjournal-eval-bundle`` (:func:`eval_bundle_of`): ``run_id`` in place of
``session_id``, and its streams — ``EvalRun-{run_id}``, its checkpoints
``AgentLedger-EvalRun-{run_id}`` and the key rotations ``AgentKeys``, each when it exists.
Redacted, a score keeps its value, label, turn, session and facts, and withholds what
was judged (the turn's input and output) and the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from agentjournal import events
from agentjournal.ledger import redaction
from agentjournal.records import Record, TreeRecords

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "BUNDLE_VERSIONS",
    "EVAL_BUNDLE_FORMAT",
    "EVAL_BUNDLE_VERSION",
    "bundle_of",
    "eval_bundle_of",
    "has_branches",
]

BUNDLE_FORMAT: Final = "agentjournal-bundle"
BUNDLE_VERSION: Final = 3
"""The newest version: 3 adds branch lines (written only for a session with branches);
2 added each event's ``view`` (redacted bundles), the authority log and the keys."""
BUNDLE_VERSIONS: Final = (2, 3)
"""The versions this verifier reads."""
_BRANCHLESS_VERSION: Final = 2
"""What a bundle of a session without branches is written as (every 0.2 verifier reads it)."""


def bundle_of(tree: TreeRecords, *, redact: bool = False) -> dict[str, Any]:
    """A session tree's records as a bundle, withholding the conversation with ``redact``."""
    return {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION if has_branches(tree.streams) else _BRANCHLESS_VERSION,
        "session_id": tree.session_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "redacted": redact,
        "streams": [
            {"name": name, "events": [_event(record, redact) for record in records]}
            for name, records in tree.streams.items()
        ],
    }


EVAL_BUNDLE_FORMAT: Final = "agentjournal-eval-bundle"
"""The format of an eval run's bundle."""
EVAL_BUNDLE_VERSION: Final = 1
"""Its one version."""


def eval_bundle_of(
    run_id: str, streams: Mapping[str, Sequence[Record]], *, redact: bool = False
) -> dict[str, Any]:
    """An eval run's streams as a bundle, withholding what was judged with ``redact``."""
    return {
        "format": EVAL_BUNDLE_FORMAT,
        "version": EVAL_BUNDLE_VERSION,
        "run_id": run_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "redacted": redact,
        "streams": [
            {"name": name, "events": [_event(record, redact) for record in records]}
            for name, records in streams.items()
        ],
    }


def has_branches(names: Iterable[str]) -> bool:
    """Whether streams of these names hold branch lines: a branch's top stream or the
    branch registry (``AgentBranch-``/``AgentBranches-``), which only version 3 carries."""
    return any(name.startswith(_BRANCH_PREFIX) for name in names)


_BRANCH_PREFIX: Final = "AgentBranch"  # AgentBranch-{id}@{key} and AgentBranches-{id}


def _event(record: Record, redact: bool) -> dict[str, Any]:
    text = record.data
    shown: dict[str, Any] | None = None
    if redact and redaction.withholds(record.type, record.metadata):
        text = None
        if events.REDACTED_KEY in record.metadata and record.data is not None:
            try:
                shown = redaction.view(record.type, record.data.encode(), record.metadata)
            except ValueError:
                shown = None  # unreadable: withheld whole, the verifier reports it
    return {
        "revision": record.revision,
        "id": record.id,
        "type": record.type,
        "data": text,
        "data_sha256": record.data_sha256,
        "metadata": dict(record.metadata),
        "view": shown,
    }
