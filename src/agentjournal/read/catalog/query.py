"""One page of the catalog: filter, search, sort and cut its rows (pure).

:func:`parse_query` reads a query from URL parameters (``agentjournal ui``'s
``/api/sessions`` and ``/``) into a :class:`ListQuery`, refusing anything it does not
understand; :func:`page_of` answers it from the rows:

- ``app``, ``user``, ``agent``: equal to the row's; ``state``: the integrity state;
  ``blocks=1``: a guardrail block or an authority refusal; ``branches=1``: a branch;
  ``approvals=1``: waiting for approval (a pending approval); ``label``: the latest eval
  score's label (``pass``, ``fail``, ...; ``-``: never scored);
  ``since``/``until``: last activity at or after / before (ISO 8601, UTC when no zone).
- ``q``: every term (split at white space) must match, case aside: either inside the
  session id, app, user or agent, or in the session's content, each of its words (runs
  of letters and digits: ``order-42`` is ``order`` and ``42``) as the beginning of a
  word there (a lookup the caller gives,
  :meth:`~agentjournal.read.catalog.search.ContentIndex.matching`).
- ``sort`` by a column of :data:`SORTS` and ``order`` (``asc``/``desc``; text columns
  default to ascending, the rest to descending); ties are broken by session id, so
  pages never overlap. Then ``offset`` and ``limit`` (at most :data:`MAX_LIMIT`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from agentjournal.errors import InvalidInput
from agentjournal.ledger.integrity import STATES, IntegrityState
from agentjournal.read.catalog.rows import SessionRow
from agentjournal.read.catalog.search import words

Order = Literal["asc", "desc"]

_STATE_RANK: Final = {"failed": 0, "unsigned": 1, "untrusted": 2, "verified": 3}

SORTS: Final[dict[str, Callable[[SessionRow], Any]]] = {
    "session": lambda r: r.session_id,
    "app": lambda r: r.app,
    "user": lambda r: r.user,
    "agent": lambda r: r.agent,
    "items": lambda r: r.items,
    "subagents": lambda r: r.subagents_open + r.subagents_closed + r.subagents_failed,
    "blocks": lambda r: r.guardrail_blocks,
    "refusals": lambda r: r.refusals,
    "tokens": lambda r: r.tokens,
    "branches": lambda r: len(r.branches),
    "approvals": lambda r: r.pending_approvals,
    "first": lambda r: r.first_activity,
    "last": lambda r: r.last_activity,
    "integrity": lambda r: _STATE_RANK[r.integrity.state],
    "score": lambda r: r.score.score if r.score is not None else -1.0,
}
"""The columns a page sorts by. ``integrity`` ascending puts FAILED first, then unsigned,
untrusted, verified; ``score`` (the latest eval score) ascending puts the sessions never
scored first, then the lowest scores."""

TEXT_COLUMNS: Final = frozenset({"session", "app", "user", "agent"})
"""Columns sorted ascending unless told otherwise (the others: descending)."""

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
MAX_Q: Final = 256
"""Characters of ``q`` (and of each filter value)."""
MAX_WORDS: Final = 16

PARAMETERS: Final = (
    "q",
    "app",
    "user",
    "agent",
    "state",
    "blocks",
    "branches",
    "approvals",
    "label",
    "since",
    "until",
    "sort",
    "order",
    "offset",
    "limit",
)
IGNORED: Final = frozenset({"token"})
"""Parameters that belong to someone else (the viewer's token)."""


@dataclass(frozen=True)
class ListQuery:
    """What one page of the list asks for (see the module docs); the defaults: the 50
    sessions with the newest activity."""

    q: str = ""
    app: str | None = None
    user: str | None = None
    agent: str | None = None
    state: IntegrityState | None = None
    blocks: bool = False
    branches: bool = False
    approvals: bool = False
    label: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    sort: str = "last"
    order: Order = "desc"
    offset: int = 0
    limit: int = DEFAULT_LIMIT

    def terms(self) -> list[str]:
        """The terms of ``q`` (split at white space, lower-cased), each to be matched."""
        return list(dict.fromkeys(self.q.lower().split()))

    def as_params(self) -> dict[str, str]:
        """The query as URL parameters, defaults left out (parsed back to an equal query)."""
        out: dict[str, str] = {}
        for name, value in (
            ("q", self.q),
            ("app", self.app),
            ("user", self.user),
            ("agent", self.agent),
            ("state", self.state),
            ("blocks", "1" if self.blocks else None),
            ("branches", "1" if self.branches else None),
            ("approvals", "1" if self.approvals else None),
            ("label", self.label),
            ("since", self.since.isoformat() if self.since else None),
            ("until", self.until.isoformat() if self.until else None),
        ):
            if value:
                out[name] = value
        if (self.sort, self.order) != ("last", "desc"):
            out["sort"], out["order"] = self.sort, self.order
        if self.offset:
            out["offset"] = str(self.offset)
        if self.limit != DEFAULT_LIMIT:
            out["limit"] = str(self.limit)
        return out


@dataclass(frozen=True)
class ListPage:
    """One page of rows and where it sits.

    Attributes:
        rows: The page's rows, in the query's order.
        total: How many sessions match the query (every page).
        offset: The index of the page's first row among them.
        limit: The most rows a page holds.
        sessions: How many sessions the catalog holds (matching or not).
        choices: The apps and agents the catalog holds, most frequent first (at most
            :data:`MAX_CHOICES` each), sorted by name: what a filter can pick.
    """

    rows: list[SessionRow]
    total: int
    offset: int
    limit: int
    sessions: int
    choices: dict[str, list[str]] = field(default_factory=dict)


MAX_CHOICES: Final = 200


def parse_query(params: Iterable[tuple[str, str]]) -> ListQuery:
    """A query from URL parameters (name, value pairs, as a URL holds them).

    An empty value is the default. ``token`` is let through (the viewer's own).

    Raises:
        InvalidInput: A parameter is unknown or given twice, or its value is not one it
            takes (the message, one line, says which and what it takes).
    """
    seen: dict[str, str] = {}
    for name, value in params:
        if name in IGNORED:
            continue
        if name not in PARAMETERS:
            raise InvalidInput(
                f"unknown parameter {name[:40]!r}; the list takes {', '.join(PARAMETERS)}"
            )
        if name in seen:
            raise InvalidInput(f"give {name} once")
        if len(value) > MAX_Q:
            raise InvalidInput(f"{name} is longer than {MAX_Q} characters")
        seen[name] = value.strip()
    got = {name: value for name, value in seen.items() if value != ""}
    query = ListQuery(
        q=got.get("q", ""),
        app=got.get("app"),
        user=got.get("user"),
        agent=got.get("agent"),
        state=_state(got.get("state")),
        blocks=_flag("blocks", got.get("blocks")),
        branches=_flag("branches", got.get("branches")),
        approvals=_flag("approvals", got.get("approvals")),
        label=got.get("label"),
        since=_moment("since", got.get("since")),
        until=_moment("until", got.get("until")),
        sort=_sort(got.get("sort")),
        order=_order(got.get("order"), got.get("sort")),
        offset=_number("offset", got.get("offset"), 0, 10**9, 0),
        limit=_number("limit", got.get("limit"), 1, MAX_LIMIT, DEFAULT_LIMIT),
    )
    if len(query.terms()) > MAX_WORDS:
        raise InvalidInput(f"q has more than {MAX_WORDS} words")
    return query


def _state(raw: str | None) -> IntegrityState | None:
    if raw is None:
        return None
    for state in STATES:
        if raw == state:
            return state
    raise InvalidInput(f"state must be one of {', '.join(STATES)}, got {raw[:40]!r}")


def _flag(name: str, raw: str | None) -> bool:
    if raw in (None, "0"):
        return False
    if raw == "1":
        return True
    raise InvalidInput(f"{name} must be 1 or 0, got {str(raw)[:40]!r}")


def _moment(name: str, raw: str | None) -> datetime | None:
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"{name} must be an ISO 8601 time (2026-01-31 or 2026-01-31T12:00:00Z), "
            f"got {raw[:40]!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _sort(raw: str | None) -> str:
    if raw is None:
        return "last"
    if raw not in SORTS:
        raise InvalidInput(f"sort must be one of {', '.join(SORTS)}, got {raw[:40]!r}")
    return raw


def _order(raw: str | None, sort: str | None) -> Order:
    if raw is None:
        return "asc" if sort in TEXT_COLUMNS else "desc"
    if raw == "asc":
        return "asc"
    if raw == "desc":
        return "desc"
    raise InvalidInput(f"order must be asc or desc, got {raw[:40]!r}")


def _number(name: str, raw: str | None, least: int, most: int, default: int) -> int:
    if raw is None:
        return default
    # ASCII digits only (isdigit takes "²"), and short enough for int's digit limit.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10) or not least <= int(raw) <= most:
        raise InvalidInput(
            f"{name} must be a whole number from {least} to {most}, got {raw[:40]!r}"
        )
    return int(raw)


def page_of(
    rows: Sequence[SessionRow],
    query: ListQuery,
    *,
    content: Callable[[str], set[str]] | None = None,
) -> ListPage:
    """The page of ``rows`` that ``query`` asks for.

    Args:
        rows: Every session (in any order).
        query: What to keep, in which order, which page.
        content: The sessions whose content holds a word beginning with the one given
            (None: ``q`` matches the session id, app, user and agent only).
    """
    kept = [row for row in rows if _kept(row, query)]
    for term in query.terms():
        holders = _holders(term, content)
        kept = [
            row
            for row in kept
            if row.session_id in holders
            or term in f"{row.session_id}\n{row.app}\n{row.user}\n{row.agent}".lower()
        ]
    column = SORTS[query.sort]
    kept.sort(key=lambda row: (column(row), row.session_id), reverse=query.order == "desc")
    return ListPage(
        rows=kept[query.offset : query.offset + query.limit],
        total=len(kept),
        offset=query.offset,
        limit=query.limit,
        sessions=len(rows),
        choices=choices(rows),
    )


def _holders(term: str, content: Callable[[str], set[str]] | None) -> set[str]:
    """The sessions whose content has, for each word of ``term``, a word it begins."""
    found: set[str] | None = None
    for word in words(term):
        if content is None or (found is not None and not found):
            return set()
        holders = content(word)
        found = holders if found is None else found & holders
    return found or set()


def _kept(row: SessionRow, query: ListQuery) -> bool:
    return (
        (query.app is None or row.app == query.app)
        and (query.user is None or row.user == query.user)
        and (query.agent is None or row.agent == query.agent)
        and (query.state is None or row.integrity.state == query.state)
        and (not query.blocks or row.guardrail_blocks > 0 or row.refusals > 0)
        and (not query.branches or bool(row.branches))
        and (not query.approvals or row.pending_approvals > 0)
        and (query.label is None or _label(row) == query.label)
        and (query.since is None or row.last_activity >= query.since)
        and (query.until is None or row.last_activity < query.until)
    )


def _label(row: SessionRow) -> str:
    """The latest eval score's label (``-``: never scored)."""
    return row.score.label if row.score is not None else "-"


def choices(rows: Iterable[SessionRow]) -> dict[str, list[str]]:
    """The apps and agents of ``rows`` a filter can pick: the most frequent
    :data:`MAX_CHOICES` of each, sorted by name (empty names left out)."""
    apps: Counter[str] = Counter()
    agents: Counter[str] = Counter()
    for row in rows:
        if row.app:
            apps[row.app] += 1
        if row.agent:
            agents[row.agent] += 1
    return {
        name: sorted(value for value, _ in counter.most_common(MAX_CHOICES))
        for name, counter in (("app", apps), ("agent", agents))
    }
