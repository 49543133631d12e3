"""Crash safety and concurrency of the embedded database, with real files, threads and processes.

Child processes run short scripts with ``sys.executable -c``; they talk to the test through
lines on stdout. Nothing here asserts on timings: waits are bounded only so a broken engine
fails the test instead of hanging it.
"""

from __future__ import annotations

import itertools
import json
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream import DataChangeRecord, HeartbeatRecord
from changestream.clock import parse_ts
from changestream.embedded.database import store_of
from tests.conftest import in_threads

pytestmark = pytest.mark.timeout(120)

ITEMS = "CREATE TABLE Items (Id INT64 NOT NULL, Tag STRING(MAX), Pad STRING(MAX)) PRIMARY KEY (Id)"
AUDIT = "CREATE TABLE Audit (Txn INT64 NOT NULL, RowCount INT64) PRIMARY KEY (Txn)"
STREAM = "ItemsStream"
LINE_WAIT_S = 60.0


# --- helpers -------------------------------------------------------------------------------


def make_db(path: Path, durability: str = "normal") -> tuple[changestream.EmbeddedDatabase, int]:
    """A database with Items and Audit, and one change stream over both; returns its creation."""
    db = changestream.open(str(path), durability=durability)
    db.execute_ddl([ITEMS, AUDIT])
    created = db.execute_ddl(f"CREATE CHANGE STREAM {STREAM} FOR Items, Audit")
    return db, created


def only_token(db: changestream.EmbeddedDatabase) -> str:
    partitions = db.partitions(STREAM)
    assert len(partitions) == 1, "these tests expect the stream to have a single partition"
    return partitions[0].token


def read_log(db: changestream.EmbeddedDatabase, start: int) -> list[DataChangeRecord]:
    """Every data record of the single partition from ``start`` to the last commit."""
    end = store_of(db).last_commit_ts()
    records = list(db.read_change_stream(STREAM, start, end, only_token(db), 1000))
    data = [r for r in records if isinstance(r, DataChangeRecord)]
    assert all(isinstance(r, DataChangeRecord | HeartbeatRecord) for r in records)
    return data


def to_us(moment: Any) -> int:
    return parse_ts(moment, "commit_timestamp")


def transactions_of(records: list[DataChangeRecord]) -> dict[str, list[DataChangeRecord]]:
    """Records grouped by server_transaction_id, checking each transaction is complete."""
    groups: dict[str, list[DataChangeRecord]] = defaultdict(list)
    for record in records:
        groups[record.server_transaction_id].append(record)
    for txn_id, group in groups.items():
        expected = {r.number_of_records_in_transaction for r in group}
        assert expected == {len(group)}, f"transaction {txn_id} is incomplete: {group}"
        assert len({r.commit_timestamp for r in group}) == 1
        assert len({r.transaction_tag for r in group}) == 1
        assert [r.record_sequence for r in group] == [f"{n:08d}" for n in range(len(group))]
        assert [r.is_last_record_in_transaction_in_partition for r in group] == [
            i == len(group) - 1 for i in range(len(group))
        ]
    return groups


def assert_log_order(records: list[DataChangeRecord]) -> None:
    """Commit timestamps never go back in log order, and each belongs to one transaction."""
    stamps = [r.commit_timestamp for r in records]
    assert stamps == sorted(stamps)
    owner: dict[int, str] = {}
    for record in records:
        assert owner.setdefault(record.commit_timestamp, record.server_transaction_id) == (
            record.server_transaction_id
        ), "two transactions share a commit timestamp"


