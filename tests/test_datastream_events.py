"""The Datastream event envelope: the seed's INSERT → UPDATE → DELETE example, every column
type from real change records and snapshot reads, uuids, sort keys and schema keys."""

from __future__ import annotations

import gc
import re
import uuid
from pathlib import Path

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changestream.clock import now_us
from changestream.datastream.events import (
    BACKFILL_READ_METHOD,
    CDC_READ_METHOD,
    CdcBuilder,
    CdcMod,
    backfill_events,
    cdc_events,
    schema_key,
)
from changestream.errors import InvalidArgument
from tests.datastream_support import (
    ALL_TYPES_DDL,
    ENVELOPE_FIELDS,
    PK,
    SAMPLE_DDL,
    STREAM,
    T0,
    all_types_rows,
    open_db,
    read_mods,
    seed_events,
    table_of,
)

GENERIC = ENVELOPE_FIELDS
SOURCE_METADATA = [
    "database",
    "table",
    "is_deleted",
    "change_type",
    "tx_id",
    "commit_timestamp",
    "record_sequence",
    "mod_index",
    "primary_keys",
]
MILLIS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@pytest.mark.parametrize("capture", ["NEW_ROW", "NEW_ROW_AND_OLD_VALUES"])
def test_seed_insert_update_delete_gives_three_events(tmp_path: Path, capture: str) -> None:
    events = seed_events(tmp_path, capture)
    docs = [event.to_json_dict() for event in events]

    assert [list(doc) for doc in docs] == [[*GENERIC, "source_metadata", "payload"]] * 3
    assert [list(doc["source_metadata"]) for doc in docs] == [SOURCE_METADATA] * 3
    assert [doc["source_metadata"]["change_type"] for doc in docs] == ["INSERT", "UPDATE", "DELETE"]
    assert [doc["source_metadata"]["is_deleted"] for doc in docs] == [False, False, True]
    insert, update, delete = docs
    assert insert["payload"] == {"THIS_IS_MY_PK": PK, "FIELD1": "foo", "FIELD2": "TLV"}
    assert update["payload"] == {"THIS_IS_MY_PK": PK, "FIELD1": None, "FIELD2": "TLV"}
    if capture == "NEW_ROW_AND_OLD_VALUES":
        # The seed's DELETE carries the last row.
        assert delete["payload"] == update["payload"]
    else:
        assert delete["payload"] == {"THIS_IS_MY_PK": PK, "FIELD1": None, "FIELD2": None}
    for doc, event in zip(docs, events, strict=True):
        assert doc["stream_name"] == STREAM
        assert doc["read_method"] == CDC_READ_METHOD
        assert doc["object"] == "DB1_SAMPLE"
        assert doc["schema_key"] == schema_key(table_of(SAMPLE_DDL))
        assert doc["read_timestamp"] == "2019-11-07T07:37:16.808Z"
        assert MILLIS.match(doc["source_timestamp"])
        meta = doc["source_metadata"]
        assert (meta["database"], meta["table"]) == ("DB1", "SAMPLE")
        assert meta["primary_keys"] == ["THIS_IS_MY_PK"]
        assert meta["tx_id"] == event.source_metadata.tx_id
        assert meta["commit_timestamp"].startswith(doc["source_timestamp"][:-1])
        assert event.source_timestamp == event.source_metadata.commit_timestamp
        assert doc["sort_keys"] == [event.source_timestamp, 1, int(meta["record_sequence"]), 0]
    assert len({doc["uuid"] for doc in docs}) == 3
    assert [e.sort_keys for e in events] == sorted(e.sort_keys for e in events)


