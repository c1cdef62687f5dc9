"""The fold of visible items (engine/timeline.py), directly: Timeline, Picker, fold (pure)."""

from __future__ import annotations

import json

import pytest

from agentjournal.engine.timeline import (
    Clear,
    Entry,
    Key,
    Picker,
    Pop,
    Timeline,
    TimelineEvent,
    fold,
    items_of,
)
from agentjournal.store.contract import model_key

S = "AgentSession-s1"
C = "AgentSubsession-s1-sub-billing-h1"


def entry(index: int, revision: int | None = None, stream: str = S, part: int = 0) -> Entry:
    """An item at ``index``; its revision is its index unless given."""
    text = json.dumps({"role": "user", "content": f"m{index}@{stream}:{revision}"})
    return Entry(stream, index if revision is None else revision, part, index, text)


def keys(entries: list[Entry]) -> list[Key]:
    return [e.key for e in entries]


def indices(timeline: Timeline) -> list[int]:
    return [e.index for e in timeline.entries]


def built(*events: Entry | Pop | Clear) -> Timeline:
    timeline = Timeline()
    for event in events:
        timeline.apply(event)
    return timeline


# -- Entry ------------------------------------------------------------------------------


def test_an_entry_hands_out_its_parsed_item_once_then_fresh_copies() -> None:
    parsed = {"role": "user", "content": "hi"}
    e = Entry(S, 3, 1, 7, json.dumps(parsed), fresh=parsed)
    assert e.key == (S, 3, 1)
    first = e.item()
    assert first is parsed  # the parse the reader already made is not repeated
    first["content"] = "changed by the caller"
    second = e.item()
    assert second == {"role": "user", "content": "hi"}  # from item_json, not the mutated copy
    assert second is not e.item()


@pytest.mark.parametrize(
    "texts",
    [
        ['{"role":"user","content":"a"}', '{"type":"x","n":1.5,"l":[1,{"k":null}]}'],
        ['{"role":"user","content":"a"}', '{"n":NaN}'],  # orjson refuses: one by one
        ['{"a":1}', '{"b":"\\ud800"}', '{"c":1e400}'],  # a lone surrogate, a huge float
        ['{"a":1}'],
    ],
)
def test_plain_entries_parsed_together_give_what_each_gives_alone(texts: list[str]) -> None:
    entries = [Entry(S, n, 0, n, text, plain=True) for n, text in enumerate(texts)]
    alone = [Entry(S, n, 0, n, text, plain=True).item() for n, text in enumerate(texts)]
    together = items_of(entries)
    assert json.dumps(together) == json.dumps(alone)
    assert [type(item) for item in together] == [dict] * len(texts)
    assert all(a is not b for a, b in zip(together, items_of(entries), strict=True))


def test_entries_parsed_together_hand_out_a_fresh_parse_first() -> None:
    parsed = {"role": "user", "content": "b"}
    entries = [Entry(S, 0, 0, 0, '{"a":1}', plain=True), Entry(S, 1, 0, 1, "{}", parsed, True)]
    assert items_of(entries) == [{"a": 1}, parsed]  # the fresh one, not its text
    assert items_of(entries)[1] == {}


def test_entries_compare_without_their_parsed_item() -> None:
    text = json.dumps({"role": "user", "content": "hi"})
    assert Entry(S, 0, 0, 0, text, fresh={"x": 1}) == Entry(S, 0, 0, 0, text)
    assert Entry(S, 0, 0, 0, text) != Entry(S, 0, 1, 0, text)


# -- Timeline.apply ---------------------------------------------------------------------


def test_items_are_appended_in_the_order_applied() -> None:
    timeline = built(entry(0), entry(1), entry(2))
    assert indices(timeline) == [0, 1, 2]
    assert not timeline.complete  # nothing says there is nothing older


def test_a_pop_removes_the_newest_entry_with_its_key() -> None:
    timeline = built(entry(0), entry(1), entry(2), Pop((S, 1, 0)))
    assert indices(timeline) == [0, 2]
    assert timeline.hidden == set()


def test_a_pop_removes_one_entry_only() -> None:
    # Two parts of one foreign event share stream and revision but not the key.
    timeline = built(entry(0), entry(0, part=1), Pop((S, 0, 1)))
    assert keys(timeline.entries) == [(S, 0, 0)]


def test_a_pop_of_an_item_not_yet_seen_hides_it_when_it_arrives() -> None:
    timeline = built(entry(0), Pop((C, 4, 0)))
    assert timeline.hidden == {(C, 4, 0)}
    timeline.apply(entry(5, revision=4, stream=C))
    assert indices(timeline) == [0]
    assert timeline.hidden == set()  # used up: the key cannot come again
    timeline.apply(entry(6, revision=5, stream=C))
    assert indices(timeline) == [0, 6]


