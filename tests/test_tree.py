"""SessionTree's own methods (engine/tree.py), directly: what a write, an event read and a
reader's results change in it, and nothing else; AuthorityLog; index metadata (pure)."""

from __future__ import annotations

import json
import logging
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

import pytest
from kurrent_agent_schema import AssistantToolCallsGenerated, ToolCallInfo, to_json

from agentjournal import events
from agentjournal._locks import CrossLoopLock
from agentjournal.engine import codec
from agentjournal.engine.timeline import Clear, Entry, Picker, Pop, Timeline
from agentjournal.engine.tree import AuthorityLog, Commit, SessionTree, index_of, next_index_after
from agentjournal.ledger.chain import GENESIS
from agentjournal.store.contract import RecordedEvent

S = "AgentSession-s1"
A = "AgentSubsession-s1-sub-billing-h1"
B = "AgentSubsession-s1-sub-refunds-h2"
LOG = "AgentAuthority-s1"
NOW = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
BILLING = events.Subagent("sub-billing-h1", "billing", "triage", "h1", A, S, "")
REFUNDS = events.Subagent("sub-refunds-h2", "refunds", "billing", "h2", B, A, "")
GRANT = {"scopes": ["billing.read"], "ceilings": {}}


def recorded(
    stream: str, revision: int, type_: str, data: bytes, metadata: dict[str, str] | None = None
) -> RecordedEvent:
    return RecordedEvent(
        id=uuid.uuid4(),
        type=type_,
        data=data,
        metadata=metadata or {},
        stream=stream,
        revision=revision,
        position=revision,
        recorded_at=NOW,
    )


def item_event(
    stream: str, revision: int, item: dict[str, Any], index: int | None
) -> RecordedEvent:
    encoded = codec.encode_item(item, message_index=max(index or 0, 0), author=None, timestamp=NOW)
    metadata = {} if index is None else {events.INDEX_KEY: str(index)}
    return recorded(stream, revision, encoded.type, encoded.data, metadata)


def started(
    subagent: events.Subagent,
    revision: int,
    *,
    index: int | None,
    item: dict[str, Any] | None = None,
    authority: dict[str, Any] | None = None,
) -> RecordedEvent:
    """A ``SubagentStarted``: the parent's copy (with an index) or the twin (without)."""
    data = events.encode_subagent_started(
        subagent,
        item_json=None if item is None else codec.exact_json(item),
        twin=uuid.uuid4(),
        timestamp=NOW,
        authority=authority,
    )
    metadata = {} if index is None else {events.INDEX_KEY: str(index)}
    stream = subagent.parent_stream if index is not None else subagent.stream
    return recorded(stream, revision, events.SUBAGENT_STARTED, data, metadata)


def completed(subagent: events.Subagent, revision: int) -> RecordedEvent:
    data = events.encode_subagent_completed(
        subagent, outcome="success", summary="", reason=None, twin=uuid.uuid4(), timestamp=NOW
    )
    return recorded(subagent.parent_stream, revision, events.SUBAGENT_COMPLETED, data)


def handoff_call() -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": "h1",
        "name": "transfer_to_billing",
        "arguments": "{}",
    }


def entry(index: int, stream: str = S, revision: int | None = None) -> Entry:
    text = json.dumps({"role": "user", "content": f"m{index}"})
    return Entry(stream, index if revision is None else revision, 0, index, text)


def indices(tree: SessionTree) -> list[int]:
    return [e.index for e in tree.timeline.entries]


# -- a new tree -----------------------------------------------------------------------------


def test_a_new_tree_knows_nothing_yet() -> None:
    tree = SessionTree(S)
    assert (tree.loaded, tree.heads, tree.hashes, tree.chain, tree.next_index) == (
        False,
        {},
        {},
        [],
        None,
    )
    assert tree.followed == [S]
    assert (tree.unsigned, tree.ledger_head, tree.authority, tree.chain_run) == (
        0,
        None,
        None,
        None,
    )
    assert tree.timeline.entries == []
    assert isinstance(tree.lock, CrossLoopLock)
    other = SessionTree(S)
    assert other.lock is not tree.lock  # nothing shared between two trees
    assert other.timeline is not tree.timeline


