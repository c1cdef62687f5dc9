"""The usage stage: every ``ModelResponded`` reads as one of this session's tree, names its
response, and the report totals their tokens (:func:`check_responses`)."""

from __future__ import annotations

from agentjournal import events
from agentjournal._text import cut, plural
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Tree
from agentjournal.tokens import ModelResponse, Usage


def check_responses(report: Report, tree: Tree) -> None:
    """Each ``ModelResponded`` reads as one, belongs to this session's tree and names the
    response its metadata does; the report totals what they record."""
    total, count = Usage(), 0
    for name, event in tree.noted:  # every stream's events of the types it holds, in order
        if event.type != events.MODEL_RESPONDED:
            continue
        where = ("usage", name, event.revision)
        if not tree.is_tree_stream(name):
            report.fail(*where, f"a model response does not belong on {name}")
            continue
        try:
            response = ModelResponse.decode((event.data or "").encode())
        except ValueError as error:
            report.fail(*where, f"an unreadable model response: {cut(str(error), 200)}")
            continue
        if response.session_id != tree.session_id:
            report.fail(*where, "a model response of another session")
        elif event.metadata.get(events.RESPONSE_ID_KEY) not in (None, response.response_id):
            report.fail(*where, "aj.response_id is not the response's id")
        else:
            count += 1
            total += response.usage
    if count and not report.failed("usage"):
        report.lines.append(
            f"usage: {plural(count, 'model response')}; {total.input_tokens} input "
            f"({total.cached_input_tokens} cached), {total.output_tokens} output "
            f"({total.reasoning_tokens} reasoning) tokens"
        )
