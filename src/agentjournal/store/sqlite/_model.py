"""The SQLite store's read model: applying each write's model change and reading a tree's items."""

from __future__ import annotations

import sqlite3
from typing import Final

from agentjournal._gc import no_collection
from agentjournal.errors import (
    InvalidInput,
)
from agentjournal.store.contract import (
    MODEL_PARTS,
    MODEL_REVISIONS,
    AppendRequest,
    ModelAdd,
    ModelClear,
    ModelCopy,
    ModelItems,
    ModelSnapshot,
    model_key,
)
from agentjournal.store.sqlite._rows import _EVENT_COLUMNS, _recorded, _stream_id
from agentjournal.store.sqlite._stored import ITEM_TEXT, Packer, Unpacker

# A model read packs each item's place in one integer (store.model.model_key) in the query:
# one column a row instead of three. SQLite's integers have 64 bits, so stream numbers
# from this one are packed in Python instead.
_SQL_KEYS = 1 << 23
_MODEL_ITEMS: Final = (
    f"SELECT idx, (stream_id << 40) | (revision << 8) | part, {ITEM_TEXT} FROM items "
    "WHERE tree = ? ORDER BY idx"
)
# A model read's items in one row (store.model.ModelItems.joined): how many texts are
# compressed, the keys as decimals, their count, the first and last index, and how many
# items name a stream outside the tree's (?2..?3: the tree's stream numbers, when they have
# no gap; see _ITEMS_ELSEWHERE); then the texts joined by ",\n" (_PLAIN_TEXTS, or
# _PACKED_TEXTS decompressed in Python). One row instead of one per item: each row costs
# sqlite3 a tuple and its objects (~0.45 µs); group_concat appends in C. Its order is the
# scan's: the primary key's b-tree from (tree, lowest idx) up, the only way SQLite reads
# ``WHERE tree = ?`` here (no other index; ``reverse_unordered_selects`` never set).
_MODEL_JOINED: Final = (
    "SELECT count(*) FILTER (WHERE dictionary IS NOT NULL AND typeof(item) = 'blob'), "
    "CASE WHEN min(dictionary) = max(dictionary) THEN min(dictionary) END, "
    "group_concat((stream_id << 40) | (revision << 8) | part), count(*), "
    "(SELECT min(idx) FROM items WHERE tree = ?1), (SELECT max(idx) FROM items WHERE tree = ?1), "
    "count(*) FILTER (WHERE {elsewhere}) FROM items WHERE tree = ?1"
)
_ITEMS_BETWEEN: Final = _MODEL_JOINED.format(elsewhere="stream_id NOT BETWEEN ?2 AND ?3")
# Streams numbered with gaps (sessions written side by side): each item's looked up.
_ITEMS_ELSEWHERE: Final = _MODEL_JOINED.format(
    elsewhere="stream_id NOT IN (SELECT id FROM streams WHERE tree = ?2)"
)
_PLAIN_TEXTS: Final = "SELECT group_concat(item, ',' || char(10)) FROM items WHERE tree = ?"
# Compressed texts: a row each, decompressed in one Python loop (~1.4 µs an item; a SQL
# function called per row from the aggregate costs ~2.7).
_PACKED_TEXTS: Final = "SELECT item, dictionary FROM items WHERE tree = ? ORDER BY idx"
_PACKED_ONLY: Final = "SELECT item FROM items WHERE tree = ? ORDER BY idx"


def read_model(db: sqlite3.Connection, tree: str, unpacker: Unpacker) -> ModelSnapshot | None:
    """The read model of the tree whose root stream is ``tree``, in one read transaction;
    None unless every stream of the tree is current (:meth:`SQLiteEventStore.read_model`).
    ``unpacker`` reads the stored form (and serves ``ITEM_TEXT`` on ``db``)."""
    db.execute("BEGIN")  # one snapshot of the file for all three queries
    try:
        streams = db.execute(
            "SELECT id, name, head, modelled FROM streams WHERE tree = ?", (tree,)
        ).fetchall()
        names = {row[0]: row[1] for row in streams}
        heads = {row[1]: row[2] for row in streams}
        root = next((row[0] for row in streams if row[1] == tree), None)
        if root is None or any(row[2] != row[3] for row in streams):
            return None
        # Only the root's last event: a reader needs another stream's only while a
        # subagent is open on it, and reads it apart (checked against ``heads``).
        last = db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events e WHERE e.stream_id = ? AND e.revision = ?",
            (root, heads[tree]),
        ).fetchone()
        if last is None:
            return None
        if max(heads.values()) >= MODEL_REVISIONS:
            return None  # a key could not hold the revision: the events answer
        found = db.execute("SELECT floor, mixed FROM trees WHERE tree = ?", (root,)).fetchone()
        items = _model_items(db, root, tree, names, unpacker)
        if items is None:
            return None  # an item on a stream not of the tree (a hand-edited file)
    finally:
        db.execute("COMMIT")
    floor, mixed = (-1, 0) if found is None else found
    last_event = _recorded(unpacker, tree, *last)
    return ModelSnapshot(heads, last_event, names, items, int(floor), not mixed)


