"""The stored form of the SQLite file's text columns: zstd with a dictionary kept in the file.

An event's ``data`` and ``metadata`` (and a read model row's ``item``) are stored as zstd
frames compressed with a dictionary whenever that is smaller; every read hands back exactly
the bytes that were written, so nothing above the store sees the stored form (and every hash
holds). A row names the dictionary its values were compressed with (``dictionary`` column;
NULL: stored as given), and the dictionary itself is a row of the file's ``dictionaries``
table: a file stays readable by any later version, whatever dictionary that version writes
with.

The dictionary written with is :data:`DICTIONARY`, a zstd raw-content dictionary: text the
events repeat (metadata keys, field names, event types, JSON shapes), most frequent last
(zstd reaches the end of a raw dictionary with the shortest offsets). Frames are written
without zstd's magic number, dictionary id and checksum (the row says all three: what it is,
with which dictionary, and the chain hash checks the content): ~10 bytes fewer per value.

A compressed value that does not decompress (the file edited by hand) reads as the bytes
stored, as any edit does: changed content, which the chain hash does not match. So does a frame
whose header says it holds more than an event may (``MAX_EVENT_BYTES``): it is not decompressed
at all, so a small hand-made frame of gigabytes of zeros cannot exhaust a reader's memory. A
read model item naming a dictionary the file lacks reads as changed text too (the verifier's
read model check reports it). Bytes after a frame are not read: they are no part of any value,
and what is read is what the chain covers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Final

import zstandard

from agentjournal.errors import UndecodableEvent
from agentjournal.store._events import MAX_EVENT_BYTES

_LEVEL: Final = 3

# Raw content: zstd matches anything of it; the most frequent shapes come last. Changing
# this text makes new rows use a new dictionary row; rows written before keep theirs.
DICTIONARY: Final = (
    '"agentjournal.GuardrailDecided" "agentjournal.AuthorityRefused" '
    '"agentjournal.AuthorityGranted" "agentjournal.PolicyRecorded" "agentjournal.AuthorityHeld" '
    '"agentjournal.BranchForked" "agentjournal.BranchStarted" "agentjournal.SubagentContinued" '
    '"agentjournal.RunPaused" "agentjournal.RunResumed" "agentjournal.LineGuarded" '
    '"agentjournal.SubjectErased" "agentjournal.SessionCleared" "agentjournal.ItemPopped" '
    '"EvalRunStarted" "TurnScored" "SessionScored" "EvalRunCompleted" "InterruptIssued" '
    '"aj.enc":"'
    '"aj.opaque":"'
    '"aj.viewed":"'
    '"aj.guarded":"'
    '"aj.policy":"'
    '"aj.tool_rule":"'
    '"aj.interrupt":"'
    '"aj.line_end":"'
    '"aj.started_at":"'
    '"aj.ended_at":"'
    '"$system":"'
    '"$metadata":"'
    '{"heads":{"AgentSession-":{"hash":"","revision":}},"key_id":"ed25519:","metadata":'
    '{"$schema_version":"2","span_id":"","trace_id":""},"previous":"'
    '0000000000000000000000000000000000000000000000000000000000000000","sequence":'
    ',"session_id":"","signature":"==","signed_at":"+00:00"}'
    '{"agent_id": "sub-", "outcome": "success", "summary": "'
    '{"agent_id": "sub-", "agent_type": "", "prompt": "", "subsession_stream": '
    '"AgentSubsession-", "timestamp": "", "extensions": {"openai": {"source_agent": "'
    '", "twin_event_id": "", "call_id": "", "parent_stream": "AgentSession-'
    '"aj.twin":"","aj.open":"AgentSubsession-","aj.closes":"AgentSubsession-",'
    '"aj.closes_hash":"'
    '{"app_name": "", "agent_name": "", "user_id": "", "timestamp": "'
    '{"session_id":"","agent":"","model":null,"system":null,"response_id":"resp-",'
    '"usage":{"input_tokens":"0","cached_input_tokens":"0","output_tokens":"0",'
    '"reasoning_tokens":"0","total_tokens":"0"},"started_at":"","ended_at":"",'
    '"outputs":{"function_call":1}}{"message":1}}'
    '{"tool_calls": [{"call_id": "call_", "tool_name": "", "arguments": {}, '
    '"tool_kind": "function"}], "message_id": "", "author_name": "", "message_index": '
    '{"call_id": "call_", "result": "", "author_name": "", "message_index": '
    '{"content": "", "message_id": "msg_", "author_name": "", "message_index": '
    '{"content": "", "message_index": , "timestamp": "2026-'
    '{"id":"msg_","content":[{"annotations":[],"text":"","type":"output_text",'
    '"logprobs":[]}],"role":"assistant","status":"completed","type":"message"}'
    '{"arguments":"{\\"":\\"\\"}","call_id":"call_","name":"","type":"function_call",'
    '"id":"fc_"}'
    '{"call_id":"call_","output":"","type":"function_call_output"}'
    '{"content":"","role":"user"}'
    '", "extensions": {"openai": {"item_json": "{\\"arguments\\":\\"{\\\\\\"\\",'
    '\\"call_id\\":\\"call_\\",\\"name\\":\\"\\",\\"type\\":\\"function_call\\",'
    '\\"id\\":\\"fc_\\"}"}}}'
    '", "extensions": {"openai": {"item_json": "{\\"call_id\\":\\"call_\\",\\"output\\":'
    '\\"\\",\\"type\\":\\"function_call_output\\"}"}}}'
    '", "extensions": {"openai": {"item_json": "{\\"id\\":\\"msg_\\",\\"content\\":'
    '[{\\"annotations\\":[],\\"text\\":\\"\\",\\"type\\":\\"output_text\\",'
    '\\"logprobs\\":[]}],\\"role\\":\\"assistant\\",\\"status\\":\\"completed\\",'
    '\\"type\\":\\"message\\"}"}}}'
    '", "extensions": {"openai": {"item_json": "{\\"content\\":\\"\\",\\"role\\":\\"user\\"}"}}}'
    '{"aj.index":"","$usage":"{\\"input_tokens\\": \\"0\\", \\"output_tokens\\": \\"0\\", '
    '\\"total_tokens\\": \\"0\\", \\"cached_input_tokens\\": \\"0\\", '
    '\\"reasoning_tokens\\": \\"0\\"}","aj.response_id":"resp-","aj.call_id":"call_",'
    '"aj.item_type":"function_call_output","aj.item_type":"function_call",'
    '"aj.redacted":"'
    '{"aj.index":"","aj.turn":"","aj.next_index":"","$schema_version":"2","trace_id":"'
    '","span_id":"","aj.chain":"2","aj.seq":"","aj.prev":"","aj.hash":"'
)

# A read model row's item text in a query: a compressed one (a BLOB naming a dictionary)
# through the unpacker's SQL function, in C for the others. A TEXT value is the text
# itself whatever the row names (an edit by hand reads as what it wrote).
ITEM_TEXT: Final = (
    "CASE WHEN dictionary IS NULL OR typeof(item) != 'blob' THEN item "
    "ELSE aj_item(item, dictionary) END"
)


def _params() -> zstandard.ZstdCompressionParameters:
    return zstandard.ZstdCompressionParameters.from_level(
        _LEVEL,
        format=zstandard.FORMAT_ZSTD1_MAGICLESS,
        write_content_size=1,
        write_checksum=0,
        write_dict_id=0,
    )


def _bounded(decompress: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """``decompress``, refusing (``ZstdError``) a frame that says it holds more than an event
    may, before it allocates any of it."""
    frame = zstandard.get_frame_parameters
    magicless = zstandard.FORMAT_ZSTD1_MAGICLESS

    def bounded(value: bytes) -> bytes:
        if frame(value, format=magicless).content_size > MAX_EVENT_BYTES:
            raise zstandard.ZstdError("a frame larger than an event")
        return decompress(value)

    return bounded


def _dictionary(content: bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(content, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


class Packer:
    """Compresses values with one dictionary (one thread at a time: zstd contexts are not
    shareable); with no dictionary (:data:`PLAIN`), stores every value as given."""

    def __init__(self, dictionary_id: int | None, content: bytes = b"") -> None:
        self.dictionary_id = dictionary_id
        self._compress: Callable[[bytes], bytes] | None = None
        if dictionary_id is not None:
            dictionary = _dictionary(content)
            dictionary.precompute_compress(level=_LEVEL)
            self._compress = zstandard.ZstdCompressor(
                dict_data=dictionary, compression_params=_params()
            ).compress

    def pack(self, data: bytes, metadata: bytes) -> tuple[bytes, bytes, int | None]:
        """``data`` and ``metadata`` as stored, and the dictionary id the row names (None:
        stored as given, when compressing would not make them smaller)."""
        compress = self._compress
        if compress is None:
            return data, metadata, None
        packed_data, packed_metadata = compress(data), compress(metadata)
        if len(packed_data) + len(packed_metadata) >= len(data) + len(metadata):
            return data, metadata, None
        return packed_data, packed_metadata, self.dictionary_id

    def pack_text(self, text: str) -> tuple[str | bytes, int | None]:
        """A read model item as stored: the text itself (TEXT) or its frame (BLOB)."""
        if self._compress is None:
            return text, None
        raw = text.encode("utf-8")
        packed = self._compress(raw)
        if len(packed) >= len(raw):
            return text, None
        return packed, self.dictionary_id


PLAIN: Final = Packer(None)
"""The writer of a store opened without compression: every value stored as given."""


class Unpacker:
    """Decompresses values with the file's dictionaries, loaded on first use (one thread
    at a time)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        """Serve ``db``: its dictionaries, and the SQL function ``aj_item`` of
        :data:`ITEM_TEXT` on it."""
        self._db = db
        self._decompress: dict[int, Callable[[bytes], bytes]] = {}
        db.create_function("aj_item", 2, self._item_text, deterministic=True)

    def joined_alike(self, items: list[bytes], dictionary: int) -> str | None:
        """Read model items' texts, each compressed with ``dictionary``, joined by
        ``",\n"``; None when one of them does not decompress (ask :meth:`joined_texts`)."""
        try:
            decompress = self._decompress.get(dictionary) or self._load(
                dictionary, "a read model item"
            )
        except UndecodableEvent:  # a dictionary the file lacks: ask joined_texts
            return None
        try:
            return b",\n".join(map(decompress, items)).decode("utf-8", "replace")
        except (zstandard.ZstdError, MemoryError):  # not a frame, or one claiming a vast size
            return None

    def joined_texts(self, rows: Sequence[tuple[str | bytes, int | None]]) -> str:
        """Read model items' texts (``item, dictionary`` rows) joined by ``",\n"``."""
        texts = []
        known = self._decompress
        for item, dictionary in rows:
            if type(item) is str:
                texts.append(item)
                continue
            assert isinstance(item, bytes)
            decompress = known.get(dictionary) if dictionary is not None else None
            if decompress is None:
                texts.append(self._item_text(item, dictionary))
                continue
            try:
                texts.append(decompress(item).decode("utf-8", "replace"))
            except (zstandard.ZstdError, MemoryError):  # not a frame, or one claiming a vast size
                texts.append(item.decode("utf-8", "replace"))  # edited by hand
        return ",\n".join(texts)

    def _item_text(self, value: bytes, dictionary: int | None) -> str:
        """A compressed read model item's text (changed text when it does not decompress, or
        names a dictionary the file lacks)."""
        try:
            unpacked = self.unpack(value, dictionary, "a read model item")
        except UndecodableEvent:
            unpacked = value
        return unpacked.decode("utf-8", "replace")

    def unpack(self, value: bytes, dictionary: int | None, stream: str = "$all") -> bytes:
        """The bytes written, from ``value`` as stored with ``dictionary``."""
        if dictionary is None:
            return value
        decompress = self._decompress.get(dictionary)
        if decompress is None:
            decompress = self._load(dictionary, stream)
        try:
            return decompress(value)
        except (zstandard.ZstdError, MemoryError):  # not a frame, or one claiming a vast size
            return value  # edited by hand: reads as changed content

    def _load(self, dictionary: int, stream: str) -> Callable[[bytes], bytes]:
        row = self._db.execute(
            "SELECT content FROM dictionaries WHERE id = ?", (dictionary,)
        ).fetchone()
        if row is None or not isinstance(row[0], bytes):
            raise UndecodableEvent(
                stream, f"{stream}: an event names dictionary {dictionary}, which the file lacks"
            )
        decompress = _bounded(
            zstandard.ZstdDecompressor(
                dict_data=_dictionary(row[0]), format=zstandard.FORMAT_ZSTD1_MAGICLESS
            ).decompress
        )
        self._decompress[dictionary] = decompress
        return decompress


def writing_dictionary(db: sqlite3.Connection, content: bytes = DICTIONARY.encode()) -> int:
    """The id of ``content``'s row in the file's dictionaries, added (in a transaction of
    its own, committed before any row names it) if the file has none."""
    found = db.execute("SELECT id FROM dictionaries WHERE content = ?", (content,)).fetchone()
    if found is not None:
        return int(found[0])
    db.execute("BEGIN IMMEDIATE")
    try:
        found = db.execute("SELECT id FROM dictionaries WHERE content = ?", (content,)).fetchone()
        if found is None:
            found = (
                db.execute("INSERT INTO dictionaries(content) VALUES (?)", (content,)).lastrowid,
            )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return int(found[0])