def test_an_authority_log_not_read_yet_is_empty() -> None:
    log = AuthorityLog()
    assert (log.revision, log.hash, log.policy, dict(log.held)) == (-1, GENESIS, None, {})


# -- apply(Commit) ------------------------------------------------------------------------


def test_apply_takes_on_everything_a_write_changed() -> None:
    tree = SessionTree(S)
    tree.loaded_with({S: 2}, {S: "s2"})
    run = object()
    log = AuthorityLog(0, "l0", "p", {"billing": GRANT})
    owners = OrderedDict({"t1": A})
    tree.apply(
        Commit(
            heads={S: 3, A: 1},
            hashes={S: "s3", A: "a1"},
            entries=[entry(3), entry(4, A, 1)],
            written=4,
            chain=[BILLING],
            next_index=5,
            call_owner=owners,
            run=run,
            grants={A: GRANT},
            authority=log,
            ledger=(0, "c0"),
        )
    )
    assert tree.heads == {S: 3, A: 1}
    assert tree.hashes == {S: "s3", A: "a1"}
    assert indices(tree) == [3, 4]
    assert tree.chain == [BILLING]
    assert tree.followed == [S, A]
    assert tree.next_index == 5
    assert tree.call_owner == owners
    assert tree.chain_run is run
    assert tree.grants == {A: GRANT}
    assert tree.authority == log
    assert tree.ledger_head == (0, "c0")
    assert tree.unsigned == 4


def test_apply_changes_nothing_a_commit_leaves_out() -> None:
    tree = SessionTree(S)
    run = object()
    owners = OrderedDict({"t1": A})
    log = AuthorityLog(0, "l0")
    first = Commit(
        heads={S: 3, A: 1},
        hashes={S: "s3", A: "a1"},
        chain=[BILLING],
        next_index=5,
        call_owner=owners,
        run=run,
        grants={A: GRANT},
        authority=log,
        ledger=(0, "c0"),
    )
    tree.apply(first)
    tree.apply(Commit(heads={A: 2}, hashes={A: "a2"}, written=1))  # None: unchanged
    assert tree.heads == {S: 3, A: 2}
    assert tree.hashes == {S: "s3", A: "a2"}
    assert tree.chain == [BILLING]
    assert tree.next_index == 5
    assert tree.call_owner == owners
    assert tree.chain_run is run  # a write without a run keeps the run that wrote inside
    assert tree.grants == {A: GRANT}
    assert (tree.authority, tree.ledger_head) == (log, (0, "c0"))


def test_apply_keeps_its_own_copy_of_the_chain() -> None:
    tree = SessionTree(S)
    chain = [BILLING]
    tree.apply(Commit(heads={}, hashes={}, chain=chain))
    chain.append(REFUNDS)
    assert tree.chain == [BILLING]


def test_apply_stops_following_streams_that_closed() -> None:
    tree = SessionTree(S)
    tree.apply(
        Commit(heads={S: 3, A: 1, B: 0}, hashes={S: "s", A: "a", B: "b"}, chain=[BILLING, REFUNDS])
    )
    assert tree.followed == [S, A, B]
    tree.apply(
        Commit(
            heads={S: 4, A: 2, B: 1, LOG: 0}, hashes={S: "s", A: "a", B: "b", LOG: "l"}, chain=[]
        )
    )
    # Only the session's stream and open subagents' are followed: not the closed ones, nor
    # the authority log the same write appended to.
    assert tree.heads == {S: 4}
    assert tree.hashes == {S: "s"}


