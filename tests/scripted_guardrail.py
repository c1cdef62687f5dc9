"""A guardrail service on loopback whose decision per action type a test scripts.

It answers ``POST /v1/validate`` over real HTTP (:mod:`http_stub`) with the
decision set for the request's action type (ALLOW when none is set); a MODIFY
rewrites the payload with the action type's function below, so a test can see
the modification land where it should.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from http_stub import HttpStub, Received, Reply


def modify_input(payload: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": payload["content"].replace("secret", "[REDACTED]")}


def modify_tool_call(payload: dict[str, Any]) -> dict[str, Any]:
    arguments = json.loads(payload["function"]["arguments"])
    if "order_id" in arguments:
        arguments["order_id"] = "REDACTED-" + str(arguments["order_id"])
    function = {**payload["function"], "arguments": json.dumps(arguments)}
    return {**payload, "function": function}


def modify_handoff(payload: dict[str, Any]) -> dict[str, Any]:
    arguments = json.loads(payload["input"] or "{}")
    if "reason" in arguments:
        arguments["reason"] = "[REDACTED]"
    return {**payload, "input": json.dumps(arguments)}


def modify_response(payload: str) -> str:
    return payload.replace("secret", "[REDACTED]")


MODIFIERS: dict[str, Callable[[Any], Any]] = {
    "AGENT_INPUT": modify_input,
    "TOOL_CALL": modify_tool_call,
    "AGENT_HANDOFF": modify_handoff,
    "AGENT_RESPONSE": modify_response,
}


Replier = Callable[[dict[str, Any]], Reply]


class ScriptedGuardrail(HttpStub):
    """Decides ``decisions[action_type]`` (ALLOW by default) for every request.

    ``replies[action_type]``, when set, builds the whole reply from the request
    body instead (for faults); ``before`` is called with each body first.
    """

    def __init__(
        self,
        decisions: dict[str, str] | None = None,
        *,
        replies: dict[str, Replier] | None = None,
        before: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        super().__init__(self._answer)
        self.decisions = dict(decisions or {})
        self.replies = dict(replies or {})
        self.before = before

    def asked(self, action_type: str | None = None) -> list[dict[str, Any]]:
        """The request bodies received (of one action type)."""
        bodies = [request.json() for request in self.received]
        return [b for b in bodies if action_type is None or b["action_type"] == action_type]

    def _answer(self, request: Received) -> Reply:
        body = request.json()
        if self.before is not None:
            self.before(body)
        if body["action_type"] in self.replies:
            return self.replies[body["action_type"]](body)
        decision = self.decisions.get(body["action_type"], "ALLOW")
        answer: dict[str, Any] = {
            "action_id": body["action_id"],
            "decision": decision,
            "reason_code": f"SCRIPTED_{decision}",
            "reason_message": f"scripted {decision} for {body['action_type']}",
        }
        if decision == "MODIFY":
            answer["modified_payload"] = MODIFIERS[body["action_type"]](body["payload"])
        return Reply(body=json.dumps(answer).encode())