class Child:
    """A Python child process running ``script``; its stdout lines arrive on a queue."""

    def __init__(self, script: str, *args: object, stdin: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *map(str, args)],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def next_line(self) -> str:
        try:
            line = self.lines.get(timeout=LINE_WAIT_S)
        except queue.Empty:
            self.kill()
            pytest.fail(f"child printed nothing for {LINE_WAIT_S} s")
        if line is None:
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            pytest.fail(f"child exited early ({self.proc.wait()}): {stderr}")
        return line

    def remaining_lines(self) -> list[str]:
        """After the process ended: every line not yet taken."""
        self._pump.join(timeout=LINE_WAIT_S)
        found: list[str] = []
        while True:
            line = self.lines.get(timeout=LINE_WAIT_S)
            if line is None:
                return found
            found.append(line)

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=LINE_WAIT_S)

    def finish(self) -> int:
        code = self.proc.wait(timeout=LINE_WAIT_S)
        if code != 0:
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            pytest.fail(f"child failed with {code}: {stderr}")
        return code

    def close(self) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.close()


# --- SIGKILL in the middle of a transaction ---------------------------------------------------

DOOMED_CHILD = r"""
import sys, time
import changestream

path, durability, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = changestream.open(path, durability=durability)
pad = "x" * 1000
with db.transaction(tag="doomed") as tx:
    for start in range(1000, 1000 + rows, 200):
        values = ", ".join(f"({i}, 'doomed', '{pad}')" for i in range(start, start + 200))
        tx.execute_update(f"INSERT INTO Items (Id, Tag, Pad) VALUES {values}")
    tx.execute_update("UPDATE Items SET Tag = 'doomed' WHERE Id = 1")
    tx.execute_update("DELETE FROM Items WHERE Id = 2")
    tx.execute_update("INSERT INTO Audit (Txn, RowCount) VALUES (666, 666)")
    tx.insert("Items", ["Id", "Tag"], [[900, "doomed-buffered"]])
    print("READY", flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("durability", ["normal", "full"])
def test_sigkill_mid_transaction_leaves_no_trace(
    tmp_path: Path, durability: str, children: list[Child]
) -> None:
    path = tmp_path / "crash.db"
    db, created = make_db(path, durability)
    with db.transaction(tag="kept") as tx:
        tx.insert("Items", ["Id", "Tag"], [[1, "kept"], [2, "kept"]])
    kept_ts = to_us(tx.commit_timestamp)
    wal = Path(str(path) + "-wal")
    wal_before = wal.stat().st_size

    child = Child(DOOMED_CHILD, path, durability, 3000)
    children.append(child)
    assert child.next_line() == "READY"
    # The uncommitted rows did not fit SQLite's page cache: they are frames in the WAL now.
    assert wal.stat().st_size > wal_before + 1_000_000
    # Readers are not blocked by the writer, and see none of its work.
    assert db.read("Items", columns=["Id", "Tag"]) == [(1, "kept"), (2, "kept")]
    assert child.kill() == -signal.SIGKILL

    fresh = changestream.open(str(path), durability=durability, busy_timeout=5.0)
    for handle in (db, fresh):
        assert handle.read("Items", columns=["Id", "Tag"]) == [(1, "kept"), (2, "kept")]
        assert handle.read("Audit") == []
        records = read_log(handle, created)
        assert [(r.transaction_tag, r.commit_timestamp) for r in records] == [("kept", kept_ts)]
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert raw.execute("SELECT count(*) FROM _cs_log").fetchone() == (1,)
    finally:
        raw.close()

    # Writable again, including the keys the dead transaction had taken.
    with fresh.transaction(tag="after") as tx:
        tx.execute_update("INSERT INTO Items (Id, Tag) VALUES (1000, 'after')")
        tx.insert("Items", ["Id", "Tag"], [[900, "after"]])
        tx.update("Items", ["Id", "Tag"], [[1, "after"]])
    after_ts = to_us(tx.commit_timestamp)
    assert after_ts > kept_ts
    records = read_log(db, created)
    assert [r.transaction_tag for r in records] == ["kept", "after", "after"]
    assert {r.commit_timestamp for r in records[1:]} == {after_ts}
    assert sorted(k for r in records[1:] for m in r.mods for k in m.keys.values()) == [1, 900, 1000]
    assert db.read("Items", columns=["Id", "Tag"]) == [
        (1, "after"),
        (2, "kept"),
        (900, "after"),
        (1000, "after"),
    ]
    fresh.close()
    db.close()


# --- SIGKILL while committing in a loop ---------------------------------------------------------

LOOP_CHILD = r"""
import sys
import changestream

