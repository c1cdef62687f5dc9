"""What the commands share: one-line usage errors, the store option, writing files safely,
and what a verification trusts from outside the data (keys, an anchor time, a policy)."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from agentjournal.errors import InvalidInput
from agentjournal.store import DEFAULT_URI, URI_ENV


class Commands:
    """Where a command module adds its parser: every command shares the common options
    (``--debug``), says what it does in one line and shows an example.

    Args:
        action: The parent parser's subcommands.
        common: The parser of the options every command takes.
    """

    def __init__(
        self,
        action: argparse._SubParsersAction[argparse.ArgumentParser],
        common: argparse.ArgumentParser,
    ) -> None:
        self._action = action
        self._common = common

    def add(self, name: str, text: str, example: str | None = None) -> argparse.ArgumentParser:
        """A command ``name`` that does ``text`` (its help and description)."""
        parser = self._action.add_parser(
            name,
            help=text,
            description=text,
            parents=[self._common],
            epilog=f"example: {example}" if example else None,
        )
        parser.set_defaults(prog=parser.prog)  # whose help a usage error points to
        return parser

    def group(self, name: str, text: str) -> Commands:
        """A command ``name`` whose subcommands are added to what it returns."""
        parser = self.add(name, text)
        action = parser.add_subparsers(
            dest=f"{name}_command", metavar="COMMAND", required=True, parser_class=type(parser)
        )
        return Commands(action, self._common)


_SERVICE_MODULES = frozenset({"starlette", "uvicorn"})
"""What the ``[service]`` extra installs (the reference guardrail service)."""


def missing_service(error: ImportError, needs: str) -> int:
    """A usage error naming the ``[service]`` extra when ``error`` is one of its modules
    missing; any other import error is raised again (it is a bug, not an install step)."""
    missing = (error.name or "").partition(".")[0]
    if missing not in _SERVICE_MODULES:
        raise error
    return usage(f"{needs} ({missing} is missing): pip install 'agentjournal[service]'")


if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentjournal.audit.verify import Report
    from agentjournal.authority import Policy
    from agentjournal.records import TreeRecords

STORE_HELP = f"the store (default: ${URI_ENV}, else {DEFAULT_URI})"


def usage(message: str) -> int:
    """Print a usage error as one line on stderr; return exit code 1."""
    print(f"agentjournal: {' '.join(message.split())}", file=sys.stderr)
    return 1


def check_guardrails(option: str | None) -> None:
    """Refuse a guardrail service URL (``--guardrails``, else its variable) that no client
    could call, before anything is opened or written.

    Raises:
        InvalidInput: It is not http(s).
    """
    from agentjournal.guardrails.client import check_base_url
    from agentjournal.journal import GUARDRAIL_URL_ENV

    url = option or os.environ.get(GUARDRAIL_URL_ENV)
    if url:
        try:
            check_base_url(url)
        except InvalidInput as error:
            named = "--guardrails" if option else f"${GUARDRAIL_URL_ENV}"
            raise InvalidInput(f"{named}: {error}") from None


def writable_folder(path: str, target: str | None = None) -> None:
    """Raise unless the folder ``path`` would be written in exists (that of ``target``, the
    file ``path`` names through its links, when given).

    Raises:
        InvalidInput: It does not exist (or is not a folder).
    """
    folder = os.path.dirname(target or os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InvalidInput(f"cannot write {path}: folder {folder} does not exist; create it first")


def writable_output(path: str) -> str:
    """The file a command may write its output ``path`` to: through symbolic links, a file
    in a folder that exists and can be written, and, if the file exists, a regular file that
    can be read and is no SQLite database, none's write-ahead log, shared memory or journal,
    and no private key (PEM, or a raw seed as ``$AGENTJOURNAL_SIGNING_KEY_FILE`` may hold
    one) — what an export never replaces (a store's own file given as the output, or a
    key's). Write that file, not ``path``: it is what was checked.

    Raises:
        InvalidInput: It may not.
    """
    from agentjournal.ledger.keys import KEY_FILE_MOST  # cryptography: only for exports

    if not path:
        raise InvalidInput("the output file name is empty")
    if path == "-":  # where ``view -o -`` means standard output, this command writes a file
        raise InvalidInput("cannot write -: this command writes a file; give its name")
    target = os.path.realpath(path)
    writable_folder(path, target)
    folder = os.path.dirname(target)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidInput(f"cannot write {path}: folder {folder} cannot be written")
    try:
        found = os.stat(target)
    except FileNotFoundError:
        return target  # a new file
    except OSError as error:
        raise InvalidInput(f"cannot write {path}: {error.strerror}") from None
    if stat.S_ISDIR(found.st_mode):
        raise InvalidInput(f"cannot write {path}: it is a folder; give a file name")
    if not stat.S_ISREG(found.st_mode):
        raise InvalidInput(f"cannot write {path}: not a regular file (a pipe or a device)")
    try:
        with open(target, "rb") as handle:
            head = handle.read(KEY_FILE_MOST + 1)
    except OSError as error:
        raise InvalidInput(
            f"cannot write {path}: it cannot be read to tell what it holds ({error.strerror})"
        ) from None
    held = _held(target, head, KEY_FILE_MOST)
    if held is not None:
        raise InvalidInput(f"cannot write {path}: it holds {held}, which an export never replaces")
    return target


def _held(target: str, head: bytes, key_file_most: int) -> str | None:
    """What an existing file (``head``: its first bytes, past ``key_file_most`` if it is
    longer) holds that an export never replaces, if it does."""
    if head.startswith(_SQLITE_HEADER):
        return "a SQLite database"
    for suffix, what in _SIDE_FILES:  # beside its database, even while still empty
        database = target.removesuffix(suffix)
        if database != target and _a_database(database):
            return f"the {what} of the SQLite database {os.path.basename(database)}"
    if _PEM_PRIVATE_KEY.search(head):
        return "a private key"
    if len(head) <= key_file_most and b"-----BEGIN" not in head:
        from agentjournal.ledger.keys import SigningKey

        try:  # a raw seed, as the key loader reads one
            SigningKey.from_text(head.decode("utf-8"))
        except (InvalidInput, UnicodeDecodeError, ValueError):
            return None
        return "a private key"
    return None


_SQLITE_HEADER: Final = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""
_SIDE_FILES: Final = (
    ("-wal", "write-ahead log"),
    ("-shm", "shared memory"),
    ("-journal", "rollback journal"),
)
"""The files SQLite keeps beside a database, by the suffix of their names."""
_PEM_PRIVATE_KEY: Final = re.compile(rb"(?:^|\n)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
"""A PEM private key block, anywhere in a file (after a certificate, say)."""


def _a_database(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False


def write_atomically(path: str, text: str | Iterable[str]) -> None:
    """Write ``text`` (or its pieces, one after the other: no copy of them joined) to
    ``path`` so that nothing half-written ever has the real name: into a new file of its
    own beside it (never an existing one, nor through a link), renamed into place. Through
    a symbolic link at ``path``, its target is written (the link stays).

    Raises:
        OSError: It cannot be written (the error names ``path``).
    """
    target = os.path.realpath(path)
    partial = os.path.join(os.path.dirname(target), f".agentjournal-{secrets.token_hex(4)}.partial")
    try:
        # O_EXCL: a new file, never one that is there, nor a link's target; the mode as
        # open() makes it (0666 less the umask).
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with open(descriptor, "w", encoding="utf-8") as handle:
            if isinstance(text, str):
                handle.write(text)
            else:
                handle.writelines(text)
        os.replace(partial, target)
    except OSError as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise OSError(error.errno, error.strerror, path) from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise


def add_verification_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``verify`` and ``bundle verify`` share."""
    parser.add_argument(
        "--pubkey",
        metavar="KEY",
        action="append",
        default=[],
        help="a trusted Ed25519 public key: a file (PEM or raw hex/base64) or the key itself; "
        "repeat for several. Keys are never taken from the bundle (default: none, so "
        "--allow-uncovered is needed)",
    )
    parser.add_argument(
        "--allow-uncovered",
        action="store_true",
        help="report events after the last checkpoint as warnings, not failures (default: off)",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="the authority policy (YAML) the session must have run under: every policy it "
        "recorded must be this one (an outside anchor, like the keys; default: none)",
    )
    parser.add_argument(
        "--not-before",
        metavar="TIME",
        help="RFC 3339 time the newest checkpoint must not be older than (an outside anchor: "
        "a bundle cut back to an earlier checkpoint verifies otherwise; default: none)",
    )


@dataclass(frozen=True)
class Anchors:
    """What a verify command trusts from outside the data."""

    keys: dict[str, Ed25519PublicKey]
    not_before: str | None
    policy: Policy | None
    allow_uncovered: bool

    def verify_bundle(self, bundle: Any) -> Report:
        from agentjournal.audit.verify import verify_bundle

        return verify_bundle(
            bundle,
            self.keys,
            allow_uncovered=self.allow_uncovered,
            not_before=self.not_before,
            policy=self.policy,
        )

    def verify_records(self, records: TreeRecords) -> Report:
        from agentjournal.audit.verify import verify_records

        return verify_records(
            records,
            self.keys,
            allow_uncovered=self.allow_uncovered,
            not_before=self.not_before,
            policy=self.policy,
        )


def anchors_of(args: argparse.Namespace) -> Anchors:
    """The trusted keys, anchor time and policy a verify command was given.

    Raises:
        InvalidInput: A key, the time or the policy cannot be read, or no key is given.
    """
    keys = trusted_keys(args.pubkey)
    if not keys and not args.allow_uncovered:
        raise InvalidInput("give the trusted public key with --pubkey (or --allow-uncovered)")
    policy = None
    if args.policy is not None:
        from agentjournal.authority import Policy

        policy = Policy.load(args.policy)
    return Anchors(keys, _checked_time(args.not_before), policy, args.allow_uncovered)


def trusted_keys(values: Sequence[str]) -> dict[str, Ed25519PublicKey]:
    """Read ``--pubkey`` values: each a key file's path or the key itself.

    Raises:
        InvalidInput: A value is neither a readable key file nor a key.
    """
    from agentjournal.ledger.keys import key_id, load_public_key

    keys: dict[str, Ed25519PublicKey] = {}
    for value in values:
        text = value
        if os.path.isfile(value):
            try:
                with open(value, encoding="utf-8") as handle:
                    text = handle.read(64 * 1024)  # a key is a few hundred bytes
            except (OSError, UnicodeDecodeError) as error:
                raise InvalidInput(f"cannot read public key {value!r}: {error}") from None
        try:
            public = load_public_key(text)
        except InvalidInput as error:
            if text is value:
                raise InvalidInput(
                    f"--pubkey {value!r} is neither a key file nor a key ({error})"
                ) from None
            raise InvalidInput(f"{value} holds no public key: {error}") from None
        keys[key_id(public)] = public
    return keys


def trusted_with_own(values: list[str]) -> dict[str, Ed25519PublicKey]:
    """The ``--pubkey`` keys and the configured signing key's, as ``sessions`` trusts them.

    Raises:
        InvalidInput: A key cannot be read.
    """
    from agentjournal.ledger.keys import SigningKey

    keys = trusted_keys(values)
    own = SigningKey.from_environment()
    if own is not None:
        keys.setdefault(own.key_id, own.public_key)
    return keys


def _checked_time(value: str | None) -> str | None:
    """A ``--not-before`` value, refused unless it is an RFC 3339 time."""
    if value is not None:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"--not-before {value!r} is not an RFC 3339 time") from None
    return value


KEYS_ENV: Final = "AGENTJOURNAL_KEYS"
"""The embedded key store's file when ``--keys`` is not given (``erase`` and the read
commands)."""


def add_keys_argument(parser: argparse.ArgumentParser) -> None:
    """``--keys FILE``: the key store a read command opens sealed content with."""
    parser.add_argument(
        "--keys",
        metavar="FILE",
        help=f"the key store file (default: ${KEYS_ENV}): sealed content is shown opened, "
        "[erased] once its subject was erased; without one it reads [sealed]. Opened "
        "read-only, never created",
    )


def key_file(args: argparse.Namespace) -> str | None:
    """The key store file a command was given (``--keys``, else ``$AGENTJOURNAL_KEYS``)."""
    path: str | None = args.keys or os.environ.get(KEYS_ENV) or None
    return path
