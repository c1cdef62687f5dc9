"""``agentjournal demo``: a scripted support conversation with nested handoffs, offline."""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from agentjournal.cli._common import STORE_HELP, Commands
from agentjournal.errors import InvalidInput

if TYPE_CHECKING:
    from agentjournal.authority import Policy
    from agentjournal.guardrails.rules import RuleSet
    from agentjournal.ledger import SigningKey


def register(commands: Commands) -> None:
    """Add the ``demo`` command."""
    text = "run a scripted conversation with handoffs, offline"
    demo = commands.add("demo", text, "agentjournal demo --policy samples/policy.yml")
    where = demo.add_mutually_exclusive_group()
    where.add_argument("--uri", help=STORE_HELP + "; created when missing")
    where.add_argument(
        "--db",
        metavar="PATH",
        help="a SQLite file: the same as --uri sqlite:///PATH (default: none)",
    )
    demo.add_argument(
        "--session",
        metavar="ID",
        help="the new session's id (default: support- and 8 random hex digits)",
    )
    demo.add_argument(
        "--key",
        metavar="FILE",
        help="the signing key, made when missing (default: $AGENTJOURNAL_SIGNING_KEY_FILE "
        "or $AGENTJOURNAL_SIGNING_KEY, else ./agentjournal-demo.pem)",
    )
    demo.add_argument(
        "--rules",
        metavar="FILE",
        help="the guardrail's rules, e.g. samples/guardrail-rules.yml (default: a refund "
        "ceiling of 2000 cents and PII redaction)",
    )
    demo.add_argument(
        "--policy",
        metavar="FILE",
        help="an authority policy, e.g. samples/policy.yml (default: none)",
    )
    demo.set_defaults(run=_run)


@dataclass(frozen=True)
class DemoSetup:
    """What the demo runs with, read and checked before the Agents SDK is loaded.

    Attributes:
        session_id: The new session's id.
        key: The signing key.
        public: How to name its public key on the command line.
        rules: The guardrail's rules.
        policy: The authority policy, if any.
        started: When the command started (``time.monotonic()``).
    """

    session_id: str
    key: SigningKey
    public: str
    rules: RuleSet
    policy: Policy | None
    started: float


def prepare(
    *,
    session_id: str | None = None,
    key_file: str | None = None,
    rules_file: str | None = None,
    policy_file: str | None = None,
    started: float | None = None,
) -> DemoSetup:
    """Read and check everything the demo is given (a usage error costs no SDK import).

    Raises:
        InvalidInput: The session id, a file or the key folder is wrong.
    """
    from agentjournal.authority import Policy
    from agentjournal.guardrails.rules import load_rules
    from agentjournal.streams import validate_id

    session_id = validate_id(session_id or f"support-{uuid.uuid4().hex[:8]}", "session id")
    rules = load_rules(RULES) if rules_file is None else _rules(rules_file)
    policy = None if policy_file is None else Policy.load(policy_file)
    key, public = _demo_key(key_file)
    return DemoSetup(
        session_id, key, public, rules, policy, time.monotonic() if started is None else started
    )


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    from agentjournal._text import shown_uri
    from agentjournal.cli._common import missing_service
    from agentjournal.store import check_uri, store_uri

    try:  # the [service] extra, checked before anything is written or loaded
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as error:
        return missing_service(error, "the demo runs the reference guardrail service")
    uri = f"sqlite:///{os.path.abspath(args.db)}" if args.db else store_uri(args.uri)
    check_uri(uri)  # before the key is made: a refused store leaves nothing behind
    setup = prepare(
        session_id=args.session,
        key_file=args.key,
        rules_file=args.rules,
        policy_file=args.policy,
        started=started,
    )
    # The Agents SDK takes a few seconds to load on a cold start: the first line comes
    # before it, and a terminal is told what the wait is (progress only on a terminal).
    print(f"session {setup.session_id} in {shown_uri(uri)}", flush=True)
    if sys.stderr.isatty():
        print("agentjournal demo: loading the Agents SDK...", file=sys.stderr, flush=True)
    from agentjournal.cli._demo import run_demo

    return asyncio.run(run_demo(uri, setup))


RULES = """
rules:
  - kind: ceiling        # refunds above 20.00 EUR need a human
    tool: issue_refund
    argument: amount_cents
    max: 2000
  - kind: redact_pii     # no customer e-mail address, SSN or card number reaches a tool
"""

DEMO_KEY: Final = "agentjournal-demo.pem"
"""The key the demo signs with when none is configured (in the working directory)."""


def _rules(path: str) -> RuleSet:
    """The guardrail rules in the YAML file ``path``.

    Raises:
        InvalidInput: The file cannot be read or holds no valid rules.
    """
    from agentjournal.guardrails.rules import load_rules

    try:
        with open(path, encoding="utf-8") as handle:
            return load_rules(handle.read())
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInput(f"cannot read rules {path}: {error}") from None
    except ValueError as error:
        raise InvalidInput(f"invalid rules in {path}: {error}") from None


def _demo_key(key_file: str | None) -> tuple[SigningKey, str]:
    """The signing key and how to name its public key on the command line.

    ``key_file`` when given (made when missing), else the configured key, else
    :data:`DEMO_KEY` (made when missing). A key file's public key is the file
    beside it (``.pub``); a key from the environment is named by its hex.
    """
    from agentjournal.ledger import SIGNING_KEY_FILE_ENV, SigningKey

    if key_file is None:
        configured = SigningKey.from_environment()
        if configured is not None:
            return configured, _public_ref(configured, os.environ.get(SIGNING_KEY_FILE_ENV))
        key_file = DEMO_KEY
    if os.path.exists(key_file):
        key = SigningKey.from_file(key_file)
        return key, _public_ref(key, key_file)
    folder = os.path.dirname(os.path.abspath(key_file))
    if not os.path.isdir(folder):
        raise InvalidInput(f"cannot write {key_file}: folder {folder} does not exist")
    key = SigningKey.generate()
    descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(key.private_pem())
    with open(f"{key_file}.pub", "w", encoding="utf-8") as handle:
        handle.write(key.public_pem())
    return key, shlex.quote(f"{key_file}.pub")


def _public_ref(key: SigningKey, key_file: str | None) -> str:
    """``KEY.pub`` when that file holds this key's public key, else the key in hex."""
    if key_file:
        try:
            with open(f"{key_file}.pub", encoding="utf-8") as handle:
                if handle.read(64 * 1024) == key.public_pem():
                    return shlex.quote(f"{key_file}.pub")
        except (OSError, UnicodeDecodeError):
            pass
    return key.public_key.public_bytes_raw().hex()
