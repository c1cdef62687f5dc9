"""A session line's turns as a scorer sees them (the records; reading them is below).

A turn is the SDK's: it opens at a user message (turn 1, 2, ...; see
:mod:`agentjournal.engine.turns`) and holds every item after it up to the next one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from agentjournal import events
from agentjournal.engine import turns
from agentjournal.engine.core import open_line
from agentjournal.engine.fork import decode_line, visible_before
from agentjournal.errors import InvalidInput, UndecodableEvent
from agentjournal.events import HASH_KEY
from agentjournal.read.lines import find_branch
from agentjournal.read.usage import Prices
from agentjournal.records import DamagedEvent, opened_stream
from agentjournal.shred.keys import MemoryKeyStore
from agentjournal.shred.sealing import OpeningStore
from agentjournal.streams import MAIN_BRANCH, session_stream, validate_id
from agentjournal.tokens import ModelResponse, Usage

if TYPE_CHECKING:
    from agentjournal.engine.timeline import Entry
    from agentjournal.shred.keys import SubjectKeyStore
    from agentjournal.store.contract import EventStore, RecordedEvent


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a turn: its name, its arguments (parsed JSON where they are JSON),
    its call id and its output (None: no output recorded)."""

    name: str
    arguments: Any
    call_id: str
    output: Any = None


@dataclass(frozen=True, slots=True)
class GuardrailCheck:
    """One guardrail decision recorded in a turn: ``ALLOW``, ``BLOCK`` or ``MODIFY``, what
    it judged (``input``, ``output``, ``tool_call``, ``handoff``), the tool when it judged a
    call, its reason (the message, else the code), its reason code and the agent that
    acted."""

    action: str
    kind: str
    tool: str | None = None
    reason: str = ""
    code: str = ""
    agent: str = ""


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """What a turn's (or a session line's) model calls cost: requests, tokens, and the cost
    in US dollars where the model's price is known."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost: float | None = None


@dataclass(frozen=True, slots=True)
class ScoredTurn:
    """One turn of one session line, as scorers see it.

    Attributes:
        session: The session id.
        line: ``"main"`` or the branch name.
        index: The turn's number (the SDK's: 1 for the first user message).
        input: The user message's text.
        output: The turn's final answer (its last assistant message's text; ``""``: none).
        items: The turn's SDK items, oldest first (the user message first).
        tool_calls: Its tool calls, in order.
        guardrails: The guardrail decisions recorded in it, in order.
        agents: The agents that spoke in it, in order of first word (handoffs included).
        usage: What its model calls cost.
        head: The ``aj.hash`` of the line's last event of this turn: binds a score to the
            exact record it judged.
    """

    session: str
    line: str
    index: int
    input: str
    output: str
    items: tuple[Any, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    guardrails: tuple[GuardrailCheck, ...] = ()
    agents: tuple[str, ...] = ()
    usage: TurnUsage = TurnUsage()
    head: str = ""


@dataclass(frozen=True, slots=True)
class ScoredSession:
    """A session line's turns (from its first scored turn on), as scorers see them."""

    session: str
    line: str
    turns: tuple[ScoredTurn, ...]
    usage: TurnUsage = TurnUsage()
    head: str = ""


# -- reading ------------------------------------------------------------------------------

_KINDS: Final[Mapping[str, str]] = {
    "AGENT_INPUT": "input",
    "AGENT_RESPONSE": "output",
    "TOOL_CALL": "tool_call",
    "AGENT_HANDOFF": "handoff",
}
"""A guardrail's action type -> the word a :class:`GuardrailCheck` says it judged."""

LINE_EVENTS: Final = frozenset(
    {
        events.BRANCH_FORKED,
        events.BRANCH_STARTED,
        events.SUBAGENT_CONTINUED,
        events.BRANCH_DELETED,
        events.LINE_GUARDED,
        events.SUBJECT_ERASED,
    }
)
"""Event types that say something of the line (a fork, its end, an erasure), not of a
turn: no turn holds them, so none is any turn's head."""


