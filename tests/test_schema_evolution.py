"""Table DDL after creation: ALTER TABLE ADD / DROP / ALTER COLUMN and CREATE / DROP INDEX, with
Spanner's checks, atomic with the other statements of the call, followed by change streams
(records after the change carry the new columns) and by watch() with show_expanded_events."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream import AlreadyExists, DataChangeRecord, FailedPrecondition, NotFound
from changestream.embedded.database import store_of
from tests.server_support import serving
from tests.watch_support import take

ORDERS = (
    "CREATE TABLE Orders (Id INT64 NOT NULL, Customer STRING(10), Amount INT64) PRIMARY KEY (Id)"
)
STREAM = "CREATE CHANGE STREAM Everything FOR ALL OPTIONS (value_capture_type = 'NEW_ROW')"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    with changestream.open(str(tmp_path / "shop.db")) as database:
        database.execute_ddl([ORDERS, STREAM])
        with database.transaction() as tx:
            tx.insert("Orders", ["Id", "Customer", "Amount"], [[1, "ann", 10], [2, "bob", None]])
        yield database


def records(db: changestream.EmbeddedDatabase, start: int) -> list[DataChangeRecord]:
    (partition,) = db.partitions("Everything")
    end = store_of(db).last_commit_ts()
    return [
        r
        for r in db.read_change_stream("Everything", start, end, partition.token)
        if isinstance(r, DataChangeRecord)
    ]


def columns_of(record: DataChangeRecord) -> list[str]:
    return [c.name for c in sorted(record.column_types, key=lambda c: c.ordinal_position)]


def test_add_column_reads_null_then_new_values_and_streams_follow(
    db: changestream.EmbeddedDatabase,
) -> None:
    before = store_of(db).last_commit_ts() + 1
    with db.transaction() as tx:
        tx.update("Orders", ["Id", "Amount"], [[1, 11]])
    changed = db.execute_ddl("ALTER TABLE Orders ADD COLUMN Note STRING(MAX)")
    assert db.read("Orders") == [(1, "ann", 11, None), (2, "bob", None, None)]
    with db.transaction() as tx:
        tx.update("Orders", ["Id", "Note"], [[2, "rush"]])
    assert db.read("Orders", [[2]], ["Note"]) == [("rush",)]
    assert list(db.execute_sql("SELECT Note FROM Orders WHERE Id = 2")) == [["rush"]]
    old, new = records(db, before)
    assert old.commit_timestamp < changed < new.commit_timestamp
    assert columns_of(old) == ["Id", "Customer", "Amount"]
    assert columns_of(new) == ["Id", "Customer", "Amount", "Note"]
    assert new.mods[0].new_values == {"Customer": "bob", "Amount": None, "Note": "rush"}
    # IF NOT EXISTS is a no-op on a column that is there (names ignore case), else refused.
    db.execute_ddl("ALTER TABLE Orders ADD COLUMN IF NOT EXISTS note STRING(MAX)")
    with pytest.raises(AlreadyExists, match="already has a column 'Note'"):
        db.execute_ddl("ALTER TABLE Orders ADD COLUMN NOTE INT64")


def test_a_not_null_column_needs_a_default_on_a_table_with_rows(
    db: changestream.EmbeddedDatabase,
) -> None:
    with pytest.raises(FailedPrecondition, match="give it a DEFAULT"):
        db.execute_ddl("ALTER TABLE Orders ADD COLUMN Qty INT64 NOT NULL")
    start = store_of(db).last_commit_ts() + 1
    db.execute_ddl("ALTER TABLE Orders ADD COLUMN Qty INT64 NOT NULL DEFAULT (-1)")
    db.execute_ddl("ALTER TABLE Orders ADD COLUMN Gift BOOL DEFAULT (TRUE)")
    with db.transaction() as tx:
        tx.insert("Orders", ["Id"], [[3]])
        tx.insert_or_update("Orders", ["Id", "Qty"], [[4, 5]])
    assert db.read("Orders", [[1], [3], [4]], ["Id", "Qty", "Gift"]) == [
        (1, -1, True),
        (3, -1, True),
        (4, 5, True),
    ]
    # The change stream records the defaults the rows got.
    (inserted,) = [r for r in records(db, start) if r.mod_type == "INSERT"]
    values = [(m.keys["Id"], m.new_values["Qty"], m.new_values["Gift"]) for m in inserted.mods]
    assert values == [(3, -1, True), (4, 5, True)]
    # On an empty table NOT NULL needs no default.
    db.execute_ddl("CREATE TABLE Empty (K INT64 NOT NULL) PRIMARY KEY (K)")
    db.execute_ddl("ALTER TABLE Empty ADD COLUMN V STRING(MAX) NOT NULL")
    with pytest.raises(changestream.ChangeStreamError), db.transaction() as tx:
        tx.insert("Empty", ["K"], [[1]])


def test_drop_column_and_what_refuses_it(db: changestream.EmbeddedDatabase) -> None:
    start = store_of(db).last_commit_ts() + 1
    db.execute_ddl("ALTER TABLE Orders DROP COLUMN Amount")
    assert db.read("Orders") == [(1, "ann"), (2, "bob")]
    with db.transaction() as tx:
        tx.insert("Orders", ["Id", "Customer"], [[3, "cy"]])
    (after,) = records(db, start)
    assert columns_of(after) == ["Id", "Customer"]
    with pytest.raises(FailedPrecondition, match="part of the primary key"):
        db.execute_ddl("ALTER TABLE Orders DROP COLUMN Id")
    with pytest.raises(NotFound, match="has no column 'Amount'"):
        db.execute_ddl("ALTER TABLE Orders DROP COLUMN Amount")
    db.execute_ddl(
        [
            "ALTER TABLE Orders ADD COLUMN Note STRING(MAX)",
            "CREATE CHANGE STREAM Notes FOR Orders(Note)",
            "CREATE INDEX ByCustomer ON Orders (Customer)",
        ]
    )
    with pytest.raises(FailedPrecondition, match="change stream\\(s\\) Notes track it by name"):
        db.execute_ddl("ALTER TABLE Orders DROP COLUMN Note")
    with pytest.raises(FailedPrecondition, match="index\\(es\\) ByCustomer use it"):
        db.execute_ddl("ALTER TABLE Orders DROP COLUMN Customer")


def test_alter_column_changes_spanner_allows(db: changestream.EmbeddedDatabase) -> None:
    with pytest.raises(changestream.InvalidArgument), db.transaction() as tx:
        tx.update("Orders", ["Id", "Customer"], [[1, "x" * 11]])
    db.execute_ddl("ALTER TABLE Orders ALTER COLUMN Customer STRING(MAX)")
    with db.transaction() as tx:
        tx.update("Orders", ["Id", "Customer"], [[1, "x" * 11]])
    with pytest.raises(FailedPrecondition, match="values of 'Customer' longer than 5"):
        db.execute_ddl("ALTER TABLE Orders ALTER COLUMN Customer STRING(5)")
    with pytest.raises(FailedPrecondition, match="NULL values in 'Amount'"):
        db.execute_ddl("ALTER TABLE Orders ALTER COLUMN Amount INT64 NOT NULL")
    with pytest.raises(FailedPrecondition, match="from INT64 to STRING"):
        db.execute_ddl("ALTER TABLE Orders ALTER COLUMN Amount STRING(MAX)")
    with pytest.raises(FailedPrecondition, match="part of the primary key"):
        db.execute_ddl("ALTER TABLE Orders ALTER COLUMN Id INT64")
    db.execute_ddl("CREATE INDEX ByAmount ON Orders (Amount)")
    with db.transaction() as tx:
        tx.update("Orders", ["Id", "Amount"], [[2, 20]])
    db.execute_ddl("ALTER TABLE Orders ALTER COLUMN Amount INT64 NOT NULL")
    with pytest.raises(changestream.ChangeStreamError), db.transaction() as tx:
        tx.update("Orders", ["Id", "Amount"], [[2, None]])
    # NOT NULL dropped again: the table is rebuilt, its rows and index kept.
    db.execute_ddl("ALTER TABLE Orders ALTER COLUMN Amount INT64")
    with db.transaction() as tx:
        tx.update("Orders", ["Id", "Amount"], [[2, None]])
    assert db.read("Orders") == [(1, "x" * 11, 10), (2, "bob", None)]
    assert [i.name for i in store_of(db).catalog().table("Orders").indexes] == ["ByAmount"]


def test_ddl_statements_of_one_call_apply_together(db: changestream.EmbeddedDatabase) -> None:
    with pytest.raises(NotFound):
        db.execute_ddl(
            ["ALTER TABLE Orders ADD COLUMN Note STRING(MAX)", "ALTER TABLE Orders DROP COLUMN X"]
        )
    assert [c.name for c in store_of(db).catalog().table("Orders").columns] == [
        "Id",
        "Customer",
        "Amount",
    ]
    assert db.read("Orders", [[1]]) == [(1, "ann", 10)]


def test_indexes_are_used_checked_and_kept(
    db: changestream.EmbeddedDatabase, tmp_path: Path
) -> None:
    db.execute_ddl(
        [
            "CREATE NULL_FILTERED INDEX ByAmount ON Orders (Amount DESC) STORING (Customer)",
            "CREATE INDEX IF NOT EXISTS ByAmount ON Orders (Customer)",
        ]
    )
    plan = sqlite3.connect(str(tmp_path / "shop.db")).execute(
        'EXPLAIN QUERY PLAN SELECT Id FROM "Orders" WHERE "Amount" = 10'
    )
    assert "ByAmount" in " ".join(str(row) for row in plan)
    assert list(db.execute_sql("SELECT Id FROM Orders WHERE Amount = 10")) == [[1]]
    with pytest.raises(AlreadyExists, match="index 'byamount' already exists"):
        db.execute_ddl("CREATE INDEX byamount ON Orders (Customer)")
    with pytest.raises(FailedPrecondition, match="STORING column 'Id'"):
        db.execute_ddl("CREATE INDEX Other ON Orders (Customer) STORING (Id)")
    with db.transaction() as tx:
        tx.insert("Orders", ["Id", "Customer", "Amount"], [[3, "ann", 30]])
    with pytest.raises(FailedPrecondition, match="rows of 'Orders' share a value"):
        db.execute_ddl("CREATE UNIQUE INDEX OneEach ON Orders (Customer)")
    db.execute_ddl("CREATE UNIQUE INDEX OneAmount ON Orders (Amount)")
    with pytest.raises(changestream.ChangeStreamError), db.transaction() as tx:
        tx.insert("Orders", ["Id", "Amount"], [[4, 30]])
    db.execute_ddl("ALTER TABLE Orders RENAME TO Sales")
    reopened = changestream.open(str(tmp_path / "shop.db"))
    try:
        indexes = store_of(reopened).catalog().table("Sales").indexes
        assert [(i.name, i.table, i.null_filtered, i.storing) for i in indexes] == [
            ("ByAmount", "Sales", True, ("Customer",)),
            ("OneAmount", "Sales", False, ()),
        ]
    finally:
        reopened.close()
    db.execute_ddl(["DROP INDEX OneAmount", "DROP INDEX IF EXISTS OneAmount"])
    with pytest.raises(NotFound, match="index 'OneAmount' does not exist \\(indexes: ByAmount\\)"):
        db.execute_ddl("DROP INDEX OneAmount")
    with db.transaction() as tx:
        tx.insert("Sales", ["Id", "Amount"], [[4, 30]])


def test_watch_shows_table_ddl_as_expanded_events(db: changestream.EmbeddedDatabase) -> None:
    with db.watch(show_expanded_events=True) as expanded, db.watch() as plain:
        db.execute_ddl("ALTER TABLE Orders ADD COLUMN Note STRING(MAX)")
        db.execute_ddl("CREATE UNIQUE INDEX ByNote ON Orders (Note DESC)")
        db.execute_ddl("DROP INDEX ByNote")
        with db.transaction() as tx:
            tx.update("Orders", ["Id", "Note"], [[1, "n"]])
        modify, created, dropped, update = take(expanded, 4)
        (plain_update,) = take(plain, 1)
    assert modify["operationType"] == "modify"
    assert modify["operationDescription"] == {
        "columns": [
            {"name": "Id", "type": {"code": "INT64"}},
            {"name": "Customer", "type": {"code": "STRING"}},
            {"name": "Amount", "type": {"code": "INT64"}},
            {"name": "Note", "type": {"code": "STRING"}},
        ],
        "primaryKey": ["Id"],
        "action": "ADD COLUMN",
        "column": "Note",
    }
    index: dict[str, Any] = {
        "name": "ByNote",
        "key": {"Note": -1},
        "unique": True,
        "nullFiltered": False,
        "storing": [],
    }
    assert created["operationType"] == "createIndexes"
    assert created["operationDescription"] == {"indexes": [index]}
    assert dropped["operationType"] == "dropIndexes"
    assert dropped["operationDescription"] == {"indexes": [index]}
    assert update["updateDescription"]["updatedFields"] == {"Note": "n"}
    assert plain_update["_id"] == update["_id"]


def test_a_column_records_when_it_was_added(tmp_path: Path) -> None:
    """``added_at`` is the commit timestamp of the ADD COLUMN; ALTER COLUMN keeps it, a
    column added again after a drop gets its own, columns made with the table have none."""
    path = str(tmp_path / "added.db")
    with changestream.open(path) as db:
        db.execute_ddl(ORDERS)
        first = db.execute_ddl("ALTER TABLE Orders ADD COLUMN Note STRING(10)")
        db.execute_ddl("ALTER TABLE Orders ALTER COLUMN Note STRING(MAX)")
        (orders,) = db.tables()
        assert [c.added_at for c in orders.columns] == [None, None, None, first]
        db.execute_ddl("ALTER TABLE Orders DROP COLUMN Note")
        again = db.execute_ddl("ALTER TABLE Orders ADD COLUMN Note STRING(MAX)")
        assert again > first
    with changestream.open(path) as db:  # read back from the catalog
        (orders,) = db.tables()
        assert orders.column("Note").added_at == again


def test_table_ddl_over_the_server(db: changestream.EmbeddedDatabase) -> None:
    with (
        serving({"shop": db}) as running,
        changestream.connect(f"http://127.0.0.1:{running.server.port}/shop") as remote,
    ):
        remote.execute_ddl(
            [
                "ALTER TABLE Orders ADD COLUMN Note STRING(MAX)",
                "CREATE INDEX ByNote ON Orders (Note)",
            ]
        )
        with remote.transaction() as tx:
            tx.update("Orders", ["Id", "Note"], [[1, "remote"]])
        assert remote.read("Orders", [[1]]) == [(1, "ann", 10, "remote")]
        # When a column was added travels too (a replica tells a re-added column by it).
        (orders,) = remote.tables()
        assert orders.column("Note").added_at == next(iter(db.tables())).column("Note").added_at
        with pytest.raises(FailedPrecondition, match="part of the primary key"):
            remote.execute_ddl("ALTER TABLE Orders DROP COLUMN Id")


def test_watch_and_the_stream_client_see_new_columns_without_a_restart(
    db: changestream.EmbeddedDatabase,
) -> None:
    from changestream.client import RecordProcessor, StreamClient

    seen: list[dict[str, Any]] = []

    class Keep(RecordProcessor):
        def process_records(self, records: list[Any], checkpointer: Any) -> None:
            seen.extend(m.new_values for r in records for m in r.mods)

    client = StreamClient(
        db, "Everything", "w1", Keep, start_timestamp=store_of(db).last_commit_ts() + 1
    )
    client.start()
    try:
        with db.watch(full_document="updateLookup") as cursor:
            with db.transaction() as tx:
                tx.update("Orders", ["Id", "Amount"], [[1, 12]])
            (before,) = take(cursor, 1)
            assert before["updateDescription"]["updatedFields"] == {"Amount": 12}
            db.execute_ddl("ALTER TABLE Orders ADD COLUMN Note STRING(MAX)")
            with db.transaction() as tx:
                tx.update("Orders", ["Id", "Note"], [[1, "later"]])
            (after,) = take(cursor, 1)
        deadline = time.monotonic() + 30
        while len(seen) < 2:
            assert time.monotonic() < deadline, f"the Stream Client got {seen}"
            time.sleep(0.05)
    finally:
        client.stop()
    assert after["updateDescription"]["updatedFields"] == {"Note": "later"}
    assert after["fullDocument"] == {"Id": 1, "Customer": "ann", "Amount": 12, "Note": "later"}
    assert seen[-1] == {"Customer": "ann", "Amount": 12, "Note": "later"}


def test_a_transaction_buffered_before_a_column_is_added_still_commits(
    db: changestream.EmbeddedDatabase,
) -> None:
    """A writer racing ALTER TABLE ADD COLUMN is not refused: what it writes is still there."""
    with db.transaction() as tx:
        tx.insert_or_update("Orders", ["Id", "Amount"], [[3, 30]])
        with changestream.open(db.path) as other:
            other.execute_ddl("ALTER TABLE Orders ADD COLUMN Note STRING(MAX) DEFAULT ('n/a')")
    assert db.read("Orders", [[3]]) == [(3, None, 30, "n/a")]
    # A column the transaction writes that is gone (or of another type) still refuses it.
    refused = pytest.raises(FailedPrecondition, match="changed or dropped during the transaction")
    with refused, db.transaction() as tx:
        tx.update("Orders", ["Id", "Note"], [[3, "x"]])
        with changestream.open(db.path) as other:
            other.execute_ddl("ALTER TABLE Orders DROP COLUMN Note")
    assert db.read("Orders", [[3]]) == [(3, None, 30)]
