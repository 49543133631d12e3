"""Every example record of the seed, reproduced field by field.

The one deliberate difference: the seed shows ``{"code": "INT"}`` for the INT64 Balance column,
while the seed also says the type "matches the type structure described in the Spanner API
reference", whose TypeCode is ``INT64``; we follow the API reference.
"""

from __future__ import annotations

import gc
import pickle
from pathlib import Path
from typing import Any

import msgspec
import pytest

import changestream
from changestream import COMMIT_TIMESTAMP, ChildPartitionsRecord, DataChangeRecord, HeartbeatRecord
from tests.conftest import ACCOUNT_BALANCE, FixedClock, OpenDb

TAG = "app=banking,env=prod,action=update"
COMMIT = "2022-09-27T12:30:00.123456Z"

ACCOUNT_ID = {
    "name": "AccountId",
    "type": {"code": "STRING"},
    "is_primary_key": True,
    "ordinal_position": 1,
}
LAST_UPDATE = {
    "name": "LastUpdate",
    "type": {"code": "TIMESTAMP"},
    "is_primary_key": False,
    "ordinal_position": 2,
}
BALANCE = {
    "name": "Balance",
    "type": {"code": "INT64"},
    "is_primary_key": False,
    "ordinal_position": 3,
}


def open_bank(
    open_db: OpenDb, tmp_path: Path, capture: str
) -> tuple[changestream.Database, FixedClock]:
    clock = FixedClock("2022-09-27T11:00:00Z")
    db = open_db(str(tmp_path / "bank.db"), clock=clock)
    db.execute_ddl(
        [
            ACCOUNT_BALANCE,
            "CREATE CHANGE STREAM Bank FOR AccountBalance "
            f"OPTIONS (value_capture_type = '{capture}')",
        ]
    )
    return db, clock


def created(db: Any) -> int:
    """When the stream was created: where its first partition starts (embedded or remote)."""
    return min(p.start_timestamp for p in db.partition_history("Bank"))


def records_between(
    db: changestream.Database, start: Any, end: Any
) -> list[changestream.ChangeRecord]:
    """Run the seed's workflow from ``start`` to ``end``: the initial query, then every
    partition (children after their parents), returning everything read in order."""
    out: list[changestream.ChangeRecord] = []
    initial = list(db.read_change_stream("Bank", start, end, None, 1000))
    queue = [(c.token, initial[0].start_timestamp) for c in initial[0].child_partitions]
    seen = set()
    while queue:
        token, child_start = queue.pop(0)
        if token in seen:
            continue
        seen.add(token)
        for record in db.read_change_stream("Bank", child_start, end, token, 1000):
            out.append(record)
            if isinstance(record, ChildPartitionsRecord):
                queue.extend((c.token, record.start_timestamp) for c in record.child_partitions)
    return out


def data_records(records: list[changestream.ChangeRecord]) -> list[dict[str, Any]]:
    found = [r.to_dict() for r in records if isinstance(r, DataChangeRecord)]
    return sorted(found, key=lambda r: (r["commit_timestamp"], r["record_sequence"]))


def test_transfer_between_accounts_in_two_partitions(open_db: OpenDb, tmp_path: Path) -> None:
    db, clock = open_bank(open_db, tmp_path, "OLD_AND_NEW_VALUES")
    with db.transaction() as tx:
        tx.insert(
            "AccountBalance",
            ["AccountId", "LastUpdate", "Balance"],
            [
                ["Id1", "2022-09-26T11:28:00.189413Z", 1500],
                ["Id2", "2022-01-20T11:25:00.199915Z", 1500],
            ],
        )
    db.split_at("AccountBalance", ("Id2",))
    clock.set(COMMIT)
    with db.transaction(tag=TAG) as tx:
        tx.update(
            "AccountBalance",
            ["AccountId", "LastUpdate", "Balance"],
            [["Id1", COMMIT_TIMESTAMP, 1000], ["Id2", COMMIT_TIMESTAMP, 2000]],
        )
    assert changestream.clock.format_ts(changestream.clock.parse_ts(tx.commit_timestamp)) == COMMIT
    records = records_between(db, created(db), COMMIT)
    transfer = [r for r in data_records(records) if r["mod_type"] == "UPDATE"]
    server_transaction_id = transfer[0]["server_transaction_id"]
    assert isinstance(server_transaction_id, str) and server_transaction_id
    common = {
        "commit_timestamp": COMMIT,
        "server_transaction_id": server_transaction_id,
        "is_last_record_in_transaction_in_partition": True,
        "table_name": "AccountBalance",
        "column_types": [ACCOUNT_ID, LAST_UPDATE, BALANCE],
        "mod_type": "UPDATE",
        "value_capture_type": "OLD_AND_NEW_VALUES",
        "number_of_records_in_transaction": 2,
        "number_of_partitions_in_transaction": 2,
        "transaction_tag": TAG,
        "is_system_transaction": False,
    }
    assert transfer == [
        {
            **common,
            "record_sequence": "00000000",
            "mods": [
                {
                    "keys": {"AccountId": "Id1"},
                    "new_values": {"LastUpdate": COMMIT, "Balance": 1000},
                    "old_values": {"LastUpdate": "2022-09-26T11:28:00.189413Z", "Balance": 1500},
                }
            ],
        },
        {
            **common,
            "record_sequence": "00000001",
            "mods": [
                {
                    "keys": {"AccountId": "Id2"},
                    "new_values": {"LastUpdate": COMMIT, "Balance": 2000},
                    "old_values": {"LastUpdate": "2022-01-20T11:25:00.199915Z", "Balance": 1500},
                }
            ],
        },
    ]
    # The two records came from two different partitions, as the seed says.
    tokens = {
        r.partition_token
        for r in records
        if isinstance(r, DataChangeRecord) and r.mod_type == "UPDATE"
    }
    assert len(tokens) == 2
    db.close()


