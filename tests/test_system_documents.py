"""The Database additions the layers above build on: system documents and logs, the schema
(tables, change streams), and snapshot reads — each embedded and through a server."""

from __future__ import annotations

import datetime as dt
import decimal
import sqlite3
import threading
from pathlib import Path

import pytest

import changestream
from changestream import COMMIT_TIMESTAMP, KeyRange
from changestream.embedded.database import store_of
from changestream.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from tests.conftest import FixedClock, OpenDb

VALUES = (
    "CREATE TABLE V (K STRING(MAX) NOT NULL, Ts TIMESTAMP OPTIONS (allow_commit_timestamp = true),"
    " B BYTES(MAX), N NUMERIC, D DATE, J JSON, A ARRAY<INT64>, F FLOAT64, Flag BOOL,"
    " I INT64 NOT NULL) PRIMARY KEY (K)"
)
COLUMNS = ["K", "Ts", "B", "N", "D", "J", "A", "F", "Flag", "I"]
PAIRS = "CREATE TABLE Pairs (A INT64 NOT NULL, B STRING(10) NOT NULL, C FLOAT64) PRIMARY KEY (B, A)"


def test_documents_are_versioned_and_conditional(tmp_path: Path, open_db: OpenDb) -> None:
    db = open_db(str(tmp_path / "docs.db"))
    assert db.system_documents("k") == {}
    body = {"state": "Not started", "nested": {"$odd": [1, 2.5, None, True]}, "big": 2**62}
    assert db.put_system_document("k", "s1", body, None) == 1
    with pytest.raises(AlreadyExists, match="k/s1 already exists"):
        db.put_system_document("k", "s1", body, None)
    assert db.put_system_document("k", "s1", {**body, "state": "Starting"}, 1) == 2
    with pytest.raises(FailedPrecondition, match="is at version 2, not version 1"):
        db.put_system_document("k", "s1", body, 1)
    with pytest.raises(FailedPrecondition, match="does not exist, not version 3"):
        db.put_system_document("k", "other", body, 3)
    db.put_system_document("k2", "s1", {"x": 1}, None)
    found = db.system_documents("k")
    assert list(found) == ["s1"]
    assert found["s1"].version == 2
    assert found["s1"].body == {**body, "state": "Starting"}
    with pytest.raises(FailedPrecondition, match="at version 2, not version 1"):
        db.delete_system_document("k", "s1", 1)
    assert db.delete_system_document("k", "s1", 2) is True
    assert db.delete_system_document("k", "s1") is False
    assert db.system_documents("k") == {}
    assert list(db.system_documents("k2")) == ["s1"]


def test_a_document_written_in_a_transaction_commits_with_its_changes_or_not_at_all(
    tmp_path: Path,
) -> None:
    db = changestream.open(str(tmp_path / "atomic.db"))  # an embedded transaction's own
    db.execute_ddl("CREATE TABLE T (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)")
    with db.transaction() as tx:
        tx.insert("T", ["K", "V"], [[1, "a"]])
        tx.put_system_document("position", "src", {"lsn": 10})
    assert db.system_documents("position")["src"].body == {"lsn": 10}
    with pytest.raises(AlreadyExists), db.transaction() as tx:
        tx.put_system_document("position", "src", {"lsn": 20})
        tx.insert("T", ["K", "V"], [[1, "again"]])  # fails at commit: the row exists
    (document,) = db.system_documents("position").values()
    assert (document.body, document.version) == ({"lsn": 10}, 1)
    with db.transaction() as tx:
        tx.put_system_document("position", "src", {"lsn": 30})
    assert db.system_documents("position")["src"].version == 2
    with pytest.raises(InvalidArgument, match="JSON object"), db.transaction() as tx:
        tx.put_system_document("position", "src", ["not", "an", "object"])
    db.close()


