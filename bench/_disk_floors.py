"""The disk floors of the default stored form: a store file's bytes after each change its form
could make, measured on a copy of the file.

Each change is applied to a scratch copy on top of the ones before, and the copy is vacuumed
and measured as the store's files are (``bench/_stores.disk_bytes``), from the copy vacuumed
with nothing changed (what vacuuming alone saves is no change's):

- *the raw item only where needed*: the SDK's item kept for exact replay
  (``extensions.openai.item_json``) left out of every event whose canonical fields rebuild it
  exactly — a template of the item's shape, filled from the fields, printing the very text kept,
  checked event by event (the codec's rebuild today, for other writers' events, prints keys in
  another order and the easy-message form); the others keep it (a writer built so would also
  record which template it used, a byte an event not counted here);
- *compact metadata*: each event's metadata in a binary form that decodes back to the very bytes
  written (checked row by row): ``aj.seq`` and ``aj.prev`` left out where they are the row's
  revision and the hash of the row before it, digests and other hex as bytes, UUIDs as 16
  bytes, decimal integers and times as varints, the rest as text; each field's key and its
  value's kind one byte, of a table kept once in the file;
- *the read model's texts compressed*: each item row as a store opened with
  ``?compress=zstd`` keeps it (zstd with the dictionary of the source), the events as above;
- *no read model*: the read model's rows deleted, the floor of any change to the read model
  (which cold reads need: "Disk form" says what storing it otherwise costs them);
- *only the events that hold items*, on a second copy: every event that holds no item deleted
  first (sessions started, model responses, subagents' twins but the handoff calls', and
  checkpoints), then the raw items and the metadata as above and no read model (an event whose
  stream's previous event was deleted keeps its ``aj.prev`` whole): not a design, but what is
  left when the store keeps what the SDK's keeps, so the bytes above it are those of the
  records the SDK does not keep.

Nothing here is a stored form the store writes or reads: these are measurements of how far each
design in ``bench/RESULTS.md`` ("Disk form") would go, on the very events a store holds.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from _stores import disk_bytes
from agentjournal.engine.codec import exact_json
from agentjournal.events import ITEM_EVENT_TYPES
from agentjournal.store._append import encode_metadata
from agentjournal.store.sqlite._stored import DICTIONARY, Packer, writing_dictionary

_EXTENSION = b', "extensions": {"openai": {"item_json": '
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX = re.compile(r"(?:[0-9a-f]{2})+")
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,17}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SEQ, _PREV = "aj.seq", "aj.prev"
_NO_PREV = "0" * 64
_DERIVED, _DIGEST, _INTEGER, _BYTES, _ID, _INSTANT, _TEXT = range(7)


def floors(path: Path) -> Iterator[tuple[str, int]]:
    """Yield each change's name and the bytes of a copy of ``path`` (a store written as
    given) after it and the changes before it, the copy vacuumed and unchanged first."""
    _check_compact_form()
    folder = Path(tempfile.mkdtemp(prefix="agentjournal-disk-floors-"))
    try:
        disk_bytes(path)  # checkpoints the WAL into the file
        with _copy(path, folder / "floor.db") as (db, copy):
            yield "vacuumed, nothing changed", _vacuumed(db, copy)
            left_out, events = _raw_items_where_needed(db)
            yield (
                f"the raw item only where needed ({left_out:,} of {events:,} left out)",
                _vacuumed(db, copy),
            )
            _compact_metadata(db)
            yield "+ metadata in a compact stored form", _vacuumed(db, copy)
            _compressed_read_model(db)
            yield "+ the read model's texts compressed", _vacuumed(db, copy)
            db.execute("DELETE FROM items")
            yield "+ no read model (the floor of any change to it)", _vacuumed(db, copy)
        # The same changes on a copy that keeps only the events holding an item (each links
        # its stream's previous one kept, or its aj.prev is stored whole).
        with _copy(path, folder / "items-only.db") as (db, copy):
            db.execute(
                "DELETE FROM events WHERE type NOT IN "
                f"({', '.join('?' for _ in ITEM_EVENT_TYPES)}) AND instr(data, 'item_json') = 0",
                sorted(ITEM_EVENT_TYPES),
            )
            db.execute("DELETE FROM items")
            _raw_items_where_needed(db)
            _compact_metadata(db)
            kept = db.execute("SELECT count(*) FROM events").fetchone()[0]
            yield (
                f"+ only the events that hold items (what the SDK keeps: {kept:,} events)",
                _vacuumed(db, copy),
            )
    finally:
        shutil.rmtree(folder)


@contextlib.contextmanager
def _copy(path: Path, copy: Path) -> Iterator[tuple[sqlite3.Connection, Path]]:
    shutil.copyfile(path, copy)
    db = sqlite3.connect(copy, isolation_level=None)
    try:
        if db.execute("SELECT count(*) FROM events WHERE dictionary IS NOT NULL").fetchone()[0]:
            raise ValueError(f"{path}: the floors are of the form stored as given")
        yield db, copy
    finally:
        db.close()


def _vacuumed(db: sqlite3.Connection, path: Path) -> int:
    db.execute("VACUUM")
    return disk_bytes(path)


def _raw_items_where_needed(db: sqlite3.Connection) -> tuple[int, int]:
    """Leave the raw item out of every event whose canonical fields rebuild it exactly;
    return how many were left out, of the events that kept one."""
    left_out = events = 0
    db.execute("BEGIN")
    for position, type_, data in db.execute(
        "SELECT position, type, data FROM events WHERE instr(data, 'item_json') > 0"
    ).fetchall():
        body = orjson.loads(data)
        extensions = body.get("extensions") if isinstance(body, dict) else None
        openai = extensions.get("openai") if isinstance(extensions, dict) else None
        kept = openai.get("item_json") if isinstance(openai, dict) else None
        if not isinstance(kept, str):
            continue
        events += 1
        end = _EXTENSION + json.dumps(kept).encode() + b"}}}"
        if extensions != {"openai": {"item_json": kept}} or not data.endswith(end):
            continue  # printed otherwise: a rebuild could not leave it out as cut here
        without = data[: -len(end)] + b"}"
        if any(exact_json(item) == kept for item in _templates(type_, orjson.loads(without))):
            db.execute("UPDATE events SET data = ? WHERE position = ?", (without, position))
            left_out += 1
    db.execute("COMMIT")
    return left_out, events


def _templates(type_: str, doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The items a rebuild by template could print from an event's canonical fields: each
    common shape in the key orders the SDK's items come in (the Runner's model dumps, and
    items written by hand), no value that the fields do not hold."""
    if type_ == "UserMessageReceived":
        yield {"content": doc.get("content"), "role": "user"}
        yield {"role": "user", "content": doc.get("content")}
    elif type_ == "ToolResultReceived":
        call_id, output = doc.get("call_id"), doc.get("result")
        yield {"call_id": call_id, "output": output, "type": "function_call_output"}
        yield {"type": "function_call_output", "call_id": call_id, "output": output}
    elif type_ == "AssistantToolCallsGenerated" and len(doc.get("tool_calls", ())) == 1:
        if doc.get("content"):
            return
        call = doc["tool_calls"][0]
        name, call_id = call.get("tool_name"), call.get("call_id")
        for separators in ((",", ":"), (", ", ": ")):
            arguments = json.dumps(call.get("arguments"), separators=separators, ensure_ascii=False)
            runner: dict[str, Any] = {
                "arguments": arguments,
                "call_id": call_id,
                "name": name,
                "type": "function_call",
            }
            if "message_id" in doc:
                runner["id"] = doc["message_id"]
            yield runner
            yield {
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
            }
    elif type_ == "AssistantTextGenerated" and "message_id" in doc:
        text, id_ = doc.get("content"), doc["message_id"]
        part: dict[str, Any] = {
            "annotations": [],
            "text": text,
            "type": "output_text",
            "logprobs": [],
        }
        yield {
            "id": id_,
            "content": [part],
            "role": "assistant",
            "status": "completed",
            "type": "message",
        }
        part = {"type": "output_text", "text": text, "annotations": []}
        yield {
            "type": "message",
            "role": "assistant",
            "id": id_,
            "status": "completed",
            "content": [part],
        }


