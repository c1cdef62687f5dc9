"""``agentjournal erase``: erase a data subject's content, keeping the proof.

The same erasure as ``journal.erase``: the subject's keys destroyed in the key store,
``agentjournal.SubjectErased`` on each session that held its content (signed by a
checkpoint when ``$AGENTJOURNAL_SIGNING_KEY(_FILE)`` names a key), the store's plaintext
copies purged. Runs without the Agents SDK. Bad input is refused before anything is
opened, written or destroyed.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from agentjournal.cli._common import KEYS_ENV, STORE_HELP, Commands, key_file


def register(commands: Commands) -> None:
    """Add the ``erase`` command."""
    text = "erase a data subject's content (its keys destroyed); every chain still verifies"
    erase = commands.add(
        "erase",
        text,
        "agentjournal erase --subject user-42 --reason 'GDPR request 88' --as dpo@example.com",
    )
    erase.add_argument("--subject", required=True, help="the data subject (its user_id)")
    erase.add_argument("--reason", required=True, help="why (recorded; required)")
    erase.add_argument(
        "--as", dest="by", metavar="NAME", required=True, help="who erases (recorded; required)"
    )
    erase.add_argument(
        "--keys", metavar="FILE", help=f"the key store file (default: ${KEYS_ENV}); never created"
    )
    erase.add_argument("--uri", help=STORE_HELP + "; never created")
    erase.set_defaults(run=run_erase)


def run_erase(args: argparse.Namespace) -> int:
    """Erase the subject and say where.

    Raises:
        InvalidInput: A blank argument, or no key store (exit 1; nothing written).
        JournalError: The store cannot be opened or written (exit 1: run it again).
    """
    from agentjournal.errors import InvalidInput

    for flag, value in (("--subject", args.subject), ("--reason", args.reason), ("--as", args.by)):
        if not value.strip():
            raise InvalidInput(f"{flag} must be non-blank text")
    path = key_file(args)
    if not path:
        raise InvalidInput(f"no key store: pass --keys FILE or set ${KEYS_ENV}")
    if not os.path.isfile(path):
        raise InvalidInput(f"no key store at {path}: check --keys (it is never created)")
    from agentjournal.shred.sqlite_keys import SQLiteKeyStore

    SQLiteKeyStore(path, read_only=True).close()  # a key store, before anything is written
    return asyncio.run(_erase(args, path))


async def _erase(args: argparse.Namespace, path: str) -> int:
    from agentjournal._text import printable
    from agentjournal.engine.erasure import erase
    from agentjournal.ledger.keys import SigningKey
    from agentjournal.shred.sqlite_keys import SQLiteKeyStore
    from agentjournal.store import open_store, store_uri

    signing_key = SigningKey.from_environment()
    store = await open_store(store_uri(args.uri), create=False)
    keys = SQLiteKeyStore(path)
    try:
        erasure = await erase(
            store,
            keys,
            subject=args.subject,
            reason=args.reason,
            by=args.by,
            signing_key=signing_key,
        )
    finally:
        keys.close()
        await store.close()
    if not erasure.key_ids:
        print(printable(f"subject {args.subject} has no key in {path}: nothing to erase"))
        return 0
    if not erasure.sessions:
        print(
            printable(
                f"erased subject {args.subject}: {len(erasure.key_ids)} key(s) destroyed; "
                "no session held content under them"
            )
        )
        return 0
    if not erasure.written:
        print(
            printable(
                f"subject {args.subject} was erased already ({len(erasure.key_ids)} key(s) "
                "destroyed before): nothing new written"
            )
        )
        return 0
    sessions = ", ".join(erasure.written)
    print(
        printable(
            f"erased subject {erasure.subject} at {erasure.erased_at}: "
            f"{len(erasure.key_ids)} key(s) destroyed; SubjectErased on sessions: {sessions}"
        )
    )
    return 0