@settings(max_examples=60, deadline=None)
@given(
    stream=st.text(min_size=1, max_size=12),
    tx_id=st.text(max_size=12),
    sequence=st.integers(0, 99_999_999).map(lambda n: f"{n:08d}"),
    ts=st.integers(0, 2**62),
    first=st.integers(0, 5),
    count=st.integers(1, 4),
)
def test_the_mods_of_a_record_get_the_uuids_of_the_recipe(
    stream: str, tx_id: str, sequence: str, ts: int, first: int, count: int
) -> None:
    # A record's events share the first parts of their uuids' identity, worked out once;
    # each must still be the UUID 5 of its whole identity.
    table = table_of(SAMPLE_DDL)
    build = CdcBuilder(stream, "db", table, 1)
    mods = [({"THIS_IS_MY_PK": str(i)}, {"FIELD1": "a", "FIELD2": "b"}, {}) for i in range(count)]
    events = build.record(ts, tx_id, sequence, "INSERT", mods, first_index=first)
    namespace = uuid.UUID("6b19f7f1-b143-460a-aabc-117f902a791b")
    expected = [
        str(
            uuid.uuid5(
                namespace,
                orjson.dumps(["cdc", stream, "db_SAMPLE", ts, tx_id, sequence, i]).decode(),
            )
        )
        for i in range(first, first + count)
    ]
    assert [e.uuid for e in events] == expected
    assert [e.sort_keys for e in events] == [
        (ts, 1, int(sequence), i) for i in range(first, first + count)
    ]


@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=40))
def test_an_event_uuid_is_the_uuid5_of_its_identity_whatever_the_digits(identity: str) -> None:
    """The uuid is spelled out from the SHA-1 digest (faster than ``uuid.uuid5``): every
    value of the digits the version and variant overwrite gives uuid5's text."""
    from changestream.datastream.events import _uuid_of

    namespace = uuid.UUID("6b19f7f1-b143-460a-aabc-117f902a791b")
    assert _uuid_of(identity.encode()) == str(uuid.uuid5(namespace, identity))


def test_uuids_are_deterministic_per_change(tmp_path: Path) -> None:
    table = table_of(SAMPLE_DDL)
    mod = CdcMod(
        100,
        "7",
        "00000001",
        2,
        "UPDATE",
        {"THIS_IS_MY_PK": "5"},
        {"FIELD1": "a", "FIELD2": "b"},
        {},
    )
    first = cdc_events("s", "db", table, [mod], read_timestamp_us=1)[0]
    # The recipe is fixed: a UUID 5 of the change's identity, stable across releases.
    namespace = uuid.UUID("6b19f7f1-b143-460a-aabc-117f902a791b")
    identity = orjson.dumps(["cdc", "s", "db_SAMPLE", 100, "7", "00000001", 2]).decode()
    assert first.uuid == str(uuid.uuid5(namespace, identity))
    # Re-emitted after a crash: read later, same change → same uuid.
    again = cdc_events("s", "db", table, [mod], read_timestamp_us=999)[0]
    assert again.uuid == first.uuid
    others = [
        cdc_events("other", "db", table, [mod], 1)[0],
        cdc_events("s", "db2", table, [mod], 1)[0],
        cdc_events("s", "db", table, [CdcMod(101, *_rest(mod))], 1)[0],
        cdc_events("s", "db", table, [_with(mod, mod_index=3)], 1)[0],
        cdc_events("s", "db", table, [_with(mod, record_sequence="00000002")], 1)[0],
    ]
    assert len({first.uuid, *(event.uuid for event in others)}) == 6

    row = (5, "a", "b")
    backfill = backfill_events("s", "db", table, [row], 50, read_timestamp_us=1)[0]
    assert backfill_events("s", "db", table, [row], 50, 2)[0].uuid == backfill.uuid
    # Uuids follow what was read, not when: the same row read again in a later snapshot (a
    # chunk re-read after a crash) keeps its uuid; a changed row gets another.
    assert backfill_events("s", "db", table, [row], 51, 2)[0].uuid == backfill.uuid
    backfill_identity = orjson.dumps(["backfill", "s", "db_SAMPLE", [5, "a", "b"]]).decode()
    assert backfill.uuid == str(uuid.uuid5(namespace, backfill_identity))
    assert backfill_events("s", "db", table, [(5, "changed", "b")], 50, 2)[0].uuid != backfill.uuid
    assert backfill_events("s", "db", table, [(6, "a", "b")], 50, 2)[0].uuid != backfill.uuid
    assert backfill.uuid != first.uuid