def _check_compact_form() -> None:
    """The compact metadata decodes back to the very bytes of values that only look like the
    kinds it packs (before any row is measured)."""
    values = [
        "0",
        "00",
        "007",
        "-1",
        "0x1",
        "1" * 19,
        "ABCDEF01",
        "abc",
        "a" * 64,
        "A" * 64,
        "",
        "é ünïcode",
        "1969-12-31T23:59:59.999999Z",
        "2016-12-31T23:59:60.000000Z",
        "2026-13-01T00:00:00.000000Z",
        "2026-12-06T21:00:00.000000Z",
        "fe6e6bc8-bdb6-5d9d-80b4-3e2560248458",
        "FE6E6BC8-BDB6-5D9D-80B4-3E2560248458",
    ]
    fields = {f"key{n}": value for n, value in enumerate(values)}
    fields.update({_SEQ: "00", _PREV: "f" * 64})
    derived = {_SEQ: "0", _PREV: _NO_PREV}
    codes: dict[tuple[str, int], int] = {}
    packed = _pack(fields, derived, codes)
    fields_of = {code: field for field, code in codes.items()}
    if _unpack(packed, derived, fields_of) != encode_metadata(fields):
        raise AssertionError("the compact form does not decode its edge cases back")


def _compressed_read_model(db: sqlite3.Connection) -> None:
    """Store the read model's item texts as a compressing store does."""
    content = DICTIONARY.encode("utf-8")
    pack_text = Packer(writing_dictionary(db, content), content).pack_text
    db.execute("BEGIN")
    for tree, index, item in db.execute("SELECT tree, idx, item FROM items").fetchall():
        db.execute(
            "UPDATE items SET item = ?, dictionary = ? WHERE tree = ? AND idx = ?",
            (*pack_text(item), tree, index),
        )
    db.execute("COMMIT")


