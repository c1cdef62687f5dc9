"""``--model-script FILE``: each agent's model answers, scripted, so a run needs no API key.

The file is YAML or JSON (JSON is YAML): a mapping of agent id to a list of
turns. Each time that agent's model is called it gives the next turn, which is
either a text answer or a list of tool calls::

    io.clawpedia.agents.jira-ticket-manager:
      - tool_calls:
          - name: get_ticket_details
            arguments: {ticket_id: PROJ-123}
      - text: PROJ-123 is in progress.
    io.clawpedia.agents.jira-admin:
      - text: Project Bluebird is created.

A tool call may name its ``id`` (default ``call_<agent id>_<turn>_<position>``,
unique within a run); ``arguments`` is an object or a JSON string (sent as it is,
e.g. to script a malformed call). A plain string is short for ``{text: ...}``.
An agent called more often than it has turns fails the run (``MODEL_ERROR``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from agents.models.interface import Model
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal.errors import InvalidInput


class ModelScript:
    """The scripted turns of each agent id (one :class:`ScriptedModel` per agent)."""

    def __init__(self, turns: dict[str, list[list[Any]]], source: str) -> None:
        self._models = {agent: ScriptedModel(steps) for agent, steps in turns.items()}
        self.source = source

    def model_for(self, agent_id: str) -> Model:
        """The model of ``agent_id``; an agent the script does not name gets no turn at all."""
        found = self._models.get(agent_id)
        if found is None:
            found = self._models[agent_id] = ScriptedModel([])
        return found

    def agents(self) -> list[str]:
        """The agent ids the script names."""
        return sorted(self._models)


def load_script(path: str | os.PathLike[str], known: set[str] | None = None) -> ModelScript:
    """Read a model script.

    Args:
        path: The YAML or JSON file.
        known: The agent ids of the manifests: a script naming another id is refused.

    Raises:
        InvalidInput: The file cannot be read or does not have the documented shape;
            the message names the agent and turn.
    """
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInput(f"{path}: cannot read the model script: {error}") from None
    except yaml.YAMLError:
        raise InvalidInput(f"{path}: the model script is not valid YAML or JSON") from None
    return script_from(document, str(path), known)


def script_from(
    document: Any, where: str, known: set[str] | None = None, *, ids: str = ""
) -> ModelScript:
    """A model script from its parsed document (a mapping of agent id to a list of turns).

    Args:
        document: The parsed YAML or JSON.
        where: What to name in messages (the file, and a place in it).
        known: The agent ids that may be named (None: any).
        ids: Put before the default item and call ids (``call_{ids}{agent}_{turn}_{n}``),
            so that scripts used in one session give distinct ids.

    Raises:
        InvalidInput: ``document`` does not have the documented shape.
    """
    if not isinstance(document, dict):
        raise InvalidInput(f"{where}: expected a mapping of agent id to a list of turns")
    turns: dict[str, list[list[Any]]] = {}
    for agent, steps in document.items():
        if known is not None and agent not in known:
            raise InvalidInput(
                f"{where}: agent {agent!r} has no manifest (known: {', '.join(sorted(known))})"
            )
        if not isinstance(steps, list):
            raise InvalidInput(f"{where}: {agent}: expected a list of turns")
        turns[str(agent)] = [
            _turn(step, f"{where}: {agent} turn {number}", prefix=f"{ids}{agent}_{number}")
            for number, step in enumerate(steps, start=1)
        ]
    return ModelScript(turns, where)


def _turn(step: Any, where: str, *, prefix: str) -> list[Any]:
    if isinstance(step, str):
        step = {"text": step}
    if not isinstance(step, dict) or len(step) != 1 or not {"text", "tool_calls"} >= set(step):
        raise InvalidInput(f"{where}: expected {{text: ...}} or {{tool_calls: [...]}}")
    if "text" in step:
        if not isinstance(step["text"], str):
            raise InvalidInput(f"{where}: text must be a string")
        return [assistant_message(step["text"], item_id=f"msg_{prefix}")]
    calls = step["tool_calls"]
    if not isinstance(calls, list) or not calls:
        raise InvalidInput(f"{where}: tool_calls must be a non-empty list")
    output: list[Any] = []
    for position, call in enumerate(calls, start=1):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise InvalidInput(f"{where}: tool call {position} needs a name")
        if set(call) - {"name", "arguments", "id"}:
            raise InvalidInput(f"{where}: tool call {position} takes name, arguments and id only")
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict | str):
            raise InvalidInput(f"{where}: tool call {position}: arguments is an object or a string")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        call_id = call.get("id", f"call_{prefix}_{position}")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput(f"{where}: tool call {position}: id must be a non-empty string")
        output.append(function_call(call["name"], arguments, call_id=call_id))
    return output