path, durability = sys.argv[1], sys.argv[2]
db = changestream.open(path, durability=durability)
i = 0
while True:
    k = 1 + i % 5
    with db.transaction(tag=f"txn={i}") as tx:
        if i % 2:
            tx.execute_update(
                "INSERT INTO Audit (Txn, RowCount) VALUES (@t, @k)", {"t": i, "k": k}
            )
        else:
            tx.insert("Audit", ["Txn", "RowCount"], [[i, k]])
        rows = [[i * 10 + j, f"t{i}", "p" * 200] for j in range(k)]
        tx.insert("Items", ["Id", "Tag", "Pad"], rows)
        if i:
            tx.update("Items", ["Id", "Tag"], [[(i - 1) * 10, f"updated-by-{i}"]])
    print(i, flush=True)
    i += 1
"""


@pytest.mark.parametrize("durability", ["normal", "full"])
def test_sigkill_while_committing_keeps_whole_transactions(
    tmp_path: Path, durability: str, children: list[Child]
) -> None:
    path = tmp_path / "loop.db"
    db, created = make_db(path, durability)
    child = Child(LOOP_CHILD, path, durability)
    children.append(child)
    for _ in range(40):
        child.next_line()
    time.sleep(random.uniform(0.0, 0.05))
    assert child.kill() == -signal.SIGKILL
    confirmed = [int(line) for line in child.remaining_lines() if line.strip().isdigit()]
    # Every commit the child saw return survives its death (both modes survive a process crash).
    acknowledged = (confirmed[-1] + 1) if confirmed else 40

    records = read_log(db, created)
    assert_log_order(records)
    groups = transactions_of(records)
    index_of = {}
    for txn_id, group in groups.items():
        tag = group[0].transaction_tag
        assert tag.startswith("txn=")
        index_of[txn_id] = int(tag.removeprefix("txn="))
    committed = sorted(index_of.values())
    n = len(committed)
    assert committed == list(range(n)), "committed transactions must form a prefix"
    assert acknowledged <= n <= acknowledged + 1

    # Per transaction: exactly the records and mods it made.
    for txn_id, group in groups.items():
        i, k = index_of[txn_id], 1 + index_of[txn_id] % 5
        by_kind = {(r.table_name, r.mod_type): r for r in group}
        assert len(by_kind) == len(group) == (3 if i else 2)
        items = by_kind[("Items", "INSERT")]
        assert sorted(m.keys["Id"] for m in items.mods) == [i * 10 + j for j in range(k)]
        assert all(m.new_values["Tag"] == f"t{i}" for m in items.mods)
        audit = by_kind[("Audit", "INSERT")]
        assert [(m.keys, m.new_values) for m in audit.mods] == [({"Txn": i}, {"RowCount": k})]
        if i:
            (update,) = by_kind[("Items", "UPDATE")].mods
            assert update.keys == {"Id": (i - 1) * 10}
            assert update.new_values == {"Tag": f"updated-by-{i}"}
            assert update.old_values == {"Tag": f"t{i - 1}"}

    # Rows against mods, exactly.
    rows = db.read("Items", columns=["Id", "Tag"])
    insert_mods = [m for r in records if r.mod_type == "INSERT" for m in r.mods]
    item_keys = [m.keys["Id"] for m, r in _with_record(records, "Items", "INSERT")]
    assert len(item_keys) == len(set(item_keys)) == len(rows)
    assert sorted(item_keys) == [row[0] for row in rows]
    for key, tag in rows:
        i = key // 10
        expected = f"updated-by-{i + 1}" if key % 10 == 0 and i + 1 < n else f"t{i}"
        assert tag == expected
    audit_rows = db.read("Audit")
    assert audit_rows == [(i, 1 + i % 5) for i in range(n)]
    assert len(insert_mods) == len(rows) + len(audit_rows)
    assert sum(len(r.mods) for r in records if r.mod_type == "UPDATE") == n - 1

    # And the file takes new writes.
    with db.transaction(tag="after") as tx:
        tx.insert("Audit", ["Txn", "RowCount"], [[-1, 0]])
    assert read_log(db, created)[-1].transaction_tag == "after"
    db.close()


def _with_record(
    records: list[DataChangeRecord], table: str, mod_type: str
) -> Iterator[tuple[Any, DataChangeRecord]]:
    for record in records:
        if record.table_name == table and record.mod_type == mod_type:
            for mod in record.mods:
                yield mod, record


# --- threads sharing one Database ---------------------------------------------------------------


def test_threads_sharing_one_database(tmp_path: Path) -> None:
    db, created = make_db(tmp_path / "threads.db")
    threads_n, per_thread, rows_per_txn = 4, 40, 3
    barrier = threading.Barrier(threads_n)
    stamps: dict[str, int] = {}

    def writer(w: int) -> None:
        barrier.wait()
        for n in range(per_thread):
            tag = f"w{w}-{n}"
            base = (w * per_thread + n) * rows_per_txn
            with db.transaction(tag=tag) as tx:
                if n % 3 == 0:
                    values = ", ".join(f"({base + j}, '{tag}')" for j in range(rows_per_txn))
                    tx.execute_update(f"INSERT INTO Items (Id, Tag) VALUES {values}")
                else:
                    tx.insert(
                        "Items", ["Id", "Tag"], [[base + j, tag] for j in range(rows_per_txn)]
                    )
            stamps[tag] = to_us(tx.commit_timestamp)

    assert in_threads(writer, [(w,) for w in range(threads_n)], LINE_WAIT_S) == []

    total = threads_n * per_thread
    rows = db.read("Items", columns=["Id", "Tag"])
    assert [r[0] for r in rows] == list(range(total * rows_per_txn))
    records = read_log(db, created)
    assert len(records) == total, "one record per transaction (one table, one mod type)"
    commit_order = [r.commit_timestamp for r in records]
    assert all(a < b for a, b in itertools.pairwise(commit_order))
    assert {r.transaction_tag: r.commit_timestamp for r in records} == stamps
    assert len(set(stamps.values())) == total
    for record in records:
        assert record.number_of_records_in_transaction == 1
        keys = sorted(m.keys["Id"] for m in record.mods)
        assert {m.new_values["Tag"] for m in record.mods} == {record.transaction_tag}
        assert [rows[k][1] for k in keys] == [record.transaction_tag] * rows_per_txn
    db.close()


# --- several writer processes and a tailing reader ------------------------------------------

WRITER_CHILD = r"""
import json, sys
import changestream

