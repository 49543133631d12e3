"""The compiled Avro encoders write the bytes fastavro writes for the same schema and values."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import fastavro
import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changestream.datastream._avro import avro_plan, avro_schema
from changestream.datastream.avro_binary import compile_encoder, long_bytes
from changestream.datastream.events import CdcMod, Event, backfill_events, cdc_events
from changestream.ddl.schema import Column, Table
from changestream.errors import InvalidArgument
from changestream.streams.origins import TableOrigin
from changestream.types import ColumnType
from tests.datastream_support import ALL_TYPES_DDL, all_types_rows, table_of

ALL_TYPES = table_of(ALL_TYPES_DDL)
_LONGS = st.integers(-(2**63), 2**63 - 1)
_AWARE = st.datetimes(
    min_value=dt.datetime(1, 1, 2), timezones=st.sampled_from([dt.UTC, dt.timezone.min])
)


def fastavro_bytes(schema: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


@given(_LONGS)
def test_a_long_is_the_zigzag_varint_fastavro_writes(value: int) -> None:
    assert long_bytes(value) == fastavro_bytes("long", value)
    assert long_bytes(value) == long_bytes(value)  # again, from the cache of large longs


@pytest.mark.parametrize(
    ("schema", "values"),
    [
        ("boolean", st.booleans()),
        ("long", _LONGS),
        ("int", st.integers(-(2**31), 2**31 - 1)),
        ("double", st.floats(allow_nan=True, allow_infinity=True)),
        ("float", st.floats(width=32, allow_nan=False)),
        ("string", st.text(st.characters(exclude_categories=("Cs",)))),
        ("bytes", st.binary()),
        ({"type": "int", "logicalType": "date"}, st.dates() | st.integers(-(2**31), 2**31 - 1)),
        ({"type": "long", "logicalType": "timestamp-micros"}, _AWARE | _LONGS),
        ({"type": "long", "logicalType": "timestamp-millis"}, _AWARE),
        (["null", "string"], st.none() | st.text(st.characters(exclude_categories=("Cs",)))),
        ({"type": "array", "items": ["null", "long"]}, st.lists(st.none() | _LONGS)),
        ({"type": "array", "items": ["string", "long"]}, st.lists(st.text() | _LONGS)),
        (
            {
                "type": "record",
                "name": "R",
                "fields": [
                    {"name": "a", "type": ["null", "double"]},
                    {"name": "b", "type": {"type": "array", "items": "bytes"}},
                ],
            },
            st.fixed_dictionaries(
                {"a": st.none() | st.floats(allow_nan=False), "b": st.lists(st.binary())}
            ),
        ),
    ],
    ids=lambda p: p if isinstance(p, str) else None,
)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=200)
@given(data=st.data())
def test_every_supported_schema_encodes_as_fastavro_does(
    schema: Any, values: st.SearchStrategy[Any], data: st.DataObject
) -> None:
    value = data.draw(values)
    assert compile_encoder(schema)(value) == fastavro_bytes(schema, value)


def test_a_schema_it_cannot_encode_is_refused_when_compiled() -> None:
    with pytest.raises(ValueError, match="union"):
        compile_encoder(["null", "long", "string"])
    with pytest.raises(ValueError, match="not supported"):
        compile_encoder("null")


def reference_record(event: Event) -> dict[str, Any]:
    """The event as the record fastavro writes for its schema: the form the files had
    before the compiled encoder (timestamps as longs, NUMERIC and JSON payloads as text)."""
    meta = event.source_metadata
    metadata: dict[str, Any] = (
        meta.to_json_dict()
        if meta.origin is not None
        else {
            "database": meta.database,
            "table": meta.table,
            "is_deleted": meta.is_deleted,
            "change_type": meta.change_type,
            "tx_id": meta.tx_id,
            "commit_timestamp": meta.commit_timestamp,
            "record_sequence": meta.record_sequence,
            "mod_index": meta.mod_index,
            "primary_keys": list(meta.primary_keys),
        }
    )
    names = [f["name"] for f in avro_schema(event.table)["fields"][-1]["type"]["fields"]]
    payload = {
        field: _columnar(column.type, event.payload[column.name])
        for field, column in zip(names, event.table.columns, strict=True)
    }
    return {
        "stream_name": event.stream_name,
        "read_method": event.read_method,
        "object": event.object,
        "schema_key": event.schema_key,
        "uuid": event.uuid,
        "read_timestamp": event.read_timestamp // 1000,
        "source_timestamp": event.source_timestamp // 1000,
        "sort_keys": list(event.sort_keys),
        "source_metadata": metadata,
        "payload": payload,
    }


def _columnar(ctype: ColumnType, value: Any) -> Any:
    if value is None:
        return None
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        return [_columnar(ctype.element, item) for item in value]
    if ctype.code == "NUMERIC":
        return format(value, "f")
    if ctype.code == "JSON":
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return value


def assert_encoded_as_fastavro(events: list[Event]) -> None:
    plan = avro_plan(events[0].table, events[0].source_metadata.flavor)
    for event in events:
        assert plan.encode(event) == fastavro_bytes(plan.schema, reference_record(event))


_ORIGINS = [
    None,
    TableOrigin("postgresql", "pg", "public", "all_types"),
    TableOrigin("mysql", "my", "shop", "all_types"),
]


@pytest.mark.parametrize("origin", _ORIGINS, ids=["own", "postgresql", "mysql"])
def test_events_of_every_column_type_encode_as_fastavro_writes_them(
    origin: TableOrigin | None,
) -> None:
    rows = all_types_rows()
    backfill = backfill_events("s", "DB1", ALL_TYPES, rows, 500, 1_573_112_236_808_123, origin)
    assert_encoded_as_fastavro(backfill)
    keys = {"Id": 7}
    values = {c.name: None for c in ALL_TYPES.non_key_columns}
    mods = [
        CdcMod(1_700_000_000_123_456, "42", "00000003", i, kind, keys, values, {})
        for i, kind in enumerate(["INSERT", "UPDATE", "DELETE"])
    ]
    cdc = [e for m in mods for e in cdc_events("s", "DB1", ALL_TYPES, [m], 1_700_000_000_999_000)]
    if origin is not None:  # as a source's changes carry it: its transaction and position
        position = "0/16B3748" if origin.kind == "postgresql" else "binlog.000003:4711"
        cdc = [
            msgspec.structs.replace(
                e,
                source_metadata=msgspec.structs.replace(
                    e.source_metadata, origin=origin, lsn=position
                ),
            )
            for e in cdc
        ]
    assert_encoded_as_fastavro(cdc)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "BOOL": st.booleans(),
    "INT64": _LONGS,
    "FLOAT64": st.floats(allow_nan=True, allow_infinity=True),
    "NUMERIC": st.decimals(places=9, min_value=-(10**28), max_value=10**28),
    "STRING": st.text(st.characters(exclude_categories=("Cs",)), max_size=8),
    "BYTES": st.binary(max_size=8),
    "DATE": st.dates(),
    "TIMESTAMP": st.datetimes(timezones=st.just(dt.UTC)),
    "JSON": _JSON,
}


@st.composite
def tables_and_rows(draw: st.DrawFn) -> tuple[Table, list[tuple[Any, ...]]]:
    codes = draw(st.lists(st.sampled_from(sorted(_SCALARS)), min_size=1, max_size=5))
    arrays = draw(st.lists(st.booleans(), min_size=len(codes), max_size=len(codes)))
    columns = [Column("K", ColumnType("INT64"), 1, not_null=True)]
    values: list[st.SearchStrategy[Any]] = [st.integers(0, 10**6)]
    for index, (code, array) in enumerate(zip(codes, arrays, strict=True), 2):
        scalar = ColumnType(code)
        ctype = ColumnType("ARRAY", element=scalar) if array else scalar
        columns.append(Column(f"c{index}", ctype, index))
        value = st.none() | _SCALARS[code]
        values.append(st.none() | st.lists(value, max_size=3) if array else value)
    table = Table(name="T", columns=tuple(columns), primary_key=("K",))
    rows = draw(st.lists(st.tuples(*values), min_size=1, max_size=4))
    return table, rows


@settings(max_examples=150, deadline=None)
@given(table_and_rows=tables_and_rows(), at=st.integers(0, 2**62))
def test_events_of_any_table_encode_as_fastavro_writes_them(
    table_and_rows: tuple[Table, list[tuple[Any, ...]]], at: int
) -> None:
    table, rows = table_and_rows
    assert_encoded_as_fastavro(backfill_events("s", "db", table, rows, at, at + 1))


def test_a_value_avro_cannot_hold_names_the_column() -> None:
    (event,) = backfill_events(
        "s", "DB1", ALL_TYPES, all_types_rows()[:1], 500, 1_573_112_236_808_123
    )
    bad = msgspec.structs.replace(event, payload={**event.payload, "S": {1}})
    with pytest.raises(InvalidArgument, match=r"cannot be written as Avro: column S \(STRING"):
        avro_plan(ALL_TYPES).encode(bad)