def test_documents_reject_what_is_not_json(tmp_path: Path, open_db: OpenDb) -> None:
    db = open_db(str(tmp_path / "docs.db"))
    with pytest.raises(InvalidArgument, match=r"body\.when holds a date"):
        db.put_system_document("k", "s", {"when": dt.date(2020, 1, 1)}, None)
    with pytest.raises(InvalidArgument, match="must be a finite number"):
        db.put_system_document("k", "s", {"x": float("nan")}, None)
    with pytest.raises(InvalidArgument, match="kind must be 1 to 256 printable"):
        db.system_documents("")
    with pytest.raises(InvalidArgument, match="expected_version must be an integer"):
        db.put_system_document("k", "s", {}, "1")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="must not set 'time'"):
        db.append_system_log("k", "s", {"time": 1})
    with pytest.raises(InvalidArgument, match="limit must be between 1 and 10000"):
        db.system_log("k", "s", 0)


def test_log_appends_in_order_with_the_database_time(tmp_path: Path, open_db: OpenDb) -> None:
    clock = FixedClock("2024-05-01T00:00:00Z")
    db = open_db(str(tmp_path / "log.db"), clock=clock)
    db.put_system_document("k", "s", {}, None)
    for index in range(5):
        clock.set(f"2024-05-01T00:00:0{index}Z")
        db.append_system_log("k", "s", {"n": index, "$tagged": "x"})
    db.append_system_log("k", "other", {"n": 99})
    base = changestream.clock.parse_ts("2024-05-01T00:00:00Z")
    entries = db.system_log("k", "s", 3)
    assert entries == [{"time": base + i * 1_000_000, "n": i, "$tagged": "x"} for i in (2, 3, 4)]
    assert [e["n"] for e in db.system_log("k", "s")] == [0, 1, 2, 3, 4]
    # A document's log goes with it; other logs stay.
    db.delete_system_document("k", "s")
    assert db.system_log("k", "s") == []
    assert [e["n"] for e in db.system_log("k", "other")] == [99]


