"""``agentjournal bundle export|verify``: a session tree as one file, and its offline check.

``bundle export --eval RUN`` writes an eval run's bundle instead (its stream, checkpoints
and key rotations: ``agentjournal-eval-bundle``); ``bundle verify`` tells the two formats
apart by the file's ``format``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import TYPE_CHECKING, Any, Final

from agentjournal._text import plural
from agentjournal.cli._common import (
    STORE_HELP,
    Commands,
    add_verification_arguments,
    anchors_of,
    usage,
    writable_output,
    write_atomically,
)
from agentjournal.errors import InvalidInput, StoreUnavailable

if TYPE_CHECKING:
    from agentjournal.ledger.checkpoints import Checkpoint
    from agentjournal.ledger.keys import SigningKey
    from agentjournal.store.contract import EventStore

DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024
"""The largest bundle ``bundle verify`` reads (the whole bundle is held in memory)."""


def register(commands: Commands) -> None:
    """Add the ``bundle`` command and its ``export`` and ``verify``."""
    text = "export or verify a session bundle"
    subcommands = commands.group("bundle", text)
    text = "write a session tree as a bundle"
    export = subcommands.add(
        "export", text, "agentjournal bundle export support-4711 -o bundle.json --redact"
    )
    export.add_argument("session", nargs="?", help="the session id")
    export.add_argument(
        "--eval",
        dest="eval_run",
        metavar="RUN",
        help="export the eval run RUN instead of a session (its scores; --redact withholds "
        "what was judged; default: none)",
    )
    export.add_argument("-o", "--output", required=True, help="the bundle file to write")
    export.add_argument("--uri", help=STORE_HELP + "; never created")
    export.add_argument(
        "--redact",
        action="store_true",
        help="withhold every copy of the conversation; digests and views stay (default: off)",
    )
    export.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="do not sign a checkpoint of the heads first (default: one is signed when a "
        "key is set)",
    )
    export.set_defaults(run=lambda args: asyncio.run(export_to_file(args)))
    text = "verify a bundle offline"
    check = subcommands.add(
        "verify", text, "agentjournal bundle verify bundle.json --pubkey journal.pem.pub"
    )
    check.add_argument("bundle", help="the bundle file")
    add_verification_arguments(check)
    check.add_argument(
        "--max-bytes",
        metavar="BYTES",
        type=_byte_count,
        default=DEFAULT_MAX_BYTES,
        help="refuse a bundle larger than this many bytes, read whole into memory "
        "(default: 268435456, i.e. 256 MiB)",
    )
    check.set_defaults(run=verify_file)


def _byte_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes") from None
    if value < 1:
        raise argparse.ArgumentTypeError("a size is at least 1 byte")
    return value


async def export_to_file(args: argparse.Namespace) -> int:
    """Sign the heads of every line first when a key is set, then write the bundle.

    Raises:
        JournalError: The store, the session or the output folder is missing, or
            the signing key cannot be read (a usage error: 1).
    """
    from agentjournal.audit.export import export_bundle
    from agentjournal.cli._store import open_session
    from agentjournal.ledger.keys import SigningKey

    output: str = args.output
    if (args.session is None) == (args.eval_run is None):
        raise InvalidInput("name a session, or an eval run with --eval RUN (one of them)")
    target = writable_output(output)  # before anything is signed or read: what is written
    key = SigningKey.from_environment() if not args.no_checkpoint else None
    if args.eval_run is not None:
        return await _export_eval(args, output, target, key)
    store, session_id = await open_session(args.uri, args.session)
    try:
        if key is not None:
            try:
                signed = await sign_every_line(store, session_id, key)
            except StoreUnavailable as error:  # e.g. a store this process cannot write
                raise StoreUnavailable(
                    f"{error} (a checkpoint is signed before an export when a key is set; "
                    "--no-checkpoint exports without one)"
                ) from error
            if signed is not None:
                print(
                    f"signed a checkpoint with {signed.key_id} "
                    f"({plural(len(signed.heads), 'stream head')})"
                )
        bundle = await export_bundle(store, session_id, redact=args.redact)
    finally:
        await store.close()
    return await _write(output, target, bundle)


async def _export_eval(
    args: argparse.Namespace, output: str, target: str, key: SigningKey | None
) -> int:
    """Sign the eval run's head first when a key is set, then write its bundle.

    Raises:
        JournalError: The store or the run is missing (a usage error: 1).
    """
    from agentjournal.audit.export import export_eval_bundle
    from agentjournal.engine.evals import sign_head
    from agentjournal.store import open_store, store_uri
    from agentjournal.streams import eval_run_stream, validate_id

    run_id = validate_id(args.eval_run, "eval run id")
    store = await open_store(store_uri(args.uri), create=False)
    try:
        bundle = await export_eval_bundle(store, run_id, redact=args.redact)
        if key is not None:
            run = eval_run_stream(run_id)
            events = next(s["events"] for s in bundle["streams"] if s["name"] == run)
            head = (events[-1]["revision"], events[-1]["metadata"]["aj.hash"])
            if await sign_head(store, run, head, key) is not None:
                print(f"signed a checkpoint with {key.key_id} (1 stream head)")
                bundle = await export_eval_bundle(store, run_id, redact=args.redact)
    finally:
        await store.close()
    return await _write(output, target, bundle)


async def _write(output: str, target: str, bundle: dict[str, Any]) -> int:
    """Write ``bundle`` to ``target`` (the file ``output`` names) in one step and say what
    it holds."""
    try:
        await asyncio.to_thread(write_atomically, target, json.dumps(bundle, ensure_ascii=False))
    except OSError as error:
        return usage(f"cannot write {output}: {error.strerror or error}")
    streams = bundle["streams"]
    count = sum(len(stream["events"]) for stream in streams)
    print(f"wrote {output}: {plural(len(streams), 'stream')}, {plural(count, 'event')}")
    return 0


async def sign_every_line(store: EventStore, session_id: str, key: SigningKey) -> Checkpoint | None:
    """Sign one checkpoint of every line of the session as it is now: each line's top
    stream (a deleted branch's too), its open subsessions and continuations, every
    authority log and the registry (:meth:`~agentjournal.records.TreeRecords.checkpoint_heads`).

    Not main's heads alone: a branch written without a key, or by a process that has not
    checkpointed since, is covered by this one checkpoint. None when there is nothing to
    sign.

    Raises:
        InvalidInput: The session id is malformed, or the session does not exist.
        StoreError: The tree could not be read or the checkpoint written.
    """
    from agentjournal.engine.core import open_line
    from agentjournal.walk import read_tree

    heads = (await read_tree(store, session_id)).checkpoint_heads()
    core = open_line(store, session_id, signing_key=key)
    # Main's own heads are read again as it signs: a newer head is never lowered.
    return await core.checkpoint({}, extra=heads)


def verify_file(args: argparse.Namespace) -> int:
    """Verify a bundle offline, from the file and the given keys alone.

    Whatever the file holds — not UTF-8, not JSON, nested too deeply, too
    large, a crafted bundle — it is a failed check (2) naming where, never a
    crash. A file that cannot be opened is a usage error (1).
    """
    from agentjournal.audit.verify import parse_bundle

    path: str = args.bundle
    try:
        anchors = anchors_of(args)
    except InvalidInput as error:
        return usage(str(error))
    try:
        raw = _read_bounded(path, args.max_bytes)
    except _TooLarge:
        print(
            f"FAILED: {path}: larger than {_amount(args.max_bytes)}, the most this verifier "
            "reads into memory (raise --max-bytes to verify it)"
        )
        return 2
    except OSError as error:
        return usage(f"cannot read {path}: {error.strerror or error}")
    try:
        bundle = parse_bundle(raw)
    except InvalidInput as error:
        print(f"FAILED: {path}: {error}")
        return 2
    report = anchors.verify_bundle(bundle)
    print(report.text())
    return 0 if report.ok else 2


class _TooLarge(Exception):
    """Raised by :func:`_read_bounded` for a file over the limit (before reading it all)."""


def _read_bounded(path: str, max_bytes: int) -> bytes:
    """The bytes of ``path``, reading at most ``max_bytes + 1`` whatever the file claims.

    Raises:
        OSError: The file cannot be read.
        _TooLarge: It holds more than ``max_bytes``.
    """
    chunks: list[bytes] = []
    read = 0
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:  # refused before reading a byte
            raise _TooLarge(size)
        while chunk := handle.read(1 << 20):  # a pipe or device claims no size
            read += len(chunk)
            if read > max_bytes:
                raise _TooLarge(read)
            chunks.append(chunk)
    return b"".join(chunks)


def _amount(count: int) -> str:
    """``1.0 GiB``, ``256 MiB``, ``17 bytes``."""
    value, unit = float(count), "bytes"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{count} bytes" if unit == "bytes" else f"{value:.4g} {unit}"
