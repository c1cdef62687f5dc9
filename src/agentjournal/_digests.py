"""Digests of what agentjournal records (pure): of event data, and of JSON values."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Made once (json.dumps with options builds an encoder per call); the same bytes.
_SORTED_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def value_digest(value: Any) -> str:
    """``sha256:`` + hex SHA-256 of ``value`` as JSON with sorted keys, no whitespace, UTF-8.

    The digest of a payload a guardrail judged, of a withheld value in a redacted view, and of a
    string a ceiling reads. Lone surrogates are kept as their bytes (``surrogatepass``): a digest
    never fails on data a model or a forged bundle produced.
    """
    text = _SORTED_JSON(value)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def data_digest(data: bytes) -> str:
    """Hex SHA-256 of an event's data."""
    return hashlib.sha256(data).hexdigest()
