"""A span's ``--jsonl`` line: ``json.dumps(span.as_json(), sort_keys=True)`` and a newline.

Printed from a template of the line's fixed shape (its keys sorted once, here), each value
printed as ``json``'s encoder prints it: a string by the very function the encoder calls
(``encode_basestring_ascii``), an integer and a finite float by their ``repr`` (what the
encoder calls), a bool as ``true``/``false``, None as ``null``; an object's keys sorted.
A value of any other type (a NaN, a subclass, a key that is no string) takes the exact
path, ``json`` itself: ``tests/test_trace_fast_path.py`` holds the two equal on random spans.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring_ascii
from math import isfinite
from operator import is_
from typing import Any, Final

from agentjournal.read.traces.spans import ProjectedSpan, SpanEvent, SpanLink

_SORTED_JSON: Final = json.JSONEncoder(sort_keys=True).encode
"""What ``json.dumps(value, sort_keys=True)`` prints: the exact path."""

_string: Final = encode_basestring_ascii
_int: Final = int.__repr__
_float: Final = float.__repr__


class _Unusual(Exception):
    """A value the template does not print: the line takes the exact path."""


def span_line(span: ProjectedSpan) -> str:
    """The span's ``--jsonl`` line: ``json.dumps(span.as_json(), sort_keys=True) + "\\n"``."""
    try:
        return _template(span)
    except (_Unusual, TypeError):  # TypeError: sorting keys of mixed types, as json fails
        return exact_line(span)


def exact_line(span: ProjectedSpan) -> str:
    """The span's ``--jsonl`` line printed by ``json`` (:func:`span_line` prints the same)."""
    return _SORTED_JSON(span.as_json()) + "\n"


def _template(span: ProjectedSpan) -> str:
    parent = span.parent_id
    error = span.error
    if error is None:
        status = '{"code": "UNSET"}'
    else:
        status = '{"code": "ERROR", "message": ' + _value(error) + "}"
    return (
        f'{{"attributes": {_object(span.attributes)}, '
        f'"end_time_unix_nano": {_value(span.end_ns)}, '
        f'"events": {_events(span.events)}, '
        f'"links": {_links(span.links)}, '
        f'"name": {_value(span.name)}, '
        f'"parent_span_id": {"null" if parent is None else _value(parent)}, '
        f'"span_id": {_value(span.span_id)}, '
        f'"start_time_unix_nano": {_value(span.start_ns)}, '
        f'"status": {status}, '
        f'"trace_id": {_value(span.trace_id)}}}\n'
    )


def _value(value: Any) -> str:
    """A string, integer, finite float or bool as ``json`` prints it."""
    kind = type(value)
    if kind is str:
        return _string(value)
    if kind is int:
        return _int(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is float and isfinite(value):
        return _float(value)
    raise _Unusual


_KEYS: dict[str, str] = {}  # attribute names, printed (a few dozen names recur)
_KEYS_KEPT: Final = 4096


def _key(key: Any) -> str:
    printed = _KEYS.get(key) if type(key) is str else None
    if printed is None:
        if type(key) is not str:
            raise _Unusual
        printed = _string(key)
        if len(_KEYS) < _KEYS_KEPT:
            _KEYS[key] = printed
    return printed


_Shape = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]
_SHAPES: dict[tuple[Any, ...], _Shape] = {}  # an object's keys -> its shape (a few recur)


def _object(mapping: Mapping[str, Any]) -> str:
    """A flat object of attributes, its keys sorted."""
    if not mapping:
        return "{}"
    keys = tuple(mapping)
    shape = _SHAPES.get(keys)
    if shape is None or not all(map(is_, keys, shape[0])):
        shape = _shape(keys)
    members = []
    for key, printed in shape[1]:
        value = mapping[key]
        kind = type(value)  # the two commonest kinds printed here, the others by _value
        members.append(
            printed
            + (_string(value) if kind is str else _int(value) if kind is int else _value(value))
        )
    return "{" + ", ".join(members) + "}"


def _shape(keys: tuple[Any, ...]) -> _Shape:
    """An object's shape: its keys (these very objects: only a later object whose keys are
    the same objects, each a ``str`` and no subclass, is printed by it) and, in sorted
    order, each key with its printed ``"key": ``."""
    if not all(type(key) is str for key in keys):
        raise _Unusual
    shape = keys, tuple((key, _key(key) + ": ") for key in sorted(keys))
    if len(_SHAPES) < _KEYS_KEPT:
        _SHAPES[keys] = shape
    return shape


def _events(events: Sequence[SpanEvent]) -> str:
    if not events:
        return "[]"
    return (
        "["
        + ", ".join(
            [
                '{"attributes": '
                + _object(event.attributes)
                + ', "name": '
                + _value(event.name)
                + ', "time_unix_nano": '
                + _value(event.time_ns)
                + "}"
                for event in events
            ]
        )
        + "]"
    )


def _links(links: Sequence[SpanLink]) -> str:
    if not links:
        return "[]"
    return (
        "["
        + ", ".join(
            [
                '{"attributes": '
                + _object(link.attributes)
                + ', "span_id": '
                + _value(link.span_id)
                + ', "trace_id": '
                + _value(link.trace_id)
                + "}"
                for link in links
            ]
        )
        + "]"
    )
