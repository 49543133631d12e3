"""The public lineage walker: every child after all of its parents, bounded or live, read one
partition after another or each in a thread of its own; every mod exactly once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import changestream
from changestream import DataChangeRecord, FailedPrecondition, parents_finished

pytestmark = pytest.mark.timeout(120)

DDL = [
    "CREATE TABLE T (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)",
    "CREATE CHANGE STREAM S FOR T",
]


def write(db: changestream.EmbeddedDatabase, keys: range, value: str) -> int:
    with db.transaction() as tx:
        tx.insert_or_update("T", ["K", "V"], [[k, value] for k in keys])
    assert tx.commit_timestamp is not None
    return changestream.clock.parse_ts(tx.commit_timestamp)


def build_lineage(db: changestream.EmbeddedDatabase) -> tuple[int, int, int]:
    """Writes around two splits and a merge; returns (start, end, mods written)."""
    db.execute_ddl(DDL)
    start = min(p.start_timestamp for p in db.partition_history("S"))
    mods = 0
    for round_, boundary in enumerate([50, 25]):
        write(db, range(100), f"a{round_}")
        mods += 100
        db.split_at("T", [boundary])
    write(db, range(100), "b")
    db.merge_at("T", [25])  # the two left children merge back: one child, two parents
    end = write(db, range(0, 100, 3), "c")
    mods += 100 + 34
    return start, end, mods


def test_rule() -> None:
    assert parents_finished((), set())
    assert parents_finished(("a", "b"), {"a", "b", "c"})
    assert not parents_finished(("a", "b"), {"a"})


def test_bounded_walk_gives_children_after_parents_and_every_mod_once(
    db: changestream.EmbeddedDatabase,
) -> None:
    start, end, written = build_lineage(db)
    order: list[str] = []
    seen: list[tuple[int, int]] = []
    for partition in changestream.walk_partitions(db, "S", start, end, 1000):
        assert all(parent in order for parent in partition.parent_tokens), partition
        order.append(partition.token)
        for record in partition.records():
            if isinstance(record, DataChangeRecord):
                seen.extend((record.commit_timestamp, m.keys["K"]) for m in record.mods)
    history = {p.token: p for p in db.partition_history("S")}
    assert set(order) == set(history)  # the whole lineage, once each
    merged = [t for t in order if len(history[t].parent_tokens) == 2]
    assert len(merged) == 1
    assert len(seen) == written == len(set(seen))


def test_partitions_left_unread_are_read_by_the_walk(db: changestream.EmbeddedDatabase) -> None:
    start, end, _ = build_lineage(db)
    everything = [p.token for p in changestream.walk_partitions(db, "S", start, end, 1000)]
    assert len(everything) == len(db.partition_history("S"))


def test_a_partition_is_read_once_and_stopping_early_ends_its_branch(
    db: changestream.EmbeddedDatabase,
) -> None:
    start, end, _ = build_lineage(db)
    walk = changestream.walk_partitions(db, "S", start, end, 1000)
    root = next(walk)
    records = root.records()
    with pytest.raises(FailedPrecondition, match="already reading"):
        root.records()
    next(records)
    records.close()  # stopped before its child partitions record
    assert root.state == "stopped"
    assert list(walk) == []  # its children were never announced
    assert root.token not in walk.finished


def test_live_walk_with_a_thread_per_partition(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "live.db")) as db:
        db.execute_ddl(DDL)
        start = min(p.start_timestamp for p in db.partition_history("S"))
        walk = changestream.walk_partitions(db, "S", start, None, 1000)
        stop_at: list[int] = []
        lock = threading.Lock()
        given: list[tuple[str, tuple[str, ...]]] = []
        seen: list[tuple[int, int]] = []
        errors: list[BaseException] = []

        def read(partition: changestream.WalkedPartition) -> None:
            try:
                iterator = records_of[partition.token]
                for record in iterator:
                    moment = record.timestamp
                    if isinstance(record, DataChangeRecord):
                        with lock:
                            seen.extend((record.commit_timestamp, m.keys["K"]) for m in record.mods)
                    if stop_at and moment >= stop_at[0]:
                        iterator.close()
                        return
            except BaseException as exc:
                errors.append(exc)

        records_of: dict[str, Iterator[changestream.ChangeRecord]] = {}
        threads: list[threading.Thread] = []

        def follow() -> None:
            for partition in walk:
                with lock:
                    given.append((partition.token, partition.parent_tokens))
                records_of[partition.token] = partition.records()  # counted as read from here
                thread = threading.Thread(target=read, args=(partition,))
                threads.append(thread)
                thread.start()

        follower = threading.Thread(target=follow)
        follower.start()
        written = 0
        for round_, boundary in enumerate([50, 25, 75]):
            write(db, range(100), f"v{round_}")
            written += 100
            db.split_at("T", [boundary])
        db.merge_at("T", [50])
        stop_at.append(write(db, range(100), "last"))
        written += 100
        follower.join(60)
        assert not follower.is_alive(), "the walk did not end after every reader stopped"
        for thread in threads:
            thread.join(10)
        assert errors == []
        tokens = [t for t, _ in given]
        for position, (_, parents) in enumerate(given):
            assert all(p in tokens[:position] for p in parents)
        assert len(given) == len(db.partition_history("S"))
        assert len(seen) == written == len(set(seen))