path, durability, writer, count, rows = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
db = changestream.open(path, durability=durability, busy_timeout=30.0)
print("READY", flush=True)
assert sys.stdin.readline().strip() == "GO"
stamps = {}
for n in range(count):
    base = (writer * count + n) * rows
    tag = f"p{writer}-{n}"
    with db.transaction(tag=tag) as tx:
        tx.insert("Items", ["Id", "Tag"], [[base + j, tag] for j in range(rows)])
    stamps[tag] = tx.commit_timestamp.isoformat()
print(json.dumps(stamps), flush=True)
db.close()
"""


class Tail:
    """Tails the single partition from ``start`` with end_timestamp=None in a thread until
    ``stop_when()`` (by default: ``want`` data records arrived), or ``deadline_s`` passed."""

    def __init__(self, db: changestream.EmbeddedDatabase, start: int, want: int, deadline_s: float):
        self.db = db
        self.start = start
        self.want = want
        self.deadline = time.monotonic() + deadline_s
        self.records: list[DataChangeRecord | HeartbeatRecord] = []
        self.errors: list[BaseException] = []
        self.timed_out = False
        self.stop_when: Callable[[], bool] = lambda: len(self.data) >= self.want
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def data(self) -> list[DataChangeRecord]:
        return [r for r in self.records if isinstance(r, DataChangeRecord)]

    def _run(self) -> None:
        try:
            token = only_token(self.db)
            for record in self.db.read_change_stream(STREAM, self.start, None, token, 1000):
                assert isinstance(record, DataChangeRecord | HeartbeatRecord), record
                self.records.append(record)
                if self.stop_when():
                    return
                if time.monotonic() > self.deadline:
                    self.timed_out = True
                    return
        except BaseException as exc:
            self.errors.append(exc)

    def join(self) -> None:
        self.thread.join(timeout=max(self.deadline - time.monotonic(), 0) + 15)
        assert not self.thread.is_alive(), "the tailing reader did not stop"
        assert self.errors == []
        assert not self.timed_out, f"reader saw {len(self.data)} of {self.want} records"


def test_writer_processes_and_a_tailing_reader(tmp_path: Path, children: list[Child]) -> None:
    path = tmp_path / "procs.db"
    db, created = make_db(path)
    writers, count, rows = 3, 30, 4
    procs = [
        Child(WRITER_CHILD, path, "full" if w % 2 else "normal", w, count, rows, stdin=True)
        for w in range(writers)
    ]
    children.extend(procs)
    for child in procs:
        assert child.next_line() == "READY"

    reader_db = changestream.open(str(path))
    tail = Tail(reader_db, created, writers * count, deadline_s=60)
    tail.thread.start()
    for child in procs:
        child.send("GO")
    stamps: dict[str, int] = {}
    for child in procs:
        stamps.update({tag: to_us(ts) for tag, ts in json.loads(child.next_line()).items()})
        child.finish()
    tail.join()

    total = writers * count
    assert len(stamps) == total
    assert len(set(stamps.values())) == total, "commit timestamps must be unique"
    seen = tail.data
    assert len(seen) == total
    assert {r.transaction_tag: r.commit_timestamp for r in seen} == stamps
    assert_log_order(seen)
    stamps_in_order = [r.commit_timestamp for r in seen]
    assert stamps_in_order == sorted(set(stamps_in_order))
    # Every row has its mod in exactly one record.
    mods = Counter(m.keys["Id"] for r in seen for m in r.mods)
    table = db.read("Items", columns=["Id", "Tag"])
    assert len(table) == total * rows
    assert mods == Counter(row[0] for row in table)
    tag_of = {m.keys["Id"]: r.transaction_tag for r in seen for m in r.mods}
    assert all(tag_of[key] == tag for key, tag in table)
    # The tail saw exactly what a bounded read of the whole log returns.
    assert [r.to_json() for r in read_log(db, created)] == [r.to_json() for r in seen]
    reader_db.close()
    db.close()


# --- busy timeout -------------------------------------------------------------------------------


def test_busy_timeout_raises_database_busy_then_retry_succeeds(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    setup, created = make_db(path)
    setup.close()
    db = changestream.open(str(path), busy_timeout=0.3)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with (
            pytest.raises(changestream.DatabaseBusy) as buffered,
            db.transaction(tag="first-try") as tx,
        ):
            tx.insert("Items", ["Id", "Tag"], [[1, "x"]])
        message = str(buffered.value)
        assert "0.3 s" in message and "busy_timeout" in message
        with (
            pytest.raises(changestream.DatabaseBusy, match=r"0\.3 s"),
            db.transaction(tag="dml-try") as tx,
        ):
            tx.execute_update("INSERT INTO Items (Id, Tag) VALUES (2, 'y')")
        with pytest.raises(changestream.DatabaseBusy, match=r"0\.3 s"):
            db.execute_ddl("CREATE TABLE Other (K INT64 NOT NULL) PRIMARY KEY (K)")
        # Reads go on while another connection holds the write lock.
        assert db.read("Items") == []
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    with db.transaction(tag="retry") as tx:
        tx.insert("Items", ["Id", "Tag"], [[1, "x"]])
    with db.transaction(tag="retry-dml") as tx:
        tx.execute_update("INSERT INTO Items (Id, Tag) VALUES (2, 'y')")
    assert db.read("Items", columns=["Id", "Tag"]) == [(1, "x"), (2, "y")]
    records = read_log(db, created)
    assert [r.transaction_tag for r in records] == ["retry", "retry-dml"]
    assert records[0].commit_timestamp < records[1].commit_timestamp
    db.close()


HOLDER_CHILD = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("LOCKED", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
print("RELEASED", flush=True)
"""


