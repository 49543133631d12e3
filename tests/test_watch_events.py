"""watch(): one event per operation type, their fields, the fullDocument modes and options."""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import changestream
from changestream import DataChangeRecord, InvalidArgument, InvalidToken
from changestream.clock import parse_ts
from changestream.embedded.database import store_of
from changestream.streams.stored_changes import StoredInserts, stored_change
from changestream.watch import ClusterTime
from changestream.watch._events import EventBuilder, document_maker
from changestream.watch.merge import record_key
from changestream.watch.options import watch_options
from tests.watch_support import COLUMNS, ITEMS, items_database, key, nothing_more, take

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    yield from items_database(tmp_path / "shop.db")


def commit(
    db: changestream.EmbeddedDatabase, tag: str | None = None, **ops: list[list[object]]
) -> int:
    """One transaction of mutations named by keyword (insert=..., update=..., ...)."""
    with db.transaction(tag=tag) as tx:
        for op, rows in ops.items():
            if op == "delete":
                tx.delete("Items", rows)
            else:
                getattr(tx, op)("Items", COLUMNS[: len(rows[0])], rows)
    assert tx.commit_timestamp is not None
    return parse_ts(tx.commit_timestamp)


def test_insert_update_replace_delete_events(db: changestream.EmbeddedDatabase) -> None:
    with db.watch() as cursor:
        first = commit(db, tag="app=shop", insert=[[1, "a", 10], [2, "b", 20]])
        commit(db, update=[[1, "x", None]])
        commit(db, replace=[[2, "r"]])
        commit(db, delete=[[1]])
        insert_1, insert_2, update, replace, delete = take(cursor, 5)

    assert insert_1["operationType"] == "insert"
    assert insert_1["ns"] == {"db": "shop", "coll": "Items"}
    assert insert_1["documentKey"] == {"Id": 1}
    assert insert_1["fullDocument"] == {"Id": 1, "V": "a", "N": 10}
    assert insert_1["clusterTime"] == ClusterTime.from_us(first)
    assert insert_1["clusterTime"].to_us() == first
    assert insert_1["wallTime"] == changestream.clock.to_datetime(first)
    # A transaction of two rows: its events carry the transaction and the writer's session.
    assert insert_1["lsid"] == {"id": db.session_id}
    assert insert_2["lsid"] == {"id": db.session_id}
    assert insert_2["txnNumber"] == insert_1["txnNumber"]
    assert insert_2["clusterTime"] == insert_1["clusterTime"]
    assert "fullDocumentBeforeChange" not in insert_1

    assert update["operationType"] == "update"
    assert update["documentKey"] == {"Id": 1}
    # A column set to NULL holds null (see null_as_missing for the other rule).
    assert update["updateDescription"] == {
        "updatedFields": {"V": "x", "N": None},
        "removedFields": [],
        "truncatedArrays": [],
    }
    assert "fullDocument" not in update
    # One row changed: no transaction, as MongoDB leaves txnNumber/lsid to transactions.
    assert "txnNumber" not in update and "lsid" not in update

    assert replace["operationType"] == "replace"
    assert replace["fullDocument"] == {"Id": 2, "V": "r", "N": None}
    assert "updateDescription" not in replace

    assert delete["operationType"] == "delete"
    assert delete["documentKey"] == {"Id": 1}
    assert "fullDocument" not in delete

    keys = [key(e) for e in (insert_1, insert_2, update, replace, delete)]
    assert keys == sorted(keys) and len(set(keys)) == 5
    tokens = [e["_id"]["_data"] for e in (insert_1, insert_2, update, replace, delete)]
    assert tokens == sorted(tokens), "token strings sort like the events they name"
    assert cursor.resume_token == delete["_id"]


def test_dml_changes_are_events_too(db: changestream.EmbeddedDatabase) -> None:
    with db.watch() as cursor:
        with db.transaction() as tx:
            tx.execute_update("INSERT INTO Items (Id, V, N) VALUES (7, 'seven', 7)")
            tx.execute_update("UPDATE Items SET N = 8 WHERE Id = 7")
        with db.transaction() as tx:
            tx.execute_update("DELETE FROM Items WHERE Id = 7")
        inserted, deleted = take(cursor, 2)
    assert inserted["operationType"] == "insert"
    assert inserted["fullDocument"] == {"Id": 7, "V": "seven", "N": 8}
    assert deleted["operationType"] == "delete"


