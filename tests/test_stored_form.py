"""The SQLite file's stored form: values compressed with a dictionary kept in the file, read back
exactly as written; files of the version before (every value stored as given) still open, read
and verify, and go on mixed."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, JournalSession
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import parse_bundle, verify_bundle
from agentjournal.errors import InvalidInput, UndecodableEvent
from agentjournal.ledger import SigningKey
from agentjournal.read.replay import check_read_model
from agentjournal.store import _sqlite_parts, sqlite_path
from agentjournal.store._events import MAX_EVENT_BYTES
from agentjournal.store.sqlite import SQLiteEventStore, _schema, _writes
from agentjournal.store.sqlite._stored import DICTIONARY, Packer, Unpacker
from agentjournal.streams import session_stream
from eval_sessions import record_support
from sqlite_v2 import V2_SCHEMA
from store_without_read_model import WithoutReadModel

KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}


def _as_v2(source: Path, target: Path) -> None:
    """A version 2 file holding ``source``'s streams, events and read model, as given."""
    stored = sqlite3.connect(source)
    unpack = Unpacker(stored).unpack
    events = [
        (*row[:5], unpack(row[5], row[8]), unpack(row[6], row[8]), row[7])
        for row in stored.execute(
            "SELECT position, stream_id, revision, id, type, data, metadata, recorded_at, "
            "dictionary FROM events"
        )
    ]
    items = [
        (*row[:5], unpack(row[5], row[6]).decode() if isinstance(row[5], bytes) else row[5])
        for row in stored.execute(
            "SELECT tree, idx, stream_id, revision, part, item, dictionary FROM items"
        )
    ]
    streams = stored.execute("SELECT id, name, head, tree, modelled FROM streams").fetchall()
    trees = stored.execute("SELECT tree, floor, mixed FROM trees").fetchall()
    stored.close()
    db = sqlite3.connect(target)
    db.executescript(V2_SCHEMA)
    with db:
        db.executemany("INSERT INTO streams VALUES (?, ?, ?, ?, ?)", streams)
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", events)
        db.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)", items)
        db.executemany("INSERT INTO trees VALUES (?, ?, ?)", trees)
    db.close()


async def _signed(path: Path, session_id: str, *, compress: bool = True) -> None:
    uri = f"sqlite:///{path}" + ("?compress=zstd" if compress else "")
    async with Journal.open(uri, signing_key=KEY) as journal:
        await record_support(journal, session_id)


async def _events(path: Path) -> list[tuple[Any, ...]]:
    async with await SQLiteEventStore.open(path) as store:
        events = await store.read_all()
    return [(e.stream, e.revision, e.id, e.type, e.data, dict(e.metadata)) for e in events]


async def _verified_items(path: Path, session_id: str) -> list[Any]:
    """The session's items, read through its read model and from its events (the same),
    after its exported bundle verified against the signing key."""
    async with await SQLiteEventStore.open(path) as store:
        bundle = await export_bundle(store, session_id)
        assert await store.read_model(session_stream(session_id)) is not None
        modelled = await JournalSession(store, session_id).get_items()
        evented = await JournalSession(WithoutReadModel(store), session_id).get_items()
    assert modelled == evented
    report = verify_bundle(parse_bundle(json.dumps(bundle).encode()), TRUSTED)
    assert report.ok, report.text()
    return modelled


