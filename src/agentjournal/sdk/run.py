"""What a session knows of the run in progress, in one object made when the run starts.

A run is recognised by the SDK's ``Usage`` object, which every context of one
run shares (the hooks', the tools', the session calls'). :class:`RunState`
holds what the hooks learn during it — the speaking agent, which response
produced each output item, the model responses not yet written, the handoff
calls and the handoffs matched to them, the grants not yet written, the final
output — and the run's spans. The next run replaces it; nothing of a run
outlives it but the responses it could not write (they go with the next run's
first write).
"""

from __future__ import annotations

import uuid
import weakref
from collections import OrderedDict
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agents.run_context import RunContextWrapper

from agentjournal.authority import Authority
from agentjournal.engine.plan import Ask, Grant, ItemsPlan, Produced, Responded
from agentjournal.sdk import tracing

_REMEMBERED: Final = 1024


def weak(obj: Any) -> weakref.ref[Any] | None:
    """A weak reference to ``obj`` (None when it cannot have one)."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


@dataclass
class RunState:
    """The run in progress (see the module docs); changed only by its own methods.

    Attributes:
        usage: The run's ``Usage`` object, weakly: what recognises it.
        wrapper: The run's main context (its session calls' ``wrapper``), weakly.
        trace: The run's spans.
        speaker: The agent speaking now (it authors the items that follow).
    """

    usage: weakref.ref[Any] | None = None
    wrapper: weakref.ref[Any] | None = None
    trace: tracing.RunTrace | None = None
    speaker: str | None = None
    produced: OrderedDict[str, Produced] = field(default_factory=OrderedDict)
    handoff_calls: OrderedDict[str, tuple[str, str]] = field(default_factory=OrderedDict)
    handoffs: dict[str, tuple[str, str]] = field(default_factory=dict)
    grants: list[Grant] = field(default_factory=list)
    finished: str | None = None
    responses: list[Responded] = field(default_factory=list)
    llm_started: dict[str, str] = field(default_factory=dict)  # agent -> its call's start
    # Tool call id -> [started, ended] (RFC 3339): stamped on the event of the call's output.
    tool_times: OrderedDict[str, list[str | None]] = field(default_factory=OrderedDict)
    asks: dict[str, Ask] = field(default_factory=dict)  # call id -> waits for approval

    def is_run(self, usage: Any) -> bool:
        """Whether ``usage`` is this run's."""
        return self.usage is not None and self.usage() is usage

    def main_context(self, wrapper: Any) -> None:
        """``wrapper`` is the run's main context (what its session calls are given)."""
        self.wrapper = weak(wrapper)

    def agent_started(self, agent: str) -> None:
        self.speaker = agent
        self.finished = None
        if self.trace is not None:
            self.trace.agent_started(agent)

    def agent_finished(self, output: Any) -> None:
        self.finished = output if isinstance(output, str) else repr(output)
        if self.trace is not None:
            self.trace.end()

    def response(
        self,
        agent: str,
        output: Sequence[Any],
        produced: Produced,
        targets: Mapping[str, str],
    ) -> None:
        """A model response: remember who produced each output item, and its handoff calls.

        A handoff is matched within its own response: this agent's older candidates
        (e.g. the second of two handoffs, which the SDK ignores) are forgotten.
        """
        for stale in [c for c, (source, _) in self.handoff_calls.items() if source == agent]:
            del self.handoff_calls[stale]
        for item in output:
            for key in identities(item):
                self.produced[key] = produced
            name = getattr(item, "name", None)
            call_id = getattr(item, "call_id", None)
            if (
                getattr(item, "type", None) == "function_call"
                and isinstance(name, str)
                and name in targets
                and call_id
            ):
                self.handoff_calls[call_id] = (agent, targets[name])
        _trim(self.produced)
        _trim(self.handoff_calls)

    def asked(self, asks: Sequence[Ask]) -> None:
        """Calls of a model response that will wait for approval: each is recorded as an
        ``InterruptIssued`` with the write of its call's item."""
        for ask in asks:
            self.asks[ask.call_id] = ask

    def model_called(self, agent: str, at: str) -> None:
        """``agent`` called the model at ``at`` (RFC 3339)."""
        self.llm_started[agent] = at

    def model_responded(self, agent: str) -> str | None:
        """When ``agent``'s model call started, if it was seen (and forget it)."""
        return self.llm_started.pop(agent, None)

    def tool_started(self, call_id: str, at: str) -> None:
        """The tool call ``call_id`` started at ``at`` (RFC 3339); a second start of the same
        id (two calls the context could not tell apart) leaves it without times."""
        if call_id in self.tool_times:
            self.tool_times[call_id] = [None, None]
            return
        self.tool_times[call_id] = [at, None]
        _trim(self.tool_times)

    def tool_ended(self, call_id: str, at: str) -> None:
        """The tool call ``call_id`` ended at ``at`` (returned or raised)."""
        times = self.tool_times.get(call_id)
        if times is not None and times[0] is not None and times[1] is None:
            times[1] = at

    def tool_call_times(self, call_id: str) -> tuple[str, str] | None:
        """When the tool call ``call_id`` started and ended, when both were seen."""
        times = self.tool_times.get(call_id)
        if times is None or times[0] is None or times[1] is None:
            return None
        return times[0], times[1]

    def tool_ran(self, call_id: str) -> bool:
        """Whether the hooks saw the tool call ``call_id`` start in this run."""
        return call_id in self.tool_times

    def responded(self, response: Responded) -> None:
        """A model response: its ``ModelResponded`` goes with the next write."""
        self.responses.append(response)

    def carry(self, previous: RunState) -> None:
        """A new run begins: what the last run left unwritten is still due — its model
        responses, a finished agent's output, pending grants and matched handoffs — and the
        next write records it."""
        self.responses[:0] = previous.responses
        self.handoffs = {**previous.handoffs, **self.handoffs}
        self.grants[:0] = previous.grants
        if self.finished is None:
            self.finished = previous.finished

    def landed(self, stored: Container[uuid.UUID]) -> None:
        """A write landed: the responses now known to be stored are no longer pending.

        ``stored`` is the ``responded`` ids of the session's
        :class:`~agentjournal.engine.tree.SessionTree`.
        """
        if any(response.id in stored for response in self.responses):
            self.responses = [r for r in self.responses if r.id not in stored]

    def handed_off(self, sender: str, receiver: str) -> bool:
        """The SDK handed off: match it to the sender's call (False when there is none).

        The SDK takes the first handoff call of a response, and only the sender's
        latest response is kept: the sender's first candidate is the call. Its
        receiver is the agent the SDK really handed to (a ``Handoff`` may route).
        """
        for call_id, (source, _) in self.handoff_calls.items():
            if source == sender:
                del self.handoff_calls[call_id]
                self.handoffs[call_id] = (sender, receiver)
                for grant in reversed(self.grants):
                    if (grant.sender, grant.receiver, grant.call_id) == (sender, receiver, None):
                        grant.call_id = call_id
                        break
                return True
        return False

    def granted(self, sender: str, receiver: str, authority: Authority) -> None:
        """A handoff granted ``receiver`` an authority: it is written with the next write."""
        last = self.grants[-1] if self.grants else None
        if last is not None and (last.sender, last.receiver, last.authority) == (
            sender,
            receiver,
            authority,
        ):
            return  # the guard's wrapper and the hooks both saw this handoff
        self.grants.append(Grant(sender, receiver, authority))

    def written(self, plan: ItemsPlan | None, *, items: bool, closing: bool) -> None:
        """A write landed: what it carried is no longer pending."""
        if plan is None:
            return
        for op in plan.routed.ops:
            if op.kind == "start" and op.subagent is not None:
                self.handoffs.pop(op.subagent.call_id, None)
            elif self.asks and op.item is not None:
                self.asks.pop(op.item.get("call_id"), None)  # type: ignore[arg-type]
        self.grants = []  # written, on a SubagentStarted or as AuthorityGranted
        if items:
            # A handoff this write could not show as a subagent (its call is inside an
            # encrypted envelope, or was never matched) never will be.
            self.handoffs.clear()
        if plan.closed or closing or items:
            self.finished = None  # the final output has been written (or closed)

    def view(self, wrapper: Any) -> RunView:
        """This run as a write made with ``wrapper`` sees it."""
        return RunView(self, wrapper)

    def produced_by(self, item: Mapping[str, Any]) -> Produced | None:
        if not self.produced:
            return None  # outside a run, or before its first model response: nothing to match
        for key in identities(item):
            found = self.produced.get(key)
            if found is not None:
                return found
        return None


