"""The pipeline's columnar CDC path (``datastream.event_columns``) against the event path: from
the same change records of a real database, the same JSON lines byte for byte, the same
segments and the same staged replica rows, for every column type and metadata flavor."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import changestream
from changestream import DataChangeRecord
from changestream.datastream._avro import avro_plan_of
from changestream.datastream.event_columns import EventColumns, backfill_columns, record_columns
from changestream.datastream.events import Event, backfill_events, record_events
from changestream.datastream.segments import CDC_LANE, SegmentWriter
from changestream.embedded.database import store_of
from changestream.errors import InvalidArgument
from changestream.spark.replica import DeltaReplica
from changestream.streams.origins import TableOrigin, source_tag
from tests.datastream_support import ALL_TYPES_DDL, all_types_rows

STREAM = "projects/p/locations/l/streams/s"
ORIGINS = {
    "own": None,
    "postgresql": TableOrigin("postgresql", "pg", "public", "all_types"),
    "mysql": TableOrigin("mysql", "my", "shop", "all_types"),
}
COLUMNS = [
    "Id", "B", "I", "F", "N", "S", "Y", "D", "T", "J", "AI", "ArrS", "AN", "AD", "ArrT", "AY",
    "AF", "AB", "AJ", "odd name-1",
]  # fmt: skip


@contextlib.contextmanager
def _captured(path: Path, table_ddl: str) -> Iterator[tuple[changestream.EmbeddedDatabase, int]]:
    """A database at ``path`` with one table and a change stream of whole rows, and where
    its changes begin."""
    with changestream.open(str(path)) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl(
            [
                table_ddl,
                "CREATE CHANGE STREAM S FOR ALL "
                "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
            ]
        )
        yield db, store_of(db).last_commit_ts() + 1


def _records(db: changestream.EmbeddedDatabase, start: int) -> list[DataChangeRecord]:
    end = store_of(db).last_commit_ts()
    (partition,) = db.partitions("S")
    return [
        r
        for r in db.read_change_stream("S", start, end, partition.token)
        if isinstance(r, DataChangeRecord)
    ]


def _content(path: Path) -> Any:
    """A segment's bytes; an Avro one's records (its sync marker is random) and a gzip one's
    bytes uncompressed (its header names the temporary file)."""
    if path.name.endswith(".avro.seg"):
        with path.open("rb") as fo:
            return list(fastavro.reader(fo))
    if path.name.endswith(".gz.seg"):
        return gzip.decompress(path.read_bytes())
    return path.read_bytes()


def _line(event: Event) -> bytes:
    return orjson.dumps(event.to_json_dict(), option=orjson.OPT_APPEND_NEWLINE)


def _assert_same(columns: EventColumns | None, events: list[Event], encoding: str = "json") -> None:
    assert columns is not None and len(columns) == len(events) > 0
    assert columns.first == events[0]
    if encoding == "avro":
        assert columns.encoded == [avro_plan_of(e).encode(e) for e in events]
    else:
        assert columns.encoded == [_line(e) for e in events]
    assert columns.rows == [e.payload for e in events]
    assert list(zip(*columns.sort_key_columns, strict=True)) == [e.sort_keys for e in events]
    assert columns.uuids == [e.uuid for e in events]
    assert columns.deleted == [e.is_deleted for e in events]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[DataChangeRecord]]:
    """Every type's edge values inserted, updated and deleted in tagged transactions of
    several rows, and the table's change records."""
    path = tmp_path_factory.mktemp("columns") / "db.sqlite"
    with _captured(path, ALL_TYPES_DDL) as (db, start):
        rows = all_types_rows()
        with db.transaction(tag=source_tag("src", "tx-1", "binlog.000001:120")) as tx:
            tx.insert("AllTypes", COLUMNS, [list(r) for r in rows])
        with db.transaction(tag=source_tag("src", "tx-2", "binlog.000003:4711")) as tx:
            tx.update("AllTypes", ["Id", "S", "I"], [[r[0], "changed", 7] for r in rows])
        with db.transaction() as tx:
            tx.delete("AllTypes", [[rows[0][0]], [rows[-1][0]]])
        (table,) = db.tables()
        return table, _records(db, start)


@pytest.mark.parametrize("encoding", ["json", "avro"])
@pytest.mark.parametrize("flavor", sorted(ORIGINS))
def test_the_columns_are_the_events_of_the_same_records(
    flavor: str, encoding: str, written: Any
) -> None:
    table, records = written
    assert {r.mod_type for r in records} == {"INSERT", "UPDATE", "DELETE"}
    origin = ORIGINS[flavor]
    at = 1_700_000_000_123_456
    events = record_events(STREAM, "db", table, records, at, origin)
    columns = record_columns(STREAM, "db", table, records, at, origin, encoding=encoding)
    _assert_same(columns, events, encoding)
    assert record_columns(STREAM, "db", table, records, at, origin, encoding=None) == (
        dataclasses.replace(columns, encoded=[])
    )


@pytest.mark.parametrize("encoding", ["json", "avro"])
@pytest.mark.parametrize("flavor", sorted(ORIGINS))
def test_backfill_columns_are_the_backfill_events_of_the_same_rows(
    flavor: str, encoding: str, written: Any
) -> None:
    table, _ = written
    rows = all_types_rows()
    origin = ORIGINS[flavor]
    events = backfill_events(STREAM, "db", table, rows, 1_700_000_000_000_001, 7, origin)
    columns = backfill_columns(
        STREAM, "db", table, rows, 1_700_000_000_000_001, 7, origin, encoding=encoding
    )
    _assert_same(columns, events, encoding)
    assert backfill_columns(STREAM, "db", table, [], 1, 1, origin) is None