def seeded_single_account(
    open_db: OpenDb, tmp_path: Path, capture: str
) -> tuple[changestream.Database, FixedClock]:
    db, clock = open_bank(open_db, tmp_path, capture)
    with db.transaction() as tx:
        tx.insert(
            "AccountBalance",
            ["AccountId", "LastUpdate", "Balance"],
            [["Id1", "2022-09-26T11:28:00.189413Z", 1000]],
        )
    clock.set(COMMIT)
    with db.transaction(tag=TAG) as tx:
        tx.update("AccountBalance", ["AccountId", "LastUpdate"], [["Id1", COMMIT_TIMESTAMP]])
    return db, clock


def single_update(db: changestream.Database) -> dict[str, Any]:
    updates = [
        r
        for r in data_records(records_between(db, created(db), COMMIT))
        if r["mod_type"] == "UPDATE"
    ]
    assert len(updates) == 1
    record = updates[0]
    assert isinstance(record["server_transaction_id"], str)
    del record["server_transaction_id"]
    return record


SINGLE = {
    "commit_timestamp": COMMIT,
    "record_sequence": "00000000",
    "is_last_record_in_transaction_in_partition": True,
    "table_name": "AccountBalance",
    "mod_type": "UPDATE",
    "number_of_records_in_transaction": 1,
    "number_of_partitions_in_transaction": 1,
    "transaction_tag": TAG,
    "is_system_transaction": False,
}


def test_new_values_example(open_db: OpenDb, tmp_path: Path) -> None:
    db, _ = seeded_single_account(open_db, tmp_path, "NEW_VALUES")
    assert single_update(db) == {
        **SINGLE,
        "column_types": [ACCOUNT_ID, LAST_UPDATE],
        "mods": [
            {"keys": {"AccountId": "Id1"}, "new_values": {"LastUpdate": COMMIT}, "old_values": {}}
        ],
        "value_capture_type": "NEW_VALUES",
    }
    db.close()


def test_new_row_example(open_db: OpenDb, tmp_path: Path) -> None:
    db, _ = seeded_single_account(open_db, tmp_path, "NEW_ROW")
    assert single_update(db) == {
        **SINGLE,
        "column_types": [ACCOUNT_ID, LAST_UPDATE, BALANCE],
        "mods": [
            {
                "keys": {"AccountId": "Id1"},
                "new_values": {"LastUpdate": COMMIT, "Balance": 1000},
                "old_values": {},
            }
        ],
        "value_capture_type": "NEW_ROW",
    }
    db.close()


def test_heartbeat_example(open_db: OpenDb, tmp_path: Path) -> None:
    db, clock = seeded_single_account(open_db, tmp_path, "OLD_AND_NEW_VALUES")
    token = db.partitions("Bank")[0].token
    clock.set("2022-09-27T12:35:00.312486Z")
    reader = db.read_change_stream("Bank", "2022-09-27T12:31:00Z", None, token, 1000)
    heartbeat = next(reader)
    assert isinstance(heartbeat, HeartbeatRecord)
    assert heartbeat.to_dict() == {"timestamp": "2022-09-27T12:35:00.312486Z"}
    db.close()


def test_child_partitions_example_merge_reported_by_both_parents(
    open_db: OpenDb, tmp_path: Path
) -> None:
    db, clock = seeded_single_account(open_db, tmp_path, "OLD_AND_NEW_VALUES")
    clock.set("2022-09-27T12:31:00Z")
    db.split_at("AccountBalance", ("Id2",))
    parent_1, parent_2 = (p.token for p in db.partitions("Bank"))
    clock.set("2022-09-27T12:40:00.562986Z")
    db.merge_at("AccountBalance", ("Id2",))
    (child,) = db.partitions("Bank")
    expected = {
        "start_timestamp": "2022-09-27T12:40:00.562986Z",
        "record_sequence": "00000000",
        "child_partitions": [
            {"token": child.token, "parent_partition_tokens": [parent_1, parent_2]}
        ],
    }
    for parent in (parent_1, parent_2):
        records = list(db.read_change_stream("Bank", "2022-09-27T12:31:00Z", None, parent, 1000))
        assert [r.to_dict() for r in records] == [expected]
        assert isinstance(records[-1], ChildPartitionsRecord)
    db.close()