def _dictionaries(path: Path) -> tuple[int, set[int | None], set[int | None]]:
    db = sqlite3.connect(path)
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        events = {r[0] for r in db.execute("SELECT DISTINCT dictionary FROM events")}
        items = {r[0] for r in db.execute("SELECT DISTINCT dictionary FROM items")}
    finally:
        db.close()
    return version, events, items


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"{}",
        b'{"content": "' + b"order 42 " * 200 + b'"}',
        b"\x28\xb5\x2f\xfd" + b"not a frame, though it starts as one" * 3,
        b"\xff\xfe not UTF-8 \x00" * 20,
        os.urandom(3000),
        DICTIONARY.encode(),
    ],
    ids=["empty", "tiny", "repetitive", "zstd-magic", "not-utf-8", "random", "the-dictionary"],
)
def test_a_value_in_its_stored_form_reads_back_exactly(value: bytes) -> None:
    db = sqlite3.connect(":memory:")
    db.executescript(_schema._SCHEMA)
    content = DICTIONARY.encode()
    db.execute("INSERT INTO dictionaries(id, content) VALUES (7, ?)", (content,))
    packer, unpacker = Packer(7, content), Unpacker(db)
    data, metadata, dictionary = packer.pack(value, b'{"aj.seq":"1"}')
    assert dictionary in (None, 7)
    if dictionary is None:
        assert (data, metadata) == (value, b'{"aj.seq":"1"}')  # not smaller: as given
    else:
        assert len(data) + len(metadata) < len(value) + len(b'{"aj.seq":"1"}')
    assert unpacker.unpack(data, dictionary) == value
    assert unpacker.unpack(metadata, dictionary) == b'{"aj.seq":"1"}'


async def test_a_store_opened_with_compression_stores_its_values_compressed_and_reads_them(
    tmp_path: Path,
) -> None:
    await _signed(tmp_path / "j.db", "support-1")
    version, events, items = _dictionaries(tmp_path / "j.db")
    assert version == 3
    assert events == {1}  # every row smaller compressed, with the file's one dictionary
    assert items == {1}
    db = sqlite3.connect(tmp_path / "j.db")
    stored = db.execute("SELECT sum(length(data) + length(metadata)) FROM events").fetchone()[0]
    db.close()
    written = sum(len(e[4]) + len(json.dumps(e[5])) for e in await _events(tmp_path / "j.db"))
    assert stored < written / 2
    await _verified_items(tmp_path / "j.db", "support-1")


async def test_a_version_2_file_opens_reads_and_verifies_and_goes_on_mixed(
    tmp_path: Path,
) -> None:
    await _signed(tmp_path / "new.db", "support-1")
    expected = await _verified_items(tmp_path / "new.db", "support-1")
    written = await _events(tmp_path / "new.db")
    _as_v2(tmp_path / "new.db", tmp_path / "old.db")

    assert await _events(tmp_path / "old.db") == written  # upgraded in place, read as given
    version, events, items = _dictionaries(tmp_path / "old.db")
    assert (version, events, items) == (3, {None}, {None})
    assert await _verified_items(tmp_path / "old.db", "support-1") == expected

    await _signed(tmp_path / "old.db", "support-2")  # new rows in the stored form
    version, events, items = _dictionaries(tmp_path / "old.db")
    assert events == {None, 1}
    assert items == {None, 1}
    assert (await _events(tmp_path / "old.db"))[: len(written)] == written
    assert await _verified_items(tmp_path / "old.db", "support-1") == expected
    assert await _verified_items(tmp_path / "old.db", "support-2") == expected


async def test_rows_written_with_another_dictionary_read_with_the_one_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later version writing with another dictionary still reads a file's earlier rows."""
    other = '{"an earlier dictionary": "' + "aj.prev aj.hash " * 20 + '"}'
    with monkeypatch.context() as patched:
        patched.setattr(_writes, "DICTIONARY", other)
        await _signed(tmp_path / "j.db", "support-1")
    expected = await _verified_items(tmp_path / "j.db", "support-1")
    await _signed(tmp_path / "j.db", "support-2")
    _, events, _ = _dictionaries(tmp_path / "j.db")
    assert events == {1, 2}
    db = sqlite3.connect(tmp_path / "j.db")
    contents = dict(db.execute("SELECT id, content FROM dictionaries").fetchall())
    db.close()
    assert contents == {1: other.encode(), 2: DICTIONARY.encode()}
    assert await _verified_items(tmp_path / "j.db", "support-1") == expected
    assert await _verified_items(tmp_path / "j.db", "support-2") == expected


