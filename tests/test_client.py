"""The Stream Client in one process: lease storage, the taker's rules, processing, checkpoints,
hand-over, lost leases, errors, and the ``changestream leases`` command.

Workers here are threads sharing one database object; the multi-process behaviour (SIGKILL,
rebalancing across processes, racing) is in test_client_processes.py. Waits are bounded.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner

import changestream
from changestream import DataChangeRecord, EmbeddedDatabase, InvalidArgument, Lease, NotFound
from changestream.cli import main
from changestream.client import (
    Checkpointer,
    InitializationContext,
    LeaseLost,
    Position,
    RecordBatch,
    RecordProcessor,
    ShutdownReason,
    StreamClient,
)
from changestream.client.lease_table import END, PARTITION_LEASE, WORKER, describe_leases
from changestream.client.taker import LeaseTaker
from changestream.clock import now_us
from changestream.embedded.database import store_of
from tests.conftest import FixedClock, OpenDb, in_threads

pytestmark = pytest.mark.timeout(120)

STREAM = "AccStream"
TIMEOUT = 1.0
WAIT_S = 30.0


def wait_for(what: str, condition: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def acc(tmp_path: Path) -> Iterator[tuple[EmbeddedDatabase, int]]:
    with changestream.open(str(tmp_path / "acc.db")) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl("CREATE TABLE Acc (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)")
        created = db.execute_ddl(f"CREATE CHANGE STREAM {STREAM} FOR Acc")
        yield db, created


def write(db: EmbeddedDatabase, rows: list[list[int]]) -> None:
    with db.transaction() as tx:
        tx.insert_or_update("Acc", ["K", "V"], rows)


class Log:
    """What processors saw, shared by every processor of a test."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.mods: list[tuple[str, int, int]] = []  # (worker, key, value) in processing order
        self.inits: list[InitializationContext] = []
        self.shutdowns: list[tuple[str, str, ShutdownReason]] = []
        self.errors: list[Exception] = []

    def values(self) -> dict[int, list[int]]:
        per_key: dict[int, list[int]] = defaultdict(list)
        with self.lock:
            for _, key, value in self.mods:
                per_key[key].append(value)
        return per_key

    def count(self) -> int:
        with self.lock:
            return len(self.mods)


class Recorder(RecordProcessor):
    """Logs every mod; checkpoints after each batch unless told not to."""

    def __init__(self, log: Log, worker: str, checkpoint: bool = True) -> None:
        self.log = log
        self.worker = worker
        self.checkpoint = checkpoint
        self.token = ""

    def initialize(self, context: InitializationContext) -> None:
        self.token = context.partition_token
        with self.log.lock:
            self.log.inits.append(context)

    def process_records(self, records: list[DataChangeRecord], checkpointer: Checkpointer) -> None:
        with self.log.lock:
            for record in records:
                for mod in record.mods:
                    self.log.mods.append((self.worker, mod.keys["K"], mod.new_values["V"]))
        if self.checkpoint:
            checkpointer.checkpoint()

    def shutdown(self, reason: ShutdownReason, checkpointer: Checkpointer) -> None:
        with self.log.lock:
            self.log.shutdowns.append((self.worker, self.token, reason))


def client(
    db: EmbeddedDatabase,
    created: int,
    worker: str,
    factory: Callable[[], RecordProcessor],
    **options: Any,
) -> StreamClient:
    options.setdefault("lease_timeout", TIMEOUT)
    return StreamClient(db, STREAM, worker, factory, start_timestamp=created, **options)


@contextmanager
def running(*clients: StreamClient) -> Iterator[None]:
    for each in clients:
        each.start()
    try:
        yield
    finally:
        for each in clients:
            assert each.stop(timeout=WAIT_S), f"{each.worker_id} did not stop"


def run_in_thread(worker: StreamClient) -> tuple[threading.Thread, list[BaseException]]:
    """``worker.run()`` started on a thread of its own; what it raises goes in the list. The
    thread is a daemon: a test that fails while it runs does not keep pytest from exiting."""
    errors: list[BaseException] = []

    def work() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, errors


def partition_rows(db: EmbeddedDatabase, consumer: str = "default") -> list[Lease]:
    rows = db.leases(STREAM, consumer).list_leases()
    return [r for r in rows if r.status_type == PARTITION_LEASE]


# --- the lease table in the engine ----------------------------------------------------------


def test_lease_table_changes_are_conditional_on_the_counter(
    acc: tuple[EmbeddedDatabase, int],
) -> None:
    db, _ = acc
    table = db.leases(STREAM, "app")
    lease = Lease(PARTITION_LEASE, "p1", parent_shard_ids=("p0",), start_timestamp=5)
    assert table.insert_if_absent(lease)
    assert not table.insert_if_absent(dataclasses.replace(lease, checkpoint="other"))
    assert table.get(PARTITION_LEASE, "p1") == lease
    assert table.get(PARTITION_LEASE, "nope") is None

    mine = table.update(dataclasses.replace(lease, lease_owner="w1", checkpoint="1:0"))
    assert mine is not None and mine.lease_counter == 1 and mine.lease_owner == "w1"
    # A writer still holding counter 0 loses, and so does a delete from that view.
    assert table.update(dataclasses.replace(lease, lease_owner="w2")) is None
    assert not table.delete(lease)
    assert table.list_leases() == [mine]
    assert mine.to_dict()["ParentShardIds"] == ["p0"]
    assert table.delete(mine)
    assert table.list_leases() == []


