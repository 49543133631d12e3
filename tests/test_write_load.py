"""Write load is kept out of each commit's transaction (``LoadBuffer``) without the split
policy or the write rates losing sight of it: the writing process sees its own load at once,
another process about a second later or when the writer closes, and a process killed with
SIGKILL loses at most that load, never a row or a change record."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import changestream
from changestream.embedded.database import store_of
from changestream.store.load import FLUSH_AFTER_S, write_rates

TABLE = "CREATE TABLE T (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)"
STREAM = "CREATE CHANGE STREAM S FOR T"


def _database(path: Path) -> changestream.EmbeddedDatabase:
    db = changestream.open(str(path))
    db.execute_ddl([TABLE, STREAM])
    db.set_split_policy(enabled=False)  # no background pass flushing on its own
    return db


def _write(db: changestream.EmbeddedDatabase, keys: range) -> None:
    with db.transaction() as txn:
        txn.insert_or_update("T", ["K", "V"], [[k, "v"] for k in keys])


def _table_rate(path: Path) -> float:
    """The write rate every process sees: the load tables only."""
    with changestream.open(str(path)) as other:
        store = store_of(other)
        return sum(write_rates(store.connection(), store.now(), 10.0).values())


def test_the_writer_sees_its_own_load_at_once_and_the_tables_get_it_later(tmp_path: Path) -> None:
    path = tmp_path / "load.db"
    db = _database(path)
    try:
        _write(db, range(100))
        (partition,) = db.partitions("S")
        assert partition.write_rate == 100 / db.split_policy().window_seconds
        assert _table_rate(path) == 0.0  # not in the commit's transaction
        # The policy's background loop writes it within about a second (policy disabled or not).
        deadline = time.monotonic() + 10 * FLUSH_AFTER_S
        while _table_rate(path) != 100 / 10.0:
            assert time.monotonic() < deadline, "the load never reached the tables"
            time.sleep(0.05)
        _write(db, range(100, 160))
    finally:
        db.close()
    assert _table_rate(path) == 160 / 10.0  # closing writes the rest


def test_rebalance_counts_this_processes_newest_load(tmp_path: Path) -> None:
    db = _database(tmp_path / "rebalance.db")
    try:
        db.set_split_policy(
            max_write_rate=20.0,
            window_seconds=10.0,
            min_lifetime_seconds=0.0,
            merge_max_write_rate=1.0,
        )
        for start in range(0, 1000, 100):
            _write(db, range(start, start + 100))
        actions = db.rebalance()
        assert [a.merge for a in actions] == [False], actions
        assert len(db.partitions("S")) == 2
    finally:
        db.close()


_KILLED_WRITER = """
import sys, changestream
db = changestream.open(sys.argv[1])
with db.transaction() as txn:
    txn.insert_or_update("T", ["K", "V"], [[k, "v"] for k in range(50)])
print("committed", flush=True)
sys.stdin.readline()
"""


def test_a_killed_writer_loses_only_its_unwritten_load(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    _database(path).close()
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline() == "committed\n"
    writer.send_signal(signal.SIGKILL)
    writer.wait(30)
    with changestream.open(str(path)) as db:
        assert len(db.read("T")) == 50
        (partition,) = db.partitions("S")
        records = db.read_change_stream(
            "S", partition.start_timestamp, store_of(db).now(), partition.token
        )
        mods = [m for r in records if isinstance(r, changestream.DataChangeRecord) for m in r.mods]
        assert len(mods) == 50
    # Its load is lost, unless its background loop wrote it in the moment before the kill.
    assert _table_rate(path) in (0.0, 50 / 10.0)