async def test_a_row_naming_a_dictionary_the_file_lacks_is_undecodable(tmp_path: Path) -> None:
    await _signed(tmp_path / "j.db", "support-1")
    with sqlite3.connect(tmp_path / "j.db") as db:
        db.execute("UPDATE events SET dictionary = 99 WHERE position = 2")
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        with pytest.raises(UndecodableEvent, match="dictionary 99"):
            await store.read_all()


async def test_a_compressed_value_edited_by_hand_reads_as_the_bytes_stored(
    tmp_path: Path,
) -> None:
    await _signed(tmp_path / "j.db", "support-1")
    with sqlite3.connect(tmp_path / "j.db") as db:
        db.execute("UPDATE events SET data = ? WHERE position = 2", (b'{"edited": true}',))
        db.execute("UPDATE events SET metadata = ? WHERE position = 3", (b'{"edited":"1"}',))
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        events = await store.read_all()
    assert events[1].data == b'{"edited": true}'  # changed content: the chain hash says so
    assert dict(events[2].metadata) == {"edited": "1"}


async def _model_texts(path: Path, session_id: str) -> list[str]:
    async with await SQLiteEventStore.open(path) as store:
        snapshot = await store.read_model(session_stream(session_id))
    assert snapshot is not None
    return [text for _, _, text in snapshot.items]


async def test_a_tree_of_plain_and_compressed_items_reads_them_all_as_written(
    tmp_path: Path,
) -> None:
    """The read model's three ways to its texts (all plain; all compressed alike; mixed)
    give the same texts as the events."""
    await _signed(tmp_path / "new.db", "support-1")
    compressed = await _model_texts(tmp_path / "new.db", "support-1")
    _as_v2(tmp_path / "new.db", tmp_path / "old.db")
    assert await _model_texts(tmp_path / "old.db", "support-1") == compressed  # all plain
    async with Journal.open(
        f"sqlite:///{tmp_path / 'old.db'}?compress=zstd", signing_key=KEY
    ) as journal:
        await journal.session("support-1").add_items([{"role": "user", "content": "and then?"}])
    _, _, items = _dictionaries(tmp_path / "old.db")
    assert items == {None, 1}
    mixed = await _model_texts(tmp_path / "old.db", "support-1")
    assert mixed[:-1] == compressed
    assert json.loads(mixed[-1]) == {"role": "user", "content": "and then?"}
    async with await SQLiteEventStore.open(tmp_path / "old.db") as store:
        modelled = await JournalSession(store, "support-1").get_items()
        evented = await JournalSession(WithoutReadModel(store), "support-1").get_items()
    assert modelled == evented
    assert len(modelled) == len(mixed)


async def test_a_compressed_item_edited_by_hand_reads_as_changed_text(tmp_path: Path) -> None:
    await _signed(tmp_path / "j.db", "support-1")
    texts = await _model_texts(tmp_path / "j.db", "support-1")
    with sqlite3.connect(tmp_path / "j.db") as db:
        db.execute("UPDATE items SET item = ? WHERE idx = 1", (b'{"role":"edited"}',))
    edited = await _model_texts(tmp_path / "j.db", "support-1")
    assert edited[1] == '{"role":"edited"}'  # not a frame: the bytes stored, as text
    assert edited[:1] + edited[2:] == texts[:1] + texts[2:]


def test_a_frame_claiming_a_vast_size_reads_as_the_bytes_stored() -> None:
    db = sqlite3.connect(":memory:")
    db.executescript(_schema._SCHEMA)
    db.execute("INSERT INTO dictionaries(id, content) VALUES (1, ?)", (DICTIONARY.encode(),))
    data, _, dictionary = Packer(1, DICTIONARY.encode()).pack(b"x" * 100, b"{}")
    assert dictionary == 1
    # The frame header's descriptor: an 8-byte content size follows; 2**45 bytes claimed.
    forged = bytes([0xE0]) + (1 << 45).to_bytes(8, "little") + data[2:]
    assert Unpacker(db).unpack(forged, 1) == forged