def test_lease_writes_from_many_threads_share_one_connection(
    acc: tuple[EmbeddedDatabase, int],
) -> None:
    """Threads writing leases at once take turns on the store's one bookkeeping connection:
    every conditional write lands, none is lost or fails, and no thread opens its own."""
    db, _ = acc
    table = db.leases(STREAM, "app")
    threads, writes = 8, 40
    for n in range(threads):
        assert table.insert_if_absent(Lease(PARTITION_LEASE, f"p{n}"))
    opened_before = len(store_of(db)._pool._all)

    def checkpoint_often(n: int) -> None:
        row = table.get(PARTITION_LEASE, f"p{n}")
        for i in range(writes):
            assert row is not None
            row = table.update(dataclasses.replace(row, checkpoint=f"{i}:0"))

    assert in_threads(checkpoint_often, [(n,) for n in range(threads)], WAIT_S) == []
    rows = {r.status_value: r for r in table.list_leases()}
    assert {(v, r.lease_counter, r.checkpoint) for v, r in rows.items()} == {
        (f"p{n}", writes, f"{writes - 1}:0") for n in range(threads)
    }
    assert len(store_of(db)._pool._all) == opened_before
    db.close()
    with pytest.raises(changestream.DatabaseClosed):
        table.list_leases()


def test_consumer_groups_and_streams_are_kept_apart(acc: tuple[EmbeddedDatabase, int]) -> None:
    db, _ = acc
    db.execute_ddl("CREATE CHANGE STREAM Other FOR Acc")
    db.leases(STREAM, "a").insert_if_absent(Lease(PARTITION_LEASE, "p"))
    db.leases(STREAM, "b").insert_if_absent(Lease(PARTITION_LEASE, "p", checkpoint="x"))
    db.leases("Other", "a").insert_if_absent(Lease(PARTITION_LEASE, "q"))
    assert [r.checkpoint for r in db.leases(STREAM, "b").list_leases()] == ["x"]
    assert db.lease_consumers(STREAM) == ["a", "b"]
    assert db.lease_consumers("Other") == ["a"]
    assert isinstance(db, changestream.Database)
    assert isinstance(db.leases(STREAM, "a"), changestream.LeaseTableLike)
    with pytest.raises(NotFound, match="change stream 'Nope' does not exist"):
        db.leases("Nope", "a")
    with pytest.raises(InvalidArgument, match="consumer must be 1 to 128 printable characters"):
        db.leases(STREAM, "")
    # Dropping a stream drops its consumer groups' state with it.
    db.execute_ddl("DROP CHANGE STREAM Other")
    db.execute_ddl("CREATE CHANGE STREAM Other FOR Acc")
    assert db.lease_consumers("Other") == []


