"""The entry point: a journal is an open event store that hands out sessions."""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Generator, Iterable, Mapping
from types import TracebackType
from typing import Any, Final

from agents.memory.session_settings import SessionSettings

from agentjournal.authority import Policy
from agentjournal.engine.erasure import Erasure
from agentjournal.engine.erasure import erase as erase_subject
from agentjournal.engine.tree import SessionTree
from agentjournal.engine.writer import rotate_key
from agentjournal.errors import InvalidInput
from agentjournal.guardrails.client import GuardrailClient
from agentjournal.ledger import KeyRotation, SigningKey
from agentjournal.read.approvals import PendingApproval
from agentjournal.read.approvals import pending_approvals as _pending_approvals
from agentjournal.sdk.session import JournalSession
from agentjournal.shred.keys import SubjectKeyStore
from agentjournal.shred.sealing import OpeningStore, SubjectSealer
from agentjournal.shred.sqlite_keys import open_key_file
from agentjournal.store import (
    EventStore,
    open_store,
    store_uri,
)
from agentjournal.streams import MAIN_BRANCH, branch_stream, session_stream, validate_id

logger = logging.getLogger("agentjournal")

DEFAULT_CACHE_BYTES: Final = 8 * 2**20
"""What the shared cache keeps of one session's items by default (a 10,000-item session of
tool calls takes about 3.3 MiB)."""

GUARDRAIL_URL_ENV: Final = "AGENTJOURNAL_GUARDRAIL_URL"
"""The guardrail service sessions use when ``guardrails=`` is not given."""


