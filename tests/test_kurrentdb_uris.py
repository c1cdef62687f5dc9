"""The KurrentDB URIs we document connect: each is parsed by the real client's own parser."""

from __future__ import annotations

import re
import socket
import uuid
from pathlib import Path

import pytest
from kurrentdbclient.connection_spec import ConnectionSpec

from agentjournal.errors import InvalidInput
from agentjournal.store import StreamState as State
from agentjournal.store import open_store
from agentjournal.store.kurrentdb import KurrentDBEventStore
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from agentjournal.testing.store_conformance import make_events

ROOT = Path(__file__).resolve().parent.parent
# A whole URI: a scheme, then a host (placeholders such as "..." are not URIs).
_URI = re.compile(r"\b(?:kurrentdb|esdb|kdb)(?:\+discover)?://[\w@:.,%-]+[^\s`\"'<>)]*")
_DOCUMENTS = [
    "README.md",
    "DESIGN.md",
    "docker-compose.yml",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src" / "agentjournal").rglob("*.py")),
]


def _documented() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for name in _DOCUMENTS:
        text = (ROOT / name).read_text()
        for match in _URI.finditer(text):
            uri = match.group(0).rstrip(".,;:")
            if "{" in uri:  # an f-string template in code, not a documented URI
                continue
            found.append((name, uri))
    return found


DOCUMENTED = _documented()


def test_the_documents_name_uris() -> None:
    names = {name for name, _ in DOCUMENTED}
    assert {
        "README.md",
        "docs/kurrentdb.md",
        "docker-compose.yml",
        "src/agentjournal/store/kurrentdb/__init__.py",
    } <= names
    assert any("," in uri for _, uri in DOCUMENTED)  # the cluster form is documented
    assert any(uri.startswith("kurrentdb+discover://") for _, uri in DOCUMENTED)


@pytest.mark.parametrize(("document", "uri"), DOCUMENTED, ids=[f"{n}:{u}" for n, u in DOCUMENTED])
def test_every_documented_uri_parses_with_the_client(document: str, uri: str) -> None:
    ConnectionSpec(uri)  # raises ValueError for a URI the client refuses


async def test_the_uris_the_store_suggests_parse() -> None:
    with pytest.raises(InvalidInput) as raised:
        await open_store("kurrentdb+discover://h1:2113,h2:2113?Tls=false")
    message = str(raised.value)
    assert "More than one target" in message
    suggested = [m.group(0).rstrip(".,;:") for m in _URI.finditer(message.split("; use ", 1)[1])]
    assert len(suggested) == 4
    for uri in suggested:
        ConnectionSpec(uri)


async def test_tls_without_credentials_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="Username and password are required"):
        await open_store("kurrentdb://127.0.0.1:2113")
    ConnectionSpec("kurrentdb://admin:changeit@127.0.0.1:2113")


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_the_cluster_form_finds_the_node_that_answers() -> None:
    stream = f"Uri-{uuid.uuid4().hex}"
    async with KurrentDBDouble() as double:
        seeds = ",".join(f"127.0.0.1:{port}" for port in (_dead_port(), double.port, _dead_port()))
        uri = f"kurrentdb://{seeds}?Tls=false&GossipTimeout=1&MaxDiscoverAttempts=2"
        async with await KurrentDBEventStore.open(uri, deadline=5) as store:
            await store.append(stream, make_events(2), expected=State.NO_STREAM)
            assert await store.head(stream) == 1
