"""Event files: JSON lines and Avro round trips for every column type, standard readers
(pyarrow, fastavro), the bucket layout, rotation by size and time, replay, crash safety."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import fastavro
import msgspec
import orjson
import pyarrow.json
import pytest

from changestream.datastream.events import CdcMod, Event, backfill_events, cdc_events
from changestream.datastream.files import (
    EventFileWriter,
    event_files,
    read_events,
)
from changestream.datastream.layout import WORK_DIRECTORY
from changestream.errors import InvalidArgument
from tests.datastream_support import (
    ALL_TYPES_DDL,
    ENVELOPE_FIELDS,
    SAMPLE_DDL,
    T0,
    all_types_rows,
    table_of,
)

FORMATS = ["json", "avro"]
ALL_TYPES = table_of(ALL_TYPES_DDL)
SAMPLE = table_of(SAMPLE_DDL)
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def sample_events(count: int, read_us: int = T0, step_us: int = 0) -> list[Event]:
    """``count`` CDC updates of SAMPLE rows, read ``step_us`` apart."""
    events: list[Event] = []
    for i in range(count):
        mod = CdcMod(
            commit_timestamp=1_000 + i,
            server_transaction_id=str(i),
            record_sequence="00000000",
            mod_index=0,
            mod_type="UPDATE",
            keys={"THIS_IS_MY_PK": i % 7},
            new_values={"FIELD1": f"value {i}" * (i % 5), "FIELD2": "TLV"},
            old_values={},
        )
        events += cdc_events("s", "DB1", SAMPLE, [mod], read_us + i * step_us)
    return events


def mixed_events() -> list[Event]:
    """Backfill events of every column type plus CDC events of another object."""
    return [
        *backfill_events("s", "DB1", ALL_TYPES, all_types_rows(), 500, T0),
        *sample_events(5),
    ]


def by_uuid(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["uuid"]: doc for doc in docs}


def read_all(root: Path) -> list[dict[str, Any]]:
    return [doc for path in event_files(root) for doc in read_events(path)]


@pytest.mark.parametrize("format", FORMATS)
def test_round_trip_of_every_type(tmp_path: Path, format: str) -> None:
    events = mixed_events()
    written = EventFileWriter(tmp_path, format).write_batch(events, batch_id=1)

    assert sorted(written) == list(event_files(tmp_path))
    assert len(written) == 2  # one file per object
    docs = read_all(tmp_path)
    assert len(docs) == len(events)
    assert by_uuid(docs) == {event.uuid: event.to_json_dict() for event in events}


def test_fastavro_reads_values_by_index_with_the_column_types(tmp_path: Path) -> None:
    events = backfill_events("s", "DB1", ALL_TYPES, all_types_rows(), 500, T0)
    (path,) = EventFileWriter(tmp_path, "avro").write(events)
    with open(path, "rb") as fo:
        reader = fastavro.reader(fo)
        schema: Any = reader.writer_schema
        metadata = reader.metadata
        records: list[Any] = list(reader)

    assert metadata["changestream.object"] == "DB1_AllTypes"
    top = {field["name"]: field["type"] for field in schema["fields"]}
    assert top["read_timestamp"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert top["sort_keys"] == {"type": "array", "items": ["string", "long"]}
    fields = top["payload"]["fields"]
    assert [f["sqlName"] for f in fields] == [c.name for c in ALL_TYPES.columns]
    assert fields[-1]["name"] == "odd_name_1"
    types = {f["sqlName"]: f["type"][1] for f in fields}
    assert types["I"] == "long" and types["F"] == "double" and types["Y"] == "bytes"
    assert types["D"] == {"type": "int", "logicalType": "date"}
    assert types["T"] == {"type": "long", "logicalType": "timestamp-micros"}
    assert types["N"] == "string" and types["J"] == "string"
    assert types["AI"] == {"type": "array", "items": ["null", "long"]}

    first = records[0]
    assert first["read_timestamp"] == dt.datetime(2019, 11, 7, 7, 37, 16, 808000, tzinfo=dt.UTC)
    assert first["sort_keys"] == [500, 0, 0, 0]
    for record, row in zip(records, all_types_rows(), strict=True):
        values = list(record["payload"].values())  # by index, as the seed describes
        for column, value, expected in zip(ALL_TYPES.columns, values, row, strict=True):
            code, element = column.type.code, column.type.element
            if expected is None:
                assert value is None
            elif code == "NUMERIC":
                assert value == format(expected, "f")
            elif code == "JSON":
                assert orjson.loads(value) == expected  # JSON text
            elif code == "ARRAY" and element is not None and element.code == "NUMERIC":
                assert value == [None if x is None else format(x, "f") for x in expected]
            elif code == "ARRAY" and element is not None and element.code == "JSON":
                assert [None if x is None else orjson.loads(x) for x in value] == expected
            else:
                assert value == expected, column.name


def finite_rows() -> list[tuple[Any, ...]]:
    """All-types rows without the non-finite floats (JSON spells them as strings, which
    breaks a reader's type inference for the column)."""
    rows = all_types_rows()
    rows[0] = (*rows[0][:3], 2.5, *rows[0][4:16], [1.5, None], *rows[0][17:])
    return rows


def test_pyarrow_reads_json_files(tmp_path: Path) -> None:
    events = backfill_events("s", "DB1", ALL_TYPES, finite_rows(), 500, T0)
    (path,) = EventFileWriter(tmp_path, "json").write(events)
    data = pyarrow.json.read_json(path)

    assert data.num_rows == 3
    assert data.column_names[:8] == ENVELOPE_FIELDS
    payload = data.column("payload").combine_chunks()
    assert str(payload.field("Id").type) == "int64"
    assert payload.field("Id").to_pylist() == [1, 2, 3]
    assert payload.field("I").to_pylist() == [-(2**63), 0, None]
    assert payload.field("F").to_pylist() == [2.5, -0.25, None]
    assert payload.field("N").to_pylist() == [
        "-12345678901234567890123456789.123456789",
        "0.000000001",
        None,
    ]
    assert payload.field("AI").to_pylist() == [[2**63 - 1, None, 0], [], None]
    meta = data.column("source_metadata").combine_chunks()
    assert meta.field("is_deleted").to_pylist() == [False] * 3


@pytest.mark.parametrize("format", FORMATS)
def test_paths_are_object_and_read_minute(tmp_path: Path, format: str) -> None:
    written = EventFileWriter(tmp_path, format).write(sample_events(3))
    extension = "jsonl" if format == "json" else "avro"
    (path,) = written
    relative = path.relative_to(tmp_path).as_posix()
    assert re.fullmatch(rf"DB1_SAMPLE/2019/11/07/07/37/{UUID}\.{extension}", relative)
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]


