"""Erasure that keeps the proof, offline: a customer's conversation sealed under the
customer's key, then erased from the command line, and the session still verifies.

Run ``python samples/erasure.py`` to write session ``support-4900`` for data subject
``user-42`` on a journal opened with ``keys=`` (the embedded key store: ``$AGENTJOURNAL_KEYS``,
else ``./keys.db``): every message, tool argument and output is sealed under the subject's
key before it is chained. Erase it with ``agentjournal erase --subject user-42 --reason TEXT
--as NAME --keys keys.db``; ``python samples/erasure.py --show`` then prints the history with
``[erased]`` where the content was, and runs one more turn on it. The model is the SDK's
``ScriptedModel``; the store is ``$AGENTJOURNAL_URI``, else ``./agentjournal.db``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal

SESSION = "support-4900"
SUBJECT = "user-42"
CONFIG = RunConfig(tracing_disabled=True)


def agent(answer: str, *, lookup: bool) -> Agent[Any]:
    @function_tool
    def find_card(last_four: str) -> str:
        """Find the customer's card."""
        return f"card ending {last_four}, holder Jane Example"

    steps: list[Any] = [[assistant_message(answer)]]
    if lookup:
        steps.insert(0, [function_call("find_card", {"last_four": "1111"}, call_id="c1")])
    return Agent(name="support", model=ScriptedModel(steps), tools=[find_card])


async def write(keys: str) -> None:
    async with Journal.open(keys=keys) as journal:
        session = journal.session(SESSION, user_id=SUBJECT)
        text = "I am Jane Example, my card ending 1111 was charged twice"
        result = await Runner.run(
            agent("Refunded to the card ending 1111.", lookup=True),
            text,
            session=session,
            hooks=session,
            run_config=CONFIG,
        )
        print(f"support: {result.final_output}")
        print(f"sealed under {SUBJECT}'s key in {keys}: the store holds only ciphertext")


async def show(keys: str) -> None:
    async with Journal.open(keys=keys) as journal:
        session = journal.session(SESSION, user_id=SUBJECT)
        for item in await session.get_items():
            print(json.dumps(item))
        result = await Runner.run(
            agent("How else can I help?", lookup=False),
            "hello again",
            session=session,
            hooks=session,
            run_config=CONFIG,
        )
        print(f"a new turn runs on the erased history: support: {result.final_output}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--show", action="store_true", help="print the history, run one more turn")
    args = parser.parse_args()
    keys = os.environ.get("AGENTJOURNAL_KEYS", "keys.db")
    asyncio.run(show(keys) if args.show else write(keys))


if __name__ == "__main__":
    main()
