"""The one way tests drive the SDK's ``Runner``: ``Runner.run`` or ``Runner.run_streamed``.

Runner-level tests run each scenario both ways (``@pytest.mark.parametrize("method",
METHODS)``): a streamed run writes the session at other moments and re-reads its tail to
compare fingerprints, so a session that passes one way may fail the other. Every run is
offline (``RunConfig(tracing_disabled=True)``, models are ``agents.testing.ScriptedModel``).

:func:`sdk_reference` is what the SDK's own ``SQLiteSession`` holds after the same runs:
the history a journal session must replay exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from agents import Agent, RunConfig, RunHooks, Runner, SQLiteSession
from agents.items import TResponseInputItem
from agents.memory import Session
from agents.result import RunResultBase

__all__ = ["CONFIG", "METHODS", "Method", "drive", "sdk_reference"]

Method = Literal["run", "run_streamed"]
METHODS: tuple[Method, ...] = ("run", "run_streamed")
CONFIG = RunConfig(tracing_disabled=True)


async def drive(
    agent: Agent[Any],
    input: Any,
    *,
    method: Method = "run",
    session: Session | None = None,
    hooks: RunHooks[Any] | None = None,
    config: RunConfig = CONFIG,
    **options: Any,
) -> RunResultBase:
    """Run ``agent`` on ``input`` to its end with ``method``; the run's result.

    A streamed run is consumed event by event (that is when it runs); ``options`` go to
    the runner as they are (``max_turns``, ``context``, ...). Whatever the run raises,
    streamed or not, reaches the caller.
    """
    if method == "run":
        return await Runner.run(
            agent, input, session=session, hooks=hooks, run_config=config, **options
        )
    result = Runner.run_streamed(
        agent, input, session=session, hooks=hooks, run_config=config, **options
    )
    async for _ in result.stream_events():
        pass
    return result


async def sdk_reference(
    method: Method, runs: Sequence[tuple[Callable[[], Agent[Any]], str]]
) -> list[TResponseInputItem]:
    """The flat history the SDK's own ``SQLiteSession`` holds after ``runs`` (no hooks).

    Each run is (a function building its agent, the user's input): scripted models are
    used up as they run, so the reference builds its own agents.
    """
    reference = SQLiteSession("reference")
    try:
        for build, text in runs:
            await drive(build(), text, method=method, session=reference)
        return await reference.get_items()
    finally:
        reference.close()