def test_events_compare_and_show_their_data_not_the_row_as_stored() -> None:
    table = table_of(SAMPLE_DDL)
    mod = CdcMod(100, "7", "00000001", 0, "UPDATE", {"THIS_IS_MY_PK": "5"}, FIELDS, {"FIELD1": "z"})
    event = cdc_events("s", "db", table, [mod], read_timestamp_us=1)[0]
    assert event.record_payload is not None and event.record_old_values is not None
    bare = msgspec.structs.replace(
        event, table=table_of(ALL_TYPES_DDL), record_payload=None, record_old_values=None
    )
    assert bare == event
    assert not bare != event  # noqa: SIM202 (``!=`` must agree with ``==``)
    assert msgspec.structs.replace(event, uuid="other") != event
    assert msgspec.structs.replace(event, payload={**event.payload, "FIELD1": "y"}) != event
    assert event != "not an event"
    assert repr(bare) == repr(event)
    assert repr(event).startswith("Event(stream_name='s', ")
    assert "record_payload=" not in repr(event) and "Table(" not in repr(event)
    # Nothing refers back to an event, so the collector need not track the thousands a task
    # holds; a cycle through one would never be collected.
    assert not gc.is_tracked(event) and not gc.is_tracked(event.source_metadata)


FIELDS = {"FIELD1": "a", "FIELD2": "b"}


def _rest(mod: CdcMod) -> tuple[object, ...]:
    return (
        mod.server_transaction_id,
        mod.record_sequence,
        mod.mod_index,
        mod.mod_type,
        mod.keys,
        mod.new_values,
        mod.old_values,
    )


def _with(mod: CdcMod, **changes: object) -> CdcMod:
    fields = {
        "commit_timestamp": mod.commit_timestamp,
        "server_transaction_id": mod.server_transaction_id,
        "record_sequence": mod.record_sequence,
        "mod_index": mod.mod_index,
        "mod_type": mod.mod_type,
        "keys": mod.keys,
        "new_values": mod.new_values,
        "old_values": mod.old_values,
    }
    fields.update(changes)
    return CdcMod(**fields)  # type: ignore[arg-type]


def test_sort_keys_put_backfill_before_later_cdc_and_order_cdc() -> None:
    table = table_of(SAMPLE_DDL)
    snapshot = 1_000
    backfill = backfill_events("s", "db", table, [(1, "old", "x")], snapshot, 5_000)[0]
    assert backfill.read_method == BACKFILL_READ_METHOD
    assert backfill.source_timestamp == snapshot
    assert backfill.sort_keys == (snapshot, 0, 0, 0)
    assert backfill.source_metadata.change_type == "INSERT"
    assert backfill.source_metadata.tx_id is None
    row = {"FIELD1": "new", "FIELD2": "x"}
    keys = {"THIS_IS_MY_PK": 1}
    cdc = cdc_events(
        "s",
        "db",
        table,
        [
            CdcMod(snapshot, "1", "00000000", 0, "UPDATE", keys, row, {}),
            CdcMod(snapshot + 1, "2", "00000000", 1, "UPDATE", keys, row, {}),
            CdcMod(snapshot + 1, "2", "00000001", 0, "UPDATE", keys, row, {}),
            CdcMod(snapshot + 2, "3", "00000000", 0, "DELETE", keys, {}, {}),
        ],
        5_000,
    )
    shuffled = [cdc[3], cdc[1], backfill, cdc[2], cdc[0]]
    assert sorted(shuffled, key=lambda e: e.sort_keys) == [backfill, *cdc]


