"""Which fields of which events hold a data subject's content, sealing them under the
subject's key and opening them again (pure).

An event keeps its structure: only the values of its content fields are replaced, a
string by an envelope string ``aj.enc:v1:<key id>:<base64url(nonce||ciphertext)>``, any
other value by ``{"aj.enc": <that string>}``, so event types, agents, tool names, call
ids, times, usage, decisions and their reason codes, grants and every id stay in the
clear for the readers that route, fold and verify. The plaintext sealed is the value's
JSON text, with the event's stream, id and the field's path as associated data.

An event that holds an SDK item also keeps, in the clear, the item's *erased form*
(:func:`erased_item`: its type, role, ids and tool name, content replaced by
``[erased]``), which is what a reader gets once the key is destroyed: the SDK can still
run a turn on the history. Content digests (a guardrail payload's, a refused call's
arguments') become keyed digests under the subject's key, so they die with it.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from agentjournal import events
from agentjournal.shred._cipher import Unopenable, associated, decrypt, encrypt, keyed_digest
from agentjournal.shred.keys import SubjectKey

ERASED: Final = "[erased]"
"""What a reader is shown in place of content whose key was destroyed."""

SEALED: Final = "[sealed]"
"""What a read tool shows in place of content sealed under a key it does not hold (it was
given no key store, or another one)."""

UNOPENABLE: Final = "[unopenable]"
"""What a read tool shows in place of sealed content that does not open under its key
(altered or moved: the verifier fails its chain)."""

KEY_ID_KEY: Final = "aj.enc"
"""Metadata of a sealed event: the id of the key its content is sealed under."""

ENVELOPE_PREFIX: Final = "aj.enc:v1:"

_ITEM_JSON: Final = ("extensions", "openai", "item_json")
_ERASED_ITEM: Final = "erased_item"

CONTENT_FIELDS: Final[Mapping[str, tuple[tuple[str, ...], ...]]] = {
    "UserMessageReceived": (("content",), _ITEM_JSON),
    "AssistantTextGenerated": (("content",), _ITEM_JSON),
    "AssistantToolCallsGenerated": (("tool_calls", "*", "arguments"), _ITEM_JSON),
    "ToolResultReceived": (("result",), _ITEM_JSON),
    "AssistantThinkingGenerated": (("content",), _ITEM_JSON),
    events.INTERRUPT_ISSUED: (("prompt",), _ITEM_JSON),
    events.INTERRUPT_RESOLVED: (("response",), _ITEM_JSON),
    events.EXTENSION_EVENT_TYPE: (("item",),),
    events.SUBAGENT_STARTED: (("prompt",), _ITEM_JSON),
    events.SUBAGENT_COMPLETED: (("summary",), ("extensions", "openai", "reason")),
    events.GUARDRAIL_DECIDED: (("payload",), ("modified_payload",), ("reason_message",)),
    events.AUTHORITY_REFUSED: (("value",),),
    events.RUN_PAUSED: (("state",),),
    events.TURN_SCORED: (("input",), ("output",), ("reason",)),
    events.SESSION_SCORED: (("reason",),),
}
"""Per event type, the paths of the values that are the subject's content (``*``: every
element of a list)."""

DIGEST_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    events.GUARDRAIL_DECIDED: ("payload_digest", "modified_payload_digest"),
    events.AUTHORITY_REFUSED: ("arguments_digest",),
}
"""Per event type, the top-level digests of content that become keyed digests."""

_ITEM_KEYS: Final = (
    "type",
    "role",
    "id",
    "call_id",
    "name",
    "status",
    "approval_request_id",
    "approve",
    "server_label",
)

KeyFinder = Callable[[str], SubjectKey | None]
"""Finds a key by id: None when it was destroyed (raises ``KeyError`` for one never held)."""


def erased_item(item: Any) -> dict[str, Any]:
    """What an SDK item becomes once its content is erased: its type, role, ids, tool name
    (a message's ``name`` is content) and approval answer, with ``[erased]`` (or ``"{}"``
    arguments) for the rest."""
    if not isinstance(item, dict):
        return {"role": "assistant", "content": ERASED}
    kept: dict[str, Any] = {
        key: item[key] for key in _ITEM_KEYS if isinstance(item.get(key), str | bool)
    }
    kind = item.get("type")
    if kind in (None, "message"):
        kept.pop("name", None)  # a message's name is the application's free text: content
    if kind in ("function_call", "mcp_approval_request", "mcp_call"):
        kept["arguments"] = "{}"
    elif isinstance(kind, str) and kind.endswith("_output"):
        kept["output"] = ERASED
    elif kind == "reasoning":
        kept["summary"] = [{"type": "summary_text", "text": ERASED}]
    elif kind in (None, "message") and "role" in kept:
        if kept["role"] == "assistant" and kind == "message":
            kept["content"] = [{"type": "output_text", "text": ERASED, "annotations": []}]
        else:
            kept["content"] = ERASED
    elif kind is None:
        return {"role": "assistant", "content": ERASED}
    return kept


def seal_content(
    type_: str,
    data: bytes,
    *,
    stream: str,
    event_id: str,
    key: SubjectKey,
    nonce: Callable[[int], bytes] = os.urandom,
) -> bytes | None:
    """``data`` with its content fields sealed under ``key`` (None: the type holds no
    content, or this event none)."""
    paths = CONTENT_FIELDS.get(type_)
    if paths is None:
        return None
    body = json.loads(data)
    if not isinstance(body, dict):
        return None
    sealed = False
    for path in paths:
        for container, name, where in _slots(body, path):
            value = container[name]
            if value is None:
                continue
            if path in (_ITEM_JSON, ("item",)):
                _keep_erased_form(container, name, value, item_json=path == _ITEM_JSON)
            plain = json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode()
            sealed_bytes = encrypt(
                key.secret, plain, associated(stream, event_id, where), nonce=nonce
            )
            envelope = f"{ENVELOPE_PREFIX}{key.key_id}:{_b64(sealed_bytes)}"
            container[name] = envelope if isinstance(value, str) else {KEY_ID_KEY: envelope}
            sealed = True
    for name in DIGEST_FIELDS.get(type_, ()):
        if isinstance(body.get(name), str):
            body[name] = keyed_digest(key.secret, body[name])
            sealed = True
    return json.dumps(body).encode() if sealed else None


def open_content(
    type_: str,
    data: bytes,
    *,
    stream: str,
    event_id: str,
    find: KeyFinder,
    shown: bool = False,
) -> bytes:
    """``data`` with its sealed fields opened: their values as written, or, where the key
    was destroyed, ``[erased]`` (an item: its erased form; an object: ``{}``).

    This is the one place a sealed value becomes what a reader sees. With ``shown`` (a
    read tool's display), a field sealed under a key ``find`` never held reads
    ``[sealed]`` and one that does not open ``[unopenable]``, in the same shapes, instead
    of raising: the envelope's text is never what a reader gets.

    Raises:
        KeyError: A field is sealed under a key ``find`` never held (not with ``shown``).
        agentjournal.shred._cipher.Unopenable: A sealed field was altered or moved (not
            with ``shown``).
    """
    paths = CONTENT_FIELDS.get(type_)
    if paths is None:
        return data
    body = json.loads(data)
    if not isinstance(body, dict):
        return data
    for path in paths:
        for container, name, where in _slots(body, path):
            envelope = _envelope_of(container[name])
            if envelope is None:
                continue
            kid, _, sealed = envelope[len(ENVELOPE_PREFIX) :].partition(":")
            erased_form = (
                container.pop(_ERASED_ITEM, None) if path in (_ITEM_JSON, ("item",)) else None
            )
            marker = ERASED
            try:
                key = find(kid)
                if key is not None:
                    aad = associated(stream, event_id, where)
                    container[name] = json.loads(decrypt(key.secret, _unb64(sealed), aad))
                    continue
            except KeyError:
                if not shown:
                    raise
                marker = SEALED
            except Unopenable:
                if not shown:
                    raise
                marker = UNOPENABLE
            if erased_form is not None:
                form = _marked(erased_form, marker)
                container[name] = (
                    json.dumps(form, separators=(",", ":")) if path == _ITEM_JSON else form
                )
            else:
                container[name] = marker if isinstance(container[name], str) else {}
    return json.dumps(body).encode()


def _marked(form: Any, marker: str) -> Any:
    """An item's erased form with ``marker`` wherever it says ``[erased]``."""
    if marker == ERASED:
        return form
    if isinstance(form, dict):
        return {key: _marked(value, marker) for key, value in form.items()}
    if isinstance(form, list):
        return [_marked(value, marker) for value in form]
    return marker if form == ERASED else form


def sealed_key_ids(type_: str, data: bytes) -> set[str]:
    """The ids of the keys ``data``'s content fields are sealed under."""
    paths = CONTENT_FIELDS.get(type_)
    if paths is None:
        return set()
    try:
        body = json.loads(data)
    except ValueError:
        return set()
    found = set()
    for path in paths:
        for container, name, _ in _slots(body, path):
            envelope = _envelope_of(container[name])
            if envelope is not None:
                found.add(envelope[len(ENVELOPE_PREFIX) :].partition(":")[0])
    return found


def is_envelope(value: Any) -> bool:
    """Whether ``value`` is a sealed field's value."""
    return _envelope_of(value) is not None


def _envelope_of(value: Any) -> str | None:
    if isinstance(value, dict) and len(value) == 1:
        value = value.get(KEY_ID_KEY)
    if isinstance(value, str) and value.startswith(ENVELOPE_PREFIX):
        return value
    return None


def _keep_erased_form(container: dict[str, Any], name: str, value: Any, *, item_json: bool) -> None:
    """Put the item's erased form beside it, just before it (``item_json`` stays last)."""
    try:
        item = json.loads(value) if item_json else value
    except ValueError:
        item = None
    rest = {k: v for k, v in container.items() if k != name}
    container.clear()
    container.update(rest)
    container[_ERASED_ITEM] = erased_item(item)
    container[name] = value


def _slots(body: Any, path: tuple[str, ...]) -> Iterator[tuple[dict[str, Any], str, str]]:
    """Each (container, key, dotted path) ``path`` names in ``body`` that holds a value."""

    def walk(
        node: Any, rest: tuple[str, ...], where: list[str]
    ) -> Iterator[tuple[dict[str, Any], str, str]]:
        head, tail = rest[0], rest[1:]
        if head == "*":
            if isinstance(node, list):
                for n, element in enumerate(node):
                    yield from walk(element, tail, [*where, str(n)])
            return
        if not isinstance(node, dict) or head not in node:
            return
        if not tail:
            yield node, head, ".".join([*where, head])
        else:
            yield from walk(node[head], tail, [*where, head])

    yield from walk(body, path, [])


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
