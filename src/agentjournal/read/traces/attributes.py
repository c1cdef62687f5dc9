"""What each span says: the GenAI semantic conventions (``gen_ai.*``) and agentjournal's own
attributes, for run, ``chat``, ``execute_tool`` and ``invoke_agent`` spans and for the
guardrail and authority span events.

Pure functions of the projector's state and an event's fields. A tool span carries the
digest of the call's arguments, never the arguments; a refusal never the refused value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentjournal import events
from agentjournal.read.traces.ids import SPAN_ID, recorded
from agentjournal.read.traces.spans import Attribute, SpanLink
from agentjournal.read.traces.state import Call, Run, Subagent, Tree, Wait
from agentjournal.read.traces.stored import Event
from agentjournal.tokens import ModelResponse, plain_body


def run_attributes(tree: Tree, run: Run) -> tuple[dict[str, Attribute], tuple[SpanLink, ...]]:
    """A run span's attributes and links: a branch's run names its line and fork, and links
    to the parent line's run span at the cut."""
    attributes: dict[str, Attribute] = {
        "agentjournal.session_id": tree.session_id,
        "agentjournal.first_event": run.first_event,
        "agentjournal.trace_recorded": run.recorded,
    }
    if run.agent:
        attributes["gen_ai.agent.name"] = run.agent
    links: tuple[SpanLink, ...] = ()
    fork = tree.fork
    if fork is not None:  # a branch's run: which line, where it left its parent
        attributes["agentjournal.branch"] = tree.line
        attributes["agentjournal.branch_stream"] = tree.top
        for name, key in (
            ("parent_branch", "parent"),
            ("fork_event_id", "event"),
            ("fork_cut_kind", "kind"),
            ("fork_cut_value", "value"),
            ("fork_cut_position", "position"),
        ):
            if fork[key] is not None:  # None: learnt without its fork (Projector.learns)
                attributes[f"agentjournal.{name}"] = fork[key]
        if fork["link"] is not None:
            trace_id, span_id = fork["link"]
            links = (
                SpanLink(
                    trace_id,
                    span_id,
                    {"agentjournal.link": "forked_from", "agentjournal.branch": tree.line},
                ),
            )
    return attributes, links


Chat = tuple[str | None, str, str | None, dict[str, Attribute]]
"""A ``chat`` span as a model response says it: when the call started (if seen) and when
the response arrived (as recorded), the model's name, and the span's attributes."""


def chat_of(data: bytes, session_id: str, record: Event) -> Chat | None:
    """The ``chat`` span of the model response ``record`` recorded (``data``: its data);
    None where :meth:`ModelResponse.decode` refuses the data.

    Data of the plain shape (:func:`~agentjournal.tokens.plain_body`: what ``decode`` reads
    at once) is read from its JSON object as ``decode`` reads it, without building the
    response; any other shape goes through ``decode``, which reads it or refuses it.
    """
    body = plain_body(data)
    if body is None:
        try:
            response = ModelResponse.decode(data)
        except (ValueError, TypeError):
            return None
        usage = response.usage
        counts = (
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_input_tokens,
            usage.reasoning_tokens,
        )
        agent, model, system = response.agent, response.model, response.system
        response_id, outputs = response.response_id, response.outputs
        started, ended = response.started_at, response.ended_at
    else:  # every field checked by plain_body: decode's own reading, without its objects
        given = body["usage"]
        counts = (
            int(given.get("input_tokens", 0)),
            int(given.get("output_tokens", 0)),
            int(given.get("cached_input_tokens", 0)),
            int(given.get("reasoning_tokens", 0)),
        )
        agent, model, system = body["agent"], body.get("model"), body.get("system")
        response_id, outputs = body.get("response_id"), body.get("outputs", {})
        started, ended = body.get("started_at"), body["ended_at"]
    attributes: dict[str, Attribute] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.agent.name": agent,
        "gen_ai.usage.input_tokens": counts[0],
        "gen_ai.usage.output_tokens": counts[1],
        "gen_ai.usage.cache_read.input_tokens": counts[2],
        "gen_ai.usage.reasoning.output_tokens": counts[3],
        "agentjournal.session_id": session_id,
        "agentjournal.stream": record.stream,
        "agentjournal.event_id": record.id,
    }
    if system:
        attributes["gen_ai.system"] = system
        attributes["gen_ai.provider.name"] = system
    if model:
        attributes["gen_ai.request.model"] = model
        attributes["gen_ai.response.model"] = model
    if response_id:
        attributes["gen_ai.response.id"] = response_id
    if outputs:  # counts as decode reads them: plain ones may be ASCII digits
        attributes["agentjournal.outputs"] = ",".join(
            f"{output}={int(count)}" for output, count in sorted(outputs.items())
        )
    return started, ended, model, attributes