def test_the_run_that_wrote_is_remembered_only_inside_a_subagent() -> None:
    tree = SessionTree(S)
    tree.apply(Commit(heads={S: 0}, hashes={S: "s"}, run=object()))
    assert tree.chain_run is None  # nothing open: no run owns the innermost stream
    run = object()
    tree.apply(Commit(heads={}, hashes={}, chain=[BILLING], run=run))
    assert tree.chain_run is run


def test_unsigned_counts_events_since_the_last_checkpoint() -> None:
    tree = SessionTree(S)
    tree.apply(Commit(heads={S: 2}, hashes={S: "s"}, written=3))
    tree.apply(Commit(heads={S: 4}, hashes={S: "s"}, written=2))
    assert tree.unsigned == 5
    tree.apply(Commit(heads={}, hashes={}, ledger=(0, "c0"), signed=True))
    assert (tree.unsigned, tree.ledger_head) == (0, (0, "c0"))
    assert tree.heads == {S: 4}  # a checkpoint's commit moves no session stream


def test_apply_folds_pops_and_clears_into_the_visible_history() -> None:
    tree = SessionTree(S)
    tree.apply(Commit(heads={S: 2}, hashes={S: "s"}, entries=[entry(0), entry(1), entry(2)]))
    tree.apply(Commit(heads={S: 3}, hashes={S: "s"}, entries=[Pop((S, 2, 0))]))
    assert indices(tree) == [0, 1]
    tree.apply(Commit(heads={S: 5}, hashes={S: "s"}, entries=[Clear(1), entry(3, revision=5)]))
    assert indices(tree) == [3]
    assert tree.timeline.complete


# -- reads ----------------------------------------------------------------------------------


def test_reset_forgets_what_was_read_and_keeps_its_lock() -> None:
    tree = SessionTree(S)
    lock = tree.lock
    tree.loaded_with({S: 3, A: 1}, {S: "s", A: "a"})
    tree.opened(BILLING, GRANT)
    tree.found_next_index(9)
    tree.apply(Commit(heads={}, hashes={}, entries=[entry(0)]))
    tree.reset()
    assert (tree.loaded, tree.heads, tree.hashes, tree.chain, tree.next_index) == (
        False,
        {},
        {},
        [],
        None,
    )
    assert tree.timeline.entries == []
    assert not tree.timeline.complete
    assert tree.followed == [S]
    assert tree.lock is lock  # a reset under the lock must not replace it


def test_loaded_with_takes_copies_of_the_heads_read() -> None:
    tree = SessionTree(S)
    heads, hashes = {S: 3}, {S: "s"}
    tree.loaded_with(heads, hashes)
    heads[S], hashes[S] = 9, "other"
    assert (tree.loaded, tree.heads, tree.hashes) == (True, {S: 3}, {S: "s"})


def test_the_next_index_found_only_grows() -> None:
    tree = SessionTree(S)
    tree.found_next_index(4)
    tree.found_next_index(2)
    assert tree.next_index == 4
    tree.found_next_index(7)
    assert tree.next_index == 7


def test_an_open_subagent_found_twice_is_in_the_chain_once() -> None:
    tree = SessionTree(S)
    tree.opened(BILLING, None)
    tree.opened(REFUNDS, GRANT)
    tree.opened(BILLING, GRANT)
    assert tree.chain == [BILLING, REFUNDS]
    assert tree.grants == {A: GRANT, B: GRANT}  # the latest grant read counts


def test_caught_up_sets_the_heads_of_the_followed_streams_and_folds() -> None:
    tree = SessionTree(S)
    tree.opened(BILLING, None)
    tree.caught_up(
        {S: 4, LOG: 7},  # the subsession has no event yet; the log is not followed
        {S: "s4", LOG: "l7"},
        [entry(3, S, 4), entry(1, A, 0), Pop((A, 0, 0)), entry(2, A, 1)],
    )
    assert tree.heads == {S: 4, A: -1}
    assert tree.hashes == {S: "s4"}
    assert indices(tree) == [2, 3]  # by index across streams, the pop after the items