def test_records_written_before_columns_changed_are_fitted_as_events_are(tmp_path: Path) -> None:
    """Records committed before a column was added (with a DEFAULT) and another dropped
    make the same columns as events: fitted to the table as it is now."""
    table_ddl = "CREATE TABLE T (K INT64 NOT NULL, A STRING(MAX), Z INT64) PRIMARY KEY (K)"
    with _captured(tmp_path / "db.sqlite", table_ddl) as (db, start):
        with db.transaction() as tx:
            tx.insert("T", ["K", "A", "Z"], [[1, "a", 5], [2, "b", 6]])
        db.execute_ddl(
            ["ALTER TABLE T ADD COLUMN B INT64 DEFAULT (7)", "ALTER TABLE T DROP COLUMN Z"]
        )
        with db.transaction() as tx:
            tx.update("T", ["K", "B"], [[1, 8]])
            tx.delete("T", [[2]])
        (table,) = db.tables()
        records = _records(db, start)
    assert [r.mod_type for r in records] == ["INSERT", "UPDATE", "DELETE"]
    for encoding in ("json", "avro"):
        events = record_events(STREAM, "db", table, records, 3)
        _assert_same(
            record_columns(STREAM, "db", table, records, 3, encoding=encoding), events, encoding
        )
    assert [e.payload for e in events][:2] == [
        {"K": 1, "A": "a", "B": 7},
        {"K": 2, "A": "b", "B": 7},
    ]


def test_names_holding_a_stand_in_still_give_the_events_lines(written: Any) -> None:
    """The template is cut at stand-ins; a stream or database name that holds one gets each
    line written whole instead, the same bytes."""
    table, records = written
    rows = all_types_rows()
    for stream, database in [("s-7346019582113904771", "db"), ("s", "d\x00changestream-uuid\x00")]:
        events = record_events(stream, database, table, records, 1)
        _assert_same(record_columns(stream, database, table, records, 1), events)
        events = backfill_events(stream, database, table, rows, 2, 2)
        _assert_same(backfill_columns(stream, database, table, rows, 2, 2), events)


def test_no_mod_gives_no_columns_and_an_unknown_encoding_is_refused(written: Any) -> None:
    table, records = written
    assert record_columns(STREAM, "db", table, [], 1) is None
    with pytest.raises(InvalidArgument, match=r"encoding must be one of avro, json, json\.gz"):
        record_columns(STREAM, "db", table, records, 1, encoding="parquet")
    with pytest.raises(InvalidArgument, match="got 'csv'"):
        backfill_columns(STREAM, "db", table, all_types_rows(), 1, 1, encoding="csv")


@pytest.mark.parametrize("fmt", ["json", "json.gz", "avro"])
@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["upsert", "delete"]),
            st.lists(st.integers(0, 30), min_size=1, max_size=6, unique=True),
            st.text(max_size=8) | st.none(),
        ),
        min_size=1,
        max_size=8,
    ),
    st.integers(120, 2_000),
)
def test_segments_and_staged_rows_match_the_event_path(
    fmt: str,
    tmp_path_factory: pytest.TempPathFactory,
    transactions: list[tuple[str, list[int], str | None]],
    max_file_bytes: int,
) -> None:
    """Whatever the transactions and however small the segments: the segments written from
    the encoded columns have the names and contents of those written from the events, and
    the replica stages the same newest row per key."""
    root = tmp_path_factory.mktemp("segments")
    table_ddl = "CREATE TABLE T (K INT64 NOT NULL, V STRING(MAX), N NUMERIC) PRIMARY KEY (K)"
    with _captured(root / "db.sqlite", table_ddl) as (db, start):
        for kind, keys, value in transactions:
            with db.transaction() as tx:
                if kind == "upsert":
                    rows = [[k, value, None if value is None else Decimal("1.50")] for k in keys]
                    tx.insert_or_update("T", ["K", "V", "N"], rows)
                else:
                    tx.delete("T", [[k] for k in keys])
        (table,) = db.tables()
        records = _records(db, start)
    events = record_events(STREAM, "db", table, records, 42)
    columns = record_columns(STREAM, "db", table, records, 42, encoding=fmt)
    if not events:
        assert columns is None
        return
    assert columns is not None
    _assert_same(columns, events, fmt)

    by_events = SegmentWriter(root / "events", fmt, max_file_bytes, CDC_LANE, 3, 1)
    by_events.write(events)
    by_columns = SegmentWriter(root / "columns", fmt, max_file_bytes, CDC_LANE, 3, 1)
    by_columns.write_encoded(columns.first, columns.encoded)
    written = [(p.relative_to(root / "events"), n) for _, p, n in by_events.close()]
    assert written == [(p.relative_to(root / "columns"), n) for _, p, n in by_columns.close()]
    for relative, _ in written:
        assert _content(root / "events" / relative) == _content(root / "columns" / relative)

    replica = DeltaReplica(root / "replica", "db", table)
    staged = replica.change_rows(
        columns.rows, columns.sort_key_columns, columns.uuids, columns.deleted
    )
    assert staged.equals(replica.source_rows(events))
