"""A session tree's events as OpenTelemetry span data (pure, no I/O).

:class:`Projector` folds the events of session trees, in commit order, into
:class:`ProjectedSpan` values, each returned once, when the span ends:

* a **run** span (``agentjournal.run``) per run: the events of one run share their
  ``trace_id`` (SCHEMA.md); it ends when the run is over (the next run of the tree
  starts, :meth:`Projector.idle`, or :meth:`Projector.finish`);
* an ``invoke_agent {agent}`` span per subagent, at any depth, under the span of the
  agent that handed off; status ERROR for outcome ``error`` or ``cancelled``;
* a ``chat {model}`` span per model response (``agentjournal.ModelResponded``) with the
  GenAI semantic conventions (``gen_ai.*``);
* an ``execute_tool {tool}`` span per tool call, from the call item to its output item,
  with the call's name, id and the digest of its arguments (never the arguments);
* an ``await_approval {tool}`` span per tool call that waited for a person, from its
  question (``InterruptIssued``) to the answer (``InterruptResolved``), under the span of
  the agent that asked, in the paused run's trace, with the request id, tool, agent,
  outcome and who answered. The answer belongs to no run (it neither starts nor
  stretches one). A follower sends the span when the answer comes; a one-shot export
  (:meth:`Projector.finish`) sends an unanswered one ending at its line's newest event,
  with outcome ``pending`` and ``agentjournal.in_progress`` (never the export's clock:
  projecting the same events twice gives the same spans);
* span events for guardrail decisions and authority refusals, on the span of the agent
  that acted.

A session's **lines** are projected apart: main, and each branch learnt from the
``agentjournal.BranchForked`` on its parent line's top stream (committed first in the
fork's transaction). A branch's runs are its own traces; its prefix is never projected
again (it is its parent's, exported with the parent's spans). Every run span of a branch
names it (``agentjournal.branch`` and the fork's cut) and carries a **link** to the
parent line's run span at the cut, so a trace viewer goes from a branch to where it
forked. A subagent open at the fork continues on the branch
(``agentjournal.SubagentContinued``): its ``invoke_agent`` span belongs to the first
branch run that speaks in it or closes it. The fork's own events (and a
``BranchDeleted``, a ``LineGuarded``) belong to no run: a fork made after a run never
stretches that run; the closes a line's end writes (``aj.line_end``) end their subagents'
spans, cancelled, without a run.

Ids: a run's trace id is the one its events recorded; span ids are the recorded ones
where they can be, else derived from event ids (:mod:`.ids`), so projecting the same
events twice gives the same spans.

The projector's state is JSON (:meth:`Projector.dump` / :meth:`Projector.load`): a
follower saves it with its position (:mod:`agentjournal.read.projections`) and, restarted,
goes on exactly where the save was.

- :mod:`.spans` — the span, span event and link records an exporter gets.
- :mod:`.projector` — the fold: runs, subagents, tool calls, and when each span ends.
- :mod:`.lines` — which line of which session tree an event belongs to; forks and links.
- :mod:`.attributes` — what each span says (``gen_ai.*`` and ``agentjournal.*``).
- :mod:`.ids` — which id each span gets (recorded or derived), and times in ns.
- :mod:`.event_fields` — what the fold reads off an event: its kind, author and tool calls.
- :mod:`.state` — the fold's state (JSON dataclasses, saved with a follower's position).
- :mod:`.parts` — the trees in parts folded apart (two processes), and the one order of
  their spans.
"""

from __future__ import annotations

from agentjournal.read.traces.lines import session_of_stream
from agentjournal.read.traces.projector import Projector, project_tree
from agentjournal.read.traces.spans import Attribute, ProjectedSpan, SpanEvent, SpanLink

__all__ = [
    "Attribute",
    "ProjectedSpan",
    "Projector",
    "SpanEvent",
    "SpanLink",
    "project_tree",
    "session_of_stream",
]
