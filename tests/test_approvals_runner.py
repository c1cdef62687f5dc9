"""``agentjournal run`` and approvals: a manifest tool declared ``needs_approval`` stops the
run (``status: "interrupted"``, the waiting calls in ``approvals``, the run held on the
thread); a later invocation, another process, answers with ``approvals`` on stdin and the
held run resumes.

Every invocation is a real ``agentjournal run`` process over a real SQLite file, with
scripted models (``--model-script``), as tests/runner_cli.py runs it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentjournal import Journal
from agentjournal import events as ev
from agentjournal.runner.contract import schema_files
from agentjournal.runner.manifest import ManifestError, load_catalog
from runner_cli import ADMIN, MANIFESTS, Invoked, invoke, request, write_script

pytestmark = pytest.mark.slow  # processes

THREAD = "thread_approve"
CREATE = {ADMIN: [{"tool_calls": [{"name": "create_project", "arguments": {"name": "Bluebird"}}]}]}


def guarded_manifests(folder: Path) -> Path:
    """The sample manifests, the admin's ``create_project`` declared ``needs_approval``."""
    copy = folder / "manifests"
    shutil.copytree(MANIFESTS, copy)
    path = copy / "jira-admin" / "agent.yml"
    text = path.read_text(encoding="utf-8")
    marked = text.replace(
        '  - type: "function"\n', '  - type: "function"\n    needs_approval: true\n'
    )
    assert marked != text
    path.write_text(marked, encoding="utf-8")
    return copy


def said(text: str) -> dict[str, list[Any]]:
    return {ADMIN: [{"text": text}]}


def checked(invoked: Invoked) -> dict[str, Any]:
    """The output, which must fit the shipped output schema."""
    output = invoked.output
    jsonschema.validate(output, schema_files()["invocation-output.schema.json"])
    return output