def tool_attributes(call: Call, session_id: str, *, in_progress: bool) -> dict[str, Attribute]:
    """An ``execute_tool`` span's attributes: the call's name, id and arguments' digest."""
    attributes: dict[str, Attribute] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.call_id,
        "gen_ai.tool.type": "function" if call.kind == "function_call" else call.kind,
        "agentjournal.arguments_digest": call.digest,
        "agentjournal.session_id": session_id,
        "agentjournal.stream": call.stream,
    }
    if call.agent:
        attributes["gen_ai.agent.name"] = call.agent
    if in_progress:
        attributes["agentjournal.in_progress"] = True
    return attributes


def approval_attributes(
    wait: Wait,
    session_id: str,
    *,
    outcome: str,
    by: str | None = None,
    in_progress: bool = False,
) -> dict[str, Attribute]:
    """An ``await_approval`` span's: the request, its tool and agent, the outcome
    (``approved``, ``rejected``, or ``pending`` while unanswered) and who answered."""
    attributes: dict[str, Attribute] = {
        "gen_ai.operation.name": "await_approval",
        "gen_ai.tool.name": wait.tool,
        "gen_ai.tool.call.id": wait.request_id,
        "gen_ai.agent.name": wait.agent,
        "agentjournal.approval_request_id": wait.request_id,
        "agentjournal.approval_outcome": outcome,
        "agentjournal.session_id": session_id,
        "agentjournal.stream": wait.stream,
        "agentjournal.event_id": wait.event_id,
    }
    if by is not None:
        attributes["agentjournal.approval_by"] = by
    if in_progress:
        attributes["agentjournal.in_progress"] = True
    return attributes


def agent_attributes(
    tree: Tree, sub: Subagent, *, outcome: str | None, in_progress: bool
) -> dict[str, Attribute]:
    """An ``invoke_agent`` span's attributes; a continuation names the branch it goes on in."""
    attributes: dict[str, Attribute] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": sub.agent,
        "gen_ai.agent.id": sub.agent_id,
        "agentjournal.session_id": tree.session_id,
        "agentjournal.stream": sub.stream,
        "agentjournal.parent_stream": sub.parent_stream,
        "agentjournal.source_agent": sub.source,
        "agentjournal.handoff_call_id": sub.call_id,
    }
    if outcome is not None:
        attributes["agentjournal.outcome"] = outcome
    if sub.continues is not None:
        attributes["agentjournal.continues"] = sub.continues
        attributes["agentjournal.branch"] = tree.line
    if in_progress:
        attributes["agentjournal.in_progress"] = True
    return attributes


def guardrail_attributes(record: Event, body: Mapping[str, Any]) -> dict[str, Attribute]:
    """The ``agentjournal.guardrail`` span event's attributes, from a ``GuardrailDecided``."""
    attributes: dict[str, Attribute] = {}
    for key in (
        "action_id",
        "action_type",
        "decision",
        "guardrail_decision",
        "reason_code",
        "enforcement",
        "agent",
        "subject",
        "call_id",
        "payload_digest",
        "modified_payload_digest",
    ):
        value = body.get(key)
        if isinstance(value, str):
            attributes[key] = value
    latency = body.get("latency_ms")
    if isinstance(latency, int | float) and not isinstance(latency, bool):
        attributes["latency_ms"] = float(latency)
    span_id = recorded(record.metadata, events.SPAN_ID_KEY, SPAN_ID)
    if span_id is not None:  # the guardrail call's own span: the service's spans hang there
        attributes["guardrail_span_id"] = span_id
    attributes["event_id"] = record.id
    return attributes


def refusal_attributes(record: Event, body: Mapping[str, Any]) -> dict[str, Attribute]:
    """The ``agentjournal.authority_refused`` span event's attributes, from an
    ``AuthorityRefused``."""
    attributes: dict[str, Attribute] = {}
    # Never the refused value: it is an argument of the conversation.
    for key in (
        "gate",
        "agent",
        "subject",
        "kind",
        "reason",
        "scope",
        "ceiling",
        "call_id",
        "arguments_digest",
        "enforcement",
    ):
        value = body.get(key)
        if isinstance(value, str):
            attributes[key] = value
    attributes["event_id"] = record.id
    return attributes