def test_full_document_modes(db: changestream.EmbeddedDatabase) -> None:
    commit(db, insert=[[1, "a", 1], [2, "b", 2]])
    start = db.ensure_watch_stream().now
    commit(db, update=[[1, "a2", 1]])
    commit(db, update=[[2, "b2", 2]])
    # Row 1 changes again and row 2 is deleted before the cursors read the updates.
    commit(db, update=[[1, "a3", 1]], delete=[[2]])

    def updates(**options: str) -> list[dict[str, object]]:
        with db.watch(start_at_operation_time=start, **options) as cursor:
            return [e for e in take(cursor, 4) if e["operationType"] == "update"]

    default = updates()
    assert all("fullDocument" not in e for e in default)
    lookup = updates(full_document="updateLookup")
    assert lookup[0]["fullDocument"] == {"Id": 1, "V": "a3", "N": 1}, "the row as it is now"
    assert lookup[1]["fullDocument"] is None, "the row was deleted since"
    for mode in ("whenAvailable", "required"):
        captured = updates(full_document=mode)
        assert [e["fullDocument"] for e in captured[:2]] == [
            {"Id": 1, "V": "a2", "N": 1},
            {"Id": 2, "V": "b2", "N": 2},
        ]


def test_full_document_before_change(db: changestream.EmbeddedDatabase) -> None:
    with db.watch(full_document_before_change="whenAvailable") as cursor:
        commit(db, insert=[[1, "a", 1]])
        commit(db, update=[[1, "b", 2]])
        commit(db, replace=[[1, "c"]])
        commit(db, delete=[[1]])
        insert, update, replace, delete = take(cursor, 4)
    assert "fullDocumentBeforeChange" not in insert
    assert update["fullDocumentBeforeChange"] == {"Id": 1, "V": "a", "N": 1}
    assert replace["fullDocumentBeforeChange"] == {"Id": 1, "V": "b", "N": 2}
    assert delete["fullDocumentBeforeChange"] == {"Id": 1, "V": "c", "N": None}
    with db.watch(full_document_before_change="required") as cursor:
        commit(db, insert=[[5, "e", 5]])
        commit(db, delete=[[5]])
        assert take(cursor, 2)[1]["fullDocumentBeforeChange"] == {"Id": 5, "V": "e", "N": 5}


def test_values_use_the_change_record_encoding(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "types.db")) as db:
        db.execute_ddl(
            "CREATE TABLE Events (Moment TIMESTAMP NOT NULL, Blob BYTES(MAX), Amount NUMERIC, "
            "Day DATE) PRIMARY KEY (Moment)"
        )
        at = dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC)
        with db.watch(full_document="updateLookup") as cursor:
            with db.transaction() as tx:
                tx.insert(
                    "Events",
                    ["Moment", "Blob", "Amount"],
                    [[at, b"\x00\x01", decimal.Decimal("1.50")]],
                )
            with db.transaction() as tx:
                tx.update("Events", ["Moment", "Day"], [[at, dt.date(2024, 5, 2)]])
            insert, update = take(cursor, 2)
    expected = {
        "Moment": "2024-05-01T09:30:00.000000Z",
        "Blob": "AAE=",
        "Amount": "1.50",
        "Day": None,
    }
    assert insert["documentKey"] == {"Moment": "2024-05-01T09:30:00.000000Z"}
    assert insert["fullDocument"] == expected
    assert update["fullDocument"] == {**expected, "Day": "2024-05-02"}


def test_table_watch_sees_only_its_table(db: changestream.EmbeddedDatabase) -> None:
    db.execute_ddl("CREATE TABLE Other (K INT64 NOT NULL) PRIMARY KEY (K)")
    with db.table("Items").watch(max_await_time_ms=200) as cursor:
        with db.transaction() as tx:
            tx.insert("Other", ["K"], [[1]])
            tx.insert("Items", COLUMNS, [[1, "a", 1]])
        (event,) = take(cursor, 1)
        assert event["ns"]["coll"] == "Items"
        assert nothing_more(cursor)