def test_a_pop_of_an_unknown_key_hides_nothing_else() -> None:
    timeline = built(entry(0), entry(1), Pop((S, 9, 0)))
    assert indices(timeline) == [0, 1]
    assert timeline.hidden == {(S, 9, 0)}


def test_a_clear_hides_everything_up_to_its_index_and_completes_the_timeline() -> None:
    timeline = built(entry(0), entry(1), entry(2), Clear(1))
    assert indices(timeline) == [2]
    assert timeline.floor == 1
    assert timeline.complete  # nothing older than a clear is visible


def test_a_clear_also_hides_indexless_items_already_there() -> None:
    foreign = entry(-1, revision=5)
    timeline = built(entry(0), foreign, entry(1), Clear(0))
    assert indices(timeline) == [1]


def test_a_clear_forgets_pending_pops() -> None:
    timeline = built(Pop((C, 0, 0)), Clear(3))
    assert timeline.hidden == set()
    timeline.apply(entry(4, revision=0, stream=C))  # the key a pop named: after a clear, shown
    assert indices(timeline) == [4]


def test_items_at_or_below_the_floor_are_dropped_when_they_arrive() -> None:
    timeline = built(Clear(5))
    for index in (0, 5, 6):
        timeline.apply(entry(index))
    assert indices(timeline) == [6]


def test_an_indexless_item_after_a_clear_is_kept() -> None:
    # A foreign writer gave no index: it was written after the clear that is already here.
    timeline = built(Clear(5), entry(-1, revision=9))
    assert indices(timeline) == [-1]


def test_an_older_clear_never_lowers_the_floor() -> None:
    timeline = built(Clear(5), Clear(2))
    assert timeline.floor == 5
    timeline.apply(entry(4))
    assert timeline.entries == []


# -- Timeline reads -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "expected"),
    [(None, [0, 1, 2]), (0, []), (-1, []), (1, [2]), (2, [1, 2]), (3, [0, 1, 2]), (9, [0, 1, 2])],
)
def test_latest_is_the_newest_limit_entries_oldest_first(
    limit: int | None, expected: list[int]
) -> None:
    timeline = built(entry(0), entry(1), entry(2))
    assert [e.index for e in timeline.latest(limit)] == expected


def test_latest_all_is_a_copy() -> None:
    timeline = built(entry(0))
    timeline.latest(None).clear()
    assert indices(timeline) == [0]


@pytest.mark.parametrize(
    ("complete", "limit", "covered"),
    [
        (False, None, False),  # everything is asked and older items may exist
        (False, 2, True),
        (False, 3, False),
        (False, 0, True),
        (True, None, True),
        (True, 5, True),
    ],
)
def test_covers(complete: bool, limit: int | None, covered: bool) -> None:
    timeline = built(entry(0), entry(1))
    timeline.complete = complete
    assert timeline.covers(limit) is covered


def test_take_replaces_the_contents_with_a_picked_window() -> None:
    timeline = built(entry(0), entry(1))
    picker = Picker(2)
    for event in (entry(9), Pop((S, 7, 0)), entry(8), entry(7), entry(6), entry(5)):
        if not picker.feed(event):
            break
    timeline.take(picker)
    assert indices(timeline) == [8, 9]  # oldest first; 7 was popped
    assert not timeline.complete
    assert timeline.hidden == set()  # the pop met its item inside the window
    assert timeline.floor == -1


def test_take_keeps_what_the_window_knows_hides_older_items() -> None:
    timeline = Timeline()
    picker = Picker(None)
    for event in (Pop((S, 1, 0)), Clear(0), entry(2)):
        assert picker.feed(event)
    timeline.take(picker)
    assert indices(timeline) == [2]
    assert timeline.floor == 0
    assert timeline.complete
    # A pop read in the window whose item was older stays pending.
    assert timeline.hidden == {(S, 1, 0)}


def test_reset_forgets_everything() -> None:
    timeline = built(entry(0), Pop((S, 9, 0)), Clear(0), entry(1))
    timeline.reset()
    assert (timeline.entries, timeline.complete, timeline.hidden, timeline.floor) == (
        [],
        False,
        set(),
        -1,
    )


# -- Picker (events newest first) ----------------------------------------------------------


def feed_all(picker: Picker, *events: Entry | Pop | Clear) -> list[bool]:
    return [picker.feed(event) for event in events]