def _model_items(
    db: sqlite3.Connection, root: int, tree: str, names: dict[int, str], unpacker: Unpacker
) -> ModelItems | None:
    """The visible items of the tree ``tree`` (root stream number ``root``, streams
    ``names``), in one row when it can be (:class:`ModelItems`); None if an item names a
    stream that is neither the tree's nor one of a copied prefix (:func:`_copied_prefix`,
    which adds those streams to ``names``)."""
    if max(names) >= _SQL_KEYS:  # a key does not fit SQLite's 64 bits: packed here
        if not _copied_prefix(db, root, tree, names):
            return None
        with no_collection():  # thousands of rows, no cycles
            return ModelItems.of_rows(
                [
                    (index, model_key(stream, revision, part), text)
                    for index, stream, revision, part, text in db.execute(
                        f"SELECT idx, stream_id, revision, part, {ITEM_TEXT} FROM items "
                        "WHERE tree = ? ORDER BY idx",
                        (root,),
                    )
                ]
            )
    low, high = min(names), max(names)
    if high - low + 1 == len(names):  # no gap: a range check of each item's stream
        found = db.execute(_ITEMS_BETWEEN, (root, low, high)).fetchone()
    else:
        found = db.execute(_ITEMS_ELSEWHERE, (root, tree)).fetchone()
    packed, dictionary, keys, count, first, last, elsewhere = found
    if elsewhere and not _copied_prefix(db, root, tree, names):
        return None  # an item on a stream that is not the tree's (a hand-edited file)
    if not count:
        return ModelItems.joined("", "", range(0), 0)
    texts = None
    if packed == count and dictionary is not None:  # all compressed alike: a loop in C
        with no_collection():  # thousands of rows, no cycles
            items = [item for (item,) in db.execute(_PACKED_ONLY, (root,))]
            texts = unpacker.joined_alike(items, dictionary)
    if texts is None and packed:  # some compressed (or one edited by hand): row by row
        with no_collection():
            texts = unpacker.joined_texts(db.execute(_PACKED_TEXTS, (root,)).fetchall())
    if texts is None:
        texts = db.execute(_PLAIN_TEXTS, (root,)).fetchone()[0]
    if texts.count("\n") != count - 1:
        # A text with a newline of its own (none this engine writes: its item texts are
        # compact JSON) would not split back: the rows, as they are.
        with no_collection():
            return ModelItems.of_rows(db.execute(_MODEL_ITEMS, (root,)).fetchall())
    indexes: str | range = range(first, last + 1)
    if last - first + 1 != count:  # a gap (a popped item): every index
        indexes = db.execute(
            "SELECT group_concat(idx) FROM items WHERE tree = ?", (root,)
        ).fetchone()[0]
    return ModelItems.joined(texts, keys, indexes, count)


_FOREIGN_ROWS: Final = (
    "SELECT max(idx) FILTER (WHERE NOT own), min(idx) FILTER (WHERE own), "
    "group_concat(DISTINCT stream_id) FILTER (WHERE NOT own) FROM ("
    "SELECT idx, stream_id, stream_id IN (SELECT id FROM streams WHERE tree = ?2) AS own "
    "FROM items WHERE tree = ?1)"
)


def _copied_prefix(db: sqlite3.Connection, root: int, tree: str, names: dict[int, str]) -> bool:
    """Whether the tree's items on other trees' streams, if any, are a copied prefix (a
    :class:`~agentjournal.store.contract.ModelCopy`: a branch's rows below its cut, on its
    parent's streams): every one before every row on the tree's own streams, each on a
    stream that exists and whose packed key SQLite could hold. ``names`` gains those
    streams. A row moved anywhere else (a hand edit) is not."""
    last_foreign, first_own, numbers = db.execute(_FOREIGN_ROWS, (root, tree)).fetchone()
    if numbers is None:
        return True  # every row on the tree's own streams
    if first_own is not None and last_foreign > first_own:
        return False
    for number in map(int, str(numbers).split(",")):
        row = db.execute("SELECT name FROM streams WHERE id = ?", (number,)).fetchone()
        if row is None or number >= _SQL_KEYS:
            return False
        names[number] = row[0]
    return True