class Journal:
    """An open event store and the sessions written to it.

    Open it with :meth:`open` (awaitable, or an async context manager that
    closes it). Session objects of one id share a cache of what was read of
    their streams (the ``cached_sessions`` most recently used ids, each holding
    items of at most ``cache_bytes``: item text plus ~150 bytes an item; older items
    are read again when needed), so a fresh ``journal.session(id)`` per request
    reads only what changed::

        async with Journal.open() as journal:
            session = journal.session("support-4711")
            await Runner.run(agent, "hi", session=session, hooks=session)
    """

    def __init__(
        self,
        store: EventStore,
        uri: str,
        *,
        cached_sessions: int = 64,
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
        signing_key: SigningKey | None = None,
        keys: SubjectKeyStore | None = None,
        own_keys: bool = False,
    ) -> None:
        _check_cache_bytes(cache_bytes)
        self.store = store
        self.keys = keys
        self._own_keys = own_keys  # a key store opened from a path here is closed here
        self.uri = uri
        self.signing_key = signing_key
        self._cached_sessions = cached_sessions
        # Each cached session's items are bounded too: together at most
        # cached_sessions x cache_bytes (plus small per-session state).
        self._cache_bytes = cache_bytes
        # Session objects of one id share what was read of its streams.
        self._trees: OrderedDict[str, SessionTree] = OrderedDict()
        self._guardrails: dict[str, GuardrailClient] = {}  # made here from URLs; closed here
        self._said_unguarded = False

    @classmethod
    def open(
        cls,
        uri: str | None = None,
        *,
        signing_key: SigningKey | str | None = None,
        deadline: float | None = None,
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
        keys: SubjectKeyStore | str | os.PathLike[str] | None = None,
    ) -> _Opening:
        """Open the journal at ``uri``.

        Args:
            uri: ``sqlite:///path.db``, ``sqlite://:memory:``,
                ``kurrentdb://host:2113?Tls=false``;
                default ``$AGENTJOURNAL_URI``, else ``sqlite:///agentjournal.db``
                (a file in the working directory).
            signing_key: The Ed25519 key that signs checkpoints (a
                :class:`~agentjournal.ledger.SigningKey` or a key file's path);
                default ``$AGENTJOURNAL_SIGNING_KEY_FILE`` or
                ``$AGENTJOURNAL_SIGNING_KEY``; with none, streams are still
                hash-chained but no checkpoint is signed.
            deadline: Seconds any one KurrentDB call may take before it fails
                with ``StoreUnavailable`` (default: the URI's ``DefaultDeadline``,
                else 10); SQLite ignores it.
            cache_bytes: What the shared cache keeps of each session's items (item
                text plus ~150 bytes an item; default 8 MiB; None: no bound). A session
                beyond it keeps its newest items; a read of older ones reads the store.
            keys: Seal every session's content under its data subject's key (see
                :meth:`session`'s ``subject``): a :class:`~agentjournal.shred.SubjectKeyStore`,
                or the path of the embedded key store's SQLite file (kept apart from the
                events; its keys cached in memory for 60 s; closed with the journal; a
                key store passed as an object stays its owner's to close). Default:
                content in the clear.

        Raises:
            InvalidInput: The URI names no known store, or a key cannot be read.
            StoreUnavailable: The store cannot be opened or reached.
        """
        if isinstance(signing_key, str):
            signing_key = SigningKey.from_file(signing_key)
        key = signing_key if signing_key is not None else SigningKey.from_environment()
        return _Opening(cls, store_uri(uri), key, deadline, cache_bytes, keys)

    def session(
        self,
        session_id: str,
        *,
        app_name: str | None = None,
        user_id: str | None = None,
        agent_name: str | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        guardrails: str | GuardrailClient | None = None,
        policy: Policy | str | os.PathLike[str] | None = None,
        record_payloads: bool = True,
        branch: str | None = None,
        subject: str | None = None,
    ) -> JournalSession:
        """Return the session ``session_id``: pass it as both ``session=`` and ``hooks=``.

        Args:
            session_id: ASCII letters, digits, ``.``, ``_`` and ``-``, at most 128
                bytes, no leading or trailing ``-`` (GUIDs are normalised to
                lowercase without dashes).
            app_name: Recorded on ``SessionStarted``.
            user_id: Recorded on ``SessionStarted``.
            agent_name: Recorded on ``SessionStarted``; defaults to the first
                agent that runs.
            session_settings: Defaults for ``get_items`` (``limit``).
            guardrails: The guardrail service: a base URL (a client with the
                default timeout and fail-closed mode, shared by this journal's
                sessions) or a configured :class:`GuardrailClient`. Default
                ``$AGENTJOURNAL_GUARDRAIL_URL``; with neither, nothing is
                checked (logged once).
            policy: The authority policy (a :class:`~agentjournal.authority.Policy` or the
                path of its YAML file): effective authority along handoffs, the four
                gates, refusals on the stream. Default: none.
            record_payloads: Whether guardrail decisions and authority refusals keep what
                they judged (the user's message, a tool call's arguments, a refused value).
                ``False`` keeps only digests (their redacted view, which verifies the same):
                use it under the SDK's ``EncryptedSession``, whose items this session stores
                encrypted, so that no plain text reaches the record beside them.
            branch: The line to read and write: a branch made by
                :meth:`JournalSession.fork` (its prefix is the parent's history as of
                the fork, nothing copied), or ``"main"``/None for the session itself.
                A name never forked is refused at the first call. With a ``policy``,
                what each agent last held is the branch's own authority log, which
                inherits the log in force at the fork (never a grant made on the parent
                line after it). With a signing key a branch signs checkpoints of its own
                streams (on the session's shared ``AgentLedger-{id}``), as main does.
            subject: The data subject whose content the session holds (default
                ``user_id``), on a journal opened with ``keys=``: messages, tool arguments
                and outputs, reasoning, handoff inputs, guardrail payloads and run state
                are sealed under the subject's key, and :meth:`erase` destroys it.

        Raises:
            InvalidInput: ``session_id``, ``session_settings``, the guardrail URL, the
                policy or the branch name is malformed; a ``subject`` on a journal
                without ``keys=``, or none (nor a ``user_id``) on one with them.
        """
        key = validate_id(session_id, "session id")
        line = None if branch in (None, MAIN_BRANCH) else branch
        sealer = self._sealer(subject if subject is not None else user_id, subject is not None)
        tree = self._tree(key, line)
        return JournalSession(
            self.store,
            key,
            app_name=app_name,
            user_id=user_id,
            agent_name=agent_name,
            session_settings=session_settings,
            tree=tree,
            guardrails=self._guardrail_client(guardrails),
            policy=policy if policy is None or isinstance(policy, Policy) else Policy.load(policy),
            signing_key=self.signing_key,
            record_payloads=record_payloads,
            branch=line,
            trees=lambda other: self._tree(key, other),
            sealer=sealer,
        )

    def _sealer(self, subject: str | None, named: bool) -> SubjectSealer | None:
        """What seals a new session's content: None when the journal has no key store."""
        if self.keys is None:
            if named:
                raise InvalidInput("subject= needs a journal opened with keys=")
            return None
        if not subject:
            raise InvalidInput(
                "this journal seals content under a data subject's key: pass user_id= or subject="
            )
        return SubjectSealer(subject, self.keys)

    def _tree(self, key: str, line: str | None) -> SessionTree:
        """The shared tree of one line of session ``key`` (None: main), most recently used
        kept: the main line's under the session id, a branch's under its stream (which
        holds "@", so never a session id). A session object that switches branches asks
        here too, so every object on one line shares what was read of it."""
        stream = session_stream(key) if line is None else branch_stream(key, line)
        cached = key if line is None else stream
        tree = self._trees.pop(cached, None) or SessionTree(stream, cache_bytes=self._cache_bytes)
        self._trees[cached] = tree
        while len(self._trees) > self._cached_sessions:
            self._trees.popitem(last=False)
        return tree

    def _guardrail_client(self, guardrails: str | GuardrailClient | None) -> GuardrailClient | None:
        if isinstance(guardrails, GuardrailClient):
            return guardrails
        url = guardrails or os.environ.get(GUARDRAIL_URL_ENV)
        if not url:
            if not self._said_unguarded:
                self._said_unguarded = True
                logger.info(
                    "no guardrail service configured: actions are not checked "
                    "(pass guardrails= or set %s)",
                    GUARDRAIL_URL_ENV,
                )
            return None
        client = self._guardrails.get(url)
        if client is None:
            try:
                client = GuardrailClient(url)
            except ValueError as error:
                raise InvalidInput(str(error)) from None
            self._guardrails[url] = client
        return client

    async def pending_approvals(
        self,
        *,
        sessions: Iterable[str] | None = None,
        app: str | None = None,
        user: str | None = None,
    ) -> list[PendingApproval]:
        """Every approval that waits for a person, across sessions, oldest first.

        Each as ``journal.session(id, branch=B).pending_approvals()`` sees it (the main
        line and every live branch, each with its open subagents), with where it waits.
        The store's catalog (the ``sessions`` projection, brought up to date and saved
        by the call) says which sessions have an unanswered question; only those are
        read.

        Args:
            sessions: Only these session ids (each must exist; default: every session).
            app: Only sessions started with this ``app_name``.
            user: Only sessions started with this ``user_id``.

        Raises:
            InvalidInput: A session id is malformed or not in the store.
            StoreUnavailable: The store could not be read.
        """
        store = self.store if self.keys is None else OpeningStore(self.store, self.keys)
        return await _pending_approvals(store, sessions=sessions, app=app, user=user)

    async def erase(self, *, subject: str, reason: str, by: str) -> Erasure:
        """Erase a data subject's content: destroy its keys, write
        ``agentjournal.SubjectErased`` (who, when, why, which sessions; no content) to every
        session that held it, and purge the store's plaintext copies (the SQLite read
        model's rows, this journal's cached items). Reads then show ``[erased]`` in place of
        the content; every chain, checkpoint and signature still verifies; the SDK can run
        new turns on the sessions (sealed under a new key). Running it again finishes an
        interrupted erasure and otherwise writes nothing.

        Args:
            subject: The data subject (a session's ``subject`` or ``user_id``).
            reason: Why (e.g. the request it carries out); recorded.
            by: Who erases it; recorded.

        Raises:
            InvalidInput: The journal has no key store, or an argument is blank; nothing
                was written.
            StoreError: An erasure event could not be written: run it again.
        """
        if self.keys is None:
            raise InvalidInput("erase needs a journal opened with keys= (nothing is sealed)")
        erasure = await erase_subject(
            self.store,
            self.keys,
            subject=subject,
            reason=reason,
            by=by,
            signing_key=self.signing_key,
        )
        for tree in list(self._trees.values()):  # items read before are plaintext in memory
            async with tree.lock:
                tree.reset()
        logger.info("subject erased from %d sessions", len(erasure.sessions))
        return erasure

    async def rotate_key(self, old: SigningKey, new: SigningKey) -> KeyRotation:
        """Record that checkpoints may from now on be signed by ``new`` (signed by ``old``).

        The rotation is an ``agentjournal.KeyRotated`` event on ``AgentKeys``,
        hash-chained like every stream and exported with every bundle, so a
        verifier that trusts ``old`` follows it to ``new``. It adds trust and
        withdraws none: keep ``old`` secret or destroy it. Sessions keep the key
        the journal was opened with; open the journal with ``new`` to sign with it.

        Raises:
            InvalidInput: ``new`` is ``old``.
            StoreError: The rotation could not be written.
        """
        rotation = await rotate_key(self.store, old, new)
        logger.info("key %s rotated to %s", old.key_id, new.key_id)
        return rotation

    async def close(self) -> None:
        """Close the store and the guardrail clients made here; sessions cannot be used after."""
        for client in self._guardrails.values():
            await client.aclose()
        self._guardrails.clear()
        await self.store.close()
        if self.keys is not None and self._own_keys:
            self.keys.close()

    async def __aenter__(self) -> Journal:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