def test_busy_timeout_against_a_writer_in_another_process(
    tmp_path: Path, children: list[Child]
) -> None:
    path = tmp_path / "busy-proc.db"
    db, created = make_db(path)
    busy = changestream.open(str(path), busy_timeout=0.3)
    holder = Child(HOLDER_CHILD, path, stdin=True)
    children.append(holder)
    assert holder.next_line() == "LOCKED"
    with (
        pytest.raises(changestream.DatabaseBusy, match=r"more than 0\.3 s"),
        busy.transaction() as tx,
    ):
        tx.insert("Items", ["Id"], [[7]])
    with pytest.raises(changestream.DatabaseBusy, match=r"more than 0\.3 s"):
        busy.split_at("Items", [100])
    holder.send("go")
    assert holder.next_line() == "RELEASED"
    holder.finish()
    with busy.transaction(tag="retried") as tx:
        tx.insert("Items", ["Id"], [[7]])
    assert [(r.transaction_tag, r.mods[0].keys) for r in read_log(db, created)] == [
        ("retried", {"Id": 7})
    ]
    busy.close()
    db.close()


def test_open_and_read_while_another_process_holds_the_write_lock(
    tmp_path: Path, children: list[Child]
) -> None:
    path = tmp_path / "open-busy.db"
    db, created = make_db(path)
    with db.transaction(tag="before") as tx:
        tx.insert("Items", ["Id"], [[1]])
    holder = Child(HOLDER_CHILD, path, stdin=True)
    children.append(holder)
    assert holder.next_line() == "LOCKED"
    reader = changestream.open(str(path), busy_timeout=0.3)
    assert reader.read("Items", columns=["Id"]) == [(1,)]
    assert [r.transaction_tag for r in read_log(reader, created)] == ["before"]
    reader.close()
    db.close()


