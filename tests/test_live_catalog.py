"""The catalog kept in memory (``read.catalog.live``): folded request by request, it lists what
a fold from the start lists, and its word index finds what was written since."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentjournal import Journal
from agentjournal.ledger import SigningKey
from agentjournal.read import catalog
from agentjournal.read.catalog.live import LiveCatalog
from agentjournal.read.catalog.rows import SessionRow


def _same(row: SessionRow) -> dict[str, Any]:
    """A row as data, but for when it was folded."""
    data = row.as_dict()
    del data["integrity"]["checked_at"]
    return data


async def test_folded_request_by_request_it_lists_what_a_fold_from_the_start_lists(
    tmp_path: Path,
) -> None:
    key, other = SigningKey.generate(), SigningKey.generate()
    keys = {key.key_id: key.public_key}
    uri = f"sqlite:///{tmp_path / 'live.db'}"
    async with Journal.open(uri, signing_key=key) as journal:
        live = LiveCatalog(keys)
        assert (await live.refresh(journal.store)).rows == []
        for number in range(6):
            session = journal.session(f"s-{number}", app_name="shop", user_id=f"u-{number}")
            await session.add_items([{"role": "user", "content": f"first words {number}"}])
            if number % 2:
                await session.fork(name="retry")  # a checkpoint, signed by the trusted key
            if number == 3:
                await session.pop_item()
            snapshot = await live.refresh(journal.store)
            assert snapshot.folded > 0
            # An untouched session keeps its row object; a touched one is built again.
            again = await live.refresh(journal.store)
            assert again.folded == 0
            assert [id(r) for r in again.rows] == [id(r) for r in snapshot.rows]
        # A key rotation changes whose checkpoints are trusted: every row is built again.
        await journal.rotate_key(key, other)
        fresh = await catalog.refresh(journal.store, keys=keys, fresh=True)
        kept = await live.refresh(journal.store)
        assert not {id(r) for r in kept.rows} & {id(r) for r in snapshot.rows}
    assert sorted(map(_same, kept.rows), key=lambda d: d["session_id"]) == sorted(
        map(_same, fresh.rows), key=lambda d: d["session_id"]
    )
    # s-3 popped an item after its signed fork: a tail no checkpoint covers, as verify says.
    assert {r.session_id: r.integrity.state for r in kept.rows} == {
        "s-0": "unsigned",
        "s-1": "verified",
        "s-2": "unsigned",
        "s-3": "failed",
        "s-4": "unsigned",
        "s-5": "verified",
    }
    assert kept.position == fresh.position
    assert kept.index.matching("first") == {f"s-{n}" for n in range(6)}
    assert kept.index.matching("3") == {"s-3"}  # popped since: the index keeps what was written