def test_a_file_made_before_the_lease_table_gets_it_on_open(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    with changestream.open(path) as db:
        db.execute_ddl("CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)")
        db.execute_ddl("CREATE CHANGE STREAM S FOR T")
    raw = sqlite3.connect(path)
    raw.execute("DROP TABLE _cs_leases")
    raw.commit()
    raw.close()
    with changestream.open(path) as db:
        assert db.leases("S", "app").insert_if_absent(Lease(PARTITION_LEASE, "p"))


# --- the taker's rules ----------------------------------------------------------------------


def owned(token: str, owner: str | None, counter: int = 0, **fields: Any) -> Lease:
    return Lease(PARTITION_LEASE, token, lease_owner=owner, lease_counter=counter, **fields)


def test_taker_takes_free_leases_up_to_its_share_and_waits_for_parents() -> None:
    taker = LeaseTaker("me", lease_timeout=10, max_steals_per_round=2)
    leases = [
        owned("a", None),
        owned("b", None),
        owned("c", "other"),
        owned("d", "other"),
        owned("parent", "other"),
        owned("child", None, parent_shard_ids=("parent",)),
        owned("done", None, checkpoint=END),
    ]
    plan = taker.plan(leases, set(), now=0.0)
    # 5 ready leases over 2 workers: a share of 3; the child waits for its parent.
    assert sorted(r.status_value for r in plan.take) == ["a", "b"]
    assert plan.steal == []


def test_taker_takes_expired_leases_after_the_timeout_by_its_own_clock() -> None:
    taker = LeaseTaker("me", lease_timeout=10, max_steals_per_round=2)
    leases = [owned("a", "dead", counter=7), owned("b", "alive", counter=3)]
    assert taker.plan(leases, set(), now=0.0).take == []
    later = [owned("a", "dead", counter=7), owned("b", "alive", counter=4)]
    assert taker.plan(later, set(), now=9.0).take == []
    assert [r.status_value for r in taker.plan(later, set(), now=10.5).take] == ["a"]


def test_taker_steals_from_the_most_loaded_only_to_reach_its_share() -> None:
    taker = LeaseTaker("me", lease_timeout=10, max_steals_per_round=2)
    leases = [owned(f"x{i}", "x") for i in range(6)] + [owned(f"y{i}", "y") for i in range(3)]
    plan = taker.plan(leases, set(), now=0.0)
    # 9 leases, 3 workers: a share of 3, all from x (6 > 3), at most 2 per round.
    assert plan.take == [] and [r.lease_owner for r in plan.steal] == ["x", "x"]
    marked = [dataclasses.replace(r, lease_stealer="me") for r in leases[:2]] + leases[2:]
    plan = taker.plan(marked, set(), now=1.0)
    assert [r.lease_owner for r in plan.steal] == ["x"]
    # Even within one: no churn.
    balanced = [owned("a", "x"), owned("b", "x"), owned("c", "y"), owned("d", "me")]
    assert taker.plan(balanced, {"d"}, now=2.0) == taker.plan(balanced, {"d"}, now=2.0)
    assert taker.plan(balanced, {"d"}, now=2.0).steal == []


def test_taker_resumes_leases_that_are_already_its_own() -> None:
    taker = LeaseTaker("me", lease_timeout=10, max_steals_per_round=2)
    leases = [owned("a", "me"), owned("b", "me")]
    assert [r.status_value for r in taker.plan(leases, {"a"}, now=0.0).take] == ["b"]


def worker(name: str, counter: int = 0) -> Lease:
    return Lease(WORKER, name, lease_owner=name, lease_counter=counter)


def test_taker_counts_registered_workers_that_hold_nothing_yet() -> None:
    taker = LeaseTaker("me", lease_timeout=10, max_steals_per_round=2)
    leases = [owned(f"p{i}", None) for i in range(8)]
    # Counting owners only, the first worker to look takes all 8.
    assert len(taker.plan(leases, set(), now=0.0).take) == 8
    others = [worker("me"), worker("w2"), worker("w3"), worker("w4")]
    assert len(LeaseTaker("me", 10, 2).plan(leases, set(), 0.0, others).take) == 2


def test_a_worker_above_its_share_hands_the_surplus_to_those_below_it() -> None:
    taker = LeaseTaker("me", lease_timeout=10, max_steals_per_round=2)
    leases = [owned(f"m{i}", "me") for i in range(7)] + [owned("o0", "other")]
    workers = [worker("me"), worker("other"), worker("new")]
    running = {f"m{i}" for i in range(7)}
    plan = taker.plan(leases, running, 0.0, workers)
    # 8 leases over 3 workers: a share of 3. "other" needs 2, "new" 3, "me" gives 4.
    given = Counter(receiver for _, receiver in plan.give)
    assert given == {"new": 3, "other": 1} and plan.take == plan.steal == []
    assert {lease.status_value for lease, _ in plan.give} <= running
    # Once marked, they count for their receivers: nothing more is given.
    receivers = dict((lease.status_value, to) for lease, to in plan.give)
    marked = [dataclasses.replace(r, lease_stealer=receivers.get(r.status_value)) for r in leases]
    assert taker.plan(marked, running, 1.0, workers).give == []
    # Without a row for "new", "me" knows only "other" (by its lease): a share of 4.
    alone = taker.plan(leases, running, 2.0, [worker("me")])
    assert Counter(receiver for _, receiver in alone.give) == {"other": 3}


def test_a_worker_whose_row_stopped_moving_is_handed_nothing() -> None:
    taker = LeaseTaker("me", lease_timeout=9, max_steals_per_round=2)
    leases = [owned(f"m{i}", "me") for i in range(6)]
    running = {f"m{i}" for i in range(6)}
    assert taker.plan(leases, running, 0.0, [worker("me"), worker("quiet")]).give != []
    # Six seconds later "quiet" has not renewed (its row stands still) while "me" has: it
    # still counts as a worker until the lease timeout, but nothing is handed to it.
    later = taker.plan(leases, running, 6.5, [worker("me", 1), worker("quiet")])
    assert later.give == [] and later.gone == []


def test_a_registered_worker_gets_rounds_to_give_before_it_is_stolen_from() -> None:
    taker = LeaseTaker("me", lease_timeout=10, max_steals_per_round=2)
    leases = [owned(f"x{i}", "x") for i in range(8)]
    workers = [worker("me"), worker("x")]
    # It gets two take intervals (a third of the lease timeout each) to hand them over.
    for now in (0.0, 6.0):
        plan = taker.plan(leases, set(), now, workers)
        assert plan.steal == [] and plan.expecting
    assert len(taker.plan(leases, set(), 7.0, workers).steal) == 2
    # A worker without a row never gives: it is stolen from at once.
    assert len(LeaseTaker("me", 10, 2).plan(leases, set(), 0.0, [worker("me")]).steal) == 2


def test_own_requests_to_steal_do_not_keep_a_silent_owner_alive() -> None:
    taker = LeaseTaker("me", lease_timeout=10, max_steals_per_round=2)
    leases = [owned(token, "dead", counter=7) for token in "abcd"]
    assert [r.status_value for r in taker.plan(leases, set(), now=0.0).steal] == ["a", "b"]
    # This worker marks two (their counters move by its own writes).
    marked = [dataclasses.replace(r, lease_stealer="me", lease_counter=8) for r in leases[:2]]
    for row in marked:
        taker.wrote(row)
    marked += leases[2:]
    assert taker.plan(marked, set(), now=9.0).take == []
    taken = taker.plan(marked, set(), now=10.5).take
    assert sorted(r.status_value for r in taken) == ["a", "b", "c", "d"]
    # Written by somebody else, the same move would have restarted the timeout.
    other = LeaseTaker("me", lease_timeout=10, max_steals_per_round=2)
    other.plan(leases, set(), now=0.0)
    assert other.plan(marked, set(), now=10.5).take == []


def test_silent_workers_rows_are_removed_after_the_timeout_but_never_ones_own() -> None:
    taker = LeaseTaker("me", lease_timeout=10, max_steals_per_round=2)
    rows = [worker("me", 1), worker("gone", 5), worker("alive", 3)]
    assert taker.plan([], set(), 0.0, rows).gone == []
    later = [worker("me", 1), worker("gone", 5), worker("alive", 4)]
    assert [w.status_value for w in taker.plan([], set(), 10.5, later).gone] == ["gone"]


# --- processing -----------------------------------------------------------------------------


def test_one_worker_follows_splits_and_merges_and_keeps_key_order(
    acc: tuple[EmbeddedDatabase, int],
) -> None:
    db, created = acc
    log = Log()
    worker = client(db, created, "w1", lambda: Recorder(log, "w1"))
    expected: dict[int, list[int]] = defaultdict(list)

    def commit(step: int) -> None:
        rows = [[step % 40, step], [(step * 7) % 40, step]] if step % 3 else [[step % 40, step]]
        rows = list({k: [k, v] for k, v in rows}.values())
        write(db, rows)
        for k, v in rows:
            expected[k].append(v)

    with running(worker):
        for step in range(60):
            commit(step)
        db.split_at("Acc", (20,))
        for step in range(60, 120):
            commit(step)
        db.split_at("Acc", (10,))
        db.merge_at("Acc", (20,))  # a child of two parents
        for step in range(120, 180):
            commit(step)
        wait_for("every mod", lambda: log.count() == sum(map(len, expected.values())))
    assert log.values() == expected
    assert {reason for _, _, reason in log.shutdowns} >= {ShutdownReason.PARTITION_END}
    # The first partition was collected: it is finished and no unfinished one waits for it.
    # Its children's rows stay while their own children (the live partitions) name them.
    rows = partition_rows(db)
    assert len(rows) == 5 and sum(r.checkpoint == END for r in rows) == 3


def test_processor_errors_are_retried_with_backoff_and_reported(
    acc: tuple[EmbeddedDatabase, int], caplog: pytest.LogCaptureFixture
) -> None:
    db, created = acc
    log = Log()
    failures = [2]

    class Flaky(Recorder):
        def process_records(self, records: list[DataChangeRecord], cp: Checkpointer) -> None:
            if failures[0]:
                failures[0] -= 1
                raise RuntimeError("sink unavailable")
            super().process_records(records, cp)

    write(db, [[1, 1], [2, 1]])
    write(db, [[1, 2]])
    with (
        caplog.at_level(logging.ERROR, "changestream.client"),
        running(client(db, created, "w1", lambda: Flaky(log, "w1"))),
    ):
        wait_for("the batch to go through", lambda: log.count() == 3)
    assert log.values() == {1: [1, 2], 2: [1]}
    retries = [r for r in caplog.records if "process_records failed" in r.getMessage()]
    assert len(retries) == 2 and "attempt 2" in retries[1].getMessage()
    assert "sink unavailable" in caplog.text


def test_checkpoints_move_forward_within_what_was_delivered(
    acc: tuple[EmbeddedDatabase, int],
) -> None:
    db, created = acc
    outcomes: list[str] = []

    class Probing(RecordProcessor):
        def process_records(self, records: list[DataChangeRecord], cp: Checkpointer) -> None:
            last = Position.of(records[-1])
            for attempt in (
                lambda: cp.checkpoint(Position(last.timestamp + 1, 0)),
                lambda: cp.checkpoint(msgspec.structs.replace(records[0], partition_token="other")),
            ):
                try:
                    attempt()
                except InvalidArgument as exc:
                    outcomes.append(str(exc))
            cp.checkpoint(records[-1])
            try:
                cp.checkpoint(Position(last.timestamp - 1, 0))
            except InvalidArgument as exc:
                outcomes.append(str(exc))
            cp.checkpoint()  # the same position again is fine
            outcomes.append(f"at {cp.last_checkpoint == last == cp.largest_permitted}")

    write(db, [[1, 1]])
    with running(client(db, created, "w1", Probing)):
        wait_for("the probes", lambda: len(outcomes) == 4)
    assert "only records up to" in outcomes[0]
    assert "a record of another partition" in outcomes[1]
    assert "checkpoints only move forward" in outcomes[2]
    assert outcomes[3] == "at True"


class CheckpointWatcher(RecordProcessor):
    """Notes, at the start of each batch, the checkpoint stored in the lease table; never
    checkpoints itself."""

    def __init__(self, db: EmbeddedDatabase, seen: list[str]) -> None:
        self.db = db
        self.seen = seen

    def process_records(self, records: list[DataChangeRecord], checkpointer: Checkpointer) -> None:
        (row,) = partition_rows(self.db)
        self.seen.append(row.checkpoint)


@pytest.mark.parametrize(
    ("options", "changes_at"),
    [
        # After every 4th one-record batch: the 5th and the 9th batch see a new checkpoint.
        ({"checkpoint_every_records": 4}, [4, 8]),
        # Due after each batch: every batch sees the previous one's checkpoint.
        ({"checkpoint_every_seconds": 1e-6}, list(range(1, 10))),
        # An hour is never due here: no automatic checkpoint at all.
        ({"checkpoint_every_seconds": 3600.0}, []),
    ],
    ids=["every-4-records", "every-microsecond", "every-hour"],
)
def test_automatic_checkpoint_cadence(
    acc: tuple[EmbeddedDatabase, int], options: dict[str, Any], changes_at: list[int]
) -> None:
    db, created = acc
    for value in range(10):
        write(db, [[1, value]])
    seen: list[str] = []
    worker = client(
        db, created, "w1", lambda: CheckpointWatcher(db, seen), max_records=1, **options
    )
    with running(worker):
        wait_for("ten one-record batches", lambda: len(seen) == 10)
    # The batches where the stored checkpoint differs from the batch before.
    assert [i for i in range(1, 10) if seen[i] != seen[i - 1]] == changes_at


def test_a_lost_lease_is_never_checkpointed(acc: tuple[EmbeddedDatabase, int]) -> None:
    db, created = acc
    log = Log()
    refused: list[str] = []
    release = threading.Event()

    class Slow(Recorder):
        def process_records(self, records: list[DataChangeRecord], cp: Checkpointer) -> None:
            super().process_records(records, cp)
            release.wait(WAIT_S)

        def shutdown(self, reason: ShutdownReason, cp: Checkpointer) -> None:
            super().shutdown(reason, cp)
            try:
                cp.checkpoint()
            except LeaseLost as exc:
                refused.append(str(exc))

    write(db, [[1, 1]])
    with running(client(db, created, "w1", lambda: Slow(log, "w1", checkpoint=False))):
        wait_for("the batch", lambda: log.count() == 1)
        (row,) = partition_rows(db)
        # Another worker takes the lease over (as if w1 had stopped renewing).
        table = db.leases(STREAM, "default")
        wait_for(
            "the take-over",
            lambda: (
                table.update(dataclasses.replace(table.list_leases()[0], lease_owner="intruder"))
                is not None
            ),
        )
        release.set()
        wait_for("w1 to notice", lambda: bool(log.shutdowns))
    assert log.shutdowns[0][2] is ShutdownReason.LEASE_LOST
    assert refused and "was lost" in refused[0]
    (after,) = partition_rows(db)
    assert after.lease_owner == "intruder" and after.checkpoint == row.checkpoint == ""


def test_a_joining_worker_gets_leases_handed_over_at_their_checkpoint(
    acc: tuple[EmbeddedDatabase, int],
) -> None:
    db, created = acc
    for boundary in (10, 20, 30):
        db.split_at("Acc", (boundary,))
    log = Log()
    # Processors that never checkpoint: only the hand-over's checkpoint prevents duplicates.
    first = client(db, created, "w1", lambda: Recorder(log, "w1", checkpoint=False))
    second = client(db, created, "w2", lambda: Recorder(log, "w2", checkpoint=False))
    with running(first):
        for value in range(20):
            write(db, [[k, value] for k in (5, 15, 25, 35)])
        wait_for("w1 to take all four", lambda: len(first.partitions) == 4)
        wait_for("w1 to process", lambda: log.count() == 80)
        with running(second):
            wait_for("the leases to even out", lambda: len(second.partitions) == 2)
            for value in range(20, 30):
                write(db, [[k, value] for k in (5, 15, 25, 35)])
            wait_for("the new mods", lambda: log.count() == 120)
            handed = [t for w, t, r in log.shutdowns if r is ShutdownReason.REQUESTED]
            assert len(handed) == 2 and set(handed) == set(second.partitions)
            assert len(first.partitions) == 2
    assert log.values() == {k: list(range(30)) for k in (5, 15, 25, 35)}
    # A clean stop released everything with the processed position checkpointed.
    assert all(r.lease_owner is None and r.checkpoint for r in partition_rows(db))


def test_a_restarted_group_resumes_after_its_checkpoints(
    acc: tuple[EmbeddedDatabase, int],
) -> None:
    db, created = acc
    log = Log()
    write(db, [[1, 1], [2, 1]])
    with running(client(db, created, "w1", lambda: Recorder(log, "w1"))):
        wait_for("the first mods", lambda: log.count() == 2)
    write(db, [[1, 2]])
    # A new worker of the same group: start_timestamp only applies to a new group.
    with running(client(db, created, "w2", lambda: Recorder(log, "w2"))):
        wait_for("the new mod", lambda: log.count() == 3)
        # A marker committed last, in the same partition: records come in commit order, so a
        # wrongly repeated delivery of the first mods would have come before it.
        write(db, [[3, 1]])
        wait_for("the marker", lambda: ("w2", 3, 1) in log.mods)
    assert log.mods == [("w1", 1, 1), ("w1", 2, 1), ("w2", 1, 2), ("w2", 3, 1)]


def test_a_backlog_comes_in_full_batches_in_commit_order_then_live_records_follow(
    acc: tuple[EmbeddedDatabase, int],
) -> None:
    db, created = acc
    for value in range(1, 251):
        write(db, [[value % 5, value]])
    batches: list[list[int]] = []

    class Batches(RecordProcessor):
        def process_records(self, records: list[DataChangeRecord], cp: Checkpointer) -> None:
            batches.append([r.mods[0].new_values["V"] for r in records])
            cp.checkpoint()

    def delivered() -> list[int]:
        return [value for batch in batches for value in batch]

    with running(client(db, created, "w1", Batches, max_records=20)):
        wait_for("the backlog", lambda: len(delivered()) == 250)
        write(db, [[1, 251]])
        write(db, [[2, 252]])
        wait_for("the live records", lambda: len(delivered()) == 252)
    assert delivered() == list(range(1, 253))
    assert max(map(len, batches)) == 20
    # The backlog was read in full batches, not record by record as it was found.
    assert [len(batch) for batch in batches[:12]] == [20] * 12


def test_a_backlog_across_splits_and_merges_is_caught_up_in_key_order(
    acc: tuple[EmbeddedDatabase, int],
) -> None:
    db, created = acc
    expected: dict[int, list[int]] = defaultdict(list)

    def commit(value: int) -> None:
        rows = [[value % 30, value], [(value * 7 + 3) % 30, value]]
        rows = list({k: [k, v] for k, v in rows}.values())
        write(db, rows)
        for k, v in rows:
            expected[k].append(v)

    for value in range(80):
        commit(value)
    db.split_at("Acc", (15,))
    for value in range(80, 160):
        commit(value)
    db.merge_at("Acc", (15,))
    for value in range(160, 240):
        commit(value)
    log = Log()
    # Small batches: every partition is caught up in many bounded reads, ending at its end.
    with running(client(db, created, "w1", lambda: Recorder(log, "w1"), max_records=7)):
        wait_for("every mod", lambda: log.count() == sum(map(len, expected.values())))
        commit(240)
        wait_for("the live mod", lambda: log.count() == sum(map(len, expected.values())))
    assert log.values() == expected
    assert [reason for _, _, reason in log.shutdowns].count(ShutdownReason.PARTITION_END) == 3


class ReadingThreads:
    """A database noting the threads that make the bounded reads (a catch-up's) of the read
    function and take their records; everything else goes to ``db`` as it is."""

    def __init__(self, db: EmbeddedDatabase) -> None:
        self._db = db
        self.threads: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def read_change_stream(self, *args: Any) -> Any:
        records = self._db.read_change_stream(*args)
        if args[2] is None:  # a live read (end None) stays on its own thread
            return records
        self.threads.add(threading.current_thread().name)

        def noted() -> Iterator[Any]:
            try:
                for record in records:
                    self.threads.add(threading.current_thread().name)
                    yield record
            finally:
                records.close()

        return noted()


def test_a_workers_partitions_catch_up_on_one_thread(acc: tuple[EmbeddedDatabase, int]) -> None:
    db, created = acc
    for boundary in (10, 20, 30):
        db.split_at("Acc", (boundary,))
    for value in range(200):
        write(db, [[value % 40, value]])
    log = Log()
    reading = ReadingThreads(db)
    worker = StreamClient(
        reading,  # type: ignore[arg-type]
        STREAM,
        "w1",
        lambda: Recorder(log, "w1"),
        lease_timeout=TIMEOUT,
        start_timestamp=created,
        max_records=7,
    )
    with running(worker):
        wait_for("the backlog", lambda: log.count() == 200)
    # The four partitions the rows are in (and their ancestors), each caught up in many
    # bounded reads, all of them on one thread (one SQLite connection), whatever thread
    # processes the partition.
    assert len(partition_rows(db)) >= 4
    assert reading.threads == {"changestream-w1-catch-up_0"}
    assert sorted(v for values in log.values().values() for v in values) == list(range(200))


def test_a_database_clock_behind_this_one_does_not_hold_the_catch_up(tmp_path: Path) -> None:
    # A replay clock far behind the wall clock: a read up to "now" waits for commits, and
    # the partition goes live after the first heartbeat instead of waiting for the clock.
    clock = FixedClock("2024-01-01T00:00:00Z")
    with changestream.open(str(tmp_path / "replay.db"), clock=clock) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl("CREATE TABLE Acc (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)")
        created = db.execute_ddl(f"CREATE CHANGE STREAM {STREAM} FOR Acc")
        clock.set("2024-01-01T00:00:01Z")
        write(db, [[1, 1], [2, 1]])
        log = Log()
        with running(client(db, created, "w1", lambda: Recorder(log, "w1"))):
            wait_for("the backlog", lambda: log.count() == 2, timeout=10)
            clock.set("2024-01-01T00:00:02Z")
            write(db, [[1, 2]])
            wait_for("the live mod", lambda: log.count() == 3, timeout=10)
    assert log.values() == {1: [1, 2], 2: [1]}


@pytest.mark.parametrize("skew_s", [0, 3600, -3600])
def test_each_batch_says_how_far_behind_it_is_by_the_databases_clock(
    tmp_path: Path, open_db: OpenDb, skew_s: int
) -> None:
    """Also for a worker whose machine's clock is an hour off the database's (a client of a
    server on another machine): a batch is behind by the time since its commit, not by that
    plus or minus the hour."""
    db = open_db(str(tmp_path / "skewed.db"), clock=lambda: now_us() + skew_s * 1_000_000)
    db.execute_ddl("CREATE TABLE Acc (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)")
    created = db.execute_ddl(f"CREATE CHANGE STREAM {STREAM} FOR Acc")
    write(db, [[1, 1]])
    committed = time.monotonic()
    time.sleep(1.5)
    lags: list[int] = []

    class Lagging(RecordProcessor):
        def process_records(self, records: RecordBatch, cp: Checkpointer) -> None:
            assert isinstance(records, list)
            lags.append(records.millis_behind_latest)

    with running(client(db, created, "w1", Lagging)):
        wait_for("the old record", lambda: len(lags) == 1)
        handed_over = time.monotonic()
        write(db, [[1, 2]])
        wait_for("the new record", lambda: len(lags) == 2)
    # The old record waited 1.5 s and more before it was handed over; the new one, at the
    # head of the stream, is behind by its commit-to-processor latency only.
    assert 1500 <= lags[0] <= (handed_over - committed) * 1000 + 50
    assert 0 <= lags[1] < 500


def test_children_wait_until_every_parent_is_finished(acc: tuple[EmbeddedDatabase, int]) -> None:
    db, created = acc
    db.split_at("Acc", (20,))
    left, right = db.partitions(STREAM)
    log = Log()
    hold_left = threading.Event()

    def child_waits_for_left() -> bool:
        """The right parent finished, and the merge child's lease waits (the left is held)."""
        states = describe_leases(db.leases(STREAM, "default").list_leases(), store_of(db).now())
        by_token = {s.lease.status_value: s.state for s in states}
        children = [s for s in states if left.token in s.lease.parent_shard_ids]
        return by_token.get(right.token) == "finished" and [c.state for c in children] == [
            "waiting"
        ]

    class HoldsLeft(Recorder):
        def process_records(self, records: list[DataChangeRecord], cp: Checkpointer) -> None:
            if self.token == left.token:
                hold_left.wait(WAIT_S)
            super().process_records(records, cp)

    workers = [client(db, created, f"w{i}", lambda i=i: HoldsLeft(log, f"w{i}")) for i in (1, 2)]
    with running(*workers):
        write(db, [[5, 1], [25, 1]])
        db.merge_at("Acc", (20,))
        write(db, [[5, 2], [25, 2]])
        wait_for("the right parent", lambda: log.values().get(25) == [1])
        # The child's lease is there and waits: it cannot be taken while its left parent is held.
        wait_for("the merge child waiting for its held parent", child_waits_for_left)
        assert 5 not in log.values() and log.values()[25] == [1]
        hold_left.set()
        wait_for("everything", lambda: log.count() == 4)
    assert log.values() == {5: [1, 2], 25: [1, 2]}


def test_two_consumer_groups_each_get_every_record(acc: tuple[EmbeddedDatabase, int]) -> None:
    db, created = acc
    logs = {"audit": Log(), "search": Log()}
    write(db, [[1, 1], [2, 1]])
    workers = [
        client(db, created, "w", lambda g=group: Recorder(logs[g], "w"), consumer=group)
        for group in logs
    ]
    with running(*workers):
        wait_for("both groups", lambda: all(log.count() == 2 for log in logs.values()))
    assert db.lease_consumers(STREAM) == ["audit", "search"]


def test_a_dropped_stream_stops_the_worker_with_its_error(
    acc: tuple[EmbeddedDatabase, int],
) -> None:
    db, created = acc
    log = Log()
    worker = client(db, created, "w1", lambda: Recorder(log, "w1"))
    thread, errors = run_in_thread(worker)
    wait_for("the lease", lambda: bool(worker.partitions))
    db.execute_ddl(f"DROP CHANGE STREAM {STREAM}")
    thread.join(WAIT_S)
    assert not thread.is_alive()
    # "was dropped" from a running read, "does not exist" from a read starting after it.
    assert len(errors) == 1 and isinstance(errors[0], NotFound) and worker.error is errors[0]
    assert "was dropped" in str(errors[0]) or "does not exist" in str(errors[0])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"worker_id": ""}, "worker_id must be 1 to 128 printable characters"),
        ({"lease_timeout": 0}, "lease_timeout must be a positive number, got 0"),
        ({"max_records": 1.5}, "max_records must be a positive integer, got 1.5"),
        ({"checkpoint_every_seconds": -1}, "positive number or None, got -1"),
        ({"max_steals_per_round": -1}, "max_steals_per_round must be an integer >= 0"),
        ({"processor_factory": 3}, "processor_factory must be a callable"),
        ({"consumer": "a\nb"}, "consumer must be 1 to 128 printable characters"),
        ({"start_timestamp": "yesterday"}, "start_timestamp must be an RFC 3339 timestamp"),
    ],
)
def test_stream_client_arguments_are_checked(
    acc: tuple[EmbeddedDatabase, int], options: dict[str, Any], message: str
) -> None:
    db, _ = acc
    arguments: dict[str, Any] = {"worker_id": "w", "processor_factory": lambda: None}
    arguments.update(options)
    with pytest.raises(InvalidArgument, match=message):
        StreamClient(db, STREAM, **arguments)