def test_the_picker_takes_the_newest_limit_items_then_stops() -> None:
    picker = Picker(2)
    assert feed_all(picker, entry(3), entry(2), entry(1)) == [True, True, False]
    assert [e.index for e in picker.picked] == [3, 2]  # newest first
    assert not picker.complete  # an older item exists beyond the window


def test_a_picker_that_runs_out_of_events_is_complete() -> None:
    picker = Picker(5)
    assert feed_all(picker, entry(1), entry(0)) == [True, True]
    assert picker.complete


def test_a_picker_without_a_limit_takes_everything() -> None:
    picker = Picker(None)
    assert all(feed_all(picker, *(entry(i) for i in range(50, 0, -1))))
    assert len(picker.picked) == 50
    assert picker.complete


def test_a_zero_window_stops_at_the_first_item() -> None:
    picker = Picker(0)
    assert feed_all(picker, Pop((S, 0, 0)), entry(1)) == [True, False]
    assert picker.picked == []
    assert not picker.complete


def test_a_popped_item_does_not_take_a_place_in_the_window() -> None:
    picker = Picker(2)
    assert feed_all(picker, entry(3), Pop((S, 2, 0)), entry(2), entry(1)) == [True] * 4
    assert [e.index for e in picker.picked] == [3, 1]
    assert picker.hidden == set()


def test_a_clear_cuts_off_everything_older() -> None:
    picker = Picker(10)
    assert feed_all(picker, entry(4), Clear(2), entry(3), entry(2)) == [True, True, True, False]
    assert [e.index for e in picker.picked] == [4, 3]
    assert picker.floor == 2
    assert picker.complete  # nothing older is visible


def test_an_indexless_item_older_than_a_clear_is_cut_off() -> None:
    picker = Picker(None)
    assert feed_all(picker, Clear(2), entry(-1, revision=3)) == [True, False]
    assert picker.picked == []


def test_the_highest_clear_decides() -> None:
    picker = Picker(None)
    feed_all(picker, Clear(5), Clear(2))
    assert picker.floor == 5


def test_items_above_the_floor_are_taken_without_a_clear_having_stopped_them() -> None:
    # Without any clear the floor is -1 but an indexless item is no reason to stop.
    picker = Picker(None)
    assert feed_all(picker, entry(-1, revision=4), entry(0)) == [True, True]
    assert len(picker.picked) == 2


# -- fold (events of several streams) ------------------------------------------------------


def test_fold_orders_items_of_several_streams_by_index() -> None:
    timeline = Timeline()
    # Read stream by stream: the parent's events, then the subsession's.
    fold(timeline, [entry(0), entry(3, revision=1), entry(1, 0, C), entry(2, 1, C)])
    assert indices(timeline) == [0, 1, 2, 3]


def test_fold_puts_an_indexless_item_right_after_the_indexed_item_before_it() -> None:
    timeline = Timeline()
    first = entry(-1, revision=1)  # a foreign writer's item after index 0 on the parent
    lone = entry(-1, revision=0, stream=C)  # nothing indexed before it on its stream
    fold(timeline, [entry(0), first, entry(4, revision=2), lone, entry(1, 1, C), entry(2, 2, C)])
    assert keys(timeline.entries) == [
        (C, 0, 0),
        (S, 0, 0),
        (S, 1, 0),
        (C, 1, 0),
        (C, 2, 0),
        (S, 2, 0),
    ]


def test_fold_keeps_stream_order_among_indexless_items() -> None:
    timeline = Timeline()
    fold(timeline, [entry(0), entry(-1, 1), entry(-1, 2), entry(-1, 3)])
    assert keys(timeline.entries) == [(S, 0, 0), (S, 1, 0), (S, 2, 0), (S, 3, 0)]


def test_fold_applies_pops_and_clears_after_every_item() -> None:
    # The clear on the subsession is read before the parent's foreign item that was
    # written before it; applied in read order that item would survive the clear.
    clear_first: list[TimelineEvent] = [entry(1, 0, C), Clear(1), entry(0), entry(-1, revision=1)]
    naive = built(*clear_first)
    assert keys(naive.entries) == [(S, 1, 0)]  # what folding in read order gets wrong
    timeline = Timeline()
    fold(timeline, clear_first)
    assert timeline.entries == []
    assert timeline.complete


def test_fold_pops_an_item_read_after_its_pop() -> None:
    timeline = Timeline()
    fold(timeline, [Pop((C, 0, 0)), entry(0), entry(1, 0, C), entry(2, 1, C)])
    assert indices(timeline) == [0, 2]
    assert timeline.hidden == set()


