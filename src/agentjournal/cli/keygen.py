"""``agentjournal keygen -o FILE [--rotate OLD]``: a new signing key, and its hand-over."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from typing import TYPE_CHECKING

from agentjournal.cli._common import STORE_HELP, Commands, usage, writable_folder
from agentjournal.errors import InvalidInput

if TYPE_CHECKING:
    from agentjournal.ledger.keys import SigningKey


def register(commands: Commands) -> None:
    """Add the ``keygen`` command."""
    text = "write a new Ed25519 signing key"
    keygen_ = commands.add(
        "keygen", text, "agentjournal keygen --rotate journal.pem -o journal-2.pem"
    )
    keygen_.add_argument(
        "-o",
        "--output",
        required=True,
        help="the private key file (PEM); FILE.pub gets the public key",
    )
    keygen_.add_argument(
        "--rotate",
        metavar="OLD",
        help="the key file being replaced: the new public key is recorded in the store, "
        "signed by OLD, so a verifier that trusts OLD trusts the new key too (default: none)",
    )
    keygen_.add_argument("--uri", help=STORE_HELP + "; with --rotate only; never created")
    keygen_.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    if args.rotate is not None:
        return asyncio.run(rotate(args.rotate, args.output, args.uri))
    if args.uri is not None:
        return usage("--uri is for --rotate: a new key alone is not recorded anywhere")
    return keygen(args.output)


def keygen(output: str) -> int:
    """A new signing key (mode 600); prints the public key's id."""
    try:
        key = _new_key_files(output)
    except InvalidInput as error:
        return usage(str(error))
    print(f"wrote {output} (private, keep it secret) and {output}.pub; key id {key.key_id}")
    return 0


def _new_key_files(output: str) -> SigningKey:
    """Write a new key to ``output`` (mode 600) and its public key to ``output.pub``.

    Raises:
        InvalidInput: Either file exists or the folder does not; nothing is written.
    """
    from agentjournal.ledger.keys import SigningKey

    if not output:
        raise InvalidInput("the key file name is empty")
    if output == "-":
        raise InvalidInput("cannot write -: a key is written to a file; give its name")
    public = f"{output}.pub"
    for path in (output, public):
        if os.path.isdir(path):
            raise InvalidInput(f"cannot write {path}: it is a folder; give a file name")
        if os.path.lexists(path):
            raise InvalidInput(f"{path} exists; refusing to overwrite a key")
    writable_folder(output)
    key = SigningKey.generate()
    try:
        descriptor = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        raise InvalidInput(f"cannot write {output}: {error.strerror or error}") from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(key.private_pem())
        with open(public, "x", encoding="utf-8") as handle:
            handle.write(key.public_pem())
    except OSError as error:  # neither file is left: a key without its public half is no key
        with contextlib.suppress(OSError):
            os.unlink(output)
        failed = error.filename or output
        raise InvalidInput(f"cannot write {failed}: {error.strerror or error}") from None
    return key


async def rotate(old_file: str, output: str, uri: str | None) -> int:
    """A new key, and OLD's signed hand-over to it recorded on the store's ``AgentKeys``
    stream. All or nothing: if the rotation cannot be recorded, the new key files are removed.

    Raises:
        JournalError: The old key or the store cannot be read (a usage error: 1).
    """
    from agentjournal._text import shown_uri
    from agentjournal.engine.writer import rotate_key
    from agentjournal.ledger.keys import SigningKey
    from agentjournal.store import open_store, store_uri

    old = SigningKey.from_file(old_file)
    target = store_uri(uri)
    store = await open_store(target, create=False)  # a missing store: no rotation to record
    try:
        try:
            new = _new_key_files(output)
        except InvalidInput as error:
            return usage(str(error))
        try:
            await rotate_key(store, old, new)
        except BaseException:
            for path in (output, f"{output}.pub"):
                os.unlink(path)
            raise
    finally:
        await store.close()
    print(
        f"wrote {output} (private, keep it secret) and {output}.pub; key id {new.key_id}\n"
        f"recorded in {shown_uri(target)}: {old.key_id} hands over to {new.key_id}; "
        f"sign with the new key from now on (AGENTJOURNAL_SIGNING_KEY_FILE={output})"
    )
    return 0