def test_drop_of_a_watched_table_emits_drop_then_invalidate_and_closes(
    db: changestream.EmbeddedDatabase,
) -> None:
    table_cursor = db.table("Items").watch(max_await_time_ms=200)
    db_cursor = db.watch(max_await_time_ms=200)
    commit(db, insert=[[1, "a", 1]])
    db.execute_ddl("DROP TABLE Items")
    insert, drop, invalidate = take(table_cursor, 3)
    assert [insert["operationType"], drop["operationType"]] == ["insert", "drop"]
    assert drop["ns"] == {"db": "shop", "coll": "Items"}
    assert "documentKey" not in drop and "txnNumber" not in drop
    assert invalidate["operationType"] == "invalidate"
    assert set(invalidate) == {"_id", "operationType", "clusterTime", "wallTime"}
    assert invalidate["clusterTime"] == drop["clusterTime"]
    assert key(drop) < key(invalidate)
    assert not table_cursor.alive
    assert table_cursor.try_next() is None
    assert list(table_cursor) == []
    assert table_cursor.resume_token == invalidate["_id"]
    # A database-wide cursor sees the drop but is not invalidated (as in MongoDB).
    assert [e["operationType"] for e in take(db_cursor, 2)] == ["insert", "drop"]
    assert db_cursor.alive and nothing_more(db_cursor)
    db_cursor.close()


def test_rename_emits_rename_with_to_then_invalidate(db: changestream.EmbeddedDatabase) -> None:
    with pytest.warns(UserWarning, match="table 'Stock' does not exist \\(yet\\).*tables: Items"):
        renamed_cursor = db.table("Stock").watch()
    with db.table("Items").watch() as cursor, renamed_cursor:
        db.execute_ddl("ALTER TABLE Items RENAME TO Stock")
        rename, invalidate = take(cursor, 2)
        assert rename["operationType"] == "rename"
        assert rename["ns"] == {"db": "shop", "coll": "Items"}
        assert rename["to"] == {"db": "shop", "coll": "Stock"}
        assert invalidate["operationType"] == "invalidate"
        assert not cursor.alive
        # The table keeps its rows and its changes flow under the new name.
        with db.transaction() as tx:
            tx.insert("Stock", COLUMNS, [[3, "c", 3]])
        (insert,) = take(renamed_cursor, 1)
        assert insert["ns"]["coll"] == "Stock"


