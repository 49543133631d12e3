"""The pipeline's DuckDB path (``datastream.stored_columns``) against its Python path: from the
same change log of a real database, the same JSON lines byte for byte, uuids, sort keys and
staged replica rows; and what it leaves to the Python path (records of a table whose columns
changed since, compact inserts, control characters, other column types) still comes out as
the Python path builds it, through the pipeline task's own reading of a range."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import changestream
from changestream import DataChangeRecord
from changestream.datastream.event_columns import EventColumns, record_columns
from changestream.datastream.stored_columns import (
    ArrowEventColumns,
    StoredColumns,
    accepts_table,
    connect,
    stored_header,
)
from changestream.embedded.database import store_of
from changestream.errors import InvalidArgument
from changestream.spark import _tasks
from changestream.spark.frontier import ReadRange
from changestream.spark.replica import UUID_COLUMN, DeltaReplica
from changestream.streams.origins import TableOrigin, source_tag

STREAM = "projects/p/locations/l/streams/s"
DDL = (
    "CREATE TABLE T (Region STRING(MAX) NOT NULL, Id INT64 NOT NULL, Name STRING(MAX), "
    "Qty INT64, Ok BOOL, Price NUMERIC, Day DATE, Moment TIMESTAMP, Blob BYTES(MAX)) "
    "PRIMARY KEY (Region, Id)"
)
COLUMNS = ["Region", "Id", "Name", "Qty", "Ok", "Price", "Day", "Moment", "Blob"]
#: The values of a row's columns after its key, for rows the tests do not generate.
FIXED = (
    "x",
    1,
    True,
    Decimal("-0.000000001"),
    dt.date(1, 1, 1),
    dt.datetime(1, 1, 1, tzinfo=dt.UTC),
    b"\x00\xff",
)
ORIGINS = [None, TableOrigin("postgresql", "pg", "public", "t")]

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
rows = st.lists(
    st.tuples(
        st.integers(-(2**63), 2**63 - 1),
        st.one_of(st.none(), texts),
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        st.one_of(st.none(), st.booleans()),
        st.one_of(
            st.none(),
            st.decimals(-(10**28), 10**28, allow_nan=False, allow_infinity=False, places=9),
        ),
        st.one_of(st.none(), st.dates()),
        st.one_of(st.none(), st.datetimes(timezones=st.just(dt.UTC))),
        st.one_of(st.none(), st.binary(max_size=8)),
    ),
    min_size=1,
    max_size=30,
    unique_by=lambda r: r[0],
)


@contextlib.contextmanager
def _database(path: Path, capture: str = "NEW_ROW_AND_OLD_VALUES") -> Iterator[Any]:
    with changestream.open(str(path)) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl(
            [DDL, f"CREATE CHANGE STREAM S FOR ALL OPTIONS (value_capture_type = '{capture}')"]
        )
        yield db


def _write(db: Any, region: str, written: list[tuple[Any, ...]]) -> None:
    """Each row upserted in one tagged transaction, updated in part, then half of them
    deleted; and two fixed rows among them, one transaction changing only those. That one's
    record holds mods of different columns (the seed's form, not the compact one) and no
    generated value (which may hold a control character). Then the rows inserted again
    under another region in one batch, which is stored compact."""
    full = [[region, i, *values] for i, *values in written]
    with db.transaction(tag=source_tag("src", "tx-1", "0/16B3748")) as tx:
        tx.insert_or_update("T", COLUMNS, [["fixed", 1, *FIXED], *full[::2]])
        tx.insert_or_update("T", ["Region", "Id", "Name"], [r[:3] for r in full[1::2]])
        tx.insert_or_update("T", ["Region", "Id", "Qty"], [["fixed", 2, 2]])
    with db.transaction() as tx:
        tx.update("T", ["Region", "Id", "Qty"], [[region, r[1], 5] for r in full])
    with db.transaction() as tx:
        tx.update("T", ["Region", "Id", "Ok"], [["fixed", 1, False]])
        tx.update("T", ["Region", "Id", "Name"], [["fixed", 2, "y"]])
    with db.transaction() as tx:  # a batch of inserts: stored compact
        tx.insert("T", COLUMNS, [[f"{region}+", *row[1:]] for row in full])
    with db.transaction() as tx:
        tx.delete("T", [[region, r[1]] for r in full[::2]])


def _log(db: Any) -> tuple[list[tuple[int, bytes]], str]:
    (partition,) = db.partitions("S")
    start = min(p.start_timestamp for p in db.partition_history("S"))
    end = store_of(db).last_commit_ts()
    return list(db.read_change_payloads("S", start, end, partition.token)), partition.token


def _python(table: Any, log: list[tuple[int, bytes]], origin: Any) -> EventColumns:
    records = [DataChangeRecord.from_payload(ts, p) for ts, p in log]
    built = record_columns(STREAM, "db", table, records, 1_700_000_000_123_456, origin)
    assert built is not None
    return built


def _assert_same(built: ArrowEventColumns, python: EventColumns, table: Any, root: Path) -> None:
    assert built.lines.cast(pa.binary()).to_pylist() == python.encoded
    assert built.uuids.to_pylist() == python.uuids
    assert built.deleted.to_pylist() == python.deleted
    assert [c.to_pylist() for c in built.sort_key_columns] == [
        list(c) for c in python.sort_key_columns
    ]
    replica = DeltaReplica(str(root), "db", table)
    staged = replica.change_arrays(built.values, built.sort_key_columns, built.uuids, built.deleted)
    assert staged.equals(
        replica.change_rows(python.rows, python.sort_key_columns, python.uuids, python.deleted)
    )


@pytest.fixture(scope="module")
def connection() -> Any:
    return connect()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows, st.sampled_from(ORIGINS), st.sampled_from(["NEW_ROW", "NEW_ROW_AND_OLD_VALUES"]))
def test_duckdb_builds_the_events_the_python_path_builds(
    tmp_path_factory: pytest.TempPathFactory,
    connection: Any,
    written: list[tuple[Any, ...]],
    origin: Any,
    capture: str,
) -> None:
    root = tmp_path_factory.mktemp("stored")
    with _database(root / "db.sqlite", capture) as db:
        _write(db, 'eu-west"1\\é', written)
        (table,) = db.tables()
        log, _ = _log(db)
    assert accepts_table(table)
    builder = StoredColumns(connection, STREAM, "db", table, 1_700_000_000_123_456, origin)
    headers = [(ts, stored_header(p)) for ts, p in log]
    accepted = [(ts, h) for ts, h in headers if h is not None and builder.accepts(ts, h)]
    # A payload with a control character has no header: it is left to Python.
    plain = [(ts, p) for (ts, p), (_, h) in zip(log, headers, strict=True) if h is not None]
    assert len(accepted) == len(plain) > 0
    built = builder.build(accepted)
    assert built is not None
    _assert_same(built, _python(table, plain, origin), table, root / "replica")


def test_what_duckdb_does_not_build_is_left_to_python(tmp_path: Path, connection: Any) -> None:
    """A payload with a control character has no header; records from before a column was
    added are not accepted, in either stored form; a table with other column types is not
    built here at all."""
    with _database(tmp_path / "db.sqlite") as db:
        with db.transaction() as tx:
            tx.insert("T", COLUMNS, [["r", 1, *FIXED], ["r", 2, *FIXED]])
        with db.transaction() as tx:
            tx.insert_or_update("T", ["Region", "Id", "Name"], [["r", 3, "tab\x01here"]])
            tx.insert_or_update("T", COLUMNS, [["r", 4, *FIXED]])
        with db.transaction() as tx:
            tx.insert_or_update("T", ["Region", "Id", "Name"], [["r", 5, "e"]])
            tx.insert_or_update("T", COLUMNS, [["r", 6, *FIXED]])
        db.execute_ddl(["ALTER TABLE T ADD COLUMN Extra INT64"])
        (table,) = db.tables()
        log, _ = _log(db)
        db.execute_ddl(["CREATE TABLE F (K INT64 NOT NULL, X FLOAT64) PRIMARY KEY (K)"])
        floats = next(t for t in db.tables() if t.name == "F")
    compact, control, before_added = log
    assert stored_header(control[1]) is None
    builder = StoredColumns(connection, STREAM, "db", table, 1)
    header = stored_header(before_added[1])
    assert header is not None and not header.compact
    assert not builder.accepts(before_added[0], header)
    header = stored_header(compact[1])
    assert header is not None and header.compact
    assert not builder.accepts(compact[0], header)  # also from before the column was added
    assert not accepts_table(floats)


@pytest.mark.parametrize(
    ("column", "bad"), [("Day", '"2026-13-45"'), ("Moment", '"yesterday"'), ("Blob", '"A"')]
)
def test_a_value_duckdb_cannot_read_is_left_to_python(
    tmp_path: Path, connection: Any, column: str, bad: str
) -> None:
    """A change log edited by hand: DuckDB builds none of the chunk, and the Python path
    says what is wrong."""
    with _database(tmp_path / "db.sqlite") as db:
        with db.transaction() as tx:
            tx.insert_or_update("T", COLUMNS, [["r", 1, *FIXED]])
            tx.insert_or_update("T", ["Region", "Id", "Name"], [["r", 2, "b"]])
        (table,) = db.tables()
        ((ts, payload),) = _log(db)[0]
    good = {"Day": '"0001-01-01"', "Moment": '"0001-01-01T00:00:00.000000Z"', "Blob": '"AP8="'}
    edited = payload.replace(f'"{column}":{good[column]}'.encode(), f'"{column}":{bad}'.encode())
    assert edited != payload
    header = stored_header(edited)
    assert header is not None
    builder = StoredColumns(connection, STREAM, "db", table, 1)
    assert builder.accepts(ts, header)
    assert builder.build([(ts, header)]) is None
    record = DataChangeRecord.from_payload(ts, edited)
    with pytest.raises(InvalidArgument, match=f"column '{column}'"):
        record_columns(STREAM, "db", table, [record], 1)
    assert builder.build([]) is None


def _lines(columns: EventColumns | ArrowEventColumns) -> list[bytes]:
    if isinstance(columns, EventColumns):
        return columns.encoded
    return list(columns.lines.cast(pa.binary()).to_pylist())


@pytest.mark.parametrize("by_duckdb", [True, False])
def test_a_task_reads_a_range_alike_by_either_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by_duckdb: bool
) -> None:
    """A pipeline task's reading of one range: the embedded database's change log built by
    DuckDB where it can, in Python where not, against the records read and built in Python
    (what a task reading a server does): the same lines and staged rows. A range this small
    holds less than ``_DUCKDB_MIN_BYTES`` of stored JSON, so DuckDB builds it only when
    that is 0; otherwise it is all built in Python."""
    if by_duckdb:
        monkeypatch.setattr(_tasks, "_DUCKDB_MIN_BYTES", 0)
    with _database(tmp_path / "db.sqlite") as db:
        _write(db, "eu", [(i, f"n{i}", i, i % 2 == 0, *FIXED[3:]) for i in range(40)])
        with db.transaction() as tx:
            tx.insert("T", COLUMNS, [["us", i, "x\x02", *FIXED[1:]] for i in range(5)])
        db.execute_ddl(["ALTER TABLE T ADD COLUMN Extra INT64"])
        with db.transaction() as tx:
            tx.insert("T", COLUMNS, [["jp", i, "ok", i, i % 3 == 0, *FIXED[3:]] for i in range(7)])
        with db.transaction() as tx:
            tx.delete("T", [["jp", i] for i in range(3)])
        _write(db, "ap", [(i, "m", None, True, None, None, None, None) for i in range(10)])
        (table,) = db.tables()
        log, token = _log(db)
        start = min(p.start_timestamp for p in db.partition_history("S"))
        read = ReadRange(token, start, store_of(db).last_commit_ts())
        plan = _tasks.TaskPlan(
            stream_name=STREAM,
            schema="db",
            tables={"T": table},
            format="json",
            max_file_bytes=1 << 20,
            segments=str(tmp_path / "segments"),
            staging=str(tmp_path / "staging"),
            replica=str(tmp_path / "replica"),
        )
        stored = list(_tasks.range_columns(plan, db, "S", read))
        python = [
            c for groups in _tasks._range_groups(plan, db, "S", read)
            for c in _tasks._python_columns(plan, groups, read.end)
        ]  # fmt: skip
    if not by_duckdb:
        assert {type(c) for c in stored} == {EventColumns}
        assert sum(len(p) for _, p in log) < _tasks._DUCKDB_MIN_BYTES
    else:
        assert {type(c) for c in stored} == {ArrowEventColumns, EventColumns}
    builder = StoredColumns(connect(), STREAM, "db", table, read.end)
    headers = ((ts, stored_header(p)) for ts, p in log)
    built = {h.compact for ts, h in headers if h is not None and builder.accepts(ts, h)}
    assert built == {True, False}  # records of both forms are built by DuckDB
    assert sorted(line for c in stored for line in _lines(c)) == sorted(
        line for c in python for line in c.encoded
    )
    assert sum(len(c) for c in stored) == sum(len(c) for c in python) > 100

    def staged(columns: list[Any]) -> pa.Table:
        staging = _tasks._Staging(plan)
        for c in columns:
            staging.add_columns(c)
        return plan.replicas["T"].staged(staging.parts["T"]).sort_by(UUID_COLUMN)

    assert staged(stored).equals(staged(python))
