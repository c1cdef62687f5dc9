"""Erasing one subject leaves every other subject's content readable and verifiable: in
other sessions of the same store, and in the same session tree, where each turn's content
(its subsession's too) is sealed under the subject of the session object that wrote it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal, events
from agentjournal.audit.verify import verify_records
from agentjournal.ledger import SigningKey
from agentjournal.shred import MemoryKeyStore
from agentjournal.shred.fields import ERASED
from agentjournal.walk import read_tree
from drive import drive

KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}
TREE = "shared-1"
SUB = "AgentSubsession-shared-1-sub-billing-"


def said(subject: str) -> list[str]:
    """What ``subject`` says in its turn: its message, a tool's argument and output (in the
    subsession), the receiver's answer."""
    return [f"TWO-{subject}-{part}-4d2c" for part in ("input", "arg", "output", "final")]


def graph(subject: str, call: str) -> Agent[Any]:
    """triage hands off (call ``call``) to billing, which looks an order up and answers."""
    _, arg, output, final = said(subject)

    @function_tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return output

    billing: Agent[Any] = Agent(
        name="billing",
        model=ScriptedModel(
            [
                [function_call("lookup_order", {"order_id": arg}, call_id=f"t-{call}")],
                [assistant_message(final, item_id=f"m-{call}")],
            ]
        ),
        tools=[lookup_order],
    )
    return Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id=call)]]),
        handoffs=[billing],
    )


def shown(items: list[Any]) -> str:
    return json.dumps(items)


def found(text: str, texts: list[str]) -> list[str]:
    return [t for t in texts if t in text]


async def turn(journal: Journal, session_id: str, subject: str, call: str) -> None:
    session = journal.session(session_id, user_id="alice", subject=subject)
    await drive(graph(subject, call), said(subject)[0], session=session, hooks=session)
    await session.checkpoint()


async def verified(journal: Journal, session_id: str) -> str:
    report = verify_records(await read_tree(journal.store, session_id), TRUSTED)
    assert report.ok, report.text()
    return report.text()


@pytest.mark.parametrize("uri", ["sqlite", "kurrentdb"])
async def test_erasing_one_subject_of_a_session_tree_leaves_the_other_readable_and_verified(
    uri: str, request: pytest.FixtureRequest
) -> None:
    """alice's turn hands off to billing, then bob's turn on the same session hands off
    again (a subsession each); bob also has a session of his own. Erasing alice erases her
    turn and her subsession only; erasing bob then erases his; each step verifies."""
    target = (
        "sqlite://:memory:" if uri == "sqlite" else request.getfixturevalue("kurrentdb_double").uri
    )
    async with Journal.open(target, keys=MemoryKeyStore(), signing_key=KEY) as journal:
        await turn(journal, TREE, "alice", "h1")
        await turn(journal, TREE, "bob", "h2")
        await turn(journal, "bob-own", "bob", "h3")
        before = shown(await journal.session(TREE, subject="bob").get_items())
        assert found(before, said("alice") + said("bob")) == said("alice") + said("bob")

        erasure = await journal.erase(subject="alice", reason="request 19", by="dpo")
        assert erasure.sessions == (TREE,)
        tree = await journal.store.read(f"AgentSession-{TREE}")
        (erased,) = [e for e in tree if e.type == events.SUBJECT_ERASED]
        assert events.SubjectErased.decode(erased.data).streams == [
            f"AgentSession-{TREE}",
            f"{SUB}h1",
        ]
        after = shown(await journal.session(TREE, subject="bob").get_items())
        assert found(after, said("alice")) == []
        assert found(after, said("bob")) == said("bob")
        assert ERASED in after
        own = shown(await journal.session("bob-own", subject="bob").get_items())
        assert found(own, said("bob")) == said("bob")
        text = await verified(journal, TREE)
        assert f"erasure: AgentSession-{TREE}: content of subject alice erased at " in text
        assert f"erasure: {SUB}h1: content of subject alice erased at " in text
        assert f"{SUB}h2: content of subject" not in text
        assert "erasure:" not in await verified(journal, "bob-own")

        # bob's own turn after alice's erasure is sealed and readable like any other.
        await turn(journal, TREE, "bob", "h4")
        assert found(shown(await journal.session(TREE, subject="bob").get_items()), said("bob"))
        await verified(journal, TREE)

        erasure = await journal.erase(subject="bob", reason="request 20", by="dpo")
        assert erasure.sessions == ("bob-own", TREE)
        last = shown(await journal.session(TREE, subject="bob").get_items())
        assert found(last, said("alice") + said("bob")) == []
        text = await verified(journal, TREE)
        assert f"erasure: {SUB}h2: content of subject bob erased at " in text
        assert f"erasure: {SUB}h1: content of subject alice erased at " in text
        await verified(journal, "bob-own")
