"""The SDK agents of a directory of manifests: one factory for ``run`` and experiments.

Each manifest becomes an ``agents.Agent`` named by its id, its declared tools bound to
their implementations, ``system__handoff`` to every other agent (through one
:class:`~agentjournal.runner.handoff.HandoffDesk` per invocation) and the rejected-handoff
tool; its model is the script's (``--model-script``) or the manifest's ``model.name`` on
OpenAI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents import Agent
from agents.models.interface import Model
from agents.models.openai_provider import OpenAIProvider

from agentjournal.runner import tools as tooling
from agentjournal.runner.handoff import HandoffDesk, HandoffModel

if TYPE_CHECKING:
    from agentjournal.runner.manifest import Catalog, Manifest
    from agentjournal.runner.script import ModelScript
    from agentjournal.runner.tools import Registry


def manifest_agent(
    manifest: Manifest, registry: Registry, script: ModelScript | None, desk: HandoffDesk
) -> Agent[Any]:
    """The SDK agent of ``manifest``: named by its id, its tools bound, ``system__handoff``."""
    inner: Model = (
        script.model_for(manifest.id)
        if script is not None
        else OpenAIProvider().get_model(manifest.model.name)
    )
    handoff = desk.handoff_for(manifest.id)
    return Agent(
        name=manifest.id,
        instructions=manifest.instructions,
        model=HandoffModel(inner, desk, manifest.id),
        tools=[*tooling.bind_tools(manifest, registry), desk.rejected_tool()],
        handoffs=[handoff] if handoff is not None else [],
    )


def manifest_desk(
    catalog: Catalog,
    registry: Registry,
    script: ModelScript | None,
    state: dict[str, Any],
) -> HandoffDesk:
    """A handoff desk over ``catalog``: its ``resolve(id)`` gives each manifest's agent
    (made on first use, then the same object); ``state`` is the thread state handoffs
    merge into."""
    agents: dict[str, Agent[Any]] = {}

    def resolve(agent_id: str) -> Agent[Any]:
        found = agents.get(agent_id)
        if found is None:
            found = agents[agent_id] = manifest_agent(
                catalog.resolve(agent_id), registry, script, desk
            )
        return found

    desk = HandoffDesk(catalog, resolve, state)
    return desk