def test_unknown_stream_and_second_start(acc: tuple[EmbeddedDatabase, int]) -> None:
    db, created = acc
    with pytest.raises(NotFound, match="change stream 'Nope' does not exist"):
        StreamClient(db, "Nope", "w", lambda: Recorder(Log(), "w"))
    worker = client(db, created, "w", lambda: Recorder(Log(), "w"))
    with running(worker), pytest.raises(changestream.FailedPrecondition, match="already started"):
        worker.start()


def test_leases_command_prints_the_table_once(
    acc: tuple[EmbeddedDatabase, int], tmp_path: Path
) -> None:
    db, created = acc
    db.split_at("Acc", (20,))
    log = Log()
    write(db, [[1, 1]])
    with running(client(db, created, "w1", lambda: Recorder(log, "w1"))):
        wait_for("the mod", lambda: log.count() == 1)
        # The processor checkpoints after it logs the mod.
        leases = db.leases(STREAM, "default")
        wait_for(
            "its checkpoint", lambda: any(r.checkpoint.endswith(":0") for r in leases.list_leases())
        )
        result = CliRunner().invoke(
            main, ["leases", str(tmp_path / "acc.db"), STREAM, "--once"], env={"COLUMNS": "250"}
        )
    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert header.split() == [
        "consumer",
        "partition",
        "parents",
        "owner",
        "stealer",
        "checkpoint",
        "lag",
        "state",
    ]
    # The partition the group started in (finished at the split) and its two children.
    assert [r.split()[-1] for r in rows] == ["finished", "owned", "owned"]
    assert all(r.split()[0] == "default" and " w1 " in r for r in rows[1:])
    assert any("Z#0" in r for r in rows)  # the checkpoint after the one record
    missing = CliRunner().invoke(main, ["leases", str(tmp_path / "acc.db"), "Nope", "--once"])
    assert missing.exit_code == 2 and "change stream 'Nope' does not exist" in missing.output


