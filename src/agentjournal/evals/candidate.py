"""The agent an experiment runs in place of the recorded one, and its scripted models.

A candidate is named two ways:

- ``MODULE:ATTR`` (``MODULE`` a dotted module or a ``.py`` file): an ``agents.Agent``.
- ``DIR`` or ``DIR:ID[@VERSION]``: a directory of ``agent.yml`` manifests, run as
  ``agentjournal run`` runs them (:mod:`agentjournal.runner.agents`); its tools are the
  ``agentjournal.tools`` entry points and ``DIR/tools.py`` when there is one. ``DIR`` alone
  names its one agent.

With a model script each agent's model is a scripted one (the runner's ``--model-script``
turns); the candidate is built afresh for every turn, so what one turn consumed never
shifts another (a rerun after a crash gets the same answers).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import Agent

from agentjournal._modules import load_file
from agentjournal.errors import InvalidInput
from agentjournal.runner.script import ModelScript


@dataclass(frozen=True)
class Candidate:
    """An agent ready to be built for one turn.

    Attributes:
        spec: How it was named (recorded with the experiment).
        name: The name of the agent a turn starts with.
        agents: The agent names a model script may name.
        scripted_only: Whether it needs a model script (manifests name models on OpenAI,
            which need ``$OPENAI_API_KEY``).
    """

    spec: str
    name: str
    agents: frozenset[str]
    scripted_only: bool
    _build: Callable[[ModelScript | None], Agent[Any]]

    def agent(self, script: ModelScript | None) -> Agent[Any]:
        """A fresh agent graph, its models scripted by ``script`` when given."""
        return self._build(script)


def load_candidate(spec: str) -> Candidate:
    """Load the candidate ``spec`` names (see the module's docstring).

    Raises:
        InvalidInput: Nothing loads under that name, it is not an ``agents.Agent``, or a
            manifest directory does not load (one line naming what).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidInput("--candidate: give MODULE:AGENT or a manifest directory")
    where, _, attr = spec.rpartition(":")
    if Path(spec).is_dir():
        return _manifests(spec, Path(spec), None)
    if where and Path(where).is_dir():
        return _manifests(spec, Path(where), attr)
    if not where or not attr:
        raise InvalidInput(f"--candidate {spec}: not a directory of manifests, nor MODULE:AGENT")
    return _module_agent(spec, where, attr)


def _module_agent(spec: str, module_name: str, attr: str) -> Candidate:
    module = _import(spec, module_name)
    found: Any = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise InvalidInput(f"--candidate {spec}: {module_name} has no {attr}")
        found = getattr(found, part)
    if not isinstance(found, Agent):
        raise InvalidInput(
            f"--candidate {spec}: {attr} is a {type(found).__name__}, not an agents.Agent"
        )
    agent: Agent[Any] = found
    names = frozenset(a.name for a in _graph(agent))

    def build(script: ModelScript | None) -> Agent[Any]:
        return agent if script is None else _scripted(agent, script)

    return Candidate(spec, agent.name, names, False, build)


def _import(spec: str, module_name: str) -> Any:
    if module_name.endswith(".py") or os.sep in module_name:
        path = Path(module_name).resolve()
        if not path.is_file():
            raise InvalidInput(f"--candidate {spec}: no such file {module_name}")
        return load_file(path, "agentjournal_candidate", f"--candidate {spec}")
    try:
        return importlib.import_module(module_name)
    except Exception as error:
        raise InvalidInput(
            f"--candidate {spec}: importing {module_name} failed: {type(error).__name__}: {error}"
        ) from None


def _graph(agent: Agent[Any]) -> list[Agent[Any]]:
    """``agent`` and every agent its handoffs reach (given as agents), each once."""
    seen: dict[int, Agent[Any]] = {}
    todo = [agent]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen[id(current)] = current
        todo.extend(h for h in current.handoffs if isinstance(h, Agent))
    return list(seen.values())


def _scripted(agent: Agent[Any], script: ModelScript) -> Agent[Any]:
    """A copy of ``agent``'s graph whose models are the script's, by agent name.

    Handoffs given as agents are copied too; a ``handoff(...)`` object keeps the agent it
    was made with (and that agent's model).
    """
    copies: dict[int, Agent[Any]] = {}
    for original in _graph(agent):
        copies[id(original)] = original.clone(model=script.model_for(original.name))
    for original in _graph(agent):
        copy = copies[id(original)]
        copy.handoffs = [copies[id(h)] if isinstance(h, Agent) else h for h in original.handoffs]
    return copies[id(agent)]


def _manifests(spec: str, root: Path, reference: str | None) -> Candidate:
    from agentjournal.runner.agents import manifest_desk
    from agentjournal.runner.manifest import load_catalog
    from agentjournal.runner.tools import check_bindings, load_registry

    catalog = load_catalog(root)
    ids = catalog.ids()
    if reference is None:
        if len(ids) != 1:
            raise InvalidInput(
                f"--candidate {spec}: the directory holds {len(ids)} agents "
                f"({', '.join(ids)}): name one as DIR:ID"
            )
        reference = ids[0]
    first = catalog.resolve(reference)
    tools = root / "tools.py"
    registry = load_registry([str(tools)] if tools.is_file() else [])
    check_bindings(catalog, registry)

    def build(script: ModelScript | None) -> Agent[Any]:
        desk = manifest_desk(catalog, registry, script, {})
        return desk.resolve(first.key)

    return Candidate(spec, first.id, frozenset(ids), True, build)
