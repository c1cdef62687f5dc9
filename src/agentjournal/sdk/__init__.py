"""The Agents SDK adapter: :class:`~agentjournal.sdk.session.JournalSession` is the SDK's
``Session`` and ``RunHooks`` in one object, with the guardrail and authority wiring and
the tracing that only a run can see. Everything below it is SDK-free (:mod:`agentjournal.engine`).
"""
