"""Token usage: what each model response cost, and totals by model, agent or session (pure).

Every model response a session sees is recorded once, by one
``agentjournal.ModelResponded`` event on the stream of the agent that called the
model (see SCHEMA.md). :class:`ModelResponse` is that event's data;
:class:`Usage` is the counts, which add up. ``$usage`` on assistant events (schema
v2) is a copy for other readers: agentjournal's totals count ``ModelResponded``
events, so a response is counted once whatever it produced (a message, tool
calls, a handoff, a refusal, a blocked answer).

**Sessions written before ``ModelResponded`` existed** (the legacy rule): an
assistant event's ``$usage`` counts when no ``ModelResponded`` came before it on
its stream (the writer puts a response's event before the items it produced, on
the same stream, so only events older than the upgrade qualify), once per run of
consecutive items of one ``aj.response_id`` on its stream (every item of one
response carries the same copy, and they are written together; a model that
reuses one id for every response, as test doubles do, still counts each
response); an event without a response id counts alone. :func:`legacy_counts` is
that rule, for this module and the catalog alike. A response that produced no
assistant event (a handoff only) was never recorded there: legacy totals may
come up short, never double.

Reading::

    from agentjournal.walk import read_tree
    from agentjournal.read.usage import Prices, usage_of

    report = usage_of(await read_tree(store, "support-4711"), by="model",
                      prices=Prices.load("prices.yml"))
    for row in report.rows:
        print(row.key, row.usage.input_tokens, row.cost)

For every session, feed the store's global order to a :class:`UsageFold`
(``fold.add(event)`` for each event of ``store.read_all()``), then
``fold.report(by=...)``. Costs come from a price table (:class:`Prices`): the
maintained one of the ``genai-prices`` package (its snapshot, read offline), and a
small YAML file of overrides and of models it lacks; a row whose tokens include a
model neither prices has cost None (unknown), never 0.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, get_args

from agentjournal import events
from agentjournal.errors import InvalidInput
from agentjournal.events import MODEL_RESPONDED
from agentjournal.streams import session_of
from agentjournal.tokens import ModelResponse, Usage

if TYPE_CHECKING:
    from agentjournal.records import TreeRecords

__all__ = [
    "GROUPS",
    "STAND_INS",
    "MODEL_RESPONDED",
    "Group",
    "Price",
    "Prices",
    "UsageFold",
    "UsageReport",
    "UsageRow",
    "legacy_counts",
    "usage_of",
]

# -- totals ----------------------------------------------------------------------------

Group = Literal["model", "agent", "session"]
"""What a usage report's rows are: one per model, per agent or per session."""
GROUPS: Final[tuple[Group, ...]] = get_args(Group)

_PER: Final = Decimal(1_000_000)
_PRICE_FIELDS: Final = ("input", "cached_input", "output", "reasoning")
_AS: Final = "as"  # a price file's entry that prices a model as a named one

STAND_INS: Final[Mapping[str, str]] = {"scripted-demo": "gpt-4.1-mini"}
"""Models that stand in for a named one and are priced as it: ``agentjournal demo``'s
scripted model plays the part of ``gpt-4.1-mini``, so its costs show as that model's would."""