def test_a_window_and_a_full_read_replace_the_timeline() -> None:
    tree = SessionTree(S)
    picker = Picker(1)
    for event in (entry(5), entry(4)):
        picker.feed(event)
    tree.take_window(picker)
    assert indices(tree) == [5]
    assert not tree.timeline.complete
    full = Timeline()
    full.apply(entry(0))
    tree.replace_timeline(full)
    assert tree.timeline is full


def test_the_log_and_ledger_heads_as_read() -> None:
    tree = SessionTree(S)
    log = AuthorityLog(3, "l3", "p", {})
    tree.read_log(log)
    tree.read_ledger((2, "c2"))
    assert (tree.authority, tree.ledger_head) == (log, (2, "c2"))
    tree.read_log(None)  # read it again before the next use
    tree.read_ledger(None)
    assert (tree.authority, tree.ledger_head) == (None, None)


# -- apply_recorded ---------------------------------------------------------------------------


def test_an_item_event_is_its_item_at_its_index() -> None:
    item = {"role": "user", "content": "hi"}
    (got,) = SessionTree(S).apply_recorded(item_event(S, 3, item, 7))
    assert got == Entry(S, 3, 0, 7, codec.exact_json(item))
    assert isinstance(got, Entry)
    assert got.item() == item


def test_an_item_without_aj_index_takes_its_events_message_index() -> None:
    # A foreign writer's canonical event still carries message_index in its data.
    encoded = codec.encode_item(
        {"role": "user", "content": "x"}, message_index=5, author=None, timestamp=NOW
    )
    (got,) = SessionTree(S).apply_recorded(recorded(S, 3, encoded.type, encoded.data, {}))
    assert isinstance(got, Entry)
    assert got.index == 5


def test_an_item_with_no_index_anywhere_is_minus_one() -> None:
    event = recorded(S, 3, "UserMessageReceived", b'{"content": "x"}', {})
    (got,) = SessionTree(S).apply_recorded(event)
    assert isinstance(got, Entry)
    assert got.index == -1


def test_a_foreign_event_holding_several_items_is_one_entry_per_part() -> None:
    message = AssistantToolCallsGenerated(
        content="Checking both.",
        tool_calls=[
            ToolCallInfo(call_id="toolu_1", tool_name="track", tool_kind="function"),
            ToolCallInfo(call_id="toolu_2", tool_name="track", tool_kind="function"),
        ],
    )
    event = recorded(S, 6, "AssistantToolCallsGenerated", to_json(message).encode())
    got = SessionTree(S).apply_recorded(event)
    assert [(e.key, e.index) for e in got if isinstance(e, Entry)] == [
        ((S, 6, 0), -1),
        ((S, 6, 1), -1),
        ((S, 6, 2), -1),
    ]


def test_reading_forward_a_subagent_that_opens_joins_the_chain() -> None:
    tree = SessionTree(S)
    follow: list[str] = []
    event = started(BILLING, 4, index=3, item=handoff_call(), authority=GRANT)
    (got,) = tree.apply_recorded(event, follow)
    assert got == Entry(S, 4, 0, 3, codec.exact_json(handoff_call()))
    assert tree.chain == [BILLING]
    assert follow == [A]  # the catch-up reads its stream too
    assert tree.grants == {A: GRANT}
    tree.apply_recorded(event, follow)  # read again (a retry): once is enough
    assert (tree.chain, follow) == ([BILLING], [A])


def test_reading_without_following_changes_no_chain() -> None:
    tree = SessionTree(S)
    (got,) = tree.apply_recorded(started(BILLING, 4, index=3, item=handoff_call()))
    assert isinstance(got, Entry)
    assert tree.chain == []
    tree.opened(BILLING, None)
    assert tree.apply_recorded(completed(BILLING, 9)) == []
    assert tree.chain == [BILLING]


def test_the_twin_that_opens_a_subsession_is_no_item() -> None:
    tree = SessionTree(S)
    follow: list[str] = []
    assert tree.apply_recorded(started(BILLING, 0, index=None), follow) == []
    assert (tree.chain, follow) == ([], [])