def test_initial_query_returns_child_partitions_with_no_parents(
    open_db: OpenDb, tmp_path: Path
) -> None:
    db, clock = seeded_single_account(open_db, tmp_path, "OLD_AND_NEW_VALUES")
    clock.set("2022-09-27T12:31:00Z")
    db.split_at("AccountBalance", ("Id2",))
    db.split_at("AccountBalance", ("Id3",))
    clock.set("2022-09-27T12:45:00Z")
    (record,) = db.read_change_stream("Bank", "2022-09-27T12:32:00Z", None, None, 10000)
    assert isinstance(record, ChildPartitionsRecord)
    assert record.to_dict() == {
        "start_timestamp": "2022-09-27T12:32:00.000000Z",
        "record_sequence": "00000000",
        "child_partitions": [
            {"token": p.token, "parent_partition_tokens": []} for p in db.partitions("Bank")
        ],
    }
    assert len(record.child_partitions) == 3
    db.close()


def test_json_forms_of_each_record_type(open_db: OpenDb, tmp_path: Path) -> None:
    db, _ = seeded_single_account(open_db, tmp_path, "OLD_AND_NEW_VALUES")
    import orjson

    for record in records_between(db, created(db), COMMIT):
        assert orjson.loads(record.to_json()) == record.to_dict()
    rows = list(
        db.execute_sql(
            'SELECT * FROM "spanner"."read_json_Bank"($1, $2, $3, $4, null)',
            [created(db), COMMIT, db.partitions("Bank")[0].token, 1000],
        )
    )
    assert [list(row[0]) for row in rows] == [["data_change_record"], ["data_change_record"]]
    google = list(
        db.execute_sql(
            "SELECT ChangeRecord FROM READ_Bank(start_timestamp => @s, end_timestamp => @e, "
            "partition_token => @t, heartbeat_milliseconds => 1000, read_options => NULL)",
            {"s": created(db), "e": COMMIT, "t": db.partitions("Bank")[0].token},
        )
    )
    assert len(google) == 2
    for (change_record,) in google:
        assert len(change_record) == 1
        (struct,) = change_record
        assert [
            len(struct[k])
            for k in ("data_change_record", "heartbeat_record", "child_partitions_record")
        ] == [1, 0, 0]
        assert struct["data_change_record"][0] == rows.pop(0)[0]["data_change_record"]
    db.close()


def test_records_of_the_same_columns_share_their_column_types_and_others_do_not() -> None:
    def payload(columns: list[dict[str, Any]]) -> bytes:
        record = DataChangeRecord.from_dict(1, _FIELDS | {"column_types": columns})
        return record.to_json().encode()

    array = {"code": "ARRAY", "array_element_type": {"code": "INT64"}}
    strings = {"code": "ARRAY", "array_element_type": {"code": "STRING"}}
    first = DataChangeRecord.from_payload(1, payload([ACCOUNT_ID, LAST_UPDATE]))
    second = DataChangeRecord.from_payload(2, payload([ACCOUNT_ID, LAST_UPDATE]))
    assert first.column_types is second.column_types
    ints = DataChangeRecord.from_payload(3, payload([ACCOUNT_ID | {"type": array}]))
    texts = DataChangeRecord.from_payload(4, payload([ACCOUNT_ID | {"type": strings}]))
    renamed = DataChangeRecord.from_payload(5, payload([ACCOUNT_ID | {"name": "Id"}]))
    assert [c.to_dict() for c in first.column_types] == [ACCOUNT_ID, LAST_UPDATE]
    assert [c.type for c in ints.column_types] == [array]
    assert [c.type for c in texts.column_types] == [strings]
    assert [c.name for c in renamed.column_types] == ["Id"]


def test_a_record_is_immutable_untracked_and_copied_with_changes() -> None:
    record = DataChangeRecord.from_dict(1, _FIELDS | {"column_types": [ACCOUNT_ID]}, "token")
    with pytest.raises(AttributeError):
        record.table_name = "other"  # type: ignore[misc]
    # Readers hold batches of records; nothing in a record refers back to it.
    assert not gc.is_tracked(record)
    moved = msgspec.structs.replace(record, partition_token="other")
    assert (moved.partition_token, record.partition_token) == ("other", "token")
    assert moved != record and msgspec.structs.replace(moved, partition_token="token") == record
    assert pickle.loads(pickle.dumps(record)) == record
    assert DataChangeRecord.from_payload(1, record.to_json().encode(), "token") == record


_FIELDS: dict[str, Any] = {
    "record_sequence": "00000000",
    "server_transaction_id": "tx",
    "is_last_record_in_transaction_in_partition": True,
    "table_name": "AccountBalance",
    "mods": [{"keys": {"AccountId": "a"}, "new_values": {}, "old_values": {}}],
    "mod_type": "UPDATE",
    "value_capture_type": "OLD_AND_NEW_VALUES",
    "number_of_records_in_transaction": 1,
    "number_of_partitions_in_transaction": 1,
    "transaction_tag": "",
    "is_system_transaction": False,
}