def _check_cache_bytes(cache_bytes: int | None) -> None:
    if cache_bytes is not None and (type(cache_bytes) is not int or cache_bytes < 0):
        raise InvalidInput(
            f"cache_bytes must be a non-negative integer or None, got {cache_bytes!r}"
        )


class _Opening:
    """``Journal.open(...)``: await it, or use it with ``async with``."""

    def __init__(
        self,
        cls: type[Journal],
        uri: str,
        signing_key: SigningKey | None,
        deadline: float | None = None,
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
        keys: SubjectKeyStore | str | os.PathLike[str] | None = None,
    ) -> None:
        _check_cache_bytes(cache_bytes)  # before anything is opened
        self._keys = keys
        self._cls = cls
        self._cache_bytes = cache_bytes
        self._uri = uri
        self._signing_key = signing_key
        self._deadline = deadline
        self._journal: Journal | None = None

    async def _open(self) -> Journal:
        keys, own = self._keys, isinstance(self._keys, str | os.PathLike)
        if isinstance(keys, str | os.PathLike):
            keys = open_key_file(keys)  # opened here: closed by the journal
        try:
            store = await open_store(self._uri, deadline=self._deadline)
        except BaseException:
            if own and keys is not None:
                keys.close()
            raise
        return self._cls(
            store,
            self._uri,
            signing_key=self._signing_key,
            cache_bytes=self._cache_bytes,
            keys=keys,
            own_keys=own,
        )

    def __await__(self) -> Generator[Any, None, Journal]:
        return self._open().__await__()

    async def __aenter__(self) -> Journal:
        self._journal = await self._open()
        return self._journal

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._journal is not None:
            await self._journal.close()
