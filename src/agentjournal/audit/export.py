"""Exporting a bundle: a session tree read from a store, as one JSON object.

The format is :mod:`agentjournal.audit.bundle`'s; this is its only part that reads a
store, kept apart so that verifying a bundle file loads no store, no asyncio and no
engine.
"""

from __future__ import annotations

from typing import Any, Final

from agentjournal.audit.bundle import bundle_of, eval_bundle_of
from agentjournal.errors import InvalidInput, StreamNotFound
from agentjournal.records import Record
from agentjournal.store.contract import EventStore
from agentjournal.streams import KEYS_STREAM, eval_run_stream, ledger_stream, validate_id
from agentjournal.walk import read_tree

__all__ = ["eval_run_records", "export_bundle", "export_eval_bundle"]

_PAGE: Final = 2000


async def export_bundle(
    store: EventStore, session_id: str, *, redact: bool = False
) -> dict[str, Any]:
    """Read every stream of the session tree into a bundle (see
    :mod:`agentjournal.audit.bundle`).

    Raises:
        InvalidInput: The session id is malformed, or the session does not exist.
        DamagedEvent: A stored event cannot be bundled (data that is not UTF-8, ...).
        StoreUnavailable: The store could not be read.
    """
    return bundle_of(await read_tree(store, session_id), redact=redact)


async def eval_run_records(store: EventStore, run_id: str) -> dict[str, list[Record]]:
    """An eval run's streams as records: ``EvalRun-{run_id}``, its checkpoints and the
    journal's key rotations, each when it exists (what its bundle holds).

    Raises:
        InvalidInput: ``run_id`` is malformed, or the store holds no such run.
        DamagedEvent: A stored event cannot be bundled.
        StoreUnavailable: The store could not be read.
    """
    run_id = validate_id(run_id, "eval run id")
    stream = eval_run_stream(run_id)
    streams: dict[str, list[Record]] = {}
    for name in (stream, ledger_stream(stream), KEYS_STREAM):
        found: list[Record] = []
        while True:
            try:
                page = await store.read(name, from_revision=len(found), limit=_PAGE)
            except StreamNotFound:
                break
            found.extend(Record.of(event) for event in page)
            if len(page) < _PAGE:
                break
        if found:
            streams[name] = found
    if stream not in streams:
        raise InvalidInput(f"no eval run {run_id!r} in the store: check the id")
    return streams


async def export_eval_bundle(
    store: EventStore, run_id: str, *, redact: bool = False
) -> dict[str, Any]:
    """Read an eval run's streams into a bundle (``agentjournal-eval-bundle``, see
    :mod:`agentjournal.audit.bundle`).

    Raises:
        InvalidInput: ``run_id`` is malformed, or the store holds no such run.
        DamagedEvent: A stored event cannot be bundled.
        StoreUnavailable: The store could not be read.
    """
    run_id = validate_id(run_id, "eval run id")
    return eval_bundle_of(run_id, await eval_run_records(store, run_id), redact=redact)