def _compact_metadata(db: sqlite3.Connection) -> None:
    """Store every event's metadata in the compact form, each checked to decode back to
    the bytes written."""
    codes: dict[tuple[str, int], int] = {}
    fields_of: dict[int, tuple[str, int]] = {}
    previous: dict[int, str] = {}
    db.execute("BEGIN")
    for position, stream, revision, metadata in db.execute(
        "SELECT position, stream_id, revision, metadata FROM events ORDER BY stream_id, revision"
    ).fetchall():
        fields = orjson.loads(metadata)
        derived = {_SEQ: str(revision), _PREV: previous.get(stream, _NO_PREV)}
        packed = _pack(fields, derived, codes)
        if len(fields_of) != len(codes):  # a key or kind first seen here
            fields_of = {code: field for field, code in codes.items()}
        if _unpack(packed, derived, fields_of) != metadata:
            raise AssertionError(f"event {position}: the compact form does not decode back")
        db.execute("UPDATE events SET metadata = ? WHERE position = ?", (packed, position))
        previous[stream] = fields.get("aj.hash", "")
    db.execute("CREATE TABLE metadata_keys (code INTEGER PRIMARY KEY, key TEXT, kind INTEGER)")
    db.executemany(
        "INSERT INTO metadata_keys VALUES (?, ?, ?)",
        [(code, key, kind) for (key, kind), code in codes.items()],
    )
    db.execute("COMMIT")


def _kind(key: str, value: str, derived: dict[str, str]) -> int:
    if derived.get(key) == value:
        return _DERIVED
    if _HEX64.fullmatch(value):
        return _DIGEST
    if _DECIMAL.fullmatch(value):
        return _INTEGER
    if _HEX.fullmatch(value):
        return _BYTES
    if _UUID.fullmatch(value):
        return _ID
    if _TIME.fullmatch(value):
        try:
            micros = _micros(value)
        except ValueError:  # a leap second, a month 13: kept as text
            return _TEXT
        if micros >= 0 and _time_text(micros) == value:
            return _INSTANT
    return _TEXT


def _pack(
    fields: dict[str, str], derived: dict[str, str], codes: dict[tuple[str, int], int]
) -> bytes:
    """One byte per field for its key and its value's kind (a table kept once in the file),
    then the value in the kind's form."""
    out = bytearray()
    for key, value in fields.items():
        kind = _kind(key, value, derived)
        code = codes.setdefault((key, kind), len(codes))
        if code > 255:
            raise AssertionError("more than 256 keys and kinds: the form needs a wider code")
        out.append(code)
        if kind in (_DIGEST, _ID):
            out += bytes.fromhex(value.replace("-", ""))
        elif kind == _INTEGER:
            out += _varint(int(value))
        elif kind == _INSTANT:
            out += _varint(_micros(value))
        elif kind != _DERIVED:
            raw = bytes.fromhex(value) if kind == _BYTES else value.encode()
            out += _varint(len(raw)) + raw
    return bytes(out)


def _unpack(packed: bytes, derived: dict[str, str], fields_of: dict[int, tuple[str, int]]) -> bytes:
    fields: dict[str, str] = {}
    at = 0
    while at < len(packed):
        key, kind = fields_of[packed[at]]
        at += 1
        if kind == _DERIVED:
            value = derived[key]
        elif kind == _DIGEST:
            value, at = packed[at : at + 32].hex(), at + 32
        elif kind == _ID:
            value, at = str(uuid.UUID(bytes=packed[at : at + 16])), at + 16
        elif kind in (_INTEGER, _INSTANT):
            number, at = _read_varint(packed, at)
            value = str(number) if kind == _INTEGER else _time_text(number)
        else:
            size, at = _read_varint(packed, at)
            raw, at = packed[at : at + size], at + size
            value = raw.hex() if kind == _BYTES else raw.decode()
        fields[key] = value
    return encode_metadata(fields)


def _micros(text: str) -> int:
    stamp = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (stamp - _EPOCH) // timedelta(microseconds=1)


def _time_text(micros: int) -> str:
    return (_EPOCH + timedelta(microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        if not number:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _read_varint(packed: bytes, at: int) -> tuple[int, int]:
    number = shift = 0
    while True:
        byte = packed[at]
        at += 1
        number |= (byte & 0x7F) << shift
        if byte < 0x80:
            return number, at
        shift += 7
