"""Shared helpers for the event, event file and Delta replica tests: tables, rows of every
type, and CDC mods read from a real database's change stream."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import changestream
from changestream import ChildPartitionsRecord, DataChangeRecord
from changestream.clock import now_us
from changestream.datastream.events import CdcMod, Event, cdc_events
from changestream.ddl.parser import parse_ddl
from changestream.ddl.schema import CreateTable, Table

#: The generic fields of every event, in the seed's order (then source_metadata and payload).
ENVELOPE_FIELDS = [
    "stream_name",
    "read_method",
    "object",
    "schema_key",
    "uuid",
    "read_timestamp",
    "source_timestamp",
    "sort_keys",
]

SAMPLE_DDL = (
    "CREATE TABLE SAMPLE (THIS_IS_MY_PK INT64 NOT NULL, FIELD1 STRING(MAX), "
    "FIELD2 STRING(MAX) NOT NULL) PRIMARY KEY (THIS_IS_MY_PK)"
)
ALL_TYPES_DDL = (
    "CREATE TABLE AllTypes (Id INT64 NOT NULL, B BOOL, I INT64, F FLOAT64, N NUMERIC, "
    "S STRING(MAX), Y BYTES(MAX), D DATE, T TIMESTAMP, J JSON, AI ARRAY<INT64>, "
    "ArrS ARRAY<STRING(MAX)>, AN ARRAY<NUMERIC>, AD ARRAY<DATE>, ArrT ARRAY<TIMESTAMP>, "
    "AY ARRAY<BYTES(MAX)>, AF ARRAY<FLOAT64>, AB ARRAY<BOOL>, AJ ARRAY<JSON>, "
    "`odd name-1` STRING(10)) PRIMARY KEY (Id)"
)
PK = 1231535353
STREAM = "projects/myProj/locations/myLoc/streams/changestream-to-files"
T0 = 1_573_112_236_808_123  # 2019-11-07T07:37:16.808123Z, the seed's first read_timestamp
UTC = dt.UTC


def table_of(ddl: str) -> Table:
    """The table a ``CREATE TABLE`` statement defines."""
    statement = parse_ddl(ddl)[0]
    assert isinstance(statement, CreateTable)
    return statement.table


def all_types_rows() -> list[tuple[Any, ...]]:
    """Rows of ``AllTypes`` covering every type, edge values, empty arrays and NULLs."""
    return [
        (
            1,
            True,
            -(2**63),
            float("inf"),
            decimal.Decimal("-12345678901234567890123456789.123456789"),
            'ção 🚀 "quoted"\n',
            b"\x00\xff\x10",
            dt.date(1, 1, 1),
            dt.datetime(2019, 11, 7, 2, 15, 39, 123456, tzinfo=UTC),
            {"b": [1, 2.5, None], "a": {"nested": True}},
            [2**63 - 1, None, 0],
            ["x", None, ""],
            [decimal.Decimal("1.50"), None],
            [dt.date(9999, 12, 31), None],
            [dt.datetime(1970, 1, 1, tzinfo=UTC), None],
            [b"", None, b"\x01"],
            [1.5, float("-inf"), None],
            [False, None, True],
            [{"k": "v"}, None, [1]],
            "odd",
        ),
        (
            2,
            False,
            0,
            -0.25,
            decimal.Decimal("0.000000001"),
            "",
            b"",
            dt.date(2024, 2, 29),
            dt.datetime(1000, 1, 1, tzinfo=UTC),
            "just a string",
            [],
            [],
            [],
            [],
            [],
            [],
            [],
            [],
            [],
            None,
        ),
        (3, *([None] * 19)),
    ]


def open_db(path: str, ddl: list[str]) -> changestream.EmbeddedDatabase:
    """A database at ``path`` with the given DDL applied."""
    db = changestream.open(path)
    db.execute_ddl(ddl)
    return db


def read_mods(
    db: changestream.Database, stream: str, start: int, end: int
) -> list[tuple[str, CdcMod]]:
    """Every mod of ``stream`` committed in ``[start, end)``, as (table, CdcMod), in commit
    order: the seed's workflow (initial query, then every partition, children after parents)."""
    found: list[tuple[tuple[int, int, int, int], str, CdcMod]] = []
    initial = list(db.read_change_stream(stream, start, end, None, 1000))
    first = initial[0]
    assert isinstance(first, ChildPartitionsRecord)
    queue = [(c.token, first.start_timestamp) for c in first.child_partitions]
    seen: set[str] = set()
    while queue:
        token, child_start = queue.pop(0)
        if token in seen:
            continue
        seen.add(token)
        for record in db.read_change_stream(stream, child_start, end, token, 1000):
            if isinstance(record, ChildPartitionsRecord):
                queue.extend((c.token, record.start_timestamp) for c in record.child_partitions)
            elif isinstance(record, DataChangeRecord):
                for index, mod in enumerate(record.mods):
                    cdc = CdcMod(
                        commit_timestamp=record.commit_timestamp,
                        server_transaction_id=record.server_transaction_id,
                        record_sequence=record.record_sequence,
                        mod_index=index,
                        mod_type=record.mod_type,
                        keys=mod.keys,
                        new_values=mod.new_values,
                        old_values=mod.old_values,
                    )
                    order = (
                        record.commit_timestamp,
                        int(record.server_transaction_id),
                        int(record.record_sequence),
                        index,
                    )
                    found.append((order, record.table_name, cdc))
    found.sort(key=lambda item: item[0])
    return [(table, mod) for _, table, mod in found]


def seed_events(tmp_path: Path, capture: str) -> list[Event]:
    """The seed's three operations on one row of SAMPLE, through a real change stream."""
    db = open_db(
        str(tmp_path / "src.db"),
        [
            SAMPLE_DDL,
            f"CREATE CHANGE STREAM S FOR SAMPLE OPTIONS (value_capture_type = '{capture}')",
        ],
    )
    start = now_us()
    columns = ["THIS_IS_MY_PK", "FIELD1", "FIELD2"]
    with db.transaction() as tx:
        tx.insert("SAMPLE", columns, [[PK, "foo", "TLV"]])
    with db.transaction() as tx:
        tx.update("SAMPLE", columns, [[PK, None, "TLV"]])
    with db.transaction() as tx:
        tx.delete("SAMPLE", [[PK]])
    end = now_us() + 1
    mods = [mod for _, mod in read_mods(db, "S", start, end)]
    db.close()
    return cdc_events(STREAM, "DB1", table_of(SAMPLE_DDL), mods, T0)
