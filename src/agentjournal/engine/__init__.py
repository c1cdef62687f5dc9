"""The SDK-free core of a journal session: what its streams hold, how a write is planned
and made, and how the flat history is read back.

Nothing here imports the Agents SDK: items are plain dicts, runs are what the
adapter (:mod:`agentjournal.sdk`) tells it.
"""