def test_schema_key_follows_the_ddl() -> None:
    base = schema_key(table_of(SAMPLE_DDL))
    assert schema_key(table_of(SAMPLE_DDL)) == base
    changed_type = SAMPLE_DDL.replace("FIELD1 STRING(MAX)", "FIELD1 INT64")
    renamed = SAMPLE_DDL.replace("FIELD1", "FIELD3")
    added = SAMPLE_DDL.replace("FIELD2 STRING(MAX) NOT NULL", "FIELD2 STRING(MAX) NOT NULL, X BOOL")
    keys = {base, *(schema_key(table_of(ddl)) for ddl in (changed_type, renamed, added))}
    assert len(keys) == 4


def test_every_type_decodes_to_what_the_database_reads(tmp_path: Path) -> None:
    db = open_db(
        str(tmp_path / "src.db"),
        [
            ALL_TYPES_DDL,
            "CREATE CHANGE STREAM S FOR ALL "
            "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
        ],
    )
    table = table_of(ALL_TYPES_DDL)
    names = [c.name for c in table.columns]
    start = now_us()
    with db.transaction() as tx:
        tx.insert("AllTypes", names, [list(row) for row in all_types_rows()])
    snapshot = now_us()
    rows = db.read("AllTypes")
    with db.transaction() as tx:
        tx.delete("AllTypes", [[1]])
    mods = [mod for _, mod in read_mods(db, "S", start, now_us() + 1)]
    db.close()

    inserts = cdc_events("s", "shop", table, mods[:3], T0)
    assert [tuple(e.payload.values()) for e in inserts] == rows
    backfill = backfill_events("s", "shop", table, rows, snapshot, T0)
    assert [e.payload for e in backfill] == [e.payload for e in inserts]
    assert [e.to_json_dict()["payload"] for e in backfill] == [
        e.to_json_dict()["payload"] for e in inserts
    ]
    (delete,) = cdc_events("s", "shop", table, mods[3:], T0)
    assert delete.is_deleted and tuple(delete.payload.values()) == rows[0]

    payload = inserts[0].to_json_dict()["payload"]
    assert payload["I"] == -(2**63)  # INT64 as a JSON number
    assert payload["F"] == "Infinity"
    assert payload["N"] == "-12345678901234567890123456789.123456789"
    assert payload["Y"] == "AP8Q"
    assert payload["D"] == "0001-01-01"
    assert payload["T"] == "2019-11-07T02:15:39.123456Z"
    assert payload["J"] == '{"a":{"nested":true},"b":[1,2.5,null]}'
    assert payload["AN"] == ["1.50", None]
    assert payload["AJ"] == ['{"k":"v"}', None, "[1]"]


def test_int64_as_decimal_string_is_accepted() -> None:
    table = table_of(SAMPLE_DDL)
    mod = CdcMod(
        1, "1", "0", 0, "INSERT", {"THIS_IS_MY_PK": "-42"}, {"FIELD1": None, "FIELD2": "x"}, {}
    )
    assert cdc_events("s", "db", table, [mod], 1)[0].payload["THIS_IS_MY_PK"] == -42


