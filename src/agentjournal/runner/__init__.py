"""The manifest runner: seed 000's ``agent.yml`` and stdin/stdout contract on a journal session.

``agentjournal run --manifests DIR --agent ID`` reads one JSON object on stdin,
runs the agent on the journal session of its ``thread_id`` and writes one JSON
object on stdout (:mod:`agentjournal.runner.contract`). Modules:

- :mod:`~agentjournal.runner.manifest` — ``agent.yml`` as strict models; a directory of them
- :mod:`~agentjournal.runner.tools` — tool implementations bound by name, arguments checked
- :mod:`~agentjournal.runner.toolkit` — what a tool body may use: the read-only config and
  instrumented HTTP clients (light: no Agents SDK)
- :mod:`~agentjournal.runner.contract` — the input and output objects (JSON Schemas shipped)
- :mod:`~agentjournal.runner.script` — ``--model-script``: scripted models, no API key
- :mod:`~agentjournal.runner.handoff` — ``system::handoff``
- :mod:`~agentjournal.runner.state` — thread state as events on the session
- :mod:`~agentjournal.runner.run` — one invocation

A tool body imports what it needs from here::

    from agentjournal.runner import http_client, invocation_config
"""

from __future__ import annotations

from agentjournal.runner.toolkit import async_http_client, http_client, invocation_config

__all__ = ["async_http_client", "http_client", "invocation_config"]