async def session_turns(
    store: EventStore,
    session_id: str,
    *,
    line: str = MAIN_BRANCH,
    keys: SubjectKeyStore | None = None,
    from_turn: int = 1,
    prices: Prices | None = None,
) -> ScoredSession:
    """A session line's turns from ``from_turn`` on, as scorers see them.

    The line is read as the read tools read it (its own streams and, for a branch, its
    parent lines up to the fork: :meth:`~agentjournal.engine.reader.Reader.line_events`),
    its visible items folded as ``get_items`` folds them and numbered into turns as the
    SDK numbers them (:mod:`agentjournal.engine.turns`). Every other event of the line
    (guardrail decisions, model responses, handoffs) belongs to the turn of the newest
    visible user message written before it (by global position); what came before the
    first user message (turn 0) is no turn a scorer sees.

    Args:
        store: The event store.
        session_id: The session.
        line: ``"main"`` or a branch's name.
        keys: The subject keys sealed content opens with; without them (or for a key
            they lack) sealed content reads ``[sealed]``; erased content reads
            ``[erased]``.
        from_turn: The first turn to include (1: every turn).
        prices: What each model costs (default: the maintained table,
            :meth:`~agentjournal.read.usage.Prices.default`); a model it does not price
            leaves the cost None.

    Raises:
        InvalidInput: The session or branch does not exist, the branch was deleted, or
            ``from_turn`` is below 1.
        DamagedEvent: The store holds an event of the line it cannot hand out.
        StoreUnavailable: The store could not be read.
    """
    session_id = validate_id(session_id, "session id")
    if isinstance(from_turn, bool) or not isinstance(from_turn, int) or from_turn < 1:
        raise InvalidInput(f"from_turn must be a turn number (1 or more), got {from_turn!r}")
    shown = OpeningStore(store, keys if keys is not None else MemoryKeyStore(), shown=True)
    if await store.head(session_stream(session_id)) is None:
        raise InvalidInput(f"session {session_id!r} does not exist")
    if line == MAIN_BRANCH:
        core = open_line(shown, session_id, use_model=False)
    else:
        branch = await find_branch(store, session_id, line)
        if branch.deleted is not None:
            raise InvalidInput(
                f"branch {line!r} of session {session_id} was {branch.deleted}: it has no "
                "turns to score"
            )
        core = open_line(
            shown, session_id, branch=branch.name, stream=branch.stream, use_model=False
        )
    try:
        read = await core.reader.line_events()
    except UndecodableEvent as error:
        raise DamagedEvent(error.stream, None, f"cannot be read: {error}") from None
    recorded = [event for _, stream_events in read for event in stream_events]
    visible = visible_before(decode_line(recorded, core.reader.stream), None)
    return build_session(
        session_id,
        line,
        recorded,
        visible,
        from_turn=from_turn,
        prices=prices if prices is not None else Prices.default(),
    )


def build_session(
    session_id: str,
    line: str,
    recorded: Sequence[RecordedEvent],
    visible: Sequence[Entry],
    *,
    from_turn: int,
    prices: Prices,
) -> ScoredSession:
    """The turns of a line from its events and its visible items (pure; see
    :func:`session_turns`)."""
    # Events about the line rather than a turn (a fork, an erasure) bind no score: a fork
    # or an erasure made later leaves every turn's head as it was.
    ordered = sorted(
        (event for event in recorded if event.type not in LINE_EVENTS),
        key=lambda event: event.position,
    )
    place = {(event.stream, event.revision): event for event in ordered}
    numbered = turns.number(
        turns.Turned(
            entry.item(),
            _turn_key(place.get((entry.stream, entry.revision))),
        )
        for entry in visible
    )
    # Where each visible user message's event sits in the global order: a turn's span.
    starts: list[tuple[int, int]] = []  # (position, turn)
    items: dict[int, list[Any]] = {}
    for (turn, turned), entry in zip(numbered, visible, strict=True):
        items.setdefault(turn, []).append(turned.item)
        event = place.get((entry.stream, entry.revision))
        if turns.is_user(turned.item) and event is not None:
            starts.append((event.position, turn))
    starts.sort()
    opening = dict(starts)
    spans: dict[int, list[RecordedEvent]] = {}
    at = -1
    for number, event in enumerate(ordered):
        while at + 1 < len(starts) and starts[at + 1][0] <= event.position:
            at += 1
        owner = _input_turn(ordered, number, opening, items)
        if owner is None and at >= 0:
            owner = starts[at][1]
        if owner is not None:
            spans.setdefault(owner, []).append(event)
    built = tuple(
        _turn(session_id, line, number, items.get(number, []), spans.get(number, []), prices)
        for number in sorted({turn for _, turn in starts} | set(items))
        if number >= from_turn
    )
    last = next((e.metadata.get(HASH_KEY) for e in reversed(ordered) if HASH_KEY in e.metadata), "")
    return ScoredSession(session_id, line, built, _total(t.usage for t in built), last or "")


def _input_turn(
    ordered: Sequence[RecordedEvent],
    number: int,
    opening: Mapping[int, int],
    items: Mapping[int, list[Any]],
) -> int | None:
    """The turn whose user message ``ordered[number]`` judged, when it is a guardrail's
    decision on an agent's input written just before that message (a streamed run checks
    its input before the message is saved); else None (pure).

    Just before: only other guardrail decisions lie between them, and the decision's
    payload is that message (its text equal, sealed or not).
    """
    event = ordered[number]
    if event.type != events.GUARDRAIL_DECIDED:
        return None
    body = _body(event)
    if body.get("action_type") != "AGENT_INPUT":
        return None
    for index in range(number + 1, len(ordered)):
        later = ordered[index]
        if later.type == events.GUARDRAIL_DECIDED:
            continue
        turn = opening.get(later.position)
        if turn is None:
            return None
        user = next((item for item in items.get(turn, ()) if turns.is_user(item)), None)
        payload = body.get("payload")
        if user is None or not isinstance(payload, Mapping):
            return None
        return turn if message_text(payload) == message_text(user) else None
    return None


