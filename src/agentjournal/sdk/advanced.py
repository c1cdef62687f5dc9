"""The SDK's ``AdvancedSQLiteSession`` API on a journal session: branches, turns and usage.

Part of :class:`~agentjournal.sdk.session.JournalSession` (one object: it inherits this
class), kept apart from the ``Session`` protocol and the hooks. Same names, arguments and
result shapes as the SDK's class; where the SDK deletes rows, events are written (DESIGN,
"Branches and time travel").
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from agents import _debug

from agentjournal import events
from agentjournal.engine import turns
from agentjournal.engine.core import SessionCore
from agentjournal.engine.fork import Branch
from agentjournal.errors import BranchDeleted, InvalidInput
from agentjournal.streams import MAIN_BRANCH

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentjournal.sdk.recorder import SessionRecorder


class _Session(Protocol):
    """What these methods use of the session they are part of."""

    _logger: logging.Logger
    _recorder: SessionRecorder
    _core: SessionCore

    @property
    def branch(self) -> str: ...
    def _line(self, branch: str | None) -> SessionCore: ...
    def _point(self, branch: str | None) -> None: ...
    def _reading(self, branch_id: str | None) -> SessionCore | None: ...
    async def _current(self) -> SessionCore: ...
    async def _read_line(
        self, branch_id: str | None, read: Callable[[SessionCore], Any]
    ) -> Any: ...
    async def _retry_cleared(self, core: SessionCore, act: Callable[[SessionCore], Any]) -> Any: ...
    async def _turned(self, branch_id: str | None) -> list[turns.Turned]: ...
    def _check_open(self) -> None: ...
    async def switch_to_branch(self, branch_id: str) -> None: ...
    async def create_branch_from_turn(
        self, turn_number: int, branch_name: str | None = None
    ) -> str: ...
    async def find_turns_by_content(
        self, search_term: str, branch_id: str | None = None
    ) -> list[dict[str, Any]]: ...


class AdvancedSessionAPI:
    """``AdvancedSQLiteSession``'s branch, turn and usage methods (mixed into
    :class:`~agentjournal.sdk.session.JournalSession`)."""

    async def create_branch_from_turn(
        self: _Session, turn_number: int, branch_name: str | None = None
    ) -> str:
        """Fork the current line before turn ``turn_number``'s user message and switch
        this object to the new branch (even when nothing comes before it), as
        ``AdvancedSQLiteSession`` does; return the branch's name.

        Nothing is copied: the branch is one atomic fork write (:meth:`fork`). A
        generated name is ``branch_from_turn_{N}_{unix seconds}`` (``_2``, ``_3``...
        when taken). Names are never reused in a session, even after a delete or clear.

        Raises:
            InvalidInput: (a ``ValueError``, with the SDK's messages) a blank name, no user
                message at that turn, or a name already used (``"main"`` included).
            BranchDeleted: The current branch was deleted.
        """
        self._check_open()
        if branch_name is not None and not branch_name.strip():
            raise InvalidInput("Branch name cannot be empty")
        trace = self._recorder.trace_now()

        def used(name: str) -> str:
            return f"Branch ID '{name}' has already been used. Choose a new branch ID."

        async def create(core: SessionCore) -> tuple[SessionCore, Branch]:
            line = core.facts.branch or MAIN_BRANCH
            if not isinstance(turn_number, int) or isinstance(turn_number, bool) or turn_number < 1:
                raise InvalidInput(
                    f"Turn {turn_number} does not contain a user message in branch '{line}'"
                )
            if branch_name == MAIN_BRANCH:  # the main line's name: used from the start
                _, users = await core.items_count()
                if turn_number > users:
                    raise InvalidInput(
                        f"Turn {turn_number} does not contain a user message in branch '{line}'"
                    )
                raise InvalidInput(used(branch_name))
            made = await core.fork(
                turn=turn_number,
                name=branch_name,
                trace=trace,
                generated=f"branch_from_turn_{turn_number}_{int(time.time())}",
                used=used,
            )
            return core, made

        made: tuple[SessionCore, Branch] = await self._retry_cleared(self._core, create)
        core, branch = made
        line = core.facts.branch or MAIN_BRANCH
        self._point(branch.name)
        if _debug.DONT_LOG_MODEL_DATA or not self._logger.isEnabledFor(logging.DEBUG):
            self._logger.debug(
                "Created branch '%s' from turn %s in '%s'", branch.name, turn_number, line
            )
        else:  # the SDK's message, with the turn's text (model data) in it
            self._logger.debug(
                "Created branch '%s' from turn %s ('%s') in '%s'",
                branch.name,
                turn_number,
                _turn_preview(await core.turned(), turn_number),
                line,
            )
        return branch.name

    async def create_branch_from_content(
        self: _Session, search_term: str, branch_name: str | None = None
    ) -> str:
        """:meth:`create_branch_from_turn` at the first user turn whose text holds
        ``search_term`` (see :meth:`find_turns_by_content`).

        Raises:
            InvalidInput: No such turn (``"No user turns found containing '...'"``), or as
                :meth:`create_branch_from_turn`.
        """
        self._check_open()
        matches = await self.find_turns_by_content(search_term)
        if not matches:
            raise InvalidInput(f"No user turns found containing '{search_term}'")
        return await self.create_branch_from_turn(matches[0]["turn"], branch_name)

    async def switch_to_branch(self: _Session, branch_id: str) -> None:
        """Point this object at ``branch_id`` (``"main"`` or a branch's name): later calls
        read and write there. Only this object moves, and nothing is written (choosing
        what to read is not history; a run already going stays on its line).

        Raises:
            InvalidInput: ``"Branch '...' does not exist"``: as in the SDK, a line exists
                while it has at least one visible item.
        """
        self._check_open()
        core = self._reading(branch_id) if isinstance(branch_id, str) else None
        found = None if core is None else await self._read_line(branch_id, _has_items)
        if not found:
            raise InvalidInput(f"Branch '{branch_id}' does not exist")
        old = self.branch
        self._point(None if branch_id == MAIN_BRANCH else branch_id)
        self._logger.info("Switched from branch '%s' to '%s'", old, branch_id)

    async def delete_branch(self: _Session, branch_id: str, force: bool = False) -> None:
        """Delete a branch: ``agentjournal.BranchDeleted`` on its stream and its registry
        entry, one atomic write that also closes ``cancelled`` every subagent open on the
        branch; nothing leaves the store (its past still replays). Its
        items are gone from every read, its usage with them, its name stays used, and
        any object still on it gets :class:`~agentjournal.errors.BranchDeleted`.

        Raises:
            InvalidInput: As ``AdvancedSQLiteSession``: a blank id, ``"main"``, the
                current branch without ``force`` (with it, this object moves to main
                first), or a branch that does not exist (has no visible item).
        """
        self._check_open()
        if not isinstance(branch_id, str) or not branch_id.strip():
            raise InvalidInput("Branch ID cannot be empty")
        if branch_id == MAIN_BRANCH:
            raise InvalidInput("Cannot delete the 'main' branch")
        if branch_id == self.branch:
            if not force:
                raise InvalidInput(
                    f"Cannot delete current branch '{branch_id}'. Use force=True or switch "
                    "branches first"
                )
            if not await self._read_line(branch_id, _has_items):
                raise InvalidInput(f"Branch '{branch_id}' does not exist")
            await self.switch_to_branch(MAIN_BRANCH)
        core = self._reading(branch_id)
        if core is None or not await self._read_line(branch_id, _has_items):
            raise InvalidInput(f"Branch '{branch_id}' does not exist")
        parent = next((b.parent for b in await core.branches() if b.name == branch_id), MAIN_BRANCH)
        await core.delete_line(parent, self._recorder.trace_now())
        self._logger.info("Deleted branch '%s'", branch_id)

    async def list_branches(self: _Session) -> list[dict[str, Any]]:
        """The lines with items, as ``AdvancedSQLiteSession`` lists them: ``branch_id``,
        ``message_count``, ``user_turns``, ``is_current``, ``created_at`` (UTC,
        ``YYYY-MM-DD HH:MM:SS``: the session's start for main, the fork's time for a
        branch); main first, then branches in the order they were forked."""
        self._check_open()
        try:
            current = (await self._current()).facts.branch or MAIN_BRANCH
        except BranchDeleted:  # another object deleted this one's branch: none is current
            current = self.branch
        main = self._line(None)
        lines: list[tuple[str, SessionCore, datetime | None]] = [
            (MAIN_BRANCH, main, await main.started_at())
        ]
        for branch in await main.branches():
            if branch.deleted is None:
                lines.append((branch.name, self._line(branch.name), branch.created))
        listed: list[dict[str, Any]] = []
        for name, core, created in lines:
            count, users = await core.items_count()
            if count:
                listed.append(
                    {
                        "branch_id": name,
                        "message_count": count,
                        "user_turns": users,
                        "is_current": name == current,
                        "created_at": turns.sdk_timestamp(created),
                    }
                )
        return listed

    async def store_run_usage(self: _Session, result: Any) -> None:
        """Book ``result.context_wrapper.usage`` on the current line's current turn.

        One ``agentjournal.TurnUsage`` event on the line's top stream, anchored on the
        turn's first item: it counts while that item is visible (a pop of the turn, a
        clear or a delete un-books it, and a later turn reusing the number does not
        inherit it). The line is the one current at the call; the turn is found in call
        order with the line's other calls. Skipped when the line has no user turn.
        Never raises (as the SDK's: it is analytics after the run); a failure is logged,
        without model data when ``agents`` is told not to log it. Every booking is kept;
        :meth:`get_turn_usage` reads the newest of a turn (the SDK replaces it).
        """
        try:
            self._check_open()  # logged like any other failure, as the SDK's
            core = self._core
            usage = result.context_wrapper.usage
            if usage is None:
                return
            counts = {
                "requests": usage.requests or 0,
                "input_tokens": usage.input_tokens or 0,
                "output_tokens": usage.output_tokens or 0,
                "total_tokens": usage.total_tokens or 0,
                "input_tokens_details": _details_json(usage.input_tokens_details),
                "output_tokens_details": _details_json(usage.output_tokens_details),
            }
            # A line ended meanwhile (a clear or delete) has no turn to book on: skipped.
            await core.book_usage(counts, self._recorder.trace_now())
        except Exception as error:
            if _debug.DONT_LOG_MODEL_DATA:
                self._logger.error("Failed to store session usage: %s", type(error).__name__)
            else:
                self._logger.error("Failed to store session usage: %s", error, exc_info=True)

    async def get_session_usage(
        self: _Session, branch_id: str | None = None
    ) -> dict[str, int] | None:
        """Usage summed over the turns of ``branch_id`` or, for None, of *every* line (as
        the SDK: None here means all branches): ``requests``, ``input_tokens``,
        ``output_tokens``, ``total_tokens``, ``total_turns``; None when nothing is booked."""
        self._check_open()
        cores: list[SessionCore | None]
        if branch_id:
            cores = [self._reading(branch_id)]
        else:
            main = self._line(None)
            cores = [main]
            cores += [self._line(b.name) for b in await main.branches() if b.deleted is None]
        rows: list[events.TurnUsage] = []
        for core in cores:
            if core is None:
                continue
            found = await self._read_line(
                core.facts.branch or MAIN_BRANCH, lambda line: line.turn_usage()
            )
            rows.extend((found or {}).values())
        if not rows:
            return None
        return {
            "requests": sum(row.requests for row in rows),
            "input_tokens": sum(row.input_tokens for row in rows),
            "output_tokens": sum(row.output_tokens for row in rows),
            "total_tokens": sum(row.total_tokens for row in rows),
            "total_turns": len(rows),
        }

    async def get_turn_usage(
        self: _Session, user_turn_number: int | None = None, branch_id: str | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """The usage booked on one turn of the line (``{}`` when none), or for None a list
        of every booked turn (each led by ``user_turn_number``), by turn: ``requests``,
        ``input_tokens``, ``output_tokens``, ``total_tokens``, ``input_tokens_details``,
        ``output_tokens_details`` (the SDK's detail objects as dicts, or None)."""
        self._check_open()
        found = await self._read_line(branch_id, lambda line: line.turn_usage())
        booked: dict[int, events.TurnUsage] = found or {}
        if user_turn_number is not None:
            usage = booked.get(user_turn_number)
            return {} if usage is None else _usage_row(usage)
        return [{"user_turn_number": turn, **_usage_row(u)} for turn, u in booked.items()]

    async def _turned(self: _Session, branch_id: str | None) -> list[turns.Turned]:
        found = await self._read_line(branch_id, lambda core: core.turned())
        return [] if found is None else found

    async def get_conversation_turns(
        self: _Session, branch_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The user messages of the line by turn, as ``AdvancedSQLiteSession`` returns them.

        Each: ``turn``, ``content`` (the text, or the parts as JSON, cut to 100 characters
        + ``"..."``), ``full_content``, ``timestamp`` (the event's time, UTC,
        ``YYYY-MM-DD HH:MM:SS``) and ``can_branch`` (True).
        """
        self._check_open()
        return turns.conversation_turns(await self._turned(branch_id))

    async def find_turns_by_content(
        self: _Session, search_term: str, branch_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The user turns whose text holds ``search_term`` (ASCII case-insensitive, no
        wildcards), shaped as :meth:`get_conversation_turns` but with ``content`` uncut."""
        self._check_open()
        if not isinstance(search_term, str):
            raise InvalidInput(f"search_term must be a string, got {search_term!r}")
        return turns.find_turns(await self._turned(branch_id), search_term)

    async def get_conversation_by_turns(
        self: _Session, branch_id: str | None = None
    ) -> dict[int, list[dict[str, str | None]]]:
        """Every item's ``type`` and ``tool_name`` by turn (0: before the first user
        message), as ``AdvancedSQLiteSession`` classifies them."""
        self._check_open()
        return turns.by_turns(await self._turned(branch_id))

    async def get_tool_usage(
        self: _Session, branch_id: str | None = None
    ) -> list[tuple[str | None, int, int]]:
        """``(tool_name, count, turn)`` per tool and turn, ordered by turn, counted as
        ``AdvancedSQLiteSession`` counts them."""
        self._check_open()
        return turns.tool_usage(await self._turned(branch_id))


def _turn_preview(items: list[turns.Turned], turn: int) -> str:
    """The first 50 characters of turn ``turn``'s user message (the SDK's log preview)."""
    for number, turned in turns.number(items):
        if number == turn and turns.is_user(turned.item):
            content = turned.item.get("content", "")
            if not isinstance(content, str):
                return "Unable to parse content"
            return content[:50] + "..." if len(content) > 50 else content
    return ""


def _details_json(details: Any) -> str | None:
    """A usage detail object as the SDK stores it (``json.dumps`` of its ``__dict__``)."""
    if not details:
        return None
    try:
        return json.dumps(details.__dict__)
    except (TypeError, ValueError, AttributeError):
        return None


def _usage_row(usage: events.TurnUsage) -> dict[str, Any]:
    """A booked turn as ``AdvancedSQLiteSession.get_turn_usage`` returns it."""
    return {
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "input_tokens_details": _parsed(usage.input_tokens_details),
        "output_tokens_details": _parsed(usage.output_tokens_details),
    }


def _parsed(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


async def _has_items(core: SessionCore) -> bool:
    """Whether a line has a visible item (the SDK's test of a branch's existence)."""
    return bool(await core.items(1))