# --- the heartbeat promise under concurrent writers ----------------------------------------------

BURST_CHILD = r"""
import random, sys, time
import changestream

path, count = sys.argv[1], int(sys.argv[2])
db = changestream.open(path, busy_timeout=30.0)
rng = random.Random(7)
for n in range(count):
    with db.transaction(tag=f"proc-{n}") as tx:
        tx.insert("Items", ["Id", "Tag"], [[10_000 + n, "proc"]])
    print(tx.commit_timestamp.isoformat(), flush=True)
    time.sleep(rng.choice([0.01, 0.2, 0.95, 1.05]))
print("DONE", flush=True)
"""


def test_heartbeats_keep_their_promise_with_concurrent_writers(
    tmp_path: Path, children: list[Child]
) -> None:
    path = tmp_path / "heartbeat.db"
    db, created = make_db(path)
    reader_db = changestream.open(str(path))
    stamps: dict[str, int] = {}
    stamps_lock = threading.Lock()
    errors: list[BaseException] = []
    finished = threading.Event()
    heartbeat_after_phase_one = threading.Event()
    phase_one_last = [0]

    def stop_when() -> bool:
        last = tail.records[-1]
        if isinstance(last, HeartbeatRecord) and last.timestamp >= phase_one_last[0] > 0:
            heartbeat_after_phase_one.set()
        with stamps_lock:
            top = max(stamps.values(), default=0)
        return (
            finished.is_set()
            and isinstance(last, HeartbeatRecord)
            and last.timestamp >= top
            and len(tail.data) >= len(stamps)
        )

    tail = Tail(reader_db, created, want=0, deadline_s=60)
    tail.stop_when = stop_when
    tail.thread.start()

    def commit(tag: str, key: int) -> None:
        with db.transaction(tag=tag) as tx:
            tx.insert("Items", ["Id", "Tag"], [[key, tag]])
        with stamps_lock:
            stamps[tag] = to_us(tx.commit_timestamp)

    def burst(w: int, count: int, phase: int) -> None:
        rng = random.Random(w * 100 + phase)
        try:
            for n in range(count):
                commit(f"t{w}-{phase}-{n}", phase * 1000 + w * 100 + n)
                time.sleep(rng.choice([0.0, 0.05, 0.3, 0.98, 1.02]))
        except BaseException as exc:
            errors.append(exc)

    def long_dml() -> None:
        # Holds the write lock across at least one heartbeat interval before committing.
        try:
            with db.transaction(tag="long-dml") as tx:
                tx.execute_update("INSERT INTO Items (Id, Tag) VALUES (5000, 'long-dml')")
                time.sleep(1.3)
            with stamps_lock:
                stamps["long-dml"] = to_us(tx.commit_timestamp)
        except BaseException as exc:
            errors.append(exc)

    def run(threads: list[threading.Thread]) -> None:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=LINE_WAIT_S)
        assert not any(t.is_alive() for t in threads)

    # Phase 1: two writer threads. Then quiet until the reader heartbeats past them.
    run([threading.Thread(target=burst, args=(w, 4, 1)) for w in range(2)])
    with stamps_lock:
        phase_one_last[0] = max(stamps.values())
    assert heartbeat_after_phase_one.wait(timeout=LINE_WAIT_S)
    # Phase 2: threads, a long DML transaction and a writer process, all at once.
    proc = Child(BURST_CHILD, path, 4)
    children.append(proc)
    run(
        [threading.Thread(target=burst, args=(w, 4, 2)) for w in range(2)]
        + [threading.Thread(target=long_dml)]
    )
    while (line := proc.next_line()) != "DONE":
        with stamps_lock:
            stamps[f"proc-{len([t for t in stamps if t.startswith('proc-')])}"] = to_us(line)
    proc.finish()
    finished.set()
    tail.join()
    assert errors == []

    # The promise: after a heartbeat at T, no data record at or below T; data never goes back.
    highest_heartbeat = 0
    last_data = 0
    heartbeats = 0
    heartbeats_between_data = 0
    for record in tail.records:
        if isinstance(record, HeartbeatRecord):
            assert record.timestamp >= highest_heartbeat, "heartbeats went backwards"
            highest_heartbeat = record.timestamp
            heartbeats += 1
            heartbeats_between_data += last_data > 0
        else:
            assert record.commit_timestamp > highest_heartbeat, (
                f"data record at {record.commit_timestamp} after heartbeat {highest_heartbeat}"
            )
            assert record.commit_timestamp >= last_data
            last_data = record.commit_timestamp
    assert heartbeats >= 2 and heartbeats_between_data >= 2
    # And nothing was lost: every commit arrived once.
    assert {r.transaction_tag: r.commit_timestamp for r in tail.data} == stamps
    assert len(tail.data) == len(stamps) == 2 * 4 * 2 + 1 + 4
    reader_db.close()
    db.close()


# --- reads on a thread whose connection holds an open write transaction ----------------------


@pytest.mark.parametrize("read", ["keys", "change_stream"])
def test_reads_inside_an_open_transaction_on_the_same_thread(tmp_path: Path, read: str) -> None:
    """Reads share the thread's connection with its open write transaction; they must neither
    fail (they used to raise sqlite3's "cannot start a transaction within a transaction") nor
    end the transaction."""
    db, created = make_db(tmp_path / "same-thread.db")
    with db.transaction(tag="first") as tx:
        tx.insert("Items", ["Id", "Tag"], [[1, "a"]])
    end = store_of(db).last_commit_ts()
    token = only_token(db)
    with db.transaction(tag="second") as tx:
        tx.execute_update("INSERT INTO Items (Id, Tag) VALUES (2, 'b')")
        if read == "keys":
            assert db.read("Items", keys=[[1]], columns=["Id", "Tag"]) == [(1, "a")]
        else:
            records = list(db.read_change_stream(STREAM, created, end, token, 1000))
            assert [r.transaction_tag for r in records if isinstance(r, DataChangeRecord)] == [
                "first"
            ]
    assert [r.transaction_tag for r in read_log(db, created)] == ["first", "second"]
    db.close()
