"""The checks after integrity split over two processes report what one process reports.

On two processes the child runs containment (it computed the call markers) and the other
checks after integrity but the checkpoints', which this process runs; the report puts each
check's lines and problems in its place. Here sessions the real ``Runner`` wrote are
attacked past the integrity check — re-chained, relinked and re-signed with the trusted
key, with the attacks of ``test_ledger.py`` — and every verification runs on one process
and on two.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import _forked
from agentjournal.audit.verify import Report, verify_bundle
from ledger_sessions import KEY, TRUSTED, edited, rechain, record, relink, resign, stream_of
from test_ledger import MUTATIONS, _widen, mutate

BUNDLES = record()


@pytest.fixture(autouse=True)
def forking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork whatever else runs in this test process (a thread another test file left idle
    would keep every child here from running)."""
    monkeypatch.setattr(_forked, "forking_safe", lambda: True)


def _resealed(bundle: dict[str, Any]) -> None:
    """What an attacker holding the trusted key does after an edit: every chain redone,
    every parent relinked to its subsession's head, every checkpoint re-signed."""
    for stream in bundle["streams"]:
        rechain(bundle, stream["name"])
    relink(bundle)
    resign(bundle, KEY)


def _call_without_allow(bundle: dict[str, Any]) -> None:
    stream = stream_of(bundle, "AgentSession-")
    stream["events"] = [
        e
        for e in stream["events"]
        if not (e["type"] == "agentjournal.GuardrailDecided" and '"TOOL_CALL"' in e["data"])
    ]


def _crafted(where: str) -> Callable[[dict[str, Any]], None]:
    def edit(bundle: dict[str, Any]) -> None:
        for stream in bundle["streams"]:
            for event in stream["events"]:
                if where == "rule" and "aj.tool_rule" in event["metadata"]:
                    event["metadata"]["aj.tool_rule"] = '{"ceilings": 3}'
                if event["type"] != "SubagentStarted" or where == "rule":
                    continue
                body = json.loads(event["data"])
                if where == "extensions":
                    body["extensions"] = "x"
                else:
                    body["extensions"]["agentjournal"]["granted_authority"] = "{not json"
                event["data"] = json.dumps(body)

    return edit


def _policy_removed(bundle: dict[str, Any]) -> None:
    for stream in bundle["streams"]:
        stream["events"] = [e for e in stream["events"] if "Policy" not in e["type"]]


ATTACKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "none": lambda bundle: None,
    "wider grant": _widen,
    "call without an allow": _call_without_allow,
    "extensions not an object": _crafted("extensions"),
    "grant not JSON": _crafted("granted"),
    "rule not a rule": _crafted("rule"),
    "policy removed": _policy_removed,
}


def _both(bundle: dict[str, Any]) -> tuple[Report, Report]:
    return verify_bundle(bundle, TRUSTED, workers=1), verify_bundle(bundle, TRUSTED, workers=2)


def _same(one: Report, two: Report) -> None:
    assert (one.lines, one.problems) == (two.lines, two.problems)
    assert (one.signers, one.foreign) == (two.signers, two.foreign)
    assert one.text() == two.text()


@pytest.mark.parametrize("name", ["guarded", "nested"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_an_attack_past_integrity_is_reported_alike_on_two_processes(
    name: str, attack: str
) -> None:
    bundle = edited(BUNDLES[name])
    ATTACKS[attack](bundle)
    changed = bundle != BUNDLES[name]  # some attacks find nothing to edit in a session
    _resealed(bundle)
    one, two = _both(bundle)
    _same(one, two)
    assert one.ok is not changed


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(BUNDLES)),
    st.sampled_from(MUTATIONS),
    st.integers(0, 1000),
    st.integers(0, 1000),
    st.booleans(),
)
def test_a_mutation_is_reported_alike_on_two_processes(
    name: str, kind: str, stream_pick: int, event_pick: int, resealed: bool
) -> None:
    bundle = edited(BUNDLES[name])
    mutate(bundle, kind, stream_pick, event_pick)
    if resealed:
        # A stream the mutation emptied cannot be re-signed: the bundle as far as it got.
        with contextlib.suppress(LookupError, ValueError, TypeError, StopIteration):
            _resealed(bundle)
    _same(*_both(bundle))


def _surrogate_in_metadata(bundle: dict[str, Any]) -> None:
    stream_of(bundle, "AgentSession-")["events"][3]["metadata"]["aj.turn"] = "\ud800"


def _revision_out_of_range(bundle: dict[str, Any]) -> None:
    stream_of(bundle, "AgentSubsession-")["events"][-1]["revision"] = 2**63


@pytest.mark.parametrize("form", [_surrogate_in_metadata, _revision_out_of_range])
def test_a_wrong_form_stops_both_processes_alike(
    form: Callable[[dict[str, Any]], None],
) -> None:
    """The form check runs once the child is forked: a wrong form is the one problem, as on
    one process, and the child is stopped and reaped."""
    bundle = edited(BUNDLES["guarded"])
    form(bundle)
    one, two = _both(bundle)
    _same(one, two)
    assert [problem.check for problem in two.problems] == ["structure"]
    deadline = time.monotonic() + 10
    while _forked._ended and time.monotonic() < deadline:
        time.sleep(0.01)
        _forked.reap()
    assert not _forked._ended