def test_a_subagent_started_without_its_item_opens_but_shows_nothing() -> None:
    tree = SessionTree(S)
    follow: list[str] = []
    assert tree.apply_recorded(started(BILLING, 4, index=3), follow) == []
    assert tree.chain == [BILLING]
    assert tree.grants == {A: None}


def test_a_subagent_that_completes_leaves_the_chain_with_everything_inside_it() -> None:
    tree = SessionTree(S)
    tree.opened(BILLING, None)
    tree.opened(REFUNDS, None)
    follow: list[str] = []
    other = events.Subagent("sub-x-h9", "x", "triage", "h9", "AgentSubsession-s1-sub-x-h9", S, "")
    assert tree.apply_recorded(completed(other, 5), follow) == []  # not open: nothing changes
    assert tree.chain == [BILLING, REFUNDS]
    assert tree.apply_recorded(completed(BILLING, 5), follow) == []
    assert tree.chain == []
    assert follow == []


def test_pops_and_clears_read_are_what_they_hide() -> None:
    tree = SessionTree(S)
    popped = recorded(S, 8, events.ITEM_POPPED, events.ItemPopped(A, 2, 1, 6).encode())
    cleared = recorded(S, 9, events.SESSION_CLEARED, events.SessionCleared(7).encode())
    assert tree.apply_recorded(popped) == [Pop((A, 2, 1))]
    assert tree.apply_recorded(cleared) == [Clear(7)]


@pytest.mark.parametrize(
    "type_", [events.SESSION_STARTED, events.GUARDRAIL_DECIDED, events.AUTHORITY_GRANTED, "Other"]
)
def test_events_that_are_no_items_add_nothing_quietly(
    type_: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agentjournal.engine"):
        assert SessionTree(S).apply_recorded(recorded(S, 0, type_, b"{}")) == []
    assert caplog.records == []  # not "unreadable": they are simply no items


@pytest.mark.parametrize(
    ("type_", "data", "metadata"),
    [
        (events.ITEM_POPPED, b"not json", {}),
        (events.SESSION_CLEARED, b'{"through_index": "7"}', {}),
        (events.SUBAGENT_STARTED, b"[1, 2]", {events.INDEX_KEY: "3"}),
        (events.SUBAGENT_COMPLETED, b"{}", {}),
        ("UserMessageReceived", b"{", {events.INDEX_KEY: "3"}),
    ],
)
def test_an_unreadable_event_is_skipped_with_a_warning_naming_it(
    type_: str, data: bytes, metadata: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    tree = SessionTree(S)
    tree.opened(BILLING, None)
    with caplog.at_level(logging.WARNING, logger="agentjournal.engine"):
        assert tree.apply_recorded(recorded(S, 12, type_, data, metadata), []) == []
    assert f"{type_} at {S}@12" in caplog.text
    assert tree.chain == [BILLING]


# -- index metadata -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "index", "after"),
    [
        ({events.INDEX_KEY: "4", events.NEXT_INDEX_KEY: "9"}, 4, 9),
        ({events.INDEX_KEY: "4"}, 4, 5),
        ({events.NEXT_INDEX_KEY: "9"}, -1, 9),
        ({}, -1, None),
        ({events.INDEX_KEY: "-1"}, -1, None),
        ({events.INDEX_KEY: "4x"}, -1, None),
        ({events.INDEX_KEY: "\uff14"}, -1, None),  # a fullwidth digit is no ASCII digit
        ({events.INDEX_KEY: "4", events.NEXT_INDEX_KEY: "nine"}, 4, 5),
    ],
)
def test_index_metadata(metadata: dict[str, str], index: int, after: int | None) -> None:
    event = recorded(S, 0, "UserMessageReceived", b"{}", metadata)
    assert index_of(event) == index
    assert next_index_after(event) == after