def test_fold_gives_what_applying_in_write_order_gives() -> None:
    # Written: 0 (S), 1 (C), 2 (C), pop of 1 (C), 3 (S), clear through 0 (S), 4 (S).
    written: list[TimelineEvent] = [
        entry(0),
        entry(1, 0, C),
        entry(2, 1, C),
        Pop((C, 0, 0)),
        entry(3, revision=1),
        Clear(0),
        entry(4, revision=2),
    ]
    in_order = built(*written)
    # Read per stream: S's events, then C's.
    read = [written[0], written[4], written[5], written[6], written[1], written[2], written[3]]
    folded = Timeline()
    fold(folded, read)
    assert indices(folded) == indices(in_order) == [2, 3, 4]
    assert folded.floor == in_order.floor == 0


def test_fold_extends_what_the_timeline_holds() -> None:
    timeline = built(entry(0), entry(1))
    fold(timeline, [entry(2, 0, C), Pop((S, 0, 0))])
    assert indices(timeline) == [1, 2]


def modelled(plain: bool = True) -> tuple[Timeline, Timeline]:
    """The same items as a read model's rows (entries made lazily) and as entries."""
    rows = [
        (0, 1, 0, 0, entry(0).item_json),
        (1, 2, 3, 0, entry(1, 3, C).item_json),
        (2, 1, 4, 1, '{"n": 12345678901234567890123, "x": NaN}'),
        (5, 1, 7, 0, entry(5, 7).item_json),
    ]
    names = {1: S, 2: C}
    made = [Entry(names[s], r, p, i, t, None, plain) for i, s, r, p, t in rows]
    packed = [(i, model_key(s, r, p), t) for i, s, r, p, t in rows]
    return Timeline.modelled(packed, names, 4, plain), Timeline.whole(made, 4)


@pytest.mark.parametrize("plain", [True, False])
def test_a_modelled_timeline_reads_as_its_entries_would(plain: bool) -> None:
    """A read model's rows hand out the same items as the entries they stand for, for every
    limit, without becoming entries; and once something needs the entries they are the same."""
    lazy, eager = modelled(plain)
    assert (len(lazy), lazy.size, lazy.floor, lazy.complete) == (
        len(eager),
        eager.size,
        eager.floor,
        eager.complete,
    )
    for limit in (None, 0, 1, 2, 4, 9):
        assert lazy.items(limit) == eager.items(limit), limit
        # A big integer stays an int (never orjson's float), NaN is read as json reads it.
        assert json.dumps(lazy.items(limit)) == json.dumps(eager.items(limit))
    assert lazy._rows, "a full read made no entries"
    assert lazy.latest(1) == eager.latest(1)
    assert lazy._rows
    assert lazy.entries == eager.entries
    assert not lazy._rows


def test_a_modelled_timeline_takes_writes_as_entries() -> None:
    """A pop, an append and a clear after a model read fold as they do on entries."""
    cases: list[list[TimelineEvent]] = [
        [Pop((C, 3, 0), 1)],
        [entry(6, 8)],
        [Pop((S, 7, 0), 5), entry(6, 8), Clear(5)],
    ]
    for events in cases:
        lazy, eager = modelled()
        for event in events:
            lazy.apply(event)
            eager.apply(event)
        assert lazy.entries == eager.entries
        assert lazy.size == eager.size
        assert lazy.items(None) == eager.items(None)


@pytest.mark.parametrize("budget", [0, 200, 400, 10_000])
def test_a_bounded_modelled_timeline_drops_rows_without_making_entries(budget: int) -> None:
    """A full read from the read model of a session bigger than its cache budget (8 MiB by
    default: ~14k items of ~430 bytes) cuts the rows as rows, to what cutting the entries
    leaves, without making an Entry of each row only to drop most of them at once."""
    texts = [json.dumps({"role": "user", "content": "x" * n}) for n in range(8)]
    rows = [(index, model_key(1, index, 0), text) for index, text in enumerate(texts)]
    lazy = Timeline.modelled(rows, {1: "S"}, -1, True)
    made = [Entry("S", index, 0, index, text, None, True) for index, text in enumerate(texts)]
    eager = Timeline.whole(made, -1)
    for timeline in (lazy, eager):
        timeline.budget = budget
        timeline.bound()
    assert (len(lazy), lazy.size, lazy.complete) == (len(eager), eager.size, eager.complete)
    assert lazy.items(None) == eager.items(None)
    assert not lazy._entries, "no entry made for the rows kept or dropped"
    assert lazy.entries == eager.entries
