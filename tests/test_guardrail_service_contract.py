"""The reference guardrail's OpenAPI document, fuzzed live, and its request bounds.

The document is checked by an OpenAPI validator and by schemathesis, which
fuzzes the real service (uvicorn on loopback) from that document alone. The
bounds are exercised over raw sockets, so the test controls exactly how much
of a body is sent and when.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate

from agentjournal.guardrails.rules import SCHEMA_FILE, load_rules, rules_schema
from agentjournal.guardrails.service import DEFAULT_MAX_BODY, create_app, running

RULES = load_rules("rules: [{kind: deny_tools, tools: [rm]}, {kind: redact_pii}]")


def refs(node: Any) -> Iterator[str]:
    """Every ``$ref`` value anywhere in ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


@pytest.mark.slow
async def test_openapi_document_is_valid_and_every_ref_resolves() -> None:
    async with running(RULES) as url, httpx.AsyncClient() as http:
        document = (await http.get(f"{url}/openapi.json")).json()
    validate(document)  # raises on an invalid OpenAPI 3.1 document
    found = list(refs(document))
    assert found
    schemas = document["components"]["schemas"]
    for ref in found:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    operation = document["paths"]["/v1/validate"]["post"]
    assert set(operation["responses"]) == {"200", "400", "408", "413", "422", "500"}
    assert {p["name"] for p in operation["parameters"]} == {"traceparent", "tracestate"}
    assert str(DEFAULT_MAX_BODY) in operation["responses"]["413"]["description"]


@pytest.mark.slow
def test_schemathesis_fuzzes_the_live_service(tmp_path: Path) -> None:
    """No 5xx and every answer as documented, with a bounded number of examples."""
    service = subprocess.Popen(
        [sys.executable, "-m", "agentjournal.cli", "guardrail", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert service.stdout is not None
        line = service.stdout.readline()
        match = re.search(r"(http://\S+)/v1/validate", line)
        assert match, line
        fuzzer = Path(sys.executable).with_name("schemathesis")
        result = subprocess.run(
            [
                str(fuzzer),
                "run",
                f"{match.group(1)}/openapi.json",
                "--checks",
                "all",
                "--max-examples",
                "40",
                "--seed",
                "20",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,  # the fuzzer leaves its reports in the working directory
        )
    finally:
        service.terminate()
        service.wait(timeout=30)
    summary = [line for line in result.stdout.splitlines() if "generated" in line]
    print(*summary, result.stdout.splitlines()[-1], sep="\n")
    assert result.returncode == 0, result.stdout[-4000:]
    assert "No issues found" in result.stdout
    # Bodies were generated: the fuzzer did not skip the request for an unresolved $ref.
    assert "skipped" not in " ".join(summary)


async def exchange(url: str, head: bytes, parts: list[bytes], *, pause: float = 0.0) -> bytes:
    """Send ``head`` and ``parts`` over a raw connection; return the response as far as sent."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head)
        for part in parts:
            writer.write(part)
            await writer.drain()
        if pause:
            await asyncio.sleep(pause)
        return await asyncio.wait_for(reader.read(65536), timeout=20)
    finally:
        writer.close()


def status_and_body(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_a_50_mb_body_is_refused_before_it_is_sent() -> None:
    # Only the headers go out: a 413 here proves the body was never read.
    async with running(RULES) as url:
        raw = await exchange(
            url,
            b"POST /v1/validate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 52428800\r\n\r\n",
            [],
        )
    status, body = status_and_body(raw)
    assert status == 413
    assert "262144-byte limit" in body["error"]


async def test_a_chunked_oversized_body_is_refused_while_streaming() -> None:
    async with running(RULES, max_body=1000) as url:
        chunk = b"x" * 600
        raw = await exchange(
            url,
            b"POST /v1/validate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"transfer-encoding: chunked\r\n\r\n",
            [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * 2,  # 1200 bytes, no final chunk yet
        )
    status, body = status_and_body(raw)
    assert status == 413
    assert body["error"] == "body is larger than the 1000-byte limit"


async def test_a_body_within_a_configured_limit_is_decided_and_one_over_is_not() -> None:
    request = {
        "action_id": "a-1",
        "action_type": "AGENT_INPUT",
        "source_agent_id": "s",
        "thread_id": "t",
        "trace": {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"},
        "payload": "",
    }
    text = json.dumps(request).encode()
    async with running(RULES, max_body=len(text)) as url, httpx.AsyncClient() as http:
        fits = await http.post(f"{url}/v1/validate", content=text)
        over = await http.post(f"{url}/v1/validate", content=text + b" ")
    assert fits.status_code == 200
    assert fits.json()["decision"] == "ALLOW"
    assert over.status_code == 413


@pytest.mark.slow
async def test_a_slow_client_times_out() -> None:
    async with running(RULES, read_timeout=0.3) as url:
        raw = await exchange(
            url,
            b"POST /v1/validate HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n",
            [b'{"action_id": '],  # then nothing more
        )
    status, body = status_and_body(raw)
    assert status == 408
    assert body == {"error": "the body did not arrive within 0.3 s", "details": []}


async def test_not_json_is_400_and_off_contract_is_422() -> None:
    async with running(RULES) as url, httpx.AsyncClient() as http:
        garbage = await http.post(f"{url}/v1/validate", content=b"{nope")
        wrong = await http.post(f"{url}/v1/validate", json={"action_type": "NOPE"})
    assert garbage.status_code == 400
    assert garbage.json() == {"error": "the body is not JSON", "details": []}
    assert wrong.status_code == 422
    assert wrong.json()["error"] == "the body does not follow the contract"
    assert {tuple(d["loc"]) for d in wrong.json()["details"]} >= {("action_type",), ("trace",)}


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1 byte"):
        create_app(RULES, max_body=0)
    for read_timeout in (0, -1, float("nan"), float("inf"), 86_401):
        with pytest.raises(ValueError, match="must be positive seconds, at most a day"):
            create_app(RULES, read_timeout=read_timeout)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n", "{}"])
def test_a_rules_file_that_holds_nothing_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape("holds no rules: write `rules: []`")):
        load_rules(text)
    assert load_rules("rules: []").rules == []  # said so: a service that checks nothing


def test_the_shipped_rules_schema_is_the_models_and_accepts_the_sample() -> None:
    shipped = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert shipped == rules_schema()
    sample = Path(__file__).parents[1] / "samples" / "guardrail-rules.yml"
    import yaml

    jsonschema.validate(yaml.safe_load(sample.read_text(encoding="utf-8")), shipped)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"rules": [{"kind": "ceiling", "tool": "x"}]}, shipped)


@pytest.mark.slow
def test_a_malformed_rules_file_is_one_line_naming_file_line_and_field(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(
        "rules:\n  - kind: deny_tools\n    tools: [rm]\n"
        "  - kind: ceiling\n    tool: refund\n    argument: cents\n    max: lots\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", "guardrail", "serve", "--rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"invalid rules in {rules}: line 7: rules.1.max: " in lines[0], lines[0]


async def test_non_json_constants_are_400_never_null() -> None:
    # NaN and 1e999 would be read as floats and come back as null in a MODIFY: refused.
    async with running(RULES) as url, httpx.AsyncClient() as http:
        for constant in (b"NaN", b"Infinity", b"-Infinity", b"1e999"):
            body = b'{"payload": {"x": ' + constant + b"}}"
            answer = await http.post(f"{url}/v1/validate", content=body)
            assert answer.status_code == 400, constant
            assert answer.json()["error"] == "the body is not JSON"
