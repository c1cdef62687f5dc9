"""Test support shipped with agentjournal.

* :mod:`agentjournal.testing.store_conformance`: the abstract conformance suite
  every :class:`~agentjournal.store.contract.EventStore` must pass; subclass it once
  per backend (needs the ``test`` extra: pytest, pytest-asyncio).
* :mod:`agentjournal.testing.session_conformance`: the abstract conformance
  suite of the OpenAI Agents SDK's ``Session`` contract, for any session class
  (the SDK's ``SQLiteSession`` and :class:`~agentjournal.JournalSession` pass
  it); subclass it with an ``open_session`` fixture (same extra).
* :mod:`agentjournal.testing.kurrentdb_double`: an in-process KurrentDB gRPC
  server for tests (never for production data).
"""
