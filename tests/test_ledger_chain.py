"""The chain primitives: JCS records, sealing, keys and checkpoints (pure)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal.errors import InvalidInput
from agentjournal.ledger import (
    GENESIS,
    HASH_KEY,
    Checkpoint,
    SigningKey,
    chain_hash,
    load_public_key,
    seal,
)
from agentjournal.ledger.chain import CHAIN_KEY, _record_bytes, jcs

_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=30)
# A format 1 record's metadata: any keys but the two that say how the event is chained
# (``aj.hash`` is left out of the record, ``aj.chain`` names another format).
_metadata = st.dictionaries(
    st.one_of(_text, st.text(alphabet=st.characters(max_codepoint=127))).filter(
        lambda key: key not in (HASH_KEY, CHAIN_KEY)
    ),
    _text,
)
_records = given(_text, st.integers(0, 2**53 - 1), _text, _text, _metadata)


def _record(
    stream: str, revision: int, event_id: str, type_: str, metadata: dict[str, str]
) -> dict[str, Any]:
    return {
        "stream": stream,
        "revision": revision,
        "id": event_id,
        "type": type_,
        "data_sha256": "ab" * 32,
        "metadata": metadata,
    }


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@_records
def test_the_record_bytes_are_rfc8785(
    stream: str, revision: int, event_id: str, type_: str, metadata: dict[str, str]
) -> None:
    record = _record(stream, revision, event_id, type_, metadata)
    assert _record_bytes(record, metadata) == rfc8785.dumps(record)


def test_seal_covers_everything_but_the_hash() -> None:
    metadata = {"aj.index": "3"}
    digest = seal("S-1", 0, "id-1", "T", b"{}", metadata, GENESIS)
    assert metadata[HASH_KEY] == digest
    assert (metadata["aj.seq"], metadata["aj.prev"]) == ("0", GENESIS)
    again = dict(metadata)
    assert seal("S-1", 0, "id-1", "T", b"{}", again, GENESIS) == digest
    for changed in (
        ("S-2", 0, "id-1", "T", b"{}"),
        ("S-1", 1, "id-1", "T", b"{}"),
        ("S-1", 0, "id-2", "T", b"{}"),
        ("S-1", 0, "id-1", "U", b"{}"),
        ("S-1", 0, "id-1", "T", b"{ }"),
    ):
        assert seal(*changed, dict(metadata), GENESIS) != digest
    assert seal("S-1", 0, "id-1", "T", b"{}", {**metadata, "aj.index": "4"}, GENESIS) != digest
    assert chain_hash("S-1", 0, "id-1", "T", "0" * 64, metadata) != digest


def test_keys_round_trip_and_checkpoints_sign() -> None:
    key = SigningKey.generate()
    assert SigningKey.from_text(key.private_pem()).key_id == key.key_id
    public = load_public_key(key.public_pem())
    heads = {"AgentSession-s": (4, "f" * 64)}
    signed = Checkpoint.sign(key, "s", heads, datetime.now(UTC), sequence=0, previous="0" * 64)
    assert signed.verify(public)
    assert not signed.verify(SigningKey.generate().public_key)
    decoded = Checkpoint.decode(__import__("json").loads(signed.encode()))
    assert decoded == signed


def test_a_checkpoint_read_from_other_mappings_than_dicts_is_the_same() -> None:
    from types import MappingProxyType

    key = SigningKey.generate()
    heads = {"AgentSession-s": (4, "f" * 64)}
    signed = Checkpoint.sign(key, "s", heads, datetime.now(UTC), sequence=0, previous="0" * 64)
    body = __import__("json").loads(signed.encode())
    proxied = {
        **body,
        "heads": MappingProxyType({k: MappingProxyType(v) for k, v in body["heads"].items()}),
        "metadata": MappingProxyType(body["metadata"]),
    }
    assert Checkpoint.decode(MappingProxyType(proxied)) == signed
    for odd in ({**body, "heads": [1]}, {**body, "metadata": []}, [body]):
        with pytest.raises(InvalidInput):
            Checkpoint.decode(odd)


@pytest.mark.parametrize("text", ["", "not a key", "AAAA", "-----BEGIN PRIVATE KEY-----\nxx\n"])
def test_bad_keys_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput):
        SigningKey.from_text(text)
    with pytest.raises(InvalidInput):
        load_public_key(text)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@_records
def test_the_chain_hash_is_the_hash_of_the_rfc8785_record(
    stream: str, revision: int, event_id: str, type_: str, metadata: dict[str, str]
) -> None:
    # chain_hash puts the record's JSON together from its parts: the same bytes.
    record = _record(stream, revision, event_id, type_, metadata)
    expected = hashlib.sha256(rfc8785.dumps(record)).hexdigest()
    with_hash = {**metadata, HASH_KEY: "f" * 64}
    assert chain_hash(stream, revision, event_id, type_, "ab" * 32, with_hash) == expected


def test_a_lone_surrogate_cannot_be_chained() -> None:
    for fields in (
        ("S-\ud800", 0, "id", "T"),
        ("S", 0, "id-\udfff", "T"),
        ("S", 0, "id", "\ud800"),
    ):
        with pytest.raises(InvalidInput, match="lone surrogate"):
            chain_hash(*fields, "0" * 64, {"aj.seq": "0"})
    with pytest.raises(InvalidInput, match="lone surrogate"):
        chain_hash("S", 0, "id", "T", "0" * 64, {"aj.x": "\ud800"})


_json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**64), 2**64),
        st.sampled_from([2**53 - 1, 2**53, -(2**53 - 1), -(2**53)]),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),  # lone surrogates and control characters included
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), _text), inner, max_size=4),
    ),
    max_leaves=20,
)


def _rfc8785_or_error(value: Any) -> bytes | type[Exception]:
    try:
        encoded: bytes = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as error:
        return type(error)
    return encoded


def _jcs_or_error(value: Any) -> bytes | type[Exception]:
    try:
        return jcs(value)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as error:
        return type(error)


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_jcs_prints_or_refuses_what_rfc8785_does(value: Any) -> None:
    # Its orjson path (ASCII keys, safe integers, no float) and rfc8785 alike.
    assert _jcs_or_error(value) == _rfc8785_or_error(value)


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [True, None, "\x1f\x7f\u2028é"]},
        {"n": 2**53 - 1, "m": -(2**53 - 1)},
        {"n": 2**53},
        {"s": "\ud800"},
        {"\ud800": "s"},
        {"\U0001f600": 1, "\uffff": 2},
        {"f": 1.5},
        ("a", 1),
    ],
)
def test_jcs_on_its_edges(value: Any) -> None:
    assert _jcs_or_error(value) == _rfc8785_or_error(value)


def test_a_checkpoint_signs_its_rfc8785_bytes() -> None:
    key = SigningKey.generate()
    heads = {"AgentSession-s": (4, "f" * 64), "AgentLedger-s": (2**53 - 1, "e" * 64)}
    signed = Checkpoint.sign(
        key, "s", heads, datetime.now(UTC), sequence=3, previous="0" * 64, metadata={"é": "ü"}
    )
    assert signed.signed_bytes() == rfc8785.dumps(signed._fields())
    assert signed.encode() == rfc8785.dumps({**signed._fields(), "signature": signed.signature})