class RunView:
    """A run as one write sees it (:class:`agentjournal.engine.plan.RunView`): the run's
    state, and the identity of the call that writes (a weak reference to its context)."""

    def __init__(self, state: RunState, wrapper: Any) -> None:
        self._state = state
        self._wrapper = wrapper

    @property
    def identity(self) -> Any:
        return weak(self._wrapper) if self._wrapper is not None else None

    @property
    def speaker(self) -> str | None:
        return self._state.speaker

    @property
    def handoffs(self) -> Mapping[str, tuple[str, str]]:
        return self._state.handoffs

    @property
    def grants(self) -> Sequence[Grant]:
        return self._state.grants

    @property
    def finished(self) -> str | None:
        return self._state.finished

    @property
    def responses(self) -> Sequence[Responded]:
        return self._state.responses

    @property
    def asks(self) -> Mapping[str, Ask]:
        return self._state.asks

    def produced_by(self, item: Mapping[str, Any]) -> Produced | None:
        return self._state.produced_by(item)

    def tool_call_times(self, call_id: str) -> tuple[str, str] | None:
        return self._state.tool_call_times(call_id)

    def decided(self, call_id: str, tool: str) -> bool | None:
        wrapper = self._wrapper
        if not isinstance(wrapper, RunContextWrapper) or not self._state.is_run(wrapper.usage):
            return None  # no run's write: nothing says what the SDK decided
        if self._state.tool_ran(call_id):
            return True
        # The SDK's own record of the decision (``state.approve``/``state.reject``): a call
        # it rejected never starts; one it approved may run without these hooks.
        found = wrapper.is_tool_approved(tool, call_id)
        return found if isinstance(found, bool) else None

    def same_run(self, run: Any) -> bool:
        return self._wrapper is not None and run is not None and run() is self._wrapper


def identities(item: Any) -> list[str]:
    """Keys that match a model output item with the session item made from it."""
    keys = []
    for name in ("call_id", "id"):
        value = item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)
        if isinstance(value, str) and value:
            keys.append(f"{name}:{value}")
    return keys


def _trim(mapping: OrderedDict[str, Any]) -> None:
    while len(mapping) > _REMEMBERED:
        mapping.popitem(last=False)
