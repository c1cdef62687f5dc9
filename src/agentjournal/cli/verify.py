"""``agentjournal verify SESSION``: verify a session tree as it is in the store;
``agentjournal verify --eval RUN``: an eval run's."""

from __future__ import annotations

import argparse
import asyncio
import gc
import threading
from typing import TYPE_CHECKING, Final

from agentjournal.cli._common import (
    STORE_HELP,
    Anchors,
    Commands,
    add_verification_arguments,
    anchors_of,
    usage,
)
from agentjournal.errors import InvalidInput

if TYPE_CHECKING:
    from agentjournal.records import TreeRecords


def register(commands: Commands) -> None:
    """Add the ``verify`` command."""
    text = "verify a session tree in the store"
    verify = commands.add(
        "verify", text, "agentjournal verify support-4711 --pubkey journal.pem.pub"
    )
    verify.add_argument("session", nargs="?", help="the session id")
    verify.add_argument(
        "--eval",
        dest="eval_run",
        metavar="RUN",
        help="verify the eval run RUN instead of a session (its chain, its events against "
        "the schema, its totals, its checkpoints; default: none)",
    )
    verify.add_argument("--uri", help=STORE_HELP + "; never created")
    add_verification_arguments(verify)
    verify.set_defaults(run=verify_session)


_THREADS_END: Final = 0.05
"""How long (seconds) the command waits, after its loop, for the threads a store's library
left shutting down (gRPC's end within a millisecond of the last channel, usually; tens of
milliseconds under load)."""


def verify_session(args: argparse.Namespace) -> int:
    """Verify the session tree as it is in the store: read in an event loop, verified once
    the loop has ended and, for a tree large enough to fork for, its threads with it
    (verification forks a second process only where no other thread runs:
    ``audit.verify._parallel``).

    A missing store or session is a usage error (1); anything wrong with what
    is stored, including an event the store cannot even decode, fails (2).

    Raises:
        JournalError: The store cannot be opened or reached (a usage error: 1).
    """
    from agentjournal._forked import wait_alone
    from agentjournal.audit.verify._parallel import MIN_EVENTS
    from agentjournal.streams import session_stream

    read = asyncio.run(_read_session(args))
    if isinstance(read, int):
        return read
    anchors, records, model = read
    if sum(map(len, records.streams.values())) >= MIN_EVENTS:
        # A tree the verifier may fork for, where no other thread runs. On KurrentDB a call the
        # store's close cancelled keeps gRPC's poller running until the reference cycles the
        # loop left are collected; gRPC's own threads end after its last channel (within a
        # millisecond, tens under load), and a fork before that would wait in gRPC's fork
        # handler for ever: the verifier forks only once they have (else on one process).
        if threading.active_count() > 1:
            gc.collect()
        wait_alone(_THREADS_END)
    report = anchors.verify_records(records)
    report.model_checked(model, session_stream(records.session_id))
    print(report.text())
    return 0 if report.ok else 2


async def _read_session(
    args: argparse.Namespace,
) -> int | tuple[Anchors, TreeRecords, tuple[str, str | None] | None]:
    """The anchors, the session tree's records and its read model's check (or an eval
    run's verification, done here: it does not fork); an exit code where reading failed."""
    from agentjournal.audit.verify import Report
    from agentjournal.cli._store import open_session
    from agentjournal.read.replay import check_read_model
    from agentjournal.records import DamagedEvent
    from agentjournal.walk import read_tree

    try:
        anchors = anchors_of(args)
        if (args.session is None) == (args.eval_run is None):
            raise InvalidInput("name a session, or an eval run with --eval RUN (one of them)")
    except InvalidInput as error:
        return usage(str(error))
    if args.eval_run is not None:
        return await verify_eval_run(args, anchors)
    store, session_id = await open_session(args.uri, args.session)
    try:
        records = await read_tree(store, session_id)
        # The events are verified after the loop; what get_items would replay from a store's read
        # model must be exactly what they hold (a model edited by hand is caught here).
        model = await check_read_model(store, session_id)
    except DamagedEvent as bad:
        failed = Report()
        failed.fail("integrity", bad.stream, bad.revision, bad.message)
        print(failed.text())
        return 2
    finally:
        await store.close()
    return anchors, records, model


async def verify_eval_run(args: argparse.Namespace, anchors: Anchors) -> int:
    """Verify an eval run as it is in the store (exit codes as for a session).

    Raises:
        JournalError: The store or the run is missing (a usage error: 1).
    """
    from agentjournal._text import cut, plural
    from agentjournal.audit.export import eval_run_records
    from agentjournal.audit.verify import Report, verify_eval_records
    from agentjournal.read.evals.bindings import changed_bindings
    from agentjournal.records import DamagedEvent
    from agentjournal.store import open_store, store_uri
    from agentjournal.streams import eval_run_stream, validate_id

    run_id = validate_id(args.eval_run, "eval run id")
    store = await open_store(store_uri(args.uri), create=False)
    try:
        records = await eval_run_records(store, run_id)
        bound, changed = await changed_bindings(store, records.get(eval_run_stream(run_id), []))
    except DamagedEvent as bad:
        failed = Report()
        failed.fail("integrity", bad.stream, bad.revision, bad.message)
        print(failed.text())
        return 2
    finally:
        await store.close()
    report = verify_eval_records(
        run_id,
        records,
        anchors.keys,
        allow_uncovered=anchors.allow_uncovered,
        not_before=anchors.not_before,
    )
    report.lines.append(
        f"bindings: {plural(bound, 'score')} bound to the turns as the store holds them"
        if not changed
        else f"bindings: {len(changed)} of {plural(bound, 'score')} judged a turn the store "
        "now holds otherwise (re-recorded, written to since, or moved): "
        + cut(", ".join(changed), 300)
    )
    print(report.text())
    return 0 if report.ok else 2