def _apply_model(
    db: sqlite3.Connection,
    request: AppendRequest,
    stream_id: int | None,
    current: int,
    head: int,
    packer: Packer,
    *,
    followed: bool = False,
) -> None:
    """Apply one appended request's read model change (inside its write's transaction),
    its items' texts in their stored form (``packer``); ``followed``: the statement that
    moved the stream's head moved ``modelled`` as this would (``_writes.Writes._claim``).

    A new stream joins the request's tree; an existing one's ``modelled`` revision
    follows its head if it was current before (and of this tree): one append without
    a change (``model`` None) leaves it behind for good, and ``read_model`` of its
    tree answers None from then on. An item added at an index already taken (two
    writers that did not see each other; never this engine's own writes) makes the
    whole tree not current rather than pick one.
    """
    change = request.model
    if change is None:
        return  # modelled stays where it was: behind the head now
    created = current < 0 and request.stream == change.tree  # a new tree's root
    if current < 0:  # a new stream joins its tree (set once: ``tree`` is indexed)
        db.execute(
            "UPDATE streams SET tree = ?, modelled = ? WHERE id = ?", (change.tree, head, stream_id)
        )
    elif not followed:
        db.execute(
            "UPDATE streams SET modelled = ? WHERE id = ? AND modelled = ? AND tree = ?",
            (head, stream_id, current, change.tree),
        )
    if not change.ops:
        return
    ids: dict[str, int] = {} if stream_id is None else {request.stream: stream_id}
    root = ids.get(change.tree) or _stream_id(db, change.tree)
    if root is None:
        raise InvalidInput(f"the model's tree {change.tree!r} names no stream")

    def id_of(name: str) -> int:
        found = ids.get(name)
        if found is None:
            found = _stream_id(db, name)
            if found is None:
                raise InvalidInput(f"a model change names stream {name!r}, which does not exist")
            ids[name] = found
        return found

    row = db.execute("SELECT floor FROM trees WHERE tree = ?", (root,)).fetchone()
    floor = -1 if row is None else int(row[0])
    pack_text = packer.pack_text
    adds: list[tuple[int, int, int, int, int, str | bytes, int | None]] = []
    current = True  # False: an item at a taken index, or one without an index

    def add_all() -> bool:
        """Insert the adds so far in one statement; False if any index was taken."""
        if not adds:
            return True
        before = db.total_changes
        db.executemany(
            "INSERT OR IGNORE INTO items(tree, idx, stream_id, revision, part, item, dictionary) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            adds,
        )
        inserted = db.total_changes - before
        count = len(adds)
        adds.clear()
        return inserted == count

    for n, op in enumerate(change.ops):
        if isinstance(op, ModelCopy):
            copied = _copy_model(db, op, root) if created and n == 0 else None
            current = current and copied is not None
            floor = max(floor, -1 if copied is None else copied)
            continue
        if isinstance(op, ModelAdd):
            if not op.plain:
                db.execute(
                    "INSERT INTO trees(tree, floor, mixed) VALUES (?, -1, 1) "
                    "ON CONFLICT(tree) DO UPDATE SET mixed = 1",
                    (root,),
                )
            if 0 <= op.index <= floor:
                continue  # hidden by an earlier clear, as the timeline hides it
            # A place its packed key cannot hold (store.model.model_key) is not modelled; the
            # heads bound read_model checks holds only for revisions of events that exist.
            current = (
                current
                and op.index >= 0
                and 0 <= op.part < MODEL_PARTS
                and 0 <= op.revision < MODEL_REVISIONS
            )
            adds.append(
                (root, op.index, id_of(op.stream), op.revision, op.part, *pack_text(op.text))
            )
            continue
        current = add_all() and current
        if isinstance(op, ModelClear):
            floor = max(floor, op.through_index)
            db.execute("DELETE FROM items WHERE tree = ? AND idx <= ?", (root, floor))
            db.execute(
                "INSERT INTO trees(tree, floor, mixed) VALUES (?, ?, 0) "
                "ON CONFLICT(tree) DO UPDATE SET floor = excluded.floor",
                (root, floor),
            )
        elif op.index < 0:  # not this engine's: the model cannot find it
            current = False
        else:
            db.execute(
                "DELETE FROM items WHERE tree = ? AND idx = ? AND stream_id = ? "
                "AND revision = ? AND part = ?",
                (root, op.index, id_of(op.stream), op.revision, op.part),
            )
    if not add_all() or not current:
        db.execute("UPDATE streams SET modelled = NULL WHERE tree = ?", (change.tree,))


def _copy_model(db: sqlite3.Connection, op: ModelCopy, root: int) -> int | None:
    """Start the new tree ``root`` as the source tree's rows below ``op.below`` (one
    ``INSERT ... SELECT``, same places and text) with the source's floor and plain mark;
    its floor, or None (nothing copied) unless every stream of the source tree is current
    and exactly at ``op.heads`` (store.model.ModelCopy)."""
    streams = db.execute(
        "SELECT id, name, head, modelled FROM streams WHERE tree = ?", (op.source,)
    ).fetchall()
    source = next((row[0] for row in streams if row[1] == op.source), None)
    if (
        source is None
        or source == root
        or {row[1]: row[2] for row in streams} != dict(op.heads)
        or any(row[2] != row[3] or row[2] >= MODEL_REVISIONS for row in streams)
    ):
        return None
    db.execute(
        "INSERT INTO items(tree, idx, stream_id, revision, part, item, dictionary) "
        "SELECT ?, idx, stream_id, revision, part, item, dictionary FROM items "
        "WHERE tree = ? AND idx < ?",
        (root, source, op.below),
    )
    db.execute(
        "INSERT INTO trees(tree, floor, mixed) SELECT ?, floor, mixed FROM trees WHERE tree = ?",
        (root, source),
    )
    row = db.execute("SELECT floor FROM trees WHERE tree = ?", (root,)).fetchone()
    return -1 if row is None else int(row[0])