def test_event_files_skip_the_work_directory_and_directories_removed_meanwhile(
    tmp_path: Path,
) -> None:
    (written,) = EventFileWriter(tmp_path, "json").write(sample_events(3))
    staged = tmp_path / WORK_DIRECTORY / "orders-1" / "staging"
    (staged / "cdc-0").mkdir(parents=True)
    (staged / "cdc-0" / "00000.jsonl").write_text("{}\n")
    (written.parent / ".tmp.jsonl").write_text("")
    assert event_files(tmp_path) == [written]

    # Directories made and removed while the files are listed (the demo lists them while the
    # pipeline runs) are skipped, not an error.
    stop = threading.Event()
    churned = tmp_path / "churned"

    def churn() -> None:
        while not stop.is_set():
            for i in range(20):
                (churned / f"backfill-{i}" / "Orders").mkdir(parents=True, exist_ok=True)
            shutil.rmtree(churned, ignore_errors=True)

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        listings = [event_files(tmp_path) for _ in range(300)]
    finally:
        stop.set()
        churner.join()
    assert all(listing == [written] for listing in listings)


@pytest.mark.parametrize("format", FORMATS)
def test_files_rotate_by_size(tmp_path: Path, format: str) -> None:
    events = sample_events(300)
    max_bytes = 4096
    written = EventFileWriter(tmp_path, format, max_file_bytes=max_bytes).write_batch(events, 1)

    assert len(written) > 5
    largest_event = max(len(str(e.to_json_dict())) for e in events)
    for path in written:
        # Closed once it reaches the limit: over it by at most one event (Avro: one block
        # of at most max_bytes / 8) plus, for Avro, the header and final block framing.
        slack = largest_event if format == "json" else max_bytes // 8 + 2048
        assert path.stat().st_size <= max_bytes + slack
    docs = [doc for path in written for doc in read_events(path)]
    assert [doc["uuid"] for doc in docs] == [
        e.uuid for e in sorted(events, key=lambda e: (e.sort_keys, e.uuid))
    ]


