"""The manifest runner's parts, directly: manifests, the contract's schemas, scripts, tool
binding, the handoff desk's checks, state merging."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentjournal.errors import InvalidInput
from agentjournal.runner.contract import model_schemas, parse_input, schema_files
from agentjournal.runner.handoff import REJECTED_NAME, WIRE_NAME, HandoffDesk
from agentjournal.runner.manifest import ManifestError, load_catalog, load_manifest
from agentjournal.runner.script import load_script
from agentjournal.runner.state import merge_state
from agentjournal.runner.tools import bind_tools, check_bindings, load_registry
from runner_cli import ADMIN, MANAGER, MANIFESTS, TOOLS

SAMPLE = yaml.safe_load((MANIFESTS / "jira-ticket-manager" / "agent.yml").read_text())


def write(folder: Path, document: Any, name: str = "agent.yml") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document) if not isinstance(document, str) else document)
    return path


def changed(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    document = json.loads(json.dumps(SAMPLE))
    target = document
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return document  # type: ignore[no-any-return]


_DELETE = object()

MANIFEST_CASES = [
    (("schema_version",), "1.1", "field schema_version"),
    (("schema_version",), 1.0, "field schema_version"),
    (("id",), "JiraTicketManager", "reverse-DNS"),
    (("version",), "2.1", "semantic version"),
    (("name",), _DELETE, "field name: missing (every property of agent.yml is mandatory)"),
    (("instructions",), "   ", "non-empty"),
    (("model", "provider"), "anthropic", "field model.provider"),
    (("model", "name"), _DELETE, "field model.name: missing"),
    (("tools",), _DELETE, "field tools: missing"),
    (("tools", 0, "type"), "code_interpreter", "field tools.0.type"),
    (("tools", 0, "function", "name"), "system::handoff", "field tools.0.function.name"),
    (("tools", 0, "function", "description"), _DELETE, "description: missing"),
    (("tools", 0, "function", "parameters", "type"), "array", "parameters.type"),
    (("tools", 0, "function", "parameters", "required"), ["nope"], "undeclared properties"),
    (
        ("tools", 0, "function", "parameters", "properties"),
        {"ticket_id": {"type": "nonsense"}},
        "JSON schema",
    ),
    (("extra",), 1, "field extra: not a property"),
    # A $ref to a URL is refused here, not loaded to fail the run later (Unresolvable).
    (
        ("tools", 0, "function", "parameters", "properties", "ticket_id"),
        {"$ref": "http://127.0.0.1:9/evil.json"},
        "field tools.0.function.parameters: properties.ticket_id.$ref: "
        "'http://127.0.0.1:9/evil.json' is not a reference inside the schema",
    ),
    (
        ("tools", 0, "function", "parameters", "$ref"),
        "defs.json#/ticket",
        "field tools.0.function.parameters: $ref: 'defs.json#/ticket' is not a reference",
    ),
    (
        ("tools", 0, "function", "parameters", "properties", "ticket_id"),
        {"$ref": "#/$defs/missing"},
        "properties.ticket_id.$ref: '#/$defs/missing' does not resolve in the schema",
    ),
]


@pytest.mark.parametrize(("path", "value", "expected"), MANIFEST_CASES)
def test_a_manifest_breaking_the_schema_names_file_field_and_expectation(
    tmp_path: Path, path: tuple[str | int, ...], value: Any, expected: str
) -> None:
    manifest = write(tmp_path, changed(path, value))
    with pytest.raises(ManifestError) as raised:
        load_manifest(manifest)
    assert str(raised.value).startswith(f"{manifest}: ")
    assert expected in str(raised.value)


def test_the_seed_example_loads() -> None:
    manifest = load_manifest(MANIFESTS / "jira-ticket-manager" / "agent.yml")
    assert manifest.id == MANAGER
    assert manifest.version == "2.1.0"
    assert manifest.tools[0].function.parameters.schema_dict()["required"] == ["ticket_id"]


async def test_a_local_reference_loads_and_checks_arguments(tmp_path: Path) -> None:
    document = changed(
        ("tools", 0, "function", "parameters", "properties", "ticket_id"),
        {"$ref": "#/$defs/ticket"},
    )
    document["tools"][0]["function"]["parameters"]["$defs"] = {
        "ticket": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"}
    }
    manifest = load_manifest(write(tmp_path, document))
    registry = load_registry([str(TOOLS)], entry_points_too=False)
    (tool,) = bind_tools(manifest, registry)
    answer = await tool.on_invoke_tool(None, '{"ticket_id": "nope"}')  # type: ignore[arg-type]
    assert "does not match" in answer
    answer = await tool.on_invoke_tool(None, '{"ticket_id": "PROJ-123"}')  # type: ignore[arg-type]
    assert json.loads(answer)["status"] == "In Progress"


def test_not_yaml_and_not_a_mapping_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="not valid YAML at line"):
        load_manifest(write(tmp_path, "id: [unclosed\n"))
    with pytest.raises(ManifestError, match="expected a mapping"):
        load_manifest(write(tmp_path, "- a\n"))


def test_id_and_version_are_unique_across_a_directory(tmp_path: Path) -> None:
    write(tmp_path / "a", SAMPLE)
    write(tmp_path / "b", SAMPLE)
    with pytest.raises(ManifestError, match=r"is already declared by .*a/agent\.yml"):
        load_catalog(tmp_path)


def test_an_id_runs_its_highest_version_unless_one_is_named(tmp_path: Path) -> None:
    write(tmp_path / "a", SAMPLE)
    write(tmp_path / "b", changed(("version",), "2.10.0"))
    write(tmp_path / "c", changed(("version",), "2.10.0-rc.1"))
    catalog = load_catalog(tmp_path)
    assert catalog.resolve(MANAGER).version == "2.10.0"
    assert catalog.resolve(f"{MANAGER}@2.1.0").version == "2.1.0"
    with pytest.raises(ManifestError, match=r"no version '9\.9\.9'"):
        catalog.resolve(f"{MANAGER}@9.9.9")
    with pytest.raises(ManifestError, match="no manifest has id"):
        catalog.resolve("io.clawpedia.agents.nobody")


def test_an_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"no agent\.yml below"):
        load_catalog(tmp_path)


# -- the contract ------------------------------------------------------------------------


def test_the_shipped_json_schemas_are_the_models_schemas() -> None:
    assert schema_files() == model_schemas()


def test_the_input_takes_traceparent_instead_of_ids() -> None:
    body = {
        "thread_id": "t",
        "run_id": "r",
        "input_message": {"role": "user", "content": "hi"},
        "state": {},
        "config": {},
        "trace": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    }
    parsed = parse_input(json.dumps(body).encode())
    assert parsed.trace.ids() == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    body["trace"] = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
    }
    with pytest.raises(InvalidInput, match="exactly one of the forms"):
        parse_input(json.dumps(body).encode())


def test_a_guid_thread_id_is_echoed_as_given() -> None:
    body = {
        "thread_id": "123E4567-E89B-12D3-A456-426614174000",
        "run_id": "r",
        "input_message": {"role": "user", "content": "hi"},
        "state": {},
        "config": {},
        "trace": {
            "trace_id": "0af7651916cd43dd8448eb211c80319c",
            "parent_span_id": "b7ad6b7169203331",
        },
    }
    assert parse_input(json.dumps(body).encode()).thread_id == body["thread_id"]


# -- scripts -------------------------------------------------------------------------------


def test_a_script_naming_an_unknown_agent_or_a_bad_turn_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump({"io.x.nobody": ["hi"]}))
    with pytest.raises(InvalidInput, match=r"'io\.x\.nobody' has no manifest"):
        load_script(path, known={MANAGER})
    path.write_text(yaml.safe_dump({MANAGER: [{"say": "hi"}]}))
    with pytest.raises(InvalidInput, match="turn 1: expected"):
        load_script(path, known={MANAGER})
    path.write_text(yaml.safe_dump({MANAGER: [{"tool_calls": [{"arguments": {}}]}]}))
    with pytest.raises(InvalidInput, match="tool call 1 needs a name"):
        load_script(path, known={MANAGER})


# -- tools -------------------------------------------------------------------------------


async def test_arguments_are_checked_against_the_declared_schema_before_the_body_runs(
    tmp_path: Path,
) -> None:
    calls: list[dict[str, Any]] = []
    module = tmp_path / "probe_tools.py"
    module.write_text(
        "CALLS = []\n"
        "def get_ticket_details(ticket_id):\n"
        "    CALLS.append(ticket_id)\n"
        "    return {'ticket': ticket_id}\n"
    )
    registry = load_registry([str(module)], entry_points_too=False)
    (tool,) = bind_tools(load_manifest(MANIFESTS / "jira-ticket-manager" / "agent.yml"), registry)
    body_calls = registry.functions["get_ticket_details"].__globals__["CALLS"]
    for arguments, problem in [
        ("{}", "'ticket_id' is a required property"),
        ('{"ticket_id": 7}', "at ticket_id: 7 is not of type 'string'"),
        ("[1]", "must be a JSON object"),
        ("{oops", "not JSON"),
    ]:
        answer = await tool.on_invoke_tool(None, arguments)  # type: ignore[arg-type]
        assert problem in answer
    assert body_calls == []
    assert calls == []
    answer = await tool.on_invoke_tool(None, '{"ticket_id": "PROJ-1"}')  # type: ignore[arg-type]
    assert json.loads(answer) == {"ticket": "PROJ-1"}
    assert body_calls == ["PROJ-1"]


def test_tools_come_from_the_entry_point_group_and_from_tools_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "site"
    (package / "jira_entry_tools.py").parent.mkdir()
    (package / "jira_entry_tools.py").write_text("def create_project(name):\n    return name\n")
    info = package / "jira_entry_tools-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jira-entry-tools\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[agentjournal.tools]\njira = jira_entry_tools\nlookup = jira_entry_tools:create_project\n"
    )
    monkeypatch.syspath_prepend(str(package))
    registry = load_registry([str(TOOLS)])
    assert registry.origins["create_project"] == str(TOOLS)  # --tools comes later and wins
    assert registry.origins["lookup"] == "entry point lookup"
    assert "get_ticket_details" in registry.functions
    only_entry_points = load_registry([])
    check_bindings(load_catalog(_only_admin(tmp_path)), only_entry_points)


def _only_admin(tmp_path: Path) -> Path:
    folder = tmp_path / "admin-only"
    shutil.copytree(MANIFESTS / "jira-admin", folder / "jira-admin")
    return folder


def test_a_missing_module_or_file_is_one_line() -> None:
    with pytest.raises(InvalidInput, match=r"--tools no\.such\.module: no such module"):
        load_registry(["no.such.module"], entry_points_too=False)
    with pytest.raises(InvalidInput, match=r"--tools /no/such\.py: no such file"):
        load_registry(["/no/such.py"], entry_points_too=False)


# -- system::handoff -------------------------------------------------------------------------


def desk() -> HandoffDesk:
    return HandoffDesk(load_catalog(MANIFESTS), resolve=lambda agent: None, state={})  # type: ignore[arg-type,return-value]


def test_the_handoff_tool_lists_the_other_agents_ids_as_an_enum() -> None:
    handoff = desk().handoff_for(MANAGER)
    assert handoff is not None
    assert handoff.tool_name == WIRE_NAME
    assert handoff.input_json_schema["properties"]["target_agent_id"]["enum"] == [ADMIN]
    assert "JIRA Admin" in handoff.tool_description


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ("nope", "not JSON"),
        ("[]", "must be a JSON object"),
        (json.dumps({"target_agent_id": "io.x.nobody", "input": "x"}), "is not one of"),
        (json.dumps({"target_agent_id": MANAGER, "input": "x"}), "is not one of"),  # itself
        (json.dumps({"target_agent_id": ADMIN, "input": 3}), "input must be a string"),
        (json.dumps({"target_agent_id": ADMIN, "input": "x", "state": []}), "state must be"),
        (json.dumps({"target_agent_id": ADMIN, "input": "x", "to": 1}), "unknown fields"),
    ],
)
def test_a_malformed_handoff_is_renamed_and_answered_with_an_error(
    arguments: str, why: str
) -> None:
    from agents.testing import function_call

    handoffs = desk()
    (item,) = handoffs.normalise(
        MANAGER, [function_call("system::handoff", arguments, call_id="c1")]
    )
    assert item.name == REJECTED_NAME
    assert why in handoffs.rejected["c1"]


def test_both_spellings_become_the_wire_name() -> None:
    from agents.testing import function_call

    arguments = json.dumps({"target_agent_id": ADMIN, "input": "x"})
    for name in ("system::handoff", "system__handoff"):
        (item,) = desk().normalise(MANAGER, [function_call(name, arguments, call_id="c1")])
        assert item.name == WIRE_NAME


# -- state -----------------------------------------------------------------------------------


def test_state_merges_key_by_key_the_invocation_winning() -> None:
    stored = {"a": 1, "b": {"x": 1}, "c": 3}
    assert merge_state(stored, {"b": {"y": 2}, "c": None}) == {"a": 1, "b": {"y": 2}, "c": None}
    assert stored == {"a": 1, "b": {"x": 1}, "c": 3}


async def test_append_event_refuses_the_sessions_own_types_and_keeps_items_intact() -> None:
    from agentjournal import Journal
    from agentjournal.runner.state import THREAD_STATE, load_state, state_event

    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session("t1")
        await session.add_items([{"role": "user", "content": "hi"}])
        for own in ("UserMessageReceived", "SubagentStarted", "agentjournal.GuardrailDecided", ""):
            with pytest.raises(InvalidInput):
                await session.append_event(own, b"{}")
        await session.append_event(
            THREAD_STATE, state_event({"a": 1}, run_id="r1", agent_id="x", status="completed")
        )
        await session.add_items([{"role": "user", "content": "again"}])
        assert await load_state(journal.store, "t1") == {"a": 1}
        assert await load_state(journal.store, "t2") == {}
        assert await journal.session("t1").get_items() == [
            {"role": "user", "content": "hi"},
            {"role": "user", "content": "again"},
        ]


# -- config values never leave the runner --------------------------------------------------


def test_the_scrubber_replaces_every_config_string_value_at_any_depth() -> None:
    from agentjournal.runner.scrub import REDACTED, Scrubber

    scrubber = Scrubber(
        {"url": "http://h/sec ret", "nested": {"list": ["tok-123456"]}, "short": "en", "n": 12345}
    )
    assert scrubber.scrub("GET http://h/sec ret/x with tok-123456 in en") == (
        f"GET {REDACTED}/x with {REDACTED} in en"
    )
    # A value with a space survives whitespace folding; a cut never keeps half a value.
    error = ValueError("at http://h/sec\n ret and tok-123456")
    line = scrubber.error_line(error)
    assert "sec" not in line
    assert "tok-" not in line
    assert "tok-" not in scrubber.error_line(ValueError("x" * 480 + "tok-123456"), limit=492)


async def test_a_failing_tool_is_an_error_output_without_config_values(tmp_path: Path) -> None:
    from agentjournal.runner import toolkit
    from http_stub import HttpStub, Received, Reply

    def fail(received: Received) -> Reply:
        return Reply(status=500, body=b"boom")

    registry = load_registry([str(TOOLS)], entry_points_too=False)
    (tool,) = bind_tools(load_manifest(MANIFESTS / "jira-ticket-manager" / "agent.yml"), registry)
    async with HttpStub(fail) as api:
        base = f"{api.url}/secret-path-9f3c"
        token = toolkit.set_config({"jira_base_url": base, "jira_token": "tok-PLANTED-77"})
        try:
            answer = await tool.on_invoke_tool(None, '{"ticket_id": "PROJ-1"}')  # type: ignore[arg-type]
        finally:
            toolkit.reset_config(token)
        assert api.received  # the body really called the API and got its 500
        assert api.url not in answer
    assert answer.startswith("Error: the tool get_ticket_details failed: HTTPStatusError")
    assert "500" in answer
    assert "[config]/rest/api/2/issue/PROJ-1" in answer
    assert "secret-path-9f3c" not in answer


# -- input size (finding 2) -------------------------------------------------------------------


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "thread_id": "t",
        "run_id": "r",
        "input_message": {"role": "user", "content": "hi"},
        "state": {},
        "config": {},
        "trace": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    }
    body.update(changes)
    return body


def test_input_larger_than_the_journal_takes_is_refused() -> None:
    from agentjournal.runner.contract import MAX_CONTENT_UNITS, MAX_STATE_BYTES, MAX_STDIN_BYTES

    with pytest.raises(InvalidInput, match="stdin is larger than"):
        parse_input(b" " * (MAX_STDIN_BYTES + 1))
    at_limit = "a" * MAX_CONTENT_UNITS  # the JSON string adds two quotes: just over
    with pytest.raises(InvalidInput, match=r"field input_message\.content: too large"):
        parse_input(json.dumps(_body(input_message={"role": "user", "content": at_limit})).encode())
    # Escaping counts: a sixth as many control characters are as large.
    escaped = "\x00" * (MAX_CONTENT_UNITS // 6)
    with pytest.raises(InvalidInput, match=r"field input_message\.content: too large"):
        parse_input(json.dumps(_body(input_message={"role": "user", "content": escaped})).encode())
    fits = "a" * (MAX_CONTENT_UNITS - 2)
    body = _body(input_message={"role": "user", "content": fits})
    message = parse_input(json.dumps(body).encode()).input_message
    assert message is not None
    assert message.content == fits
    with pytest.raises(InvalidInput, match="field state: too large"):
        parse_input(json.dumps(_body(state={"blob": "b" * MAX_STATE_BYTES})).encode())


async def test_a_run_whose_first_write_fails_leaves_no_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentjournal import Journal
    from agentjournal.errors import StreamNotFound
    from agentjournal.runner.run import Invocation, invoke
    from agentjournal.streams import session_stream
    from runner_cli import SCRIPT

    # A store that takes smaller events than the contract allows for: the input message's
    # event is refused, so the run writes nothing; no ThreadState may start the stream.
    monkeypatch.setattr("agentjournal.store._append.MAX_EVENT_BYTES", 4096)
    catalog = load_catalog(MANIFESTS)
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    setup = Invocation(
        catalog=catalog,
        registry=load_registry([str(TOOLS)], entry_points_too=False),
        agent=MANAGER,
        uri=uri,
        guardrails=None,
        script=load_script(SCRIPT, known=set(catalog.ids())),
    )
    body = _body(input_message={"role": "user", "content": "x" * 10_000}, state={"a": 1})
    output = await invoke(setup, parse_input(json.dumps(body).encode()))
    assert output.status == "failed"
    assert output.error is not None
    assert output.error.code == "JOURNAL_ERROR"
    async with Journal.open(uri) as journal:
        with pytest.raises(StreamNotFound):
            await journal.store.read(session_stream("t"))


# -- trace context and JSON strictness (findings 4 and 5) ------------------------------------

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    "tracestate",
    [
        "a=b\nX-Evil: 1",
        "a=b\r\n",
        "A=b",
        "a=",
        "=b",
        "a",
        "a=b=c",
        "a=b,a=c",
        "a=b,c",  # a member without "="
        "a=" + "x" * 257,
        "k" * 257 + "=v",
        ",".join(f"k{n}=v" for n in range(33)),
        "a=é",
    ],
)
def test_a_tracestate_breaking_the_w3c_grammar_is_refused(tracestate: str) -> None:
    for trace in (
        {"traceparent": TRACEPARENT, "tracestate": tracestate},
        {
            "trace_id": "0af7651916cd43dd8448eb211c80319c",
            "parent_span_id": "b7ad6b7169203331",
            "tracestate": tracestate,
        },
    ):
        with pytest.raises(InvalidInput, match=r"field trace: tracestate: "):
            parse_input(json.dumps(_body(trace=trace)).encode())


@pytest.mark.parametrize(
    "tracestate",
    [
        "clawpedia=runner1",
        "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
        " a=b ,\t, tenant@vendor=x y ",
        ",".join(f"k{n}=v" for n in range(32)),
        "",
    ],
)
def test_a_w3c_tracestate_is_taken_as_given(tracestate: str) -> None:
    from opentelemetry.trace import TraceState

    parsed = parse_input(
        json.dumps(_body(trace={"traceparent": TRACEPARENT, "tracestate": tracestate})).encode()
    )
    assert parsed.trace.header() == (TRACEPARENT, tracestate)
    # OpenTelemetry takes every member we take (it logs and drops what it does not).
    members = [m.strip(" \t") for m in tracestate.split(",") if m.strip(" \t")]
    assert len(TraceState.from_header([tracestate])) == len(members)


@pytest.mark.parametrize(
    "traceparent",
    [
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # version ff
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",  # flags
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    ],
)
def test_a_malformed_traceparent_is_refused(traceparent: str) -> None:
    with pytest.raises(InvalidInput, match="field trace: traceparent: "):
        parse_input(json.dumps(_body(trace={"traceparent": traceparent})).encode())


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b'{"thread_id": "t", "thread_id": "u"}', "key 'thread_id' appears twice"),
        (
            json.dumps(_body()).encode()[:-1] + b', "state": {"a": 1}}',
            "key 'state' appears twice",
        ),
        (
            json.dumps(_body()).replace('"config": {}', '"config": {"k": 1, "k": 2}').encode(),
            "key 'k' appears twice",
        ),
        (
            json.dumps(_body()).replace('"state": {}', '"state": {"x": NaN}').encode(),
            "NaN is not a JSON value",
        ),
    ],
)
def test_duplicate_keys_and_non_json_constants_are_refused(raw: bytes, problem: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(f"stdin is not one JSON object: {problem}")):
        parse_input(raw)


# -- error codes: code, schema and README agree (finding 6) -----------------------------------


def test_every_error_code_is_documented_with_its_exit_code() -> None:
    from agentjournal.runner.contract import ERROR_CODES, MAX_CONTENT_UNITS, MAX_STATE_BYTES

    output = schema_files()["invocation-output.schema.json"]["description"]
    readme = (MANIFESTS.parents[1] / "docs" / "runner.md").read_text(encoding="utf-8")
    bullet = readme[readme.index("- **Exit codes**") :].split("\n- ", 1)[0]
    by_exit = {
        1: bullet[bullet.index(" 1 ") : bullet.index(" 2 blocked")],
        3: bullet[bullet.index(" 3 failed") :],
    }
    for code, exit_code in ERROR_CODES.items():
        assert f"``{code}``" in output, code
        assert f"`{code}`" in by_exit[exit_code], code
        assert f"`{code}`" not in by_exit[4 - exit_code], code
    described = schema_files()["invocation-input.schema.json"]["description"]
    assert f"{MAX_CONTENT_UNITS:,}" in described
    assert f"{MAX_STATE_BYTES:,}" in described
