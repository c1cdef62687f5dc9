"""Every field of every event type damaged: two processes report what one reports.

On two processes a forked child checks the views and runs the checks after integrity but
the checkpoints' while this process checks the rest of the chains and runs the checkpoints'
check (``audit.verify._parallel``). Here the first event of each type in sessions the
real ``Runner`` wrote (guarded, nested handoffs, a call answered by a person under a policy
naming its approver) has one field damaged at a time — its revision, id, type, data, data
digest, view, and each metadata key changed or removed — as it is, and re-sealed by an
attacker holding the trusted key (so that the checks after integrity see it), and the
verification on two processes must give exactly the report of one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentjournal import Journal, _forked, events
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle
from approval_sessions import ANN, answered, approved_policy
from ledger_sessions import KEY, TRUSTED, edited, rechain, record, relink, resign

Damage = Callable[[dict[str, Any]], None]


async def _approved() -> dict[str, Any]:
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        session = journal.session("asked", policy=approved_policy())
        await answered(session, approve=True, key=ANN, guarded=True)
        await session.checkpoint()
        return await export_bundle(journal.store, "asked")


BUNDLES = {**record(), "approved": asyncio.run(_approved())}


@pytest.fixture(autouse=True)
def forking(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Fork whatever else runs in this test process, and count the forks."""
    forks: list[int] = []
    real = _forked.forked

    def counted(work: Callable[[], Any]) -> Any:
        forks.append(1)
        return real(work)

    monkeypatch.setattr(_forked, "forking_safe", lambda: True)
    monkeypatch.setattr(_forked, "forked", counted)
    return forks


def _field_damages(event: dict[str, Any]) -> Iterator[tuple[str, Damage]]:
    """Each field of ``event`` damaged, one at a time (named for the test's id)."""

    def setting(field: str, value: Any) -> Damage:
        return lambda e: e.__setitem__(field, value)

    yield "revision", setting("revision", event["revision"] + 1)
    yield "id", setting("id", event["id"][:-1] + ("0" if event["id"][-1] != "0" else "1"))
    yield "type", setting("type", event["type"] + "x")
    yield "data_sha256", setting("data_sha256", "0" * 64)
    if event["data"] is not None:
        yield "data appended", setting("data", event["data"] + " ")
        yield "data withheld", setting("data", None)
        yield "data not an object", setting("data", "[]")
    yield "view", setting("view", {"withheld": "sha256:" + "0" * 64})
    for key in sorted(event["metadata"]):
        yield f"{key} changed", _changed(key, event["metadata"][key] + "1")
        yield f"{key} removed", _removed(key)


def _changed(key: str, value: str) -> Damage:
    return lambda event: event["metadata"].__setitem__(key, value)


def _removed(key: str) -> Damage:
    return lambda event: event["metadata"].pop(key)


def _cases() -> Iterator[tuple[str, str, int, int, str]]:
    """(bundle, event type, stream index, event index, damage) for the first event of each
    type in each bundle and each of its fields."""
    for name, bundle in BUNDLES.items():
        seen: set[str] = set()
        for s, stream in enumerate(bundle["streams"]):
            for e, event in enumerate(stream["events"]):
                if event["type"] in seen:
                    continue
                seen.add(event["type"])
                for damage, _ in _field_damages(event):
                    yield name, event["type"], s, e, damage


CASES = list(_cases())


def _damaged(name: str, s: int, e: int, damage: str, *, resealed: bool) -> dict[str, Any]:
    bundle = edited(BUNDLES[name])
    event = bundle["streams"][s]["events"][e]
    dict(_field_damages(event))[damage](event)
    if resealed:
        # What the trusted key's holder does after the edit; some edits cannot be re-sealed
        # (a withheld data, a stream with no checkpoint left): the bundle as far as it got.
        with contextlib.suppress(LookupError, ValueError, TypeError, StopIteration):
            for stream in bundle["streams"]:
                rechain(bundle, stream["name"])
            relink(bundle)
            resign(bundle, KEY)
    return bundle


def _alike(bundle: dict[str, Any], forks: list[int]) -> bool:
    one = verify_bundle(bundle, TRUSTED, workers=1)
    assert not forks
    two = verify_bundle(bundle, TRUSTED, workers=2)
    # The child did run, unless the bundle's structure stopped everything first.
    assert forks == [1] or {p.check for p in one.problems} == {"structure"}
    assert (one.lines, one.problems) == (two.lines, two.problems)
    assert (one.signers, one.foreign) == (two.signers, two.foreign)
    assert one.text() == two.text()
    return one.ok


def test_every_bundle_verifies_alike_on_two_processes(forking: list[int]) -> None:
    for bundle in BUNDLES.values():
        forking.clear()
        assert _alike(bundle, forking)
    assert {e["type"] for s in BUNDLES["approved"]["streams"] for e in s["events"]} >= {
        events.INTERRUPT_ISSUED,
        events.INTERRUPT_RESOLVED,
    }


SAMPLE = [(*case, False) for case in CASES[::14]] + [(*case, True) for case in CASES[7::14]]


@pytest.mark.parametrize(("name", "type_", "stream", "event", "damage", "resealed"), SAMPLE)
def test_a_damaged_field_is_reported_alike_on_two_processes(
    name: str,
    type_: str,
    stream: int,
    event: int,
    damage: str,
    resealed: bool,
    forking: list[int],
) -> None:
    """A sample of the cases below (every seventh), in the fast tier."""
    _alike(_damaged(name, stream, event, damage, resealed=resealed), forking)


@pytest.mark.slow
@pytest.mark.parametrize("resealed", [False, True], ids=["as is", "resealed"])
@pytest.mark.parametrize(("name", "type_", "stream", "event", "damage"), CASES)
def test_every_damaged_field_is_reported_alike_on_two_processes(
    name: str,
    type_: str,
    stream: int,
    event: int,
    damage: str,
    resealed: bool,
    forking: list[int],
) -> None:
    bundle = _damaged(name, stream, event, damage, resealed=resealed)
    ok = _alike(bundle, forking)
    if not resealed:
        assert not ok  # every damage as it is breaks the record somewhere
