"""JSON parsing on the hot paths: ``orjson`` where it gives exactly what ``json`` gives.

:func:`loads` returns the value ``json.loads`` returns for the same text, in a
fraction of the time. ``orjson`` parses JSON to the same Python values
(``dict`` in key order, last duplicate key winning, ``int``, correctly rounded
``float``, ``str``) with three differences, each sent to ``json`` instead:

- an integer beyond 64 bits becomes a ``float`` in ``orjson``: any text holding
  19 or more digits in a row goes to ``json`` (an integer of 18 digits fits;
  found by mapping every digit to ``0`` and looking for 19 zeros, all in C);
- ``NaN``, ``Infinity`` and numbers that overflow a double, and lone surrogates
  (``"\\ud800"``), are errors in ``orjson``, values in ``json``;
- anything else ``orjson`` refuses is parsed (or refused) by ``json``.

``tests/test_json_fast.py`` holds the two to equal values, of equal types, on
random documents, big integers, floats and surrogates included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import orjson

_ZEROED: Final = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN: Final = b"0" * 19
_json_loads: Final = json.JSONDecoder().decode
orjson_loads: Final = orjson.loads
"""``orjson.loads``, for texts already known :func:`plain_text` (errors: ``ValueError``)."""
_OrjsonError: Final = orjson.JSONDecodeError


def plain_text(text: str) -> bool:
    """Whether ``text`` has no 19 digits in a row: ``orjson`` reads it exactly, or refuses it.

    Checked once when an item is written, so readers of the item need not check again
    (:attr:`agentjournal.engine.timeline.Entry.plain`).
    """
    return _LONG_RUN not in text.encode("utf-8", "surrogatepass").translate(_ZEROED)


def loads(text: str, fallback: Callable[[str], Any] = _json_loads) -> Any:
    """``json.loads(text)``, through ``orjson`` when that gives the same value.

    ``fallback`` parses what ``orjson`` does not (default: ``json``'s decoder); a
    decoder that refuses ``NaN`` and ``Infinity`` (``parse_constant``) gives exactly
    ``orjson``'s answer for them.

    Raises:
        json.JSONDecodeError: ``text`` is not JSON (as ``json.loads`` raises it).
    """
    try:
        raw = text.encode()
    except UnicodeEncodeError:  # a lone surrogate: orjson refuses it, json keeps it
        return fallback(text)
    if _LONG_RUN not in raw.translate(_ZEROED):
        try:
            return orjson_loads(raw)
        except _OrjsonError:
            pass
    return fallback(text)


_BOM: Final = b"\xef\xbb\xbf"


def loads_bytes(data: bytes) -> Any:
    """``json.loads(data)`` for bytes (an event's data), through ``orjson`` when that gives
    the same value: UTF-8 without a byte order mark and without 19 digits in a row; the
    rest (another encoding, a BOM, what ``orjson`` refuses) goes to ``json``.

    Raises:
        ValueError: ``data`` is not JSON, or not text (as ``json.loads`` raises it).
    """
    if not data.startswith(_BOM) and _LONG_RUN not in data.translate(_ZEROED):
        try:
            return orjson_loads(data)
        except _OrjsonError:
            pass
    return json.loads(data)


def loads_utf8(data: bytes) -> Any:
    """``json.loads(data.decode())``: strict UTF-8 text (a stored event's metadata), through
    ``orjson`` straight from the bytes when that gives the same value, with no ``str`` made.

    Raises:
        UnicodeDecodeError: ``data`` is not UTF-8 (as ``data.decode()`` raises it).
        ValueError: ``data`` is not JSON (as ``json.loads`` raises it).
    """
    if not data.startswith(_BOM) and _LONG_RUN not in data.translate(_ZEROED):
        try:
            return orjson_loads(data)
        except _OrjsonError:
            pass
    return loads(data.decode())
