"""A bundle handed to ``verify_bundle`` as Python objects (not parsed from a file) may carry an
event type that is a ``str`` subclass: ``_event`` and the form check accept any ``str``. The
checks that read the tree's ``noted`` events find them by a set's lookup (``kind in NOTED``),
which a subclass's own ``__hash__`` defeats, where the checks before compared each event's
type with ``==``. Such a type must judge the bundle as its plain string does, or fail it:
never let a forged grant pass the delegation check it fails as plain text."""

from __future__ import annotations

import copy
from typing import Any

from agentjournal.audit.verify import verify_bundle
from ledger_sessions import KEY, TRUSTED, rechain, record, relink, sign_heads

BUNDLES = record()
GRANTED = "agentjournal.AuthorityGranted"


class _OwnHash(str):
    """Equal to its text by ``==``, with a hash of its own."""

    __slots__ = ()

    def __hash__(self) -> int:
        return 12345


def _forged(bundle: dict[str, Any], stream: str, at: int) -> dict[str, Any]:
    """The event at ``stream``@``at`` retyped as a grant, re-chained and re-signed by the key."""
    forged = copy.deepcopy(bundle)
    next(s for s in forged["streams"] if s["name"] == stream)["events"][at]["type"] = GRANTED
    rechain(forged, stream)
    relink(forged)
    sign_heads(forged, KEY)
    return forged


def test_a_str_subclass_type_is_judged_as_its_text_or_failed() -> None:
    bundle = BUNDLES["guarded"]
    tried = 0
    for stream in bundle["streams"]:
        if not stream["name"].startswith("AgentSubsession-"):
            continue
        for at, event in enumerate(stream["events"]):
            if event["type"] == GRANTED:
                continue
            forged = _forged(bundle, stream["name"], at)
            plain = verify_bundle(forged, TRUSTED, workers=1)
            if plain.ok:
                continue  # only forgeries the plain text fails
            tried += 1
            events = next(s for s in forged["streams"] if s["name"] == stream["name"])["events"]
            events[at]["type"] = _OwnHash(GRANTED)
            subclassed = verify_bundle(forged, TRUSTED, workers=1)
            assert not subclassed.ok, (stream["name"], at, plain.text())
    assert tried