@dataclass(frozen=True, slots=True)
class Price:
    """What one model costs, in USD per 1M tokens.

    Attributes:
        input: Each input token that was not cached.
        output: Each output token (reasoning included unless ``reasoning`` is set).
        cached_input: Each cached input token (None: as ``input``).
        reasoning: Each reasoning token (None: as ``output``).
    """

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    reasoning: Decimal | None = None

    def cost(self, usage: Usage) -> Decimal:
        """What ``usage`` costs at this price, in USD."""
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        reasoning = min(usage.reasoning_tokens, usage.output_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        reasoning_price = self.output if self.reasoning is None else self.reasoning
        total = (
            (usage.input_tokens - cached) * self.input
            + cached * cached_price
            + (usage.output_tokens - reasoning) * self.output
            + reasoning * reasoning_price
        )
        return total / _PER


@dataclass(frozen=True)
class Prices:
    """A price table: the maintained prices of ``genai-prices``, with overrides.

    The YAML file :meth:`load` reads gives a model's own prices (USD per 1M tokens;
    ``cached_input`` and ``reasoning`` are optional), or names the model it is priced
    as (``as``)::

        models:
          gpt-4.1:
            input: 2.00
            cached_input: 0.50
            output: 8.00
          our-finetune-7:
            as: gpt-4.1-mini

    A model is matched first by its exact name as recorded in the file, then (unless
    ``maintained`` is False) in the maintained table, by the name it stands in for
    (:data:`STAND_INS`, or the file's ``as``) or its own; the package's snapshot is read
    offline and never updated over the network.

    Attributes:
        models: The file's prices, by model name.
        priced_as: The file's ``as`` entries: model name -> the model it is priced as.
        maintained: Whether models the file does not price are looked up in the
            maintained table.
    """

    models: Mapping[str, Price]
    priced_as: Mapping[str, str] = field(default_factory=dict)
    maintained: bool = True

    @classmethod
    def default(cls) -> Prices:
        """The maintained table alone (no overrides)."""
        return cls({})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Prices:
        """Read a price table from a YAML file.

        Raises:
            InvalidInput: The file cannot be read, is not YAML, or is not a price table
                (the message names the model and field).
        """
        from agentjournal._yaml import read_yaml

        name = os.fspath(path)
        body = read_yaml(path, "prices")
        try:
            return cls.from_json(body)
        except InvalidInput as error:
            raise InvalidInput(f"prices {name}: {error}") from None

    @classmethod
    def from_json(cls, body: Any) -> Prices:
        """A price table from its parsed form (``{"models": {name: {field: USD}}}``).

        Raises:
            InvalidInput: It is not one; the message names the model and field.
        """
        if not isinstance(body, Mapping) or set(body) != {"models"}:
            found = sorted(map(str, body)) if isinstance(body, Mapping) else type(body).__name__
            raise InvalidInput(f"a price table is a mapping with one key, models (found {found})")
        models = body["models"]
        if not isinstance(models, Mapping) or not models:
            raise InvalidInput("models must map each model name to its prices")
        table: dict[str, Price] = {}
        priced_as: dict[str, str] = {}
        for model, fields_ in models.items():
            if not isinstance(model, str) or not model:
                raise InvalidInput(f"model name {model!r} is not a name")
            if not isinstance(fields_, Mapping):
                raise InvalidInput(f"model {model!r}: give input and output (USD per 1M tokens)")
            if _AS in fields_:
                named = fields_[_AS]
                if len(fields_) != 1 or not isinstance(named, str) or not named.strip():
                    raise InvalidInput(
                        f"model {model!r}: 'as' names the model it is priced as, and stands alone"
                    )
                priced_as[model] = named.strip()
                continue
            unknown = sorted(str(key) for key in fields_ if key not in _PRICE_FIELDS)
            if unknown:
                raise InvalidInput(
                    f"model {model!r}: unknown field {unknown[0]!r} "
                    f"(fields: {', '.join(_PRICE_FIELDS)})"
                )
            for needed in ("input", "output"):
                if needed not in fields_:
                    raise InvalidInput(f"model {model!r}: {needed} is missing")
            given = {key: _usd(model, key, value) for key, value in fields_.items()}
            table[model] = Price(**given)
        for model, named in priced_as.items():
            # An alias names a price: the file's own, else the maintained table's.
            if named == model or named in priced_as:
                raise InvalidInput(f"model {model!r}: 'as' must name a priced model, not an alias")
            if named not in table and _maintained_cost(named, _ONE_TOKEN) is None:
                raise InvalidInput(
                    f"model {model!r}: 'as: {named}' names a model neither this file nor the "
                    "maintained table (genai-prices) prices"
                )
        return cls(table, priced_as)

    def cost(self, model: str | None, usage: Usage) -> Decimal | None:
        """What ``usage`` of ``model`` costs; None when it has tokens and no price."""
        if model is None:
            return Decimal(0) if not (usage.input_tokens or usage.output_tokens) else None
        named = self.priced_as.get(model) or STAND_INS.get(model, model)
        own = self.models.get(model) or self.models.get(named)  # the file's prices first
        if own is not None:
            return own.cost(usage)
        if not (usage.input_tokens or usage.output_tokens):
            return Decimal(0)
        return _maintained_cost(named, usage) if self.maintained else None


_ONE_TOKEN: Final = Usage(input_tokens=1)


def _maintained_cost(model: str, usage: Usage) -> Decimal | None:
    """What ``usage`` of ``model`` costs in the maintained table (None: not there)."""
    import genai_prices  # about 0.2 s (pydantic models): only when a cost is asked for

    counts = genai_prices.Usage(
        input_tokens=usage.input_tokens,  # cached ones included, as genai-prices counts
        cache_read_tokens=min(usage.cached_input_tokens, usage.input_tokens),
        output_tokens=usage.output_tokens,
    )
    try:
        return genai_prices.calc_price(counts, model_ref=model).total_price
    except LookupError:
        return None


def _usd(model: str, key: str, value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"model {model!r}: {key} must be a number (USD per 1M tokens)")
    if not math.isfinite(value) or value < 0:
        raise InvalidInput(f"model {model!r}: {key} must be a non-negative number, got {value}")
    return Decimal(str(value))


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One row of a usage report.

    Attributes:
        key: The model, agent or session (None: a model nobody named).
        usage: Its token counts; ``requests`` is the number of model responses.
        cost: What it cost in USD; None without a price table, or when a model in it
            has tokens and no price.
    """

    key: str | None
    usage: Usage
    cost: Decimal | None

    def as_dict(self) -> dict[str, Any]:
        """The row for ``--json`` (cost as a number of USD, or null)."""
        return {
            "key": self.key,
            **self.usage.as_dict(),
            "cost_usd": float(self.cost) if self.cost is not None else None,
        }


@dataclass(frozen=True)
class UsageReport:
    """Totals grouped one way.

    Attributes:
        by: What the rows are (``model``, ``agent`` or ``session``).
        rows: One per model, agent or session, most tokens first.
        total: Everything.
        priced: Whether a price table was given.
        legacy: How many responses were counted by the legacy ``$usage`` rule.
    """

    by: Group
    rows: list[UsageRow]
    total: UsageRow
    priced: bool
    legacy: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The report for ``--json``."""
        return {
            "by": self.by,
            "priced": self.priced,
            "rows": [row.as_dict() for row in self.rows],
            "total": self.total.as_dict(),
            "legacy_responses": self.legacy,
        }


class _Event(Protocol):
    """What the fold reads of an event: a :class:`~agentjournal.records.Record` or a
    :class:`~agentjournal.store.RecordedEvent`."""

    @property
    def stream(self) -> str: ...

    @property
    def type(self) -> str: ...

    @property
    def metadata(self) -> Mapping[str, str]: ...


_Part = tuple[str, str, str | None]  # (session, agent, model)
_COLUMN: Final[Mapping[str, int]] = {"session": 0, "agent": 1, "model": 2}


def legacy_counts(runs: dict[str, str | None], stream: str, metadata: Mapping[str, str]) -> bool:
    """Whether an item event's ``$usage`` counts under the legacy rule (see the module
    docs): once per run of consecutive items of one ``aj.response_id`` on a stream.

    Call it for every item event of a stream, in order (an item without ``$usage``
    ends the run).

    Args:
        runs: Stream -> the response id of the run its last item is in; updated. Plain
            JSON, so a saved fold (the catalog) can keep it.
        stream: The event's stream.
        metadata: The event's metadata.
    """
    if events.USAGE_KEY not in metadata:
        runs.pop(stream, None)
        return False
    response = metadata.get(events.RESPONSE_ID_KEY)
    counts = response is None or stream not in runs or runs[stream] != response
    runs[stream] = response
    return counts


class UsageFold:
    """Folds events into usage counts: feed it one tree's records, or the global order.

    Events must come in their streams' order (any interleaving of streams). A
    ``ModelResponded`` counts as one response; an assistant event's ``$usage``
    counts by the legacy rule (see the module docs). What it cannot read is skipped
    and counted in :attr:`unreadable`.

    Args:
        session_id: The session every event belongs to (one tree); None for the global
            order, where each stream's session is learned from the events.
    """

    def __init__(self, session_id: str | None = None) -> None:
        self._session = session_id
        self._parts: dict[_Part, Usage] = {}
        self._responded: set[str] = set()  # streams with a ModelResponded so far
        self._runs: dict[str, str | None] = {}  # stream -> its run's response id
        self._sessions: dict[str, str] = {}  # stream -> session (the global order)
        self.legacy = 0
        self.unreadable = 0

    def add_all(self, events_: Iterable[_Event]) -> None:
        """Fold each event, in order."""
        for event in events_:
            self.add(event)

    def add(self, event: _Event) -> None:
        """Fold one event."""
        kind = event.type
        if kind == MODEL_RESPONDED:
            self._responded.add(event.stream)
            try:
                response = ModelResponse.decode(_data(event))
            except (ValueError, RecursionError):
                self.unreadable += 1
                return
            self._count((response.session_id, response.agent, response.model), response.usage)
        elif self._session is None and kind in (events.SESSION_STARTED, events.SUBAGENT_STARTED):
            self._learn(event, kind)
        elif (
            events.holds_item(kind, event.metadata)
            and event.stream not in self._responded
            and legacy_counts(self._runs, event.stream, event.metadata)
        ):
            self._count_legacy(event)

    def _learn(self, event: _Event, kind: str) -> None:
        """Which session a stream belongs to: a session stream names itself in its first
        event; a subsession is the session of the stream whose handoff opened it."""
        if kind == events.SESSION_STARTED:
            session = session_of(event.stream)
            if session is not None:
                self._sessions[event.stream] = session
            return
        if events.INDEX_KEY not in event.metadata:
            return  # the twin: the parent's copy came first, in the same transaction
        try:
            body = json.loads(_data(event))
            child = body.get("subsession_stream")
        except (ValueError, RecursionError, AttributeError):
            return
        parent = self._sessions.get(event.stream)
        if isinstance(child, str) and parent is not None:
            self._sessions[child] = parent

    def _count_legacy(self, event: _Event) -> None:
        metadata = event.metadata
        try:
            body = json.loads(metadata[events.USAGE_KEY])
            usage = Usage.from_token_usage(body)
            author = json.loads(_data(event)).get("author_name")
        except (ValueError, RecursionError, AttributeError):
            self.unreadable += 1
            return
        session = self._session or self._sessions.get(event.stream, "")
        model = body.get("model") if isinstance(body.get("model"), str) else None
        self.legacy += 1
        self._count((session, author if isinstance(author, str) else "", model or None), usage)

    def _count(self, part: _Part, usage: Usage) -> None:
        self._parts[part] = self._parts.get(part, Usage()) + Usage(1, *_counts(usage))

    def report(self, *, by: Group = "model", prices: Prices | None = None) -> UsageReport:
        """The totals so far, one row per ``by``, with costs when ``prices`` is given.

        Raises:
            InvalidInput: ``by`` is not model, agent or session.
        """
        if by not in GROUPS:
            raise InvalidInput(f"usage is grouped by one of {', '.join(GROUPS)}, not {by!r}")
        column = _COLUMN[by]
        grouped: dict[str | None, list[tuple[str | None, Usage]]] = {}
        for part, usage in self._parts.items():
            key = part[column]
            grouped.setdefault(key, []).append((part[2], usage))
        rows = [_row(key, parts, prices) for key, parts in grouped.items()]
        rows.sort(key=lambda row: (-row.usage.total_tokens, row.key is None, row.key or ""))
        everything = [part for parts in grouped.values() for part in parts]
        return UsageReport(
            by, rows, _row(None, everything, prices), prices is not None, self.legacy
        )


def _counts(usage: Usage) -> tuple[int, int, int, int, int]:
    return (
        usage.input_tokens,
        usage.cached_input_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
        usage.total_tokens,
    )


def _row(key: str | None, parts: list[tuple[str | None, Usage]], prices: Prices | None) -> UsageRow:
    """A row of ``parts`` (model, usage): its cost is known only when every part's is."""
    usage = sum((part for _, part in parts), Usage())
    cost: Decimal | None = None
    if prices is not None:
        costs = [prices.cost(model, part) for model, part in parts]
        cost = None if any(c is None for c in costs) else sum((c for c in costs if c), Decimal(0))
    return UsageRow(key, usage, cost)


def _data(event: _Event) -> bytes:
    data = getattr(event, "data", None)
    if isinstance(data, bytes):
        return data
    return data.encode() if isinstance(data, str) else b""


def usage_of(
    records: TreeRecords, *, by: Group = "model", prices: Prices | None = None
) -> UsageReport:
    """The usage of one session tree (:func:`agentjournal.walk.read_tree`'s records).

    Raises:
        InvalidInput: ``by`` is not model, agent or session.
    """
    fold = UsageFold(records.session_id)
    for stream in records.streams.values():
        fold.add_all(stream)
    return fold.report(by=by, prices=prices)
