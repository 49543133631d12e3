"""The k-way merge: commit order over many partitions, one idle, while partitions split and
merge under a live cursor. No timing is asserted; every wait is bounded."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream.clock import parse_ts
from changestream.embedded.database import store_of
from changestream.streams.chunks import close_read
from changestream.streams.stored_changes import StoredRecord
from changestream.watch.merge import PartitionMerge, record_key
from tests.lineage import read_lineage
from tests.watch_support import COLUMNS, ITEMS, key, nothing_more, take

pytestmark = pytest.mark.timeout(120)

IDLE = range(300, 400)  # the key range of the partition nobody writes to


def commit(db: changestream.EmbeddedDatabase, rng: random.Random, n: int) -> tuple[int, set[int]]:
    """One transaction writing 1-4 keys across the key space, never in the idle range."""
    ids = {i for i in rng.sample(range(1000), 4)[: rng.randint(1, 4)] if i not in IDLE} or {1}
    with db.transaction() as tx:
        tx.insert_or_update("Items", COLUMNS, [[i, f"v{n}", n] for i in sorted(ids)])
    assert tx.commit_timestamp is not None
    return parse_ts(tx.commit_timestamp), ids


def committed_keys(
    db: changestream.EmbeddedDatabase, stream: str, start: int
) -> list[tuple[int, int, int]]:
    """The merge keys of every record committed since ``start``, in commit order, read with
    the read function partition by partition."""
    end = store_of(db).last_commit_ts()
    return sorted(
        record_key(record)
        for read in read_lineage(db, stream, start, end)
        for record in read.records
    )


def test_live_merge_in_commit_order_over_many_partitions_one_idle(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "merge.db")) as db:
        db.execute_ddl(ITEMS)
        for boundary in range(100, 1000, 100):
            db.split_at("Items", [boundary])
        stream = db.ensure_watch_stream().stream
        assert len(db.partitions(stream)) >= 10
        start = db.ensure_watch_stream().now
        cursor = db.watch(full_document="whenAvailable", max_await_time_ms=200)
        rng = random.Random(8)
        committed: list[tuple[int, set[int]]] = []
        errors: list[BaseException] = []

        def writer() -> None:
            try:
                for n in range(240):
                    committed.append(commit(db, rng, n))
                    if n == 80:
                        db.split_at("Items", [550])
                    if n == 160:
                        db.merge_at("Items", [200])
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=writer)
        thread.start()
        events: list[dict[str, Any]] = []
        try:
            while thread.is_alive() or len(events) < sum(len(ids) for _, ids in committed):
                events.extend(take(cursor, 1))
        finally:
            thread.join(30)
        assert not errors
        assert nothing_more(cursor)
        cursor.close()
        end = store_of(db).last_commit_ts()

        keys = [key(e) for e in events]
        assert keys == sorted(keys) and len(set(keys)) == len(keys), "commit order, once each"
        by_commit: dict[int, set[int]] = {}
        for event in events:
            by_commit.setdefault(event["clusterTime"].to_us(), set()).add(
                event["documentKey"]["Id"]
            )
        assert by_commit == dict(committed), "every change, no gap"

        # The same records read partition by partition with the read function, sorted.
        reads = read_lineage(db, stream, start, end)
        reference = sorted(
            ((*record_key(r), m), mod.keys["Id"])
            for read in reads
            for r in read.records
            for m, mod in enumerate(r.mods)
        )
        assert [(k[:4], e["documentKey"]["Id"]) for k, e in zip(keys, events, strict=True)] == [
            (k, i) for k, i in reference
        ]
        assert any(not read.records for read in reads), "some partitions stayed idle"


class SlowLiveReads(PartitionMerge):
    """A merge whose live readers take 3 ms per record, so that probes find records before
    them; it counts the records probes found."""

    probed = 0

    def _query(self, start: int, end: int | None, token: str) -> Iterable[StoredRecord]:
        records = super()._query(start, end, token)
        return records if end is not None else self._slowly(records)

    @staticmethod
    def _slowly(records: Iterable[StoredRecord]) -> Iterator[StoredRecord]:
        try:
            for record in records:
                time.sleep(0.003)
                yield record
        finally:
            close_read(records)

    def _probe(self, parts: list[Any]) -> None:
        super()._probe(parts)
        self.probed += sum(len(part.probed) for part in parts)


def test_read_ahead_is_counted_once_per_record_through_probes_and_backlogs(
    tmp_path: Path,
) -> None:
    """A small read-ahead over a backlog and then live writes with one idle partition and slow
    live readers (so the merge probes, and live readers deliver again what probes found):
    every record comes out
    once in order, and once the readers are quiet each has as many records counted taken as it
    sent (a record counted twice would let its reader run past the bound; one never counted
    would stall it)."""
    read_ahead = 4
    with changestream.open(str(tmp_path / "ahead.db")) as db:
        db.execute_ddl(ITEMS)
        for boundary in (100, 200, 300, 400):  # [300, 400) is IDLE
            db.split_at("Items", [boundary])
        source = db.ensure_watch_stream()
        start = source.now
        rng = random.Random(3)
        committed = [commit(db, rng, n) for n in range(40)]  # a backlog
        merge = SlowLiveReads(
            db,
            source.stream,
            start,
            read_ahead,
            now=lambda: db.ensure_watch_stream().now,
            stored=True,
        )
        try:
            keys: list[tuple[int, int, int]] = []
            for n in range(40, 120):
                committed.append(commit(db, rng, n))
                keys.extend(key for key, _ in merge.take(3, 0.002))
                for part in merge._partitions.values():
                    assert part.sent - part.taken <= read_ahead, "a reader ran past its bound"
            reference = committed_keys(db, source.stream, start)
            deadline = time.monotonic() + 60
            while len(keys) < len(reference) and time.monotonic() < deadline:
                keys.extend(key for key, _ in merge.take(50, 0.05))
            assert keys == reference, "every record of every partition, in order, once each"
            assert merge.probed > 0, "probes found records the live readers then sent again"
            assert merge.take(1, 0.3) == []  # the readers are quiet: nothing more comes
            for part in merge._partitions.values():
                assert (part.sent, len(part.buffer), part.probed) == (part.taken, 0, set())
        finally:
            merge.close()


def test_a_live_stored_read_promises_at_each_commit_that_leaves_its_partition_unchanged(
    tmp_path: Path,
) -> None:
    """A heartbeat comes when a commit elsewhere wakes the read, not a heartbeat interval
    later, and it promises that commit."""
    from changestream.streams.records import HeartbeatRecord

    with changestream.open(str(tmp_path / "promise.db")) as db:
        db.execute_ddl(ITEMS)
        db.split_at("Items", [IDLE.start])
        source = db.ensure_watch_stream()
        idle = next(p for p in db.partitions(source.stream) if p.start_key != "-∞")
        records = db.read_stored_changes(source.stream, source.now, None, idle.token, 60_000)
        first: list[StoredRecord] = []
        reader = threading.Thread(target=lambda: first.append(next(iter(records))), daemon=True)
        reader.start()
        time.sleep(0.2)  # the read waits for commits
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, [[1, "below the idle partition", 1]])
        assert tx.commit_timestamp is not None
        reader.join(timeout=30)
        assert not reader.is_alive(), "no promise within 30 s (the interval asked is 60 s)"
        close_read(records)
        (heartbeat,) = first
        assert isinstance(heartbeat, HeartbeatRecord)
        assert heartbeat.timestamp >= parse_ts(tx.commit_timestamp)


def test_partitions_catching_up_together_share_one_end_and_one_promise(tmp_path: Path) -> None:
    """A merge opened over 16 partitions with a backlog in each: every record comes out once,
    in order, and the bounded reads that catch the partitions up end where one reading of the
    database's clock put them. So the database is written once (a bounded read first promises
    that nothing more can commit at or below its end), not once per partition."""
    with changestream.open(str(tmp_path / "together.db")) as db:
        db.execute_ddl(ITEMS)
        for boundary in range(64, 1000, 64):  # 15 splits: 16 partitions
            db.split_at("Items", [boundary])
        source = db.ensure_watch_stream()
        start = source.now
        rng = random.Random(5)
        for n in range(60):
            commit(db, rng, n)
        reference = committed_keys(db, source.stream, start)
        assert len(db.partitions(source.stream, at=start)) == 16
        clock_reads = 0

        def now() -> int:
            nonlocal clock_reads
            clock_reads += 1
            return db.ensure_watch_stream().now

        # The merge catches up on the calling thread, with its connection.
        connection = store_of(db).connection()
        written_before = connection.total_changes
        merge = PartitionMerge(db, source.stream, start, 1000, now=now, stored=True)
        try:
            keys: list[tuple[int, int, int]] = []
            deadline = time.monotonic() + 60
            while len(keys) < len(reference) and time.monotonic() < deadline:
                keys.extend(key for key, _ in merge.take(1000, 0.05))
            assert keys == reference, "every record of every partition, in order, once each"
            assert clock_reads == 1, "the 16 catch-up reads share one end"
            assert connection.total_changes - written_before <= 1, "one promise, one write at most"
        finally:
            merge.close()
