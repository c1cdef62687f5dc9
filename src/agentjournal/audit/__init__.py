"""The offline audit: the bundle format and its verifier (pure: no store, no asyncio, no
engine, no network, no Agents SDK).

- :mod:`~agentjournal.audit.bundle` — the bundle format (one JSON file per session tree).
- :mod:`~agentjournal.audit.verify` — verifying a bundle or a tree's records.
- :mod:`~agentjournal.audit.export` — exporting a bundle from a store (the one part that
  reads a store; import it by name).
"""