@pytest.mark.parametrize(
    ("mod", "message"),
    [
        (CdcMod(1, "1", "0", 0, "UPDATE", {"THIS_IS_MY_PK": 1}, {"FIELD1": "a"}, {}), "whole rows"),
        (CdcMod(1, "1", "0", 0, "REPLACE", {"THIS_IS_MY_PK": 1}, {}, {}), "mod_type"),
        (
            CdcMod(
                1,
                "1",
                "0",
                0,
                "INSERT",
                {"THIS_IS_MY_PK": 1},
                {"FIELD1": "a", "FIELD2": "b", "X": 1},
                {},
            ),
            "not in table",
        ),
        (
            CdcMod(
                1,
                "1",
                "0",
                0,
                "INSERT",
                {"THIS_IS_MY_PK": "one"},
                {"FIELD1": "a", "FIELD2": "b"},
                {},
            ),
            "cannot hold",
        ),
    ],
)
def test_malformed_mods_are_rejected(mod: CdcMod, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        cdc_events("s", "db", table_of(SAMPLE_DDL), [mod], 1)


def test_backfill_rows_must_have_every_column() -> None:
    with pytest.raises(InvalidArgument, match="must have 3 values"):
        backfill_events("s", "db", table_of(SAMPLE_DDL), [(1, "a")], 1, 1)


_DECODER_DDL = (
    "CREATE TABLE Pair (A INT64 NOT NULL, `odd 'name'` STRING(MAX) NOT NULL, I INT64, "
    "N NUMERIC, T TIMESTAMP, AI ARRAY<INT64>) PRIMARY KEY (A, `odd 'name'`)"
)
_INTEGERS = st.sampled_from(["12", "-3", "0"])
#: Each column's values: mostly ones it holds (NULL among them), now and then one it cannot.
_COLUMN_VALUES = {
    "A": _INTEGERS,
    "odd 'name'": st.text(max_size=3),
    "I": st.none() | _INTEGERS,
    "N": st.none() | st.sampled_from(["1.50", "-2"]),
    "T": st.none() | st.just("2019-11-07T02:15:39.123456Z"),
    "AI": st.none() | st.lists(st.none() | _INTEGERS, max_size=2),
}
_BAD_VALUES = st.sampled_from(["x", "", "1e", ["y"]])
_KEY_NAMES = ["A", "odd 'name'"]
_VALUE_NAMES = ["I", "N", "T", "AI"]


def _value(draw: st.DrawFn, name: str) -> object:
    bad = draw(st.integers(0, 9)) == 0
    return draw(_BAD_VALUES if bad else _COLUMN_VALUES[name])


@st.composite
def _near_mods(draw: st.DrawFn) -> tuple[dict[str, object], dict[str, object]]:
    """A mod's keys and values: the table's columns, some of them moved to the other side,
    dropped, or joined by an unknown one."""
    keys = {name: _value(draw, name) for name in _KEY_NAMES}
    values = {name: _value(draw, name) for name in _VALUE_NAMES}
    for _ in range(draw(st.integers(0, 2))):
        side = draw(st.sampled_from([keys, values]))
        other = values if side is keys else keys
        action = draw(st.sampled_from(["drop", "move", "unknown"]))
        if action == "unknown":
            side["Unknown"] = _value(draw, "I")
        elif side:
            name = draw(st.sampled_from(sorted(side)))
            moved = side.pop(name)
            if action == "move":
                other[name] = moved
    return keys, values


@settings(max_examples=400, deadline=None)
@given(mod=_near_mods())
def test_the_compiled_row_decoder_decodes_as_the_generic_one_or_leaves_it_to_it(
    mod: tuple[dict[str, object], dict[str, object]],
) -> None:
    """The row decoder compiled for a table gives what the generic decoding gives, or None
    (for mods of other columns, or values that do not decode), which leaves the mod to the
    generic one: it never decodes what the generic one rejects, nor decodes differently."""
    from changestream.datastream.events import _decode_row, _row_decoder, table_plan

    keys, values = mod
    table = table_of(_DECODER_DDL)
    plan = table_plan(table)
    compiled = _row_decoder(plan, table)(keys, values)
    try:
        generic = _decode_row(plan, table, (keys, values))
    except InvalidArgument:
        assert compiled is None
        return
    if compiled is not None:
        assert compiled == generic
        assert [list(part) for part in compiled] == [list(part) for part in generic]  # order


def test_the_compiled_row_decoder_takes_the_usual_mods() -> None:
    from changestream.datastream.events import _decode_row, _row_decoder, table_plan

    table = table_of(_DECODER_DDL)
    plan = table_plan(table)
    keys = {"A": "7", "odd 'name'": "k"}
    values = {"I": "-3", "N": "1.50", "T": "2019-11-07T02:15:39.123456Z", "AI": ["1", None]}
    compiled = _row_decoder(plan, table)(keys, values)
    assert compiled is not None and compiled == _decode_row(plan, table, (keys, values))
    assert compiled[1]["A"] == 7 and compiled[1]["AI"] == [1, None]