def test_documents_survive_reopening_and_are_shared(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    with changestream.open(path) as first, changestream.open(path) as second:
        first.put_system_document("k", "s", {"v": 1}, None)
        assert second.put_system_document("k", "s", {"v": 2}, 1) == 2
        with pytest.raises(FailedPrecondition):
            first.put_system_document("k", "s", {"v": 3}, 1)
    with changestream.open(path) as reopened:
        assert reopened.system_documents("k")["s"].body == {"v": 2}
        # System tables are the engine's: no user table, no FOR ALL stream sees them.
        assert reopened.tables() == []


def test_a_file_without_the_document_tables_gets_them(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    changestream.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE _cs_documents")
    conn.execute("DROP TABLE _cs_document_log")
    conn.commit()
    conn.close()
    with changestream.open(path) as db:
        assert db.put_system_document("k", "s", {}, None) == 1


def test_tables_and_change_streams(tmp_path: Path, open_db: OpenDb) -> None:
    db = open_db(str(tmp_path / "schema.db"))
    db.execute_ddl(
        [
            PAIRS,
            VALUES,
            "CREATE CHANGE STREAM S FOR Pairs(C), V OPTIONS"
            " (value_capture_type = 'NEW_ROW', retention_period = '2h')",
        ]
    )
    db.ensure_watch_stream()  # an engine stream: never listed
    tables = db.tables()
    assert [t.name for t in tables] == ["Pairs", "V"]
    pairs = tables[0]
    assert [c.name for c in pairs.columns] == ["A", "B", "C"]
    assert pairs.primary_key == ("B", "A")
    assert [str(c.type) for c in pairs.columns] == ["INT64", "STRING(10)", "FLOAT64"]
    assert [c.not_null for c in pairs.columns] == [True, True, False]
    assert tables[1].column("Ts") is not None and tables[1].column("Ts").allow_commit_timestamp  # type: ignore[union-attr]
    if isinstance(db, changestream.EmbeddedDatabase):
        assert tables == [
            store_of(db).catalog().tables["Pairs"],
            store_of(db).catalog().tables["V"],
        ]
    (stream,) = db.change_streams()
    assert stream.name == "S"
    assert stream.value_capture_type == "NEW_ROW"
    assert stream.retention_seconds == 7200
    assert [(t.table, t.columns) for t in stream.targets] == [("Pairs", ("C",)), ("V", None)]


def test_read_snapshot_round_trips_values(tmp_path: Path, open_db: OpenDb) -> None:
    db = open_db(str(tmp_path / "snap.db"))
    db.execute_ddl(VALUES)
    rows = [
        [
            "a",
            COMMIT_TIMESTAMP,
            b"\x00\xff",
            decimal.Decimal("-12.500000001"),
            dt.date(1999, 12, 31),
            {"$weird": [1, 2.5, None]},
            [1, None, -(2**63)],
            float("inf"),
            True,
            2**63 - 1,
        ],
        ["b", None, None, None, None, None, None, None, None, 2],
        ["c", None, None, None, None, None, [], -0.0, False, 3],
    ]
    with db.transaction() as tx:
        tx.insert("V", COLUMNS, rows)
    assert tx.commit_timestamp is not None
    committed = changestream.clock.parse_ts(tx.commit_timestamp)
    snapshot = db.read_snapshot("V")
    assert snapshot.rows == db.read("V")
    assert snapshot.rows[0][1] == tx.commit_timestamp
    assert snapshot.read_timestamp == committed
    part = db.read_snapshot("V", KeyRange(start_open=("a",), end_closed=()), ["K", "I"], limit=1)
    assert part.rows == [("b", 2)]
    assert part.read_timestamp == committed
    with pytest.raises(InvalidArgument, match="keys must be a KeyRange"):
        db.read_snapshot("V", [("a",)])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="limit must be between"):
        db.read_snapshot("V", limit=0)
    with pytest.raises(NotFound, match="table 'W' does not exist"):
        db.read_snapshot("W")
    with pytest.raises(InvalidArgument, match="has no column 'X'"):
        db.read_snapshot("V", columns=["X"])


def test_read_snapshot_is_consistent_under_concurrent_writes(
    tmp_path: Path, open_db: OpenDb
) -> None:
    """Each write adds one row and stamps it with its commit timestamp: a snapshot holds
    exactly the rows of the commits at or before its read timestamp."""
    path = str(tmp_path / "busy.db")
    db = open_db(path)
    db.execute_ddl(
        "CREATE TABLE W (N INT64 NOT NULL, Ts TIMESTAMP NOT NULL"
        " OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (N)"
    )
    stop = threading.Event()
    commits: list[int] = []
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with changestream.open(path) as writer:
                n = 0
                while not stop.is_set():
                    with writer.transaction() as tx:
                        tx.insert("W", ["N", "Ts"], [[n, COMMIT_TIMESTAMP]])
                    assert tx.commit_timestamp is not None
                    commits.append(changestream.clock.parse_ts(tx.commit_timestamp))
                    n += 1
        except BaseException as exc:
            failures.append(exc)
            raise

    writer = threading.Thread(target=write)
    writer.start()
    try:
        checked = 0
        while checked < 30 or len(commits) < 30:
            # A writer that died fails the test now, not after spinning without commits.
            assert writer.is_alive(), f"the writer thread died: {failures!r}"
            snapshot = db.read_snapshot("W")
            stamps = [changestream.clock.parse_ts(row[1]) for row in snapshot.rows]
            assert [row[0] for row in snapshot.rows] == list(range(len(stamps)))
            # Rows are numbered in commit order and the read timestamp is the newest row's
            # commit: so every commit at or before it is there and none after.
            if stamps:
                assert snapshot.read_timestamp == max(stamps)
            checked += 1
    finally:
        stop.set()
        writer.join()
    final = db.read_snapshot("W")
    assert sorted(changestream.clock.parse_ts(r[1]) for r in final.rows) == commits
    assert final.read_timestamp == commits[-1]
