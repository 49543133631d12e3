"""Change capture: what each value capture type, tracking clause and write records."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

import changestream
from changestream import DataChangeRecord, KeyRange
from changestream.clock import now_us
from changestream.embedded.database import store_of
from changestream.wire.records import StoredDataChange, record_from_line

SINGERS = (
    "CREATE TABLE Singers (SingerId INT64 NOT NULL, FirstName STRING(100), "
    "LastName STRING(MAX), Age INT64) PRIMARY KEY (SingerId)"
)


def open_with(tmp_path: Path, *ddl: str) -> changestream.EmbeddedDatabase:
    db = changestream.open(str(tmp_path / "capture.db"))
    db.execute_ddl([SINGERS, *ddl])
    return db


def records(db: changestream.EmbeddedDatabase, stream: str) -> list[DataChangeRecord]:
    """Every data change record of ``stream`` so far, across all live partitions."""
    start = store_of(db).catalog().stream(stream).created_ts
    end = store_of(db).last_commit_ts()
    out: list[DataChangeRecord] = []
    for partition in db.partition_history(stream):
        begin = max(start, partition.start_timestamp)
        out.extend(
            r
            for r in db.read_change_stream(stream, begin, end, partition.token, 1000)
            if isinstance(r, DataChangeRecord)
        )
    return sorted(out, key=lambda r: (r.commit_timestamp, r.record_sequence))


def mods(record: DataChangeRecord) -> list[dict[str, Any]]:
    return [m.to_dict() for m in record.mods]


def write_insert_update_delete(db: changestream.EmbeddedDatabase) -> None:
    with db.transaction() as tx:
        tx.insert("Singers", ["SingerId", "FirstName", "LastName", "Age"], [[1, "Ann", "Lee", 30]])
    with db.transaction() as tx:
        tx.update("Singers", ["SingerId", "Age"], [[1, 31]])
    with db.transaction() as tx:
        tx.delete("Singers", [(1,)])


EXPECTED = {
    "OLD_AND_NEW_VALUES": [
        ("INSERT", {"FirstName": "Ann", "LastName": "Lee", "Age": 30}, {}),
        ("UPDATE", {"Age": 31}, {"Age": 30}),
        ("DELETE", {}, {"FirstName": "Ann", "LastName": "Lee", "Age": 31}),
    ],
    "NEW_VALUES": [
        ("INSERT", {"FirstName": "Ann", "LastName": "Lee", "Age": 30}, {}),
        ("UPDATE", {"Age": 31}, {}),
        ("DELETE", {}, {}),
    ],
    "NEW_ROW": [
        ("INSERT", {"FirstName": "Ann", "LastName": "Lee", "Age": 30}, {}),
        ("UPDATE", {"FirstName": "Ann", "LastName": "Lee", "Age": 31}, {}),
        ("DELETE", {}, {}),
    ],
    "NEW_ROW_AND_OLD_VALUES": [
        ("INSERT", {"FirstName": "Ann", "LastName": "Lee", "Age": 30}, {}),
        ("UPDATE", {"FirstName": "Ann", "LastName": "Lee", "Age": 31}, {"Age": 30}),
        ("DELETE", {}, {"FirstName": "Ann", "LastName": "Lee", "Age": 31}),
    ],
}


@pytest.mark.parametrize("capture", list(EXPECTED))
def test_value_capture_types(tmp_path: Path, capture: str) -> None:
    db = open_with(
        tmp_path, f"CREATE CHANGE STREAM S FOR Singers OPTIONS (value_capture_type = '{capture}')"
    )
    write_insert_update_delete(db)
    got = records(db, "S")
    assert [
        (r.mod_type, *(lambda m: (m["new_values"], m["old_values"]))(mods(r)[0])) for r in got
    ] == (EXPECTED[capture])
    assert all(r.value_capture_type == capture for r in got)
    assert all(r.mods[0].keys == {"SingerId": 1} for r in got)
    # column_types lists the key plus exactly the columns the mods carry, in schema order.
    for record in got:
        carried = set(record.mods[0].new_values) | set(record.mods[0].old_values)
        names = [c.name for c in record.column_types]
        assert names == ["SingerId"] + [n for n in ("FirstName", "LastName", "Age") if n in carried]
        assert [c.ordinal_position for c in record.column_types] == sorted(
            c.ordinal_position for c in record.column_types
        )
    db.close()


def test_tracked_columns_and_keys_only(tmp_path: Path) -> None:
    db = open_with(
        tmp_path,
        "CREATE CHANGE STREAM AgeOnly FOR Singers(Age)",
        "CREATE CHANGE STREAM KeysOnly FOR Singers()",
    )
    write_insert_update_delete(db)
    with db.transaction() as tx:
        tx.insert("Singers", ["SingerId", "FirstName"], [[2, "Bo"]])
    with db.transaction() as tx:
        tx.update("Singers", ["SingerId", "FirstName"], [[2, "Bob"]])
    age = records(db, "AgeOnly")
    assert [(r.mod_type, mods(r)[0]["new_values"], mods(r)[0]["old_values"]) for r in age] == [
        ("INSERT", {"Age": 30}, {}),
        ("UPDATE", {"Age": 31}, {"Age": 30}),
        ("DELETE", {}, {"Age": 31}),
        ("INSERT", {"Age": None}, {}),
    ]
    keys = records(db, "KeysOnly")
    assert [(r.mod_type, mods(r)[0]) for r in keys] == [
        ("INSERT", {"keys": {"SingerId": 1}, "new_values": {}, "old_values": {}}),
        ("DELETE", {"keys": {"SingerId": 1}, "new_values": {}, "old_values": {}}),
        ("INSERT", {"keys": {"SingerId": 2}, "new_values": {}, "old_values": {}}),
    ]
    db.close()


def test_for_all_tracks_tables_created_later_and_alter_changes_tracking(tmp_path: Path) -> None:
    db = open_with(tmp_path, "CREATE CHANGE STREAM Everything FOR ALL")
    db.execute_ddl(
        "CREATE TABLE Albums (AlbumId INT64 NOT NULL, Title STRING(MAX)) PRIMARY KEY (AlbumId)"
    )
    with db.transaction() as tx:
        tx.insert("Albums", ["AlbumId", "Title"], [[7, "Blue"]])
        tx.insert("Singers", ["SingerId"], [[1]])
    got = records(db, "Everything")
    assert [(r.table_name, r.record_sequence) for r in got] == [
        ("Albums", "00000000"),
        ("Singers", "00000001"),
    ]
    assert {r.number_of_records_in_transaction for r in got} == {2}
    assert [r.is_last_record_in_transaction_in_partition for r in got] == [False, True]
    db.execute_ddl("ALTER CHANGE STREAM Everything SET FOR Albums")
    with db.transaction() as tx:
        tx.insert("Albums", ["AlbumId"], [[8]])
        tx.insert("Singers", ["SingerId"], [[2]])
    assert [r.table_name for r in records(db, "Everything")][2:] == ["Albums"]
    db.execute_ddl("ALTER CHANGE STREAM Everything DROP FOR ALL")
    with db.transaction() as tx:
        tx.insert("Albums", ["AlbumId"], [[9]])
    assert len(records(db, "Everything")) == 3
    db.close()


def test_one_record_per_table_mod_type_and_partition(tmp_path: Path) -> None:
    db = open_with(tmp_path, "CREATE CHANGE STREAM S FOR Singers")
    with db.transaction() as tx:
        tx.insert("Singers", ["SingerId", "Age"], [[i, i] for i in range(1, 7)])
    db.split_at("Singers", (4,))
    with db.transaction(tag="batch") as tx:
        tx.update("Singers", ["SingerId", "Age"], [[1, 10], [5, 50], [2, 20], [6, 60]])
        tx.delete("Singers", [(3,)])
    got = [r for r in records(db, "S") if r.transaction_tag == "batch"]
    summary = [
        (
            r.record_sequence,
            r.mod_type,
            [m.keys["SingerId"] for m in r.mods],
            r.is_last_record_in_transaction_in_partition,
        )
        for r in got
    ]
    assert sorted(summary) == [
        ("00000000", "UPDATE", [1, 2], False),
        ("00000001", "UPDATE", [5, 6], True),
        ("00000002", "DELETE", [3], True),
    ]
    assert {r.number_of_records_in_transaction for r in got} == {3}
    assert {r.number_of_partitions_in_transaction for r in got} == {2}
    assert len({r.server_transaction_id for r in got}) == 1
    db.close()


def test_net_effect_of_several_writes_to_one_row_in_a_transaction(tmp_path: Path) -> None:
    db = open_with(tmp_path, "CREATE CHANGE STREAM S FOR Singers")
    with db.transaction() as tx:
        tx.insert("Singers", ["SingerId", "Age"], [[1, 1], [2, 2]])
    with db.transaction(tag="t") as tx:
        tx.insert("Singers", ["SingerId", "Age"], [[3, 3]])
        tx.update("Singers", ["SingerId", "Age"], [[3, 4]])  # insert+update → INSERT
        tx.insert("Singers", ["SingerId", "Age"], [[4, 4]])
        tx.delete("Singers", [(4,)])  # insert+delete → nothing
        tx.update("Singers", ["SingerId", "Age"], [[1, 10]])
        tx.update("Singers", ["SingerId", "Age"], [[1, 11]])  # update+update → one UPDATE
        tx.delete("Singers", [(2,)])
        tx.insert("Singers", ["SingerId", "Age"], [[2, 20]])  # delete+insert → UPDATE
    got = [(r.mod_type, mods(r)) for r in records(db, "S") if r.transaction_tag == "t"]
    assert got == [
        (
            "INSERT",
            [
                {
                    "keys": {"SingerId": 3},
                    "new_values": {"FirstName": None, "LastName": None, "Age": 4},
                    "old_values": {},
                }
            ],
        ),
        (
            "UPDATE",
            [
                {"keys": {"SingerId": 1}, "new_values": {"Age": 11}, "old_values": {"Age": 1}},
                {
                    "keys": {"SingerId": 2},
                    "new_values": {"FirstName": None, "LastName": None, "Age": 20},
                    "old_values": {"FirstName": None, "LastName": None, "Age": 2},
                },
            ],
        ),
    ]
    db.close()


def test_a_row_inserted_then_replaced_in_one_transaction_is_an_insert(tmp_path: Path) -> None:
    db = open_with(tmp_path, "CREATE CHANGE STREAM S FOR Singers")
    with db.transaction() as tx:
        tx.insert("Singers", ["SingerId", "Age"], [[2, 2]])
    with db.transaction(tag="t") as tx:
        tx.insert("Singers", ["SingerId", "Age"], [[1, 1]])
        tx.replace("Singers", ["SingerId", "Age"], [[1, 5]])  # insert+replace → INSERT
        tx.update("Singers", ["SingerId", "Age"], [[2, 3]])
        tx.replace("Singers", ["SingerId", "Age"], [[2, 4]])  # update+replace → UPDATE from 2
    got = [(r.mod_type, mods(r)) for r in records(db, "S") if r.transaction_tag == "t"]
    full = {"FirstName": None, "LastName": None}
    assert got == [
        ("INSERT", [{"keys": {"SingerId": 1}, "new_values": {**full, "Age": 5}, "old_values": {}}]),
        (
            "UPDATE",
            [
                {
                    "keys": {"SingerId": 2},
                    "new_values": {**full, "Age": 4},
                    "old_values": {**full, "Age": 2},
                }
            ],
        ),
    ]
    db.close()


def test_replace_insert_or_update_and_key_range_delete(tmp_path: Path) -> None:
    db = open_with(tmp_path, "CREATE CHANGE STREAM S FOR Singers")
    with db.transaction() as tx:
        tx.insert(
            "Singers", ["SingerId", "FirstName", "Age"], [[i, f"n{i}", i] for i in range(1, 6)]
        )
    with db.transaction(tag="replace") as tx:
        tx.replace("Singers", ["SingerId", "Age"], [[1, 100]])
        tx.insert_or_update("Singers", ["SingerId", "Age"], [[2, 200], [9, 900]])
    with db.transaction(tag="range") as tx:
        tx.delete("Singers", KeyRange(start_closed=(3,), end_open=(5,)))
    assert db.read("Singers", columns=["SingerId", "FirstName", "Age"]) == [
        (1, None, 100),
        (2, "n2", 200),
        (5, "n5", 5),
        (9, None, 900),
    ]
    got = {
        r.transaction_tag + ":" + r.mod_type: mods(r) for r in records(db, "S") if r.transaction_tag
    }
    assert got["replace:UPDATE"] == [
        {
            "keys": {"SingerId": 1},
            "new_values": {"FirstName": None, "LastName": None, "Age": 100},
            "old_values": {"FirstName": "n1", "LastName": None, "Age": 1},
        },
        {"keys": {"SingerId": 2}, "new_values": {"Age": 200}, "old_values": {"Age": 2}},
    ]
    assert got["replace:INSERT"] == [
        {
            "keys": {"SingerId": 9},
            "new_values": {"FirstName": None, "LastName": None, "Age": 900},
            "old_values": {},
        }
    ]
    assert [m["keys"] for m in got["range:DELETE"]] == [{"SingerId": 3}, {"SingerId": 4}]
    db.close()


def test_dml_is_captured_with_old_values(tmp_path: Path) -> None:
    db = open_with(tmp_path, "CREATE CHANGE STREAM S FOR Singers")
    with db.transaction(tag="dml") as tx:
        assert (
            tx.execute_update(
                "INSERT INTO Singers (SingerId, FirstName, Age) "
                "VALUES (1, 'Ann', 30), (2, 'Bo', 40)"
            )
            == 2
        )
        assert (
            tx.execute_update("UPDATE Singers SET Age = Age + 1 WHERE SingerId = @id", {"id": 1})
            == 1
        )
        assert tx.execute_update("DELETE FROM Singers WHERE Age > 35") == 1
    with db.transaction(tag="dml2") as tx:
        assert tx.execute_update("UPDATE Singers SET FirstName = 'Anna' WHERE true") == 1
    got = [(r.transaction_tag, r.mod_type, mods(r)) for r in records(db, "S")]
    assert got == [
        (
            "dml",
            "INSERT",
            [
                {
                    "keys": {"SingerId": 1},
                    "new_values": {"FirstName": "Ann", "LastName": None, "Age": 31},
                    "old_values": {},
                }
            ],
        ),
        (
            "dml2",
            "UPDATE",
            [
                {
                    "keys": {"SingerId": 1},
                    "new_values": {"FirstName": "Anna"},
                    "old_values": {"FirstName": "Ann"},
                }
            ],
        ),
    ]
    db.close()


def test_every_type_in_change_record_json(tmp_path: Path) -> None:
    db = changestream.open(str(tmp_path / "types.db"))
    db.execute_ddl(
        [
            "CREATE TABLE T (K STRING(10) NOT NULL, B BOOL, I INT64, F FLOAT64, N NUMERIC, "
            "S STRING(MAX), Y BYTES(MAX), D DATE, TS TIMESTAMP, J JSON, A ARRAY<INT64>, "
            "AS_ ARRAY<STRING(MAX)>) PRIMARY KEY (K)",
            "CREATE CHANGE STREAM S FOR T",
        ]
    )
    row = [
        "k",
        True,
        -5,
        1.5,
        decimal.Decimal("12.340"),
        "héllo",
        b"\x00\xff",
        dt.date(2024, 2, 29),
        dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
        {"b": [1, 2], "a": None},
        [1, None, 3],
        ["x", "y"],
    ]
    columns = ["K", "B", "I", "F", "N", "S", "Y", "D", "TS", "J", "A", "AS_"]
    with db.transaction() as tx:
        tx.insert("T", columns, [row])
    (record,) = records(db, "S")
    assert record.mods[0].new_values == {
        "B": True,
        "I": -5,
        "F": 1.5,
        "N": "12.340",
        "S": "héllo",
        "Y": base64.b64encode(b"\x00\xff").decode(),
        "D": "2024-02-29",
        "TS": "2024-01-02T03:04:05.000006Z",
        "J": {"b": [1, 2], "a": None},
        "A": [1, None, 3],
        "AS_": ["x", "y"],
    }
    types = {c.name: c.type for c in record.column_types}
    assert types["A"] == {"code": "ARRAY", "array_element_type": {"code": "INT64"}}
    assert types["N"] == {"code": "NUMERIC"} and types["J"] == {"code": "JSON"}
    assert db.read("T", [("k",)]) == [tuple(row)]
    db.close()


def test_no_record_when_only_untracked_columns_change(tmp_path: Path) -> None:
    db = open_with(tmp_path, "CREATE CHANGE STREAM S FOR Singers(Age)")
    with db.transaction() as tx:
        tx.insert("Singers", ["SingerId", "FirstName", "Age"], [[1, "a", 1]])
    with db.transaction() as tx:
        tx.update("Singers", ["SingerId", "FirstName"], [[1, "b"]])
    assert [r.mod_type for r in records(db, "S")] == ["INSERT"]
    db.close()


def test_rolled_back_transaction_leaves_no_data_and_no_record(tmp_path: Path) -> None:
    db = open_with(tmp_path, "CREATE CHANGE STREAM S FOR Singers")
    with pytest.raises(RuntimeError), db.transaction() as tx:
        tx.execute_update("INSERT INTO Singers (SingerId) VALUES (1)")
        tx.insert("Singers", ["SingerId"], [[2]])
        raise RuntimeError("boom")
    with (
        pytest.raises(changestream.AlreadyExists, match=r"row \(3,\) already exists"),
        db.transaction() as tx,
    ):
        tx.insert("Singers", ["SingerId"], [[3], [4]])
        tx.insert("Singers", ["SingerId"], [[3]])
    assert db.read("Singers") == []
    assert records(db, "S") == []
    assert store_of(db).last_commit_ts() <= now_us()
    db.close()


def test_empty_mutations_are_no_ops(tmp_path: Path) -> None:
    db = open_with(tmp_path, "CREATE CHANGE STREAM S FOR Singers")
    with db.transaction() as tx:
        tx.insert("Singers", ["SingerId"], [])
        tx.insert_or_update("Singers", ["SingerId", "Age"], [])
        tx.delete("Singers", [])
    assert records(db, "S") == []
    db.close()


def test_batch_inserts_are_stored_compact_and_read_back_in_the_seed_form(tmp_path: Path) -> None:
    db = open_with(
        tmp_path,
        "CREATE CHANGE STREAM AllOf FOR Singers",
        "CREATE CHANGE STREAM Names FOR Singers(FirstName)",
    )
    with db.transaction() as tx:
        # Columns out of schema order, one left out (NULL): the compiled builder's path.
        tx.insert("Singers", ["Age", "SingerId", "FirstName"], [[30, 1, "Ann"], [41, 2, "Bo"]])
    with db.transaction() as tx:
        # A batch and a single-row insert in one record: stored in the seed's form.
        tx.insert("Singers", ["SingerId", "FirstName", "LastName", "Age"], [[3, "Cy", "Ma", 5]])
        tx.insert_or_update("Singers", ["SingerId", "FirstName"], [[4, "Di"]])

    def row(key: int, first: str, last: str | None, age: int | None) -> dict[str, Any]:
        values = {"FirstName": first, "LastName": last, "Age": age}
        return {"keys": {"SingerId": key}, "new_values": values, "old_values": {}}

    expected = [
        [row(1, "Ann", None, 30), row(2, "Bo", None, 41)],
        [row(3, "Cy", "Ma", 5), row(4, "Di", None, None)],
    ]
    assert [mods(r) for r in records(db, "AllOf")] == expected
    names = [
        [{**m, "new_values": {"FirstName": m["new_values"]["FirstName"]}} for m in r]
        for r in expected
    ]
    assert [mods(r) for r in records(db, "Names")] == names

    stream_id = store_of(db).catalog().stream("AllOf").stream_id
    stored = (
        store_of(db)
        .connection()
        .execute(
            "SELECT commit_ts, payload FROM _cs_log WHERE stream_id = ? ORDER BY commit_ts",
            (stream_id,),
        )
        .fetchall()
    )
    first, second = (orjson.loads(payload) for _, payload in stored)
    assert "mods" not in first
    assert first["mod_columns"] == [["SingerId"], ["FirstName", "LastName", "Age"], []]
    assert first["mod_values"] == [[1, "Ann", None, 30], [2, "Bo", None, 41]]
    assert "mod_values" not in second and second["mods"] == expected[1]

    # The server sends what is stored as the seed's JSON, mods expanded, fields in order.
    read = records(db, "AllOf")
    for (commit_ts, payload), record in zip(stored, read, strict=True):
        line = orjson.loads(StoredDataChange(commit_ts, payload, record.partition_token).line())
        assert list(line["record"]) == list(record.to_dict())
        assert line["record"] == record.to_dict()
        assert record_from_line(line) == record
    db.close()
