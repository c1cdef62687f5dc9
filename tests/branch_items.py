"""Items the branch tests write: a user message and an assistant message as the SDK's
Runner stores them (one of each per turn)."""

from __future__ import annotations

from typing import Any

from agents import Agent, RunContextWrapper
from agents.result import RunResult
from agents.testing import ScriptedModel
from agents.usage import Usage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails


def user(text: str) -> Any:
    """A user message."""
    return {"role": "user", "content": text}


def assistant(text: str) -> Any:
    """An assistant message, its id derived from its text."""
    return {
        "id": f"msg_{text}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def run_result(requests: int, tokens: int) -> RunResult:
    """A finished run's result with this usage (what ``store_run_usage`` reads)."""
    usage = Usage(
        requests=requests,
        input_tokens=tokens,
        output_tokens=tokens // 2,
        total_tokens=tokens + tokens // 2,
        input_tokens_details=InputTokensDetails(cache_write_tokens=0, cached_tokens=tokens // 10),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=1),
    )
    return RunResult(
        input="x",
        new_items=[],
        raw_responses=[],
        final_output="x",
        input_guardrail_results=[],
        output_guardrail_results=[],
        tool_input_guardrail_results=[],
        tool_output_guardrail_results=[],
        context_wrapper=RunContextWrapper(context=None, usage=usage),
        _last_agent=Agent(name="a", model=ScriptedModel()),
        interruptions=[],
    )