@pytest.mark.parametrize("format", FORMATS)
def test_files_rotate_by_read_time(tmp_path: Path, format: str) -> None:
    events = sample_events(21, read_us=T0, step_us=10_000_000)  # one every 10 s, 200 s
    written = EventFileWriter(tmp_path, format, max_file_seconds=60).write(events)

    assert len(written) == 4  # [0, 60), [60, 120), [120, 180), [180, 200] s
    for path in written:
        times = [doc["read_timestamp"] for doc in read_events(path)]
        first = dt.datetime.fromisoformat(times[0])
        last = dt.datetime.fromisoformat(times[-1])
        assert last - first < dt.timedelta(seconds=60)
        # The path minute is the first event's.
        assert path.parent.name == f"{first.minute:02d}"
    assert sum(len(read_events(path)) for path in written) == 21


@pytest.mark.parametrize("format", FORMATS)
def test_a_schema_change_starts_a_new_file(tmp_path: Path, format: str) -> None:
    wider = table_of(SAMPLE_DDL.replace("NOT NULL)", "NOT NULL, EXTRA BOOL)"))
    before = backfill_events("s", "DB1", SAMPLE, [(1, "a", "b")], 10, T0)
    after = backfill_events("s", "DB1", wider, [(2, "a", "b", True)], 20, T0)
    written = EventFileWriter(tmp_path, format).write([*before, *after])

    assert len(written) == 2
    assert [read_events(p)[0]["payload"] for p in written] == [
        {"THIS_IS_MY_PK": 1, "FIELD1": "a", "FIELD2": "b"},
        {"THIS_IS_MY_PK": 2, "FIELD1": "a", "FIELD2": "b", "EXTRA": True},
    ]


@pytest.mark.parametrize("format", FORMATS)
def test_a_replayed_batch_replaces_its_files(tmp_path: Path, format: str) -> None:
    events = mixed_events() + sample_events(200)
    writer = EventFileWriter(tmp_path, format, max_file_bytes=8192)
    first = writer.write_batch(events, batch_id=41)
    contents = {path: read_events(path) for path in first}

    shuffled = events[:]
    random.Random(3).shuffle(shuffled)
    again = EventFileWriter(tmp_path, format, max_file_bytes=8192).write_batch(shuffled, 41)

    assert again == first
    assert list(event_files(tmp_path)) == sorted(first)
    assert {path: read_events(path) for path in again} == contents
    other = writer.write_batch(events, batch_id=42)
    assert not set(other) & set(first)
    assert len(event_files(tmp_path)) == 2 * len(first)


def test_write_uses_fresh_names(tmp_path: Path) -> None:
    writer = EventFileWriter(tmp_path, "json")
    events = sample_events(3)
    assert writer.write(events) != writer.write(events)
    assert len(event_files(tmp_path)) == 2


@pytest.mark.parametrize("format", FORMATS)
def test_a_failed_write_leaves_no_partial_file(tmp_path: Path, format: str) -> None:
    good = sample_events(100)
    bad = msgspec.structs.replace(
        good[-1], uuid="bad", payload={**good[-1].payload, "FIELD2": {1}}, record_payload=None
    )
    writer = EventFileWriter(tmp_path, format, max_file_bytes=2048)
    with pytest.raises((TypeError, ValueError)):
        writer.write([*good, bad])

    visible = event_files(tmp_path)
    assert visible  # the files finished before the failure
    for path in visible:
        assert read_events(path)  # complete, readable
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]
    uuids = [event["uuid"] for path in visible for event in read_events(path)]
    # Exactly the events before the failure that fit finished files, each once; never "bad".
    assert len(uuids) == len(set(uuids)) <= len(good)
    assert set(uuids) == {event.uuid for event in good[: len(uuids)]}


def test_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="format must be one of json, avro"):
        EventFileWriter(tmp_path, "csv")
    with pytest.raises(InvalidArgument, match="max_file_bytes"):
        EventFileWriter(tmp_path, "json", max_file_bytes=0)
    with pytest.raises(InvalidArgument, match=r"\.jsonl, \.jsonl\.gz or \.avro"):
        read_events(tmp_path / "x.txt")


def test_numeric_text_is_lossless(tmp_path: Path) -> None:
    wide = decimal.Decimal("123456789012345678901234567890123456789.0000000000001")
    table = table_of("CREATE TABLE W (K INT64 NOT NULL, N NUMERIC) PRIMARY KEY (K)")
    events = backfill_events("s", "DB1", table, [(1, wide)], 1, T0)
    for format in FORMATS:
        (path,) = EventFileWriter(tmp_path / format, format).write(events)
        assert decimal.Decimal(read_events(path)[0]["payload"]["N"]) == wide