def _turn_key(event: RecordedEvent | None) -> int | None:
    return None if event is None else events.turn_of(event.metadata)


def _turn(
    session_id: str,
    line: str,
    number: int,
    items: list[Any],
    span: list[RecordedEvent],
    prices: Prices,
) -> ScoredTurn:
    """One turn from its visible items and the events of its span (pure)."""
    user = next((item for item in items if turns.is_user(item)), None)
    answers = [item for item in items if _is_answer(item)]
    head = next((e.metadata.get(HASH_KEY) for e in reversed(span) if HASH_KEY in e.metadata), "")
    return ScoredTurn(
        session=session_id,
        line=line,
        index=number,
        input=message_text(user) if user is not None else "",
        output=message_text(answers[-1]) if answers else "",
        items=tuple(items),
        tool_calls=_calls(items),
        guardrails=tuple(_checks(span)),
        agents=_agents(span),
        usage=_usage(span, prices),
        head=head or "",
    )


def message_text(item: Any) -> str:
    """The text of a message item: its string content, or its text parts joined."""
    content = item.get("content") if isinstance(item, Mapping) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def _is_answer(item: Any) -> bool:
    return (
        isinstance(item, Mapping)
        and item.get("role") == "assistant"
        and item.get("type", "message") == "message"
    )


def _parsed(value: Any) -> Any:
    """A call's arguments or output: parsed JSON where the text is JSON, else as it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _calls(items: Sequence[Any]) -> tuple[ToolCall, ...]:
    """The turn's tool calls with their outputs (matched by call id), in order."""
    outputs: dict[str, Any] = {}
    for item in items:
        if isinstance(item, Mapping) and str(item.get("type", "")).endswith("_output"):
            call_id = item.get("call_id")
            if isinstance(call_id, str):
                outputs[call_id] = _parsed(item.get("output"))
    found: list[ToolCall] = []
    for item in items:
        if not isinstance(item, Mapping) or turns.classify(item) not in turns.TOOL_CALL_TYPES:
            continue
        call_id = item.get("call_id") or item.get("id") or ""
        arguments = item.get("arguments", item.get("input"))
        found.append(
            ToolCall(
                name=turns.tool_name(dict(item)) or str(item.get("type")),
                arguments=_parsed(arguments),
                call_id=str(call_id),
                output=outputs.get(str(call_id)),
            )
        )
    return tuple(found)


def _body(event: RecordedEvent) -> dict[str, Any]:
    try:
        body = json.loads(event.data)
    except (ValueError, RecursionError):
        return {}
    return body if isinstance(body, dict) else {}


def _checks(span: Sequence[RecordedEvent]) -> list[GuardrailCheck]:
    checks: list[GuardrailCheck] = []
    for event in span:
        if event.type != events.GUARDRAIL_DECIDED:
            continue
        body = _body(event)
        action = str(body.get("action_type") or "")
        code = body.get("reason_code")
        message = body.get("reason_message")
        checks.append(
            GuardrailCheck(
                action=str(body.get("decision") or ""),
                kind=_KINDS.get(action, action.lower()),
                tool=str(body.get("subject")) if action == "TOOL_CALL" else None,
                reason=str(message or code or ""),
                code=str(code or ""),
                agent=str(body.get("agent") or ""),
            )
        )
    return checks


def _agents(span: Sequence[RecordedEvent]) -> tuple[str, ...]:
    """The agents that answered (a model response) or were handed to (a subagent opened),
    in order of first appearance."""
    names: list[str] = []
    for event in span:
        name: Any = None
        if event.type == events.MODEL_RESPONDED:
            name = _body(event).get("agent")
        elif event.type == events.SUBAGENT_STARTED and opened_stream(event) is not None:
            name = _body(event).get("agent_type")
        if isinstance(name, str) and name and name not in names:
            names.append(name)
    return tuple(names)


def _usage(span: Sequence[RecordedEvent], prices: Prices) -> TurnUsage:
    """What the turn's model responses (``agentjournal.ModelResponded``) cost."""
    total = Usage()
    cost: Decimal | None = Decimal(0)
    for event in span:
        if event.type != events.MODEL_RESPONDED:
            continue
        try:
            response = ModelResponse.decode(event.data)
        except (ValueError, RecursionError):
            continue
        total = total + response.usage
        priced = prices.cost(response.model, response.usage)
        cost = None if cost is None or priced is None else cost + priced
    return TurnUsage(
        requests=total.requests,
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        total_tokens=total.total_tokens,
        cost=float(cost) if cost is not None else None,
    )


def _total(usages: Iterable[TurnUsage]) -> TurnUsage:
    """Usages added up (the cost is known only when every one's is)."""
    total = TurnUsage(cost=0.0)
    for usage in usages:
        total = TurnUsage(
            total.requests + usage.requests,
            total.input_tokens + usage.input_tokens,
            total.output_tokens + usage.output_tokens,
            total.total_tokens + usage.total_tokens,
            None if total.cost is None or usage.cost is None else total.cost + usage.cost,
        )
    return total