def test_closing_stops_iteration(db: changestream.EmbeddedDatabase) -> None:
    cursor = db.watch(max_await_time_ms=50)
    assert cursor.try_next() is None
    assert cursor.alive
    cursor.close()
    cursor.close()
    assert not cursor.alive
    with pytest.raises(StopIteration):
        next(cursor)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"full_document": "yes"}, InvalidArgument, "full_document must be one of 'default'"),
        (
            {"full_document_before_change": True},
            InvalidArgument,
            "full_document_before_change must be one of 'off'",
        ),
        ({"max_await_time_ms": -1}, InvalidArgument, "max_await_time_ms must be an integer"),
        ({"batch_size": 0}, InvalidArgument, "batch_size must be an integer of at least 1"),
        ({"resume_after": "abc"}, InvalidToken, 'shaped {"_data": "..."}'),
        ({"start_after": {"_data": "00ff"}}, InvalidToken, "not a resume token issued by watch"),
        ({"start_at_operation_time": "noon"}, InvalidArgument, "RFC 3339"),
        (
            {"resume_after": {"_data": "x"}, "start_at_operation_time": 1},
            InvalidArgument,
            "give at most one of resume_after, start_after and start_at_operation_time",
        ),
        ({"pipeline": {"$match": {}}}, InvalidArgument, "pipeline must be a list of stages"),
    ],
)
def test_bad_options(
    db: changestream.EmbeddedDatabase, options: dict[str, object], error: type, message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        db.watch(**options)  # type: ignore[arg-type]


def test_tampered_token_is_rejected(db: changestream.EmbeddedDatabase) -> None:
    with db.watch() as cursor:
        commit(db, insert=[[1, "a", 1]])
        (event,) = take(cursor, 1)
    data = event["_id"]["_data"]
    tampered = data[:20] + ("0" if data[20] != "0" else "1") + data[21:]
    with pytest.raises(InvalidToken, match="not a resume token issued by watch"):
        db.watch(resume_after={"_data": tampered})


def test_cluster_time_mapping() -> None:
    stamp = parse_ts("2024-05-01T09:30:00.123456Z")
    cluster = ClusterTime.from_us(stamp)
    assert (cluster.time, cluster.inc) == (stamp // 1_000_000, 123456)
    assert cluster.to_us() == stamp
    assert cluster.as_int64() == (stamp // 1_000_000) << 32 | 123456
    assert cluster.as_int64() < 2**64 and cluster.time < 2**32
    later = ClusterTime.from_us(stamp + 1)
    assert cluster < later and cluster.as_int64() < later.as_int64()
    assert ClusterTime.from_us(stamp + 999_999) < ClusterTime.from_us(stamp + 1_000_000)
    assert repr(cluster) == f"Timestamp({stamp // 1_000_000}, 123456)"


def test_watch_stream_system_records(db: changestream.EmbeddedDatabase) -> None:
    """The internal stream records a create, a drop and a rename in the DDL's transaction, as
    system records."""
    source = db.ensure_watch_stream()
    db.execute_ddl("CREATE TABLE Gone (K INT64 NOT NULL) PRIMARY KEY (K)")
    with pytest.raises(changestream.NotFound):
        db.execute_ddl(["DROP TABLE Gone", "DROP TABLE Missing"])
    dropped = db.execute_ddl(["DROP TABLE Gone", "ALTER TABLE Items RENAME TO Stock"])
    (partition,) = db.partitions(source.stream)
    created, *records = [
        r
        for r in db.read_change_stream(source.stream, source.now, dropped, partition.token, 1000)
        if isinstance(r, DataChangeRecord)
    ]
    assert (created.mod_type, created.table_name, created.is_system_transaction) == (
        "CREATE_TABLE",
        "Gone",
        True,
    )
    assert created.mods[0].new_values == {"table_name": "Gone"}
    assert [(c.name, c.type, c.is_primary_key) for c in created.column_types] == [
        ("K", {"code": "INT64"}, True)
    ]
    assert created.session_id == db.session_id
    assert [
        r.to_dict() | {"commit_timestamp": 0, "server_transaction_id": ""} for r in records
    ] == [
        {
            "commit_timestamp": 0,
            "record_sequence": f"{n:08d}",
            "server_transaction_id": "",
            "is_last_record_in_transaction_in_partition": n == 1,
            "table_name": table,
            "column_types": [],
            "mods": [{"keys": {}, "new_values": new, "old_values": {"table_name": table}}],
            "mod_type": mod_type,
            "value_capture_type": "OLD_AND_NEW_ROW",
            "number_of_records_in_transaction": 2,
            "number_of_partitions_in_transaction": 1,
            "transaction_tag": "",
            "is_system_transaction": True,
        }
        for n, (table, mod_type, new) in enumerate(
            [("Gone", "DROP_TABLE", {}), ("Items", "RENAME_TABLE", {"table_name": "Stock"})]
        )
    ]
    assert {r.commit_timestamp for r in records} == {dropped}


def test_inserts_stored_compact_become_the_events_of_their_records(tmp_path: Path) -> None:
    """watch() reads a batch of inserts stored compact without building its record: the events
    are those the record gives, field for field, whatever the options and values."""
    with changestream.open(str(tmp_path / "compact.db")) as db:
        db.execute_ddl(
            [
                "CREATE TABLE Docs (Id INT64 NOT NULL, Name STRING(MAX), Body JSON, "
                "Tags ARRAY<INT64>, Raw BYTES(MAX), Seen TIMESTAMP) PRIMARY KEY (Id, Name)",
                "CREATE TABLE Notes (Id INT64 NOT NULL) PRIMARY KEY (Id)",
            ]
        )
        source = db.ensure_watch_stream()
        columns = ["Id", "Name", "Body", "Tags", "Raw", "Seen"]
        when = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC)
        rows = [
            [1, "a", {"x": [1, 2], "y": None}, [3, None], b"\x00\xff", when],
            [2, "b", None, None, None, None],
        ]
        with db.transaction() as tx:  # several rows: an event per row, in a transaction
            tx.insert("Docs", columns, rows)
        with db.transaction() as tx:  # one row, columns left out
            tx.insert("Docs", ["Id", "Name"], [[3, "c"]])
        with db.transaction() as tx:  # one row in each of two tables
            tx.insert("Docs", ["Id", "Name"], [[4, "d"]])
            tx.insert("Notes", ["Id"], [[9]])
        end = store_of(db).last_commit_ts()
        (partition,) = db.partitions(source.stream, at=source.now)
        args = (source.stream, source.now, end, partition.token, 1000)
        whole = [r for r in db.read_change_stream(*args) if isinstance(r, DataChangeRecord)]
        stored = [r for r in db.read_stored_changes(*args) if r.is_data_change]
        assert [type(r) for r in stored] == [StoredInserts] * 4
        for arguments in ({}, {"null_as_missing": True}, {"full_document": "required"}):
            builder = EventBuilder(db, source.database, watch_options(arguments))
            for record, compact in zip(whole, stored, strict=True):
                key = record_key(record)
                assert record_key(compact) == key
                assert builder.events(compact, key) == builder.events(record, key)
        events = EventBuilder(db, source.database, watch_options({})).events(
            stored[0], record_key(stored[0])
        )
        assert [e["fullDocument"]["Id"] for _, e in events] == [1, 2]
        assert all(e["txnNumber"] == record_key(stored[0])[1] for _, e in events)
        assert [len(builder.events(r, record_key(r))) for r in stored] == [2, 1, 1, 1]


def test_every_other_record_is_read_stored_as_the_read_function_reads_it(
    tmp_path: Path,
) -> None:
    """Updates, deletes, replaces, a batch mixing inserts and updates, and the table records
    of the watch stream come from read_stored_changes as the records the read function gives;
    a corrupt payload fails the same way through both."""
    with changestream.open(str(tmp_path / "others.db")) as db:
        db.execute_ddl(ITEMS)
        source = db.ensure_watch_stream()
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, [[1, "a", 1]])
        with db.transaction() as tx:
            tx.update("Items", ["Id", "V"], [[1, "b"]])
            tx.insert_or_update("Items", COLUMNS, [[1, "c", 2], [2, "d", 3]])
        with db.transaction() as tx:
            tx.replace("Items", COLUMNS, [[2, "e", 4]])
            tx.delete("Items", [[1]])
        db.execute_ddl("ALTER TABLE Items ADD COLUMN W INT64")
        end = store_of(db).last_commit_ts()
        (partition,) = db.partitions(source.stream, at=source.now)
        args = (source.stream, source.now, end, partition.token, 1000)
        whole = [r for r in db.read_change_stream(*args) if isinstance(r, DataChangeRecord)]
        stored = [r for r in db.read_stored_changes(*args) if r.is_data_change]
        assert {r.mod_type for r in whole} >= {"INSERT", "UPDATE", "DELETE", "ALTER_TABLE"}
        others = [(s, w) for s, w in zip(stored, whole, strict=True) if w.mod_type != "INSERT"]
        assert len(others) >= 4 and all(s == w for s, w in others)
    for corrupt in (b"{not json", b'{"mod_type": "INSERT", "mod_values": 3}'):
        with pytest.raises(Exception) as expected:
            DataChangeRecord.from_payload(1, corrupt, "t")
        with pytest.raises(type(expected.value)):
            stored_change(1, corrupt, "t")


def test_documents_are_made_for_any_column_names() -> None:
    # The maker is a dict display compiled for the names: a name is only ever a key.
    names = ("Id", "it's", 'say "hi"', "back\\slash", "{x}", "ü", "'), print('no'), ('")
    row = (1, "a", None, 2.5, [1], {"k": "v"}, True)
    document = document_maker(names)(row)
    assert document == dict(zip(names, row, strict=True))
    assert list(document) == list(names)
    assert document_maker(names) is document_maker(tuple(names))
    assert document_maker(())(()) == {}
