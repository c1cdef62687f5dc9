"""The spans the trace projector sends: span, span event and link records, and their JSON.

These are what an exporter gets (:class:`ProjectedSpan`); ``as_json`` is the ``--jsonl``
line. Frozen and free of the projector's state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

Attribute: TypeAlias = str | int | float | bool
"""An attribute value a span carries."""


@dataclass(frozen=True)
class SpanEvent:
    """An event on a span (a guardrail decision, an authority refusal).

    Attributes:
        name: ``agentjournal.guardrail`` or ``agentjournal.authority_refused``.
        time_ns: When it was recorded (ns since the epoch).
        attributes: What it says.
    """

    name: str
    time_ns: int
    attributes: Mapping[str, Attribute]


@dataclass(frozen=True)
class SpanLink:
    """A link from a span to a span of another trace (a branch's run to its fork point).

    Attributes:
        trace_id: The linked span's trace id.
        span_id: The linked span's id.
        attributes: What the link says (``agentjournal.link``: ``forked_from``).
    """

    trace_id: str
    span_id: str
    attributes: Mapping[str, Attribute]


@dataclass(frozen=True, init=False)
class ProjectedSpan:
    """One span, ready for an exporter.

    Attributes:
        trace_id: 32 lowercase hex digits.
        span_id: 16 lowercase hex digits.
        parent_id: The parent's span id; None for a run span.
        name: The span's name.
        start_ns: Start, ns since the epoch.
        end_ns: End, ns since the epoch (never before the start).
        attributes: Its attributes.
        events: Its span events, in time order.
        error: The status description when its status is ERROR, else None.
        links: Its links to spans of other traces (a branch's run span: the parent
            line's run span at the fork).
    """

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Attribute]
    events: Sequence[SpanEvent] = ()
    error: str | None = None
    links: Sequence[SpanLink] = ()

    def __init__(
        self,
        trace_id: str,
        span_id: str,
        parent_id: str | None,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: Mapping[str, Attribute],
        events: Sequence[SpanEvent] = (),
        error: str | None = None,
        links: Sequence[SpanLink] = (),
    ) -> None:
        # The frozen dataclass's own __init__, its fields set at once (it sets each by a
        # call to object.__setattr__): an export of every tree makes one per span.
        self.__dict__.update(
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            name=name,
            start_ns=start_ns,
            end_ns=end_ns,
            attributes=attributes,
            events=events,
            error=error,
            links=links,
        )

    def as_json(self) -> dict[str, Any]:
        """The span as a JSON object (the ``--jsonl`` line)."""
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_id,
            "name": self.name,
            "start_time_unix_nano": self.start_ns,
            "end_time_unix_nano": self.end_ns,
            "status": {"code": "ERROR", "message": self.error}
            if self.error is not None
            else {"code": "UNSET"},
            "attributes": dict(self.attributes),
            "events": [
                {"name": e.name, "time_unix_nano": e.time_ns, "attributes": dict(e.attributes)}
                for e in self.events
            ],
            "links": [
                {
                    "trace_id": link.trace_id,
                    "span_id": link.span_id,
                    "attributes": dict(link.attributes),
                }
                for link in self.links
            ],
        }