class Thread:
    """One thread's invocations against one store, each another process."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.uri = f"sqlite:///{folder / 'journal.db'}"
        self.manifests = guarded_manifests(folder)
        self.scripts = 0

    async def run(self, turns: dict[str, list[Any]], **changes: Any) -> Invoked:
        self.scripts += 1
        script = write_script(self.folder, turns, f"script-{self.scripts}.json")
        stdin = request(thread_id=THREAD, **changes)
        return await invoke(
            uri=self.uri, stdin=stdin, script=script, agent=ADMIN, manifests=self.manifests
        )

    async def answer(self, *answers: dict[str, Any], turns: dict[str, list[Any]]) -> Invoked:
        return await self.run(turns, input_message=None, approvals=list(answers))

    async def events(self) -> list[Any]:
        async with Journal.open(self.uri) as journal:
            return await journal.store.read_all()

    async def items(self) -> list[Any]:
        async with Journal.open(self.uri) as journal:
            return await journal.session(THREAD).get_items()


async def interrupted(thread: Thread) -> dict[str, Any]:
    """The first invocation: it stops on ``create_project``."""
    invoked = await thread.run(CREATE)
    assert invoked.code == 4, invoked.stdout + invoked.stderr
    output = checked(invoked)
    assert output["status"] == "interrupted"
    assert (output["response"], output["error"]) == (None, None)
    assert output["agent_id"] == ADMIN
    (asked,) = output["approvals"]
    assert (asked["tool"], asked["agent"]) == ("create_project", ADMIN)
    assert json.loads(asked["arguments"]) == {"name": "Bluebird"}
    found: dict[str, Any] = asked
    return found


async def test_a_call_that_needs_approval_interrupts_and_a_later_process_approves_it(
    tmp_path: Path,
) -> None:
    thread = Thread(tmp_path)
    asked = await interrupted(thread)
    types = [e.type for e in await thread.events()]
    assert ev.INTERRUPT_ISSUED in types
    assert ev.RUN_PAUSED in types
    assert not any(i.get("type") == "function_call_output" for i in await thread.items())

    answer = {"request_id": asked["request_id"], "approve": True, "by": "dana", "reason": "ok"}
    invoked = await thread.answer(answer, turns=said("Bluebird is created with key BLUE."))
    assert invoked.code == 0, invoked.stdout + invoked.stderr
    output = checked(invoked)
    assert output["status"] == "completed"
    assert output["response"] == "Bluebird is created with key BLUE."
    assert output["approvals"] == []
    resolved = [e for e in await thread.events() if e.type == ev.INTERRUPT_RESOLVED]
    decided = ev.ApprovalDecided.decode(resolved[0].data)
    assert (decided.outcome, decided.by, decided.reason) == ("approved", "dana", "ok")
    (ran,) = [i for i in await thread.items() if i.get("type") == "function_call_output"]
    assert "BLUE" in str(ran["output"])  # the tool's body ran, once

    again = await thread.answer(answer, turns=said("again"))
    assert again.code == 1
    assert checked(again)["error"]["code"] == "INVALID_INPUT"
    assert "does not wait for an answer" in again.output["error"]["message"]


async def test_a_rejected_call_does_not_run_and_the_model_is_told(tmp_path: Path) -> None:
    thread = Thread(tmp_path)
    asked = await interrupted(thread)
    answer = {"request_id": asked["request_id"], "approve": False, "by": "lee"}
    invoked = await thread.answer(answer, turns=said("I did not create Bluebird."))
    assert invoked.code == 0, invoked.stdout + invoked.stderr
    assert checked(invoked)["response"] == "I did not create Bluebird."
    resolved = [e for e in await thread.events() if e.type == ev.INTERRUPT_RESOLVED]
    decided = ev.ApprovalDecided.decode(resolved[0].data)
    assert (decided.outcome, decided.by, decided.reason) == ("rejected", "lee", "")
    (output,) = [i for i in await thread.items() if i.get("type") == "function_call_output"]
    assert "BLUE" not in str(output["output"])  # the SDK's rejection message, not the body's


async def test_bad_answers_are_the_contract_s_error_and_write_nothing(tmp_path: Path) -> None:
    thread = Thread(tmp_path)
    asked = await interrupted(thread)
    request_id = asked["request_id"]
    before = len(await thread.events())
    bad: list[tuple[list[Any], str]] = [
        ([{"request_id": "nope", "approve": True, "by": "dana"}], "does not wait for an answer"),
        ([{"request_id": request_id, "approve": True}], "approvals.0.by"),
        ([{"request_id": request_id, "approve": True, "by": " "}], "who decides"),
        ([{"request_id": request_id, "approve": "yes", "by": "dana"}], "approvals.0.approve"),
        (
            [
                {"request_id": request_id, "approve": True, "by": "dana"},
                {"request_id": request_id, "approve": False, "by": "lee"},
            ],
            "answered twice",
        ),
        ([{"request_id": request_id, "approve": True, "by": "dana", "extra": 1}], "extra"),
    ]
    for answers, says in bad:
        invoked = await thread.run(said("never"), input_message=None, approvals=answers)
        assert invoked.code == 1, (answers, invoked.stdout)
        output = checked(invoked)
        assert output["status"] == "failed"
        assert output["error"]["code"] == "INVALID_INPUT"
        assert says in output["error"]["message"], (says, output["error"])
    with_message = await thread.run(
        said("never"), approvals=[{"request_id": request_id, "approve": True, "by": "dana"}]
    )
    assert with_message.code == 1
    assert "input_message must be null" in with_message.output["error"]["message"]
    assert len(await thread.events()) == before
    other = await invoke(
        uri=thread.uri,
        stdin=request(
            thread_id="thread_other",
            input_message=None,
            approvals=[{"request_id": request_id, "approve": True, "by": "dana"}],
        ),
        script=write_script(tmp_path, said("never"), "other.json"),
        agent=ADMIN,
        manifests=thread.manifests,
    )
    assert other.code == 1
    assert "has no run that waits for approval" in other.output["error"]["message"]
    assert len(await thread.events()) == before


async def test_a_call_answered_outside_the_runner_resumes_on_an_invocation_without_answers(
    tmp_path: Path,
) -> None:
    """``agentjournal approve`` answers the waiting call; an invocation with
    ``input_message: null`` and no answers resumes the held run with the recorded answer.
    Before the answer, and once the run has gone on, such an invocation is refused
    (INVALID_INPUT, nothing written)."""
    from approvals_cli_support import answer_from_the_command_line

    thread = Thread(tmp_path)
    asked = await interrupted(thread)
    early = await thread.run(said("never"), input_message=None)
    assert early.code == 1, early.stdout
    assert "waits for an answer: give approvals" in checked(early)["error"]["message"]

    await answer_from_the_command_line(thread.uri, THREAD, asked["request_id"], by="dana")
    invoked = await thread.run(said("Bluebird is created with key BLUE."), input_message=None)
    assert invoked.code == 0, invoked.stdout + invoked.stderr
    output = checked(invoked)
    assert (output["status"], output["response"]) == (
        "completed",
        "Bluebird is created with key BLUE.",
    )
    (decided,) = [
        ev.ApprovalDecided.decode(e.data)
        for e in await thread.events()
        if e.type == ev.INTERRUPT_RESOLVED
    ]
    assert (decided.outcome, decided.by) == ("approved", "dana")
    outputs = [i for i in await thread.items() if i.get("type") == "function_call_output"]
    assert len(outputs) == 1

    before = len(await thread.events())
    again = await thread.run(said("never"), input_message=None)
    assert again.code == 1
    assert "no held run with answered calls" in checked(again)["error"]["message"]
    assert len(await thread.events()) == before


def test_a_manifest_tool_declares_needs_approval_as_a_boolean(tmp_path: Path) -> None:
    manifests = guarded_manifests(tmp_path)
    admin = load_catalog(str(manifests)).resolve(ADMIN)
    assert [t.needs_approval for t in admin.tools] == [True]
    path = manifests / "jira-admin" / "agent.yml"
    path.write_text(
        path.read_text(encoding="utf-8").replace("needs_approval: true", 'needs_approval: "yes"'),
        encoding="utf-8",
    )
    with pytest.raises(ManifestError, match="needs_approval"):
        load_catalog(str(manifests))
