"""Test support shipped with agentjournal.

* :mod:`agentjournal.testing.store_conformance`: the abstract conformance suite
  every :class:`~agentjournal.store.base.EventStore` must pass; subclass it once
  per backend (needs the ``test`` extra: pytest, pytest-asyncio).
* :mod:`agentjournal.testing.kurrentdb_double`: an in-process KurrentDB gRPC
  server for tests (never for production data).
"""