def test_a_processor_can_stop_its_own_worker(acc: tuple[EmbeddedDatabase, int]) -> None:
    db, created = acc
    log = Log()
    workers: list[StreamClient] = []

    class Stopper(Recorder):
        def process_records(self, records: list[DataChangeRecord], cp: Checkpointer) -> None:
            super().process_records(records, cp)
            assert workers[0].stop() is False  # requested, not waited for from inside

    workers.append(client(db, created, "w1", lambda: Stopper(log, "w1")))
    write(db, [[1, 1]])
    thread = threading.Thread(target=workers[0].run)
    thread.start()
    thread.join(WAIT_S)
    assert not thread.is_alive() and log.count() == 1
    assert [reason for _, _, reason in log.shutdowns] == [ShutdownReason.REQUESTED]
    (row,) = partition_rows(db)
    assert row.lease_owner is None and row.checkpoint not in ("", END)


def test_a_group_without_a_start_starts_at_the_databases_clock(
    tmp_path: Path, open_db: OpenDb
) -> None:
    """A worker whose clock is an hour ahead of the database's (a client of a server on
    another machine): the group starts where the database's clock is, so the change
    committed right after is delivered (it started an hour later, past that change)."""
    skew_us = -3_600_000_000  # the database is an hour behind this machine
    db = open_db(str(tmp_path / "skewed.db"), clock=lambda: now_us() + skew_us)
    db.execute_ddl("CREATE TABLE Acc (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)")
    db.execute_ddl(f"CREATE CHANGE STREAM {STREAM} FOR Acc")
    log = Log()
    client = StreamClient(
        db, STREAM, "w1", lambda: Recorder(log, "w1"), lease_timeout=TIMEOUT, consumer="g"
    )
    client.start()
    try:
        table = db.leases(STREAM, "g")
        wait_for("the group's start", lambda: table.get("Stream", "start") is not None)
        start = table.get("Stream", "start")
        assert start is not None and abs(start.start_timestamp - (now_us() + skew_us)) < 60e6
        with db.transaction() as tx:
            tx.insert("Acc", ["K", "V"], [[1, 10]])
        wait_for("the change after the start", lambda: log.values() == {1: [10]})
    finally:
        client.stop(10)


def test_a_database_closed_under_a_worker_stops_it_with_one_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Closing the database while a worker of several partitions runs ends its run() with
    DatabaseClosed, said once, not once a partition with a traceback each."""
    db = changestream.open(str(tmp_path / "closed.db"))
    db.set_split_policy(enabled=False)
    db.execute_ddl("CREATE TABLE Acc (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)")
    for boundary in (100, 200, 300):
        db.split_at("Acc", (boundary,))
    created = db.execute_ddl(f"CREATE CHANGE STREAM {STREAM} FOR Acc")
    for t in range(20):
        write(db, [[k + t, t] for k in (0, 100, 200, 300)])
    log = Log()
    worker = client(db, created, "w1", lambda: Recorder(log, "w1"))
    with caplog.at_level(logging.WARNING, "changestream.client"):
        thread, errors = run_in_thread(worker)
        try:
            wait_for("every change processed", lambda: log.count() == 80)
        finally:
            db.close()
        thread.join(WAIT_S)
    assert not thread.is_alive()
    assert [type(e) for e in errors] == [changestream.DatabaseClosed]
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert said == ["worker w1 stops: database " + repr(str(tmp_path / "closed.db")) + " is closed"]