def test_a_real_frame_larger_than_an_event_is_not_decompressed() -> None:
    """A hand-made frame of zeros is small on disk and vast when decompressed: it reads as
    the bytes stored (changed content), without allocating what it holds."""
    db = sqlite3.connect(":memory:")
    db.executescript(_schema._SCHEMA)
    db.execute("INSERT INTO dictionaries(id, content) VALUES (1, ?)", (DICTIONARY.encode(),))
    packer = Packer(1, DICTIONARY.encode())
    bomb, _, _ = packer.pack(bytes(MAX_EVENT_BYTES + 1), b"{}")
    assert len(bomb) < 4096
    unpacker = Unpacker(db)
    assert unpacker.unpack(bomb, 1) == bomb
    assert unpacker.joined_alike([bomb], 1) is None
    assert unpacker.joined_texts([(bomb, 1)]) == bomb.decode("utf-8", "replace")
    largest, _, _ = packer.pack(bytes(MAX_EVENT_BYTES), b"{}")
    assert unpacker.unpack(largest, 1) == bytes(MAX_EVENT_BYTES)


async def test_a_read_model_item_naming_a_dictionary_the_file_lacks_reads_as_changed_text(
    tmp_path: Path,
) -> None:
    """Not an error that stops the reader: the verifier's read model check reports it."""
    await _signed(tmp_path / "j.db", "support-1")
    texts = await _model_texts(tmp_path / "j.db", "support-1")
    with sqlite3.connect(tmp_path / "j.db") as db:
        db.execute("UPDATE items SET dictionary = 99 WHERE idx = 1")
    edited = await _model_texts(tmp_path / "j.db", "support-1")
    assert edited[1] != texts[1]
    assert edited[:1] + edited[2:] == texts[:1] + texts[2:]


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE items SET dictionary = 99 WHERE idx = 1",
        "UPDATE items SET item = x'00ff00' WHERE idx = 1",
        "UPDATE items SET item = 'garbage', dictionary = NULL WHERE idx = 1",
    ],
)
async def test_verify_reports_a_read_model_item_that_reads_as_no_json(
    tmp_path: Path, edit: str
) -> None:
    await _signed(tmp_path / "j.db", "support-1")
    with sqlite3.connect(tmp_path / "j.db") as db:
        db.execute(edit)
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        found = await check_read_model(store, "support-1")
    assert found is not None
    assert found[0] == "read model: FAILED"
    assert found[1] is not None
    assert "holds an item that is not JSON" in found[1]


async def test_by_default_a_store_writes_its_values_as_given(tmp_path: Path) -> None:
    """Compression is asked for (it costs reads time): without it, no row names a dictionary,
    and the file holds none; the first compressed write adds the one it names."""
    await _signed(tmp_path / "j.db", "support-1", compress=False)
    version, events, items = _dictionaries(tmp_path / "j.db")
    assert version == 3
    assert events == {None}
    assert items == {None}
    with contextlib.closing(sqlite3.connect(tmp_path / "j.db")) as db:
        assert db.execute("SELECT count(*) FROM dictionaries").fetchone() == (0,)
    assert await _verified_items(tmp_path / "j.db", "support-1")
    await _signed(tmp_path / "j.db", "support-2")
    assert _dictionaries(tmp_path / "j.db")[1] == {None, 1}
    assert await _verified_items(tmp_path / "j.db", "support-2")


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("sqlite:///j.db", ("j.db", False)),
        ("sqlite:///j.db?compress=zstd", ("j.db", True)),
        ("sqlite://:memory:?compress=zstd", (":memory:", True)),
    ],
)
def test_the_uri_names_the_file_and_whether_to_compress(
    uri: str, expected: tuple[str, bool]
) -> None:
    assert _sqlite_parts(uri) == expected
    assert sqlite_path(uri) == expected[0]


@pytest.mark.parametrize("query", ["compress=gzip", "compress", "mode=ro", "compress=zstd&x=1"])
def test_an_unknown_uri_option_is_refused_in_one_line(query: str) -> None:
    with pytest.raises(InvalidInput, match=r"the one option is \?compress=zstd"):
        sqlite_path(f"sqlite:///j.db?{query}")
