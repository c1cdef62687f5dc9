"""The read side: tools that read what sessions wrote, and write nothing but their own
projection state.

- :mod:`~agentjournal.read.catalog` — one row per session tree, folded from the global order.
- :mod:`~agentjournal.read.lines` — a session's lines (main and its branches) for the tools.
- :mod:`~agentjournal.read.replay` — the flat history the SDK got back, then and now.
- :mod:`~agentjournal.read.views` — a session tree as a person reads it.
- :mod:`~agentjournal.read.usage` — token totals by model, agent or session, with cost.
- :mod:`~agentjournal.read.traces` — a session tree as OpenTelemetry span data.
- :mod:`~agentjournal.read.projections` — where a reader of the global order is, saved.
"""
