"""The runner's compliance checklist, one test per line, through the real ``agentjournal run``.

Every invocation is a child process fed one JSON object on stdin; the guardrail and a
JIRA-like tool API are real HTTP servers on loopback in this process. The runs a module
shares are made once, concurrently (``runs``); each test reads what it needs from them.
The anti-patterns the checklist names are shown caught or impossible at the end.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import pytest_asyncio

from agentjournal import Journal
from agentjournal.records import Record
from agentjournal.runner.contract import schema_files
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from agentjournal.walk import read_tree
from http_stub import HttpStub, Received, Reply
from runner_cli import (
    ADMIN,
    MANAGER,
    MANIFESTS,
    PARENT_SPAN,
    TRACE_ID,
    Invoked,
    invoke,
    request,
    write_script,
)
from scripted_guardrail import ScriptedGuardrail

SECRETS = ("sk-PLANTED-7f3a9c1e", "tok-PLANTED-41d2b8", "PLANTED-hook-5e6f")
TRACESTATE = "clawpedia=runner1"


def jira_api() -> HttpStub:
    """A JIRA-like REST API: answers a ticket's details, remembers every request."""

    def answer(received: Received) -> Reply:
        ticket = received.path.rsplit("/", 1)[-1]
        body = {"status": "In Progress", "assignee": "dana", "summary": f"ticket {ticket}"}
        return Reply(body=json.dumps(body).encode())

    return HttpStub(answer)


def config_for(api: HttpStub) -> dict[str, Any]:
    """Config with planted secrets: an API key, the tool's token, a webhook URL."""
    return {
        "openai_api_key": SECRETS[0],
        "jira_base_url": api.url,
        "jira_token": SECRETS[1],
        "webhook": f"https://hooks.invalid/{SECRETS[2]}",
    }


def modify_reply(body: dict[str, Any]) -> Reply:
    """MODIFY each action: another ticket, a marked handoff input, another final answer."""
    payload = body["payload"]
    action = body["action_type"]
    if action == "TOOL_CALL":
        try:
            arguments = json.loads(payload["function"]["arguments"])
        except ValueError:
            arguments = {}
        if "ticket_id" in arguments:
            arguments["ticket_id"] = "PROJ-124"
        payload = {
            **payload,
            "function": {**payload["function"], "arguments": json.dumps(arguments)},
        }
    elif action == "AGENT_HANDOFF":
        payload = {**payload, "input": "MODIFIED: " + payload["input"]}
    elif action == "AGENT_RESPONSE":
        payload = "MODIFIED final answer"
    answer = {
        "action_id": body["action_id"],
        "decision": "MODIFY",
        "reason_code": "SCRIPTED_MODIFY",
        "reason_message": "scripted",
        "modified_payload": payload,
    }
    return Reply(body=json.dumps(answer).encode())


@dataclass
class Run:
    """One invocation and everything around it."""

    invoked: Invoked
    db: Path
    guardrail: ScriptedGuardrail | None = None
    api: HttpStub | None = None

    @property
    def output(self) -> dict[str, Any]:
        return self.invoked.output

    async def records(self, thread: str = "thread_abc123") -> list[Record]:
        async with Journal.open(f"sqlite:///{self.db}") as journal:
            tree = await read_tree(journal.store, thread)
        return sorted(tree.records(), key=lambda record: record.position or 0)

    async def items(self, thread: str = "thread_abc123") -> list[dict[str, Any]]:
        async with Journal.open(f"sqlite:///{self.db}") as journal:
            return await journal.session(thread).get_items()  # type: ignore[return-value]


async def guarded_run(
    folder: Path,
    *,
    decisions: dict[str, str] | None = None,
    replies: dict[str, Callable[[dict[str, Any]], Reply]] | None = None,
    script: Path | None = None,
    trace: dict[str, str] | None = None,
) -> Run:
    """The sample conversation (ticket lookup, handoff, project) behind a scripted guardrail,
    with the ticket tool calling the loopback JIRA API."""
    folder.mkdir()  # noqa: ASYNC240 - a test's temporary folder
    db = folder / "journal.db"
    async with ScriptedGuardrail(decisions, replies=replies) as guardrail, jira_api() as api:
        stdin = request(
            state={"locale": "en"},
            config=config_for(api),
            trace=trace
            or {"trace_id": TRACE_ID, "parent_span_id": PARENT_SPAN, "tracestate": TRACESTATE},
        )
        kwargs: dict[str, Any] = {} if script is None else {"script": script}
        invoked = await invoke(
            uri=f"sqlite:///{db}", stdin=stdin, guardrails=guardrail.url, **kwargs
        )
    return Run(invoked, db, guardrail, api)


async def refused_run(folder: Path, script: Path) -> Run:
    """Refused handoff calls, behind a guardrail that MODIFYs every tool call."""
    folder.mkdir()  # noqa: ASYNC240 - a test's temporary folder
    db = folder / "journal.db"
    async with ScriptedGuardrail(replies={"TOOL_CALL": modify_reply}) as guardrail:
        invoked = await invoke(
            uri=f"sqlite:///{db}", stdin=request(), script=script, guardrails=guardrail.url
        )
    return Run(invoked, db, guardrail)


REFUSED_TURNS = {
    MANAGER: [
        {
            "tool_calls": [
                {
                    "name": "system::handoff",
                    "arguments": {"target_agent_id": "io.clawpedia.agents.nobody", "input": "x"},
                }
            ]
        },
        {"tool_calls": [{"name": "system__handoff", "arguments": "{not json"}]},
        {"text": "I will ask the other agent to do this."},
    ]
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The shared invocations, made concurrently (two at a time: two cores)."""
    base = tmp_path_factory.mktemp("runner")
    gate = asyncio.Semaphore(2)

    async def limited(make: Awaitable[Run]) -> Run:
        async with gate:
            return await make

    refused_script = write_script(base, REFUSED_TURNS, "refused.json")
    made = {
        "allow": guarded_run(base / "allow"),
        "modify": guarded_run(
            base / "modify",
            replies=dict.fromkeys(("TOOL_CALL", "AGENT_HANDOFF", "AGENT_RESPONSE"), modify_reply),
            trace={"traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-01", "tracestate": TRACESTATE},
        ),
        "block_tool": guarded_run(base / "block_tool", decisions={"TOOL_CALL": "BLOCK"}),
        "block_handoff": guarded_run(base / "block_handoff", decisions={"AGENT_HANDOFF": "BLOCK"}),
        "block_response": guarded_run(
            base / "block_response", decisions={"AGENT_RESPONSE": "BLOCK"}
        ),
        "refused": refused_run(base / "refused", refused_script),
    }
    done = await asyncio.gather(*(limited(make) for make in made.values()))
    return dict(zip(made, done, strict=True))


pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]  # processes


# -- the checklist -------------------------------------------------------------------


async def test_agent_exposes_a_valid_agent_yml_at_a_runner_accessible_location(
    runs: dict[str, Run], tmp_path: Path
) -> None:
    # The sample manifests are found by --manifests and run.
    assert runs["allow"].invoked.code == 0
    assert runs["allow"].output["status"] == "completed"
    # An invalid one is refused before anything runs: one JSON error naming file and field.
    broken = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, broken)
    manifest = broken / "jira-admin" / "agent.yml"
    manifest.write_text(manifest.read_text().replace('provider: "openai"', 'provider: "azure"'))
    db = tmp_path / "journal.db"
    invoked = await invoke(uri=f"sqlite:///{db}", stdin=request(), manifests=broken)
    assert invoked.code == 1
    assert invoked.output["thread_id"] == "thread_abc123"
    error = invoked.output["error"]
    assert error["code"] == "INVALID_MANIFEST"
    assert str(manifest) in error["message"]
    assert "field model.provider" in error["message"]
    assert "'openai'" in error["message"]
    assert not db.exists()


BAD_STDIN: dict[str, bytes] = {
    "empty": b"",
    "partial": json.dumps(request()).encode()[:-9],
    "two objects": json.dumps(request()).encode() * 2,
    "array": b"[]",
    "not utf-8": b'{"thread_id": "\xff"}',
    "missing state": json.dumps({k: v for k, v in request().items() if k != "state"}).encode(),
    "unknown field": json.dumps(request(extra=1)).encode(),
    "bad trace": json.dumps(
        request(trace={"trace_id": "xyz", "parent_span_id": PARENT_SPAN})
    ).encode(),
    "assistant role": json.dumps(
        request(input_message={"role": "assistant", "content": "hi"})
    ).encode(),
    "bad thread id": json.dumps(request(thread_id="a b")).encode(),
    # A message too large for its event must not create the store nor leave a session
    # without SessionStarted; duplicate keys and a tracestate with a newline must not run.
    "content over one event": json.dumps(
        request(input_message={"role": "user", "content": "a" * 6_000_000})
    ).encode(),
    "duplicate key": json.dumps(request()).encode()[:-1] + b', "run_id": "again"}',
    "tracestate with a newline": json.dumps(
        request(
            trace={"trace_id": TRACE_ID, "parent_span_id": PARENT_SPAN, "tracestate": "a=b\nX: 1"}
        )
    ).encode(),
}


async def test_agent_process_reads_its_configuration_and_input_only_from_one_json_object_on_stdin(
    runs: dict[str, Run], tmp_path: Path
) -> None:
    # Config given on stdin reached the tool (it called the API the config names, with its
    # token); the state given on stdin is in the output.
    allow = runs["allow"]
    assert allow.api is not None
    assert allow.api.received
    assert allow.api.received[0].headers["authorization"] == f"Bearer {SECRETS[1]}"
    assert allow.output["state"]["locale"] == "en"

    # Bad or partial stdin: one JSON error object, exit 1, nothing written.
    async def bad(name: str, data: bytes) -> tuple[str, Invoked, Path]:
        db = tmp_path / f"{name.replace(' ', '-')}.db"
        return name, await invoke(uri=f"sqlite:///{db}", stdin=data), db

    gate = asyncio.Semaphore(2)

    async def limited(name: str, data: bytes) -> tuple[str, Invoked, Path]:
        async with gate:
            return await bad(name, data)

    for name, invoked, db in await asyncio.gather(*(limited(n, d) for n, d in BAD_STDIN.items())):
        assert invoked.code == 1, name
        output = invoked.output
        assert output["status"] == "failed", name
        assert output["error"]["code"] == "INVALID_INPUT", name
        assert not db.exists(), name
    # An existing store is left exactly as it was.
    store = tmp_path / "existing"
    shutil.copytree(allow.db.parent, store)
    before = {path.name: path.read_bytes() for path in store.iterdir()}
    invoked = await invoke(uri=f"sqlite:///{store / 'journal.db'}", stdin=BAD_STDIN["partial"])
    assert invoked.output["error"]["code"] == "INVALID_INPUT"
    assert {path.name: path.read_bytes() for path in store.iterdir()} == before


async def test_agent_process_writes_all_results_as_one_json_object_on_stdout(
    runs: dict[str, Run],
) -> None:
    schema = schema_files()["invocation-output.schema.json"]
    for name, run in runs.items():
        jsonschema.validate(run.output, schema)  # exactly one line, the shipped schema
        assert run.output["thread_id"] == "thread_abc123", name
    allow = runs["allow"].output
    assert allow["status"] == "completed"
    assert allow["response"].startswith("PROJ-123 is In Progress")
    assert allow["agent_id"] == ADMIN
    assert allow["state"] == {"locale": "en", "requested_project": "Bluebird"}
    assert allow["trace"]["trace_id"] == TRACE_ID
    assert allow["trace"]["parent_span_id"] == PARENT_SPAN
    assert allow["error"] is None


async def test_agent_indicates_all_external_actions_including_handoffs_via_tool_calls(
    runs: dict[str, Run],
) -> None:
    items = await runs["allow"].items()
    calls = [item for item in items if item.get("type") == "function_call"]
    outputs = {item["call_id"] for item in items if item.get("type") == "function_call_output"}
    assert [call["name"] for call in calls] == [
        "get_ticket_details",
        "system__handoff",
        "create_project",
    ]
    # Every call has its output, so the next invocation replays the history as it is.
    assert {call["call_id"] for call in calls} == outputs


async def test_agent_initiates_handoff_exclusively_by_calling_the_system_handoff_tool(
    runs: dict[str, Run],
) -> None:
    # The sample's model calls it "system::handoff": accepted, stored under the wire name.
    assert [h["to"] for h in runs["allow"].output["handoffs"]] == [ADMIN]
    # An unknown target and malformed arguments are error outputs the model sees (recorded,
    # the run goes on); text announcing a handoff is no handoff.
    refused = runs["refused"]
    assert refused.invoked.code == 0
    assert refused.output["status"] == "completed"
    assert refused.output["handoffs"] == []
    assert refused.output["agent_id"] == MANAGER
    assert refused.output["response"] == "I will ask the other agent to do this."
    items = await refused.items()
    rejected = [i for i in items if i.get("type") == "function_call"]
    assert [i["name"] for i in rejected] == ["system__handoff_rejected"] * 2
    errors = [i["output"] for i in items if i.get("type") == "function_call_output"]
    assert "'io.clawpedia.agents.nobody' is not one of" in errors[0]
    assert "not JSON" in errors[1]
    types = [record.type for record in await refused.records()]
    assert "SubagentStarted" not in types
    # The guardrail was asked about each refused call and its MODIFY carried out (by the
    # guard's wrapper), instead of stopping the run as unenforceable.
    assert refused.guardrail is not None
    asked = [b["payload"]["function"]["name"] for b in refused.guardrail.asked("TOOL_CALL")]
    assert asked == ["system__handoff_rejected"] * 2


async def test_all_outbound_http_requests_include_traceparent_and_tracestate_from_stdin(
    runs: dict[str, Run],
) -> None:
    for name in ("allow", "modify"):  # trace_id/parent_span_id, and traceparent/tracestate
        run = runs[name]
        assert run.api is not None
        assert run.guardrail is not None
        requests = [*run.api.received, *run.guardrail.received]
        assert len(requests) >= 7, name
        root_span = run.output["trace"]["span_id"]
        for received in requests:
            _, trace_id, span_id, _ = received.headers["traceparent"].split("-")
            assert trace_id == TRACE_ID, (name, received.path)
            assert span_id not in (PARENT_SPAN, "0" * 16)
            assert received.headers["tracestate"] == TRACESTATE
        # The tool's request carries the tool call's span, a descendant of the root span.
        tool_span = run.api.received[0].headers["traceparent"].split("-")[2]
        assert tool_span != root_span


async def test_all_structured_logs_include_trace_id_and_span_id(runs: dict[str, Run]) -> None:
    for name, run in runs.items():
        assert run.invoked.logs, name
        for line in run.invoked.logs:
            assert "not_json" not in line, (name, line)
            assert line["trace_id"] == TRACE_ID, (name, line)
            assert re.fullmatch(r"[0-9a-f]{16}", line["span_id"]), (name, line)
    messages = [line["message"] for line in runs["allow"].invoked.logs]
    assert any(
        message.startswith("handoff io.clawpedia.agents.jira-ticket-manager")
        for message in messages
    )


async def test_runner_correctly_parses_agent_yml(runs: dict[str, Run]) -> None:
    # (tests/test_runner_parts.py checks every rule of the schema directly.) The manifests
    # became agents with their declared tools, named by id, with their instructions.
    allow = runs["allow"]
    records = await allow.records()
    started = next(
        r for r in records if r.type == "SubagentStarted" and r.stream.startswith("AgentSession")
    )
    assert started.body is not None
    assert started.body["agent_type"] == ADMIN
    assert allow.guardrail is not None
    tools = [b["payload"]["function"]["name"] for b in allow.guardrail.asked("TOOL_CALL")]
    assert tools == ["get_ticket_details", "create_project"]
    assert {b["source_agent_id"] for b in allow.guardrail.asked()} == {MANAGER, ADMIN}


async def test_runner_special_cases_system_handoff_and_does_not_submit_its_output_back(
    runs: dict[str, Run],
) -> None:
    allow = runs["allow"]
    # The sender's script has exactly two turns (the lookup, the handoff): had the handoff's
    # output gone back to it, its model would have been called a third time and failed the run.
    assert allow.output["status"] == "completed"
    (handoff,) = allow.output["handoffs"]
    assert handoff == {
        "from": MANAGER,
        "to": ADMIN,
        "input": "The user wants to create a new project named 'Bluebird'.",
        "call_id": f"call_{MANAGER}_2_1",
    }
    records = await allow.records()
    started = [r for r in records if r.type == "SubagentStarted"]
    assert {r.stream.split("-", 1)[0] for r in started} == {"AgentSession", "AgentSubsession"}
    for record in started:
        assert record.body is not None
        assert record.body["agent_type"] == ADMIN
        assert handoff["call_id"] in record.body["agent_id"]
    completed = [r for r in records if r.type == "SubagentCompleted"]
    assert {r.body["outcome"] for r in completed if r.body} == {"success"}
    # The receiver's transcript (its tool call, its answer) is on its own stream.
    sub = next(r.stream for r in started if r.stream.startswith("AgentSession"))
    assert sub
    receiver = [r for r in records if r.stream.startswith("AgentSubsession")]
    assert any(r.type == "AssistantToolCallsGenerated" for r in receiver)


async def test_runner_makes_a_blocking_guardrail_request_before_tools_handoffs_and_responses(
    runs: dict[str, Run],
) -> None:
    allow = runs["allow"]
    assert allow.guardrail is not None
    asked = [(b["action_type"], b["source_agent_id"]) for b in allow.guardrail.asked()]
    assert asked == [
        ("AGENT_INPUT", MANAGER),
        ("TOOL_CALL", MANAGER),
        ("AGENT_HANDOFF", MANAGER),
        ("AGENT_INPUT", ADMIN),
        ("TOOL_CALL", ADMIN),
        ("AGENT_RESPONSE", ADMIN),
    ]
    (handoff,) = allow.guardrail.asked("AGENT_HANDOFF")
    assert handoff["payload"] == {  # the system::handoff call's arguments object
        "target_agent_id": ADMIN,
        "input": "The user wants to create a new project named 'Bluebird'.",
        "state": {"requested_project": "Bluebird"},
    }
    assert handoff["thread_id"] == "thread_abc123"
    # Each decision is on the record before the action it allowed.
    records = await allow.records()
    position = {r.id: r.position or 0 for r in records}
    decided = {
        (r.body or {}).get("call_id") or (r.body or {}).get("action_type"): position[r.id]
        for r in records
        if r.type == "agentjournal.GuardrailDecided"
    }
    results = [r for r in records if r.type == "ToolResultReceived"]
    for result in results:
        assert result.body is not None
        assert decided[result.body["call_id"]] < position[result.id]
    final = next(r for r in records if r.type == "AssistantTextGenerated")
    assert decided["AGENT_RESPONSE"] < position[final.id]


async def test_runner_honors_allow_block_and_modify_decisions(runs: dict[str, Run]) -> None:
    # ALLOW: everything ran as the model asked.
    allow = runs["allow"]
    assert allow.api is not None
    assert [r.path for r in allow.api.received] == ["/rest/api/2/issue/PROJ-123"]
    # MODIFY: the tool ran with the modified arguments, the target got the modified input,
    # the user got the modified answer.
    modify = runs["modify"]
    assert modify.api is not None
    assert [r.path for r in modify.api.received] == ["/rest/api/2/issue/PROJ-124"]
    assert modify.output["handoffs"][0]["input"].startswith("MODIFIED: The user wants")
    assert modify.output["response"] == "MODIFIED final answer"
    # BLOCK of tool calls: no body ran, the model got an error output and went on.
    block_tool = runs["block_tool"]
    assert block_tool.api is not None
    assert block_tool.api.received == []
    assert block_tool.output["status"] == "completed"
    outputs = [
        i["output"] for i in await block_tool.items() if i.get("type") == "function_call_output"
    ]
    assert sum("the guardrail blocked this call" in str(o) for o in outputs) == 2
    # BLOCK of the handoff: halted; the run is blocked, no handoff, exit 2.
    block_handoff = runs["block_handoff"]
    assert block_handoff.invoked.code == 2
    assert block_handoff.output["status"] == "blocked"
    assert block_handoff.output["handoffs"] == []
    assert block_handoff.output["agent_id"] == MANAGER
    assert block_handoff.output["response"] is None
    assert block_handoff.output["error"]["code"] == "SCRIPTED_BLOCK"
    # BLOCK of the final response: not sent to the user, not stored.
    block_response = runs["block_response"]
    assert block_response.invoked.code == 2
    assert block_response.output["status"] == "blocked"
    assert block_response.output["response"] is None
    assert "PROJ-123 is In Progress" not in block_response.invoked.stdout
    types = [r.type for r in await block_response.records()]
    assert "AssistantTextGenerated" not in types


# -- the contract around the checklist ------------------------------------------------


async def test_config_values_never_appear_in_events_logs_or_stdout(runs: dict[str, Run]) -> None:
    for name, run in runs.items():
        stored = b"".join(path.read_bytes() for path in run.db.parent.glob("journal.db*"))
        assert stored, name
        for secret in SECRETS:
            assert secret.encode() not in stored, (name, secret)
            assert secret not in run.invoked.stdout, (name, secret)
            assert secret not in run.invoked.stderr, (name, secret)
    # The token was really used (sent to the tool's API), so the search means something.
    assert runs["allow"].api is not None
    assert any(SECRETS[1] in str(r.headers) for r in runs["allow"].api.received)


async def test_state_persists_per_thread_and_merges_with_the_invocation(tmp_path: Path) -> None:
    await _state_round_trip(tmp_path, None)


async def test_state_and_handoffs_on_the_kurrentdb_double(tmp_path: Path) -> None:
    with KurrentDBDouble.in_thread() as double:
        await _state_round_trip(tmp_path, double.uri)


async def _state_round_trip(tmp_path: Path, uri: str | None) -> None:
    """Two invocations of one thread: the sample (handoff adds state), then the admin hands
    back with the wire spelling; the second starts from the stored state."""
    target = uri or f"sqlite:///{tmp_path / 'journal.db'}"
    first = await invoke(uri=target, stdin=request(state={"locale": "en", "tier": "gold"}))
    assert first.code == 0, first.stdout + first.stderr
    assert first.output["state"] == {
        "locale": "en",
        "tier": "gold",
        "requested_project": "Bluebird",
    }
    back = write_script(
        tmp_path,
        {
            ADMIN: [
                {
                    "tool_calls": [
                        {
                            "name": "system__handoff",
                            "arguments": {
                                "target_agent_id": MANAGER,
                                "input": "Status of PROJ-124?",
                                "state": {"ticket": "PROJ-124"},
                            },
                        }
                    ]
                }
            ],
            MANAGER: [{"text": "PROJ-124 is Done."}],
        },
    )
    second = await invoke(
        uri=target,
        stdin=request(run_id="run_2", state={"tier": "platinum"}),
        script=back,
        agent=ADMIN,
    )
    assert second.code == 0, second.stdout + second.stderr
    assert second.output["state"] == {
        "locale": "en",
        "tier": "platinum",
        "requested_project": "Bluebird",
        "ticket": "PROJ-124",
    }
    assert second.output["handoffs"][0]["from"] == ADMIN
    assert second.output["agent_id"] == MANAGER
    assert second.output["response"] == "PROJ-124 is Done."
    async with Journal.open(target) as journal:
        items = await journal.session("thread_abc123").get_items()
        tree = await read_tree(journal.store, "thread_abc123")
    calls = [i for i in items if i.get("type") == "function_call"]
    assert len(calls) == 4  # both invocations' history, replayed
    states = [r for r in tree.records() if r.type == "agentjournal.ThreadState"]
    assert [json.loads(r.data or "{}")["run_id"] for r in states] == ["run_abc123", "run_2"]


# -- the anti-patterns -----------------------------------------------------------------


async def test_anti_pattern_hardcoded_agent_ids_are_reported(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, manifests)
    manifest = manifests / "jira-ticket-manager" / "agent.yml"
    manifest.write_text(
        manifest.read_text().replace(
            "hand off to the jira-admin agent.",
            f"call system::handoff with target_agent_id: '{ADMIN}'.",
        )
    )
    invoked = await invoke(
        uri=f"sqlite:///{tmp_path / 'x.db'}", stdin=request(), manifests=manifests
    )
    assert invoked.output["status"] == "completed"  # reported, not refused
    warnings = [line for line in invoked.logs if line.get("level") == "warning"]
    assert any(f"names agent id {ADMIN} in its instructions" in w["message"] for w in warnings)
    assert {w["trace_id"] for w in warnings} == {TRACE_ID}


async def test_anti_pattern_a_declared_tool_without_implementation_is_refused(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "no_tools.py"
    empty.write_text("")
    db = tmp_path / "journal.db"
    invoked = await invoke(uri=f"sqlite:///{db}", stdin=request(), tools=(empty,))
    assert invoked.code == 1
    message = invoked.output["error"]["message"]
    assert (
        "tool 'create_project' of io.clawpedia.agents.jira-admin has no implementation" in message
    )
    assert not db.exists()


async def test_without_a_model_script_or_an_api_key_nothing_runs(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    invoked = await invoke(uri=f"sqlite:///{db}", stdin=request(), script=None)
    assert invoked.code == 1
    assert invoked.output["error"]["code"] == "INVALID_SETUP"
    assert "OPENAI_API_KEY" in invoked.output["error"]["message"]
    assert not db.exists()


async def test_a_guardrail_url_no_client_could_call_is_refused_before_the_store_is_made(
    tmp_path: Path,
) -> None:
    db = tmp_path / "journal.db"
    given, configured = await asyncio.gather(
        invoke(uri=f"sqlite:///{db}", stdin=request(), guardrails="notaurl"),
        invoke(
            uri=f"sqlite:///{db}", stdin=request(), env={"AGENTJOURNAL_GUARDRAIL_URL": "ftp://x"}
        ),
    )
    for invoked, says in [
        (given, "--guardrails: guardrail base URL must be http(s), got 'notaurl'"),
        (configured, "$AGENTJOURNAL_GUARDRAIL_URL: guardrail base URL must be http(s)"),
    ]:
        assert invoked.code == 1, invoked.stdout
        assert invoked.output["error"]["code"] == "INVALID_SETUP"
        assert says in invoked.output["error"]["message"]
    assert not db.exists()  # no store


async def test_a_failing_tool_leaks_no_config_value_and_is_an_error_output(
    tmp_path: Path,
) -> None:
    # The sample tool's raise_for_status (the API answering 500) names the URL of config's
    # jira_base_url, secret path and all: the model gets the failure as an error output
    # (scrubbed) and goes on, and nothing of it reaches stdout or fails the run.
    def fail(received: Received) -> Reply:
        return Reply(status=500, body=b"down")

    secret_path = "PLANTED-path-0c7e21"
    db = tmp_path / "journal.db"
    async with HttpStub(fail) as api:
        config = {"jira_base_url": f"{api.url}/{secret_path}", "jira_token": SECRETS[1]}
        invoked = await invoke(uri=f"sqlite:///{db}", stdin=request(config=config))
        assert api.received
        url = api.url
    assert invoked.code == 0, invoked.stdout + invoked.stderr
    assert invoked.output["status"] == "completed"
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("journal.db*"))  # noqa: ASYNC240
    for planted in (secret_path, SECRETS[1], url):
        assert planted not in invoked.stdout, planted
        assert planted not in invoked.stderr, planted
        assert planted.encode() not in stored, planted
    items = await Run(invoked, db).items()
    outputs = [str(i["output"]) for i in items if i.get("type") == "function_call_output"]
    assert outputs[0].startswith("Error: the tool get_ticket_details failed: HTTPStatusError")
    assert "[config]/rest/api/2/issue/PROJ-123" in outputs[0]
    warnings = [line["message"] for line in invoked.logs if line.get("level") == "warning"]
    assert any("tool get_ticket_details failed" in message for message in warnings)


async def test_a_bad_command_line_or_store_is_one_json_error_with_its_documented_exit_code(
    tmp_path: Path,
) -> None:
    # `run` without --agent, an unknown store URI and a store that cannot be opened are each
    # one JSON error of the output schema, with its documented code and exit 1 (not
    # argparse's usage on stderr with exit 2); nothing is created.
    schema = schema_files()["invocation-output.schema.json"]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "agentjournal.cli", "run", "--manifests", str(MANIFESTS)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(process.communicate(b""), timeout=60)
    usage = Invoked(process.returncode or 0, out.decode(), "")
    missing = tmp_path / "no-such-dir" / "journal.db"
    unknown, unopened = await asyncio.gather(
        invoke(uri="foo://x", stdin=request()), invoke(uri=f"sqlite:///{missing}", stdin=request())
    )
    for invoked, code, words in [
        (usage, "INVALID_SETUP", "the following arguments are required: --agent"),
        (unknown, "INVALID_SETUP", "--uri: unknown store URI 'foo'"),
        (unopened, "STORE_UNAVAILABLE", "does not exist"),
    ]:
        jsonschema.validate(invoked.output, schema)
        assert invoked.code == 1, invoked.stdout
        assert invoked.output["error"]["code"] == code
        assert words in invoked.output["error"]["message"]
    assert not missing.parent.exists()
