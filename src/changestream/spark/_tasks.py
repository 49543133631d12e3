"""The pipeline's work inside Spark tasks: events are built, written and staged where the rows are.

A micro-batch's partition ranges, planned on the driver by the ``changestream`` source (see
:mod:`changestream.spark.offset_log`), reach :class:`CdcTask` pickled with it, one group per
task, and the task reads their changes itself; backfill chunks reach :class:`BackfillTask` as
key ranges. Each task builds the Datastream events of its rows — as columns, already encoded
for their files (see :mod:`changestream.datastream.event_columns`), but for a history replica,
which needs an event object each — writes them to segments (see
:mod:`changestream.datastream.segments`: a replayed batch rewrites the same ones), and stages,
per object, the MERGE source of the Delta replica — the newest change of each key it saw — as
an Arrow IPC file. What returns to the driver is one small summary row per file, so the
driver's memory does not grow with the batch.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from pyspark import SparkContext, TaskContext

from changestream.datastream.event_columns import (
    EventColumns,
    backfill_columns,
    record_columns,
)
from changestream.datastream.events import (
    Event,
    backfill_events,
    record_events,
    written_against,
)
from changestream.datastream.segments import (
    BACKFILL_LANE,
    CDC_LANE,
    SegmentWriter,
    publish_lane,
)
from changestream.datastream.stored_columns import (
    ArrowEventColumns,
    StoredColumns,
    StoredHeader,
    accepts_table,
    connect,
    stored_header,
)
from changestream.ddl.schema import Table
from changestream.spark._backfill import Chunk
from changestream.spark.frontier import ReadRange
from changestream.spark.history import HistoryReplica
from changestream.spark.planning import read_records
from changestream.spark.replica import DeltaReplica
from changestream.streams.opening import open_database
from changestream.streams.origins import TableOrigin
from changestream.streams.records import DataChangeRecord
from changestream.streams.roles import PipelineDatabase, StoredPayloadSource

#: What a task reports per file: ``kind`` is ``events`` (a segment), ``replica`` (a staged
#: MERGE source) or ``chunk`` (a finished backfill chunk: ``seq`` its index, ``read_timestamp``
#: its snapshot).
SUMMARY_SCHEMA: Final = pa.schema(
    [
        ("kind", pa.string()),
        ("object", pa.string()),
        ("path", pa.string()),
        ("events", pa.int64()),
        ("seq", pa.int64()),
        ("read_timestamp", pa.int64()),
    ]
)
Summary = tuple[str, str, str, int, int, int]


@dataclass(frozen=True)
class TaskPlan:
    """What every task of one pipeline needs; pickled to the executors.

    ``tables`` are the stream's tables by name (rows of other tables are skipped);
    ``segments`` and ``staging`` are directories every executor can write to.
    """

    stream_name: str
    schema: str
    tables: Mapping[str, Table]
    format: str
    max_file_bytes: int
    segments: str
    staging: str
    replica: str | None
    drop_dropped_columns: bool = False
    append_only: bool = False
    schema_files: bool = False
    #: The source-database table of each mirror table (its events carry that metadata).
    origins: Mapping[str, TableOrigin] = field(default_factory=dict)
    #: The stream's ``include`` (table → the columns it keeps, None: all; empty: every
    #: table) and ``exclude``: which tables no longer there the stream still reads.
    include: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)
    exclude: frozenset[str] = frozenset()

    def current(self, table: str, commit_ts: int) -> Table | None:
        """The table ``table`` is now, if a change committed at ``commit_ts`` is one of its
        (not a change of a table since dropped, or dropped and created again)."""
        found = self.tables.get(table)
        if found is None or (found.created_at is not None and commit_ts < found.created_at):
            return None
        return found

    def table_of(self, record: DataChangeRecord) -> Table | None:
        """The table whose events ``record`` makes: the table as it is now, or, for a change
        of a former table of that name (dropped since, or dropped and created again), the
        shape the record carries; None when the stream leaves the table out."""
        found = self.current(record.table_name, record.commit_timestamp)
        if found is not None:
            return found
        name = record.table_name
        if (self.include and name not in self.include) or name in self.exclude:
            return None
        return written_against(record, self.include.get(name))

    def origin_of(self, table: Table) -> TableOrigin | None:
        """The source-database table whose metadata the events of ``table`` carry: its
        origin when it is the table as it is now (a former table's events carry none)."""
        return self.origins.get(table.name) if table is self.tables.get(table.name) else None

    @property
    def by_columns(self) -> bool:
        """Whether tasks build events as :class:`EventColumns` rather than one :class:`Event`
        each (which a history replica needs)."""
        return not self.append_only

    def writer(self, lane: str, seq: int, task: int) -> SegmentWriter:
        return SegmentWriter(
            Path(self.segments),
            self.format,
            self.max_file_bytes,
            lane,
            seq,
            task,
            self.schema_files,
        )

    @functools.cached_property
    def replicas(self) -> dict[str, DeltaReplica]:
        root = self.replica or ""
        kind = HistoryReplica if self.append_only else DeltaReplica
        return {
            name: kind(root, self.schema, t, drop_dropped_columns=self.drop_dropped_columns)
            for name, t in self.tables.items()
        }


class _Staging:
    """The newest change per key of each object seen by one task, as Arrow."""

    def __init__(self, plan: TaskPlan) -> None:
        self.plan = plan
        self.parts: dict[str, list[pa.Table]] = defaultdict(list)

    def add(self, events: Sequence[Event]) -> None:
        """Stage the changes of ``events`` that are of the tables as they are now (a former
        table's rows are not the source's any more)."""
        if self.plan.replica is None or not events:
            return
        by_table: dict[str, list[Event]] = defaultdict(list)
        for event in events:
            by_table[event.source_metadata.table].append(event)
        for table, table_events in by_table.items():
            found = self.plan.tables.get(table)
            if found is None:
                continue
            if found.created_at is not None:
                created = found.created_at
                table_events = [e for e in table_events if e.sort_keys[0] >= created]
            if table_events:
                self.parts[table].append(self.plan.replicas[table].source_rows(table_events))

    def add_columns(self, columns: EventColumns | ArrowEventColumns) -> None:
        """Stage ``columns`` if they are changes of a table as it is now."""
        table = columns.first.table
        if self.plan.replica is None or table is not self.plan.tables.get(table.name):
            return
        replica = self.plan.replicas[table.name]
        keys, uuids, deleted = columns.sort_key_columns, columns.uuids, columns.deleted
        if isinstance(columns, ArrowEventColumns):
            rows = replica.change_arrays(columns.values, keys, uuids, deleted)
        else:
            rows = replica.change_rows(columns.rows, keys, uuids, deleted)
        self.parts[table.name].append(rows)

    def write(self, batch_key: str, task: int) -> list[Summary]:
        out: list[Summary] = []
        for table, parts in self.parts.items():
            replica = self.plan.replicas[table]
            rows = replica.staged(parts)
            path = Path(self.plan.staging) / batch_key / replica.object / f"{task:05d}.arrow"
            path.parent.mkdir(parents=True, exist_ok=True)
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as w:
                w.write_table(rows)
            out.append(("replica", replica.object, str(path), rows.num_rows, 0, 0))
        return out


def _segments(written: Iterable[tuple[str, Path, int]], seq: int) -> list[Summary]:
    return [("events", obj, str(path), n, seq, 0) for obj, path, n in written]


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a task builds, writes and stages
    events: what it makes holds no reference cycle (events, dicts, Arrow buffers), and
    collecting them as they were made cost about a tenth of a task's CPU (in one process over
    300,000 changes, best of four alternations: 12.9 µs a change paused, 13.7 collecting)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: Mods turned into events at a time (bounds a task's memory whatever a range holds).
_EVENTS_PER_CHUNK: Final = 8192


_Groups = list[tuple[Table, list[DataChangeRecord]]]


def _range_groups(
    plan: TaskPlan, db: PipelineDatabase, change_stream: str, read: ReadRange
) -> Iterator[_Groups]:
    """The records of the plan's tables in one partition range, in commit order, a chunk at
    a time, grouped as :func:`_grouped` says."""
    chunk: list[DataChangeRecord] = []
    count = 0
    for record in read_records(db, change_stream, read):
        chunk.append(record)
        count += len(record.mods)
        if count >= _EVENTS_PER_CHUNK:
            yield _grouped(plan, chunk)
            chunk, count = [], 0
    if chunk:
        yield _grouped(plan, chunk)


def _grouped(plan: TaskPlan, records: Iterable[DataChangeRecord]) -> _Groups:
    """``records`` of the plan's tables grouped by the table each makes events of (by
    identity: a former table can have the shape of today's, which must keep its own
    events), in their order."""
    pending: dict[int, tuple[Table, list[DataChangeRecord]]] = {}
    former: dict[tuple[str, str], Table] = {}
    for record in records:
        table = plan.current(record.table_name, record.commit_timestamp)
        if table is None:
            shape = (record.table_name, repr(record.column_types))
            table = former.get(shape) or plan.table_of(record)
            if table is None:
                continue
            former[shape] = table
        group = pending.get(id(table))
        if group is None:
            group = pending[id(table)] = (table, [])
        group[1].append(record)
    return [group for group in pending.values() if group[1]]


def range_events(
    plan: TaskPlan, db: PipelineDatabase, change_stream: str, read: ReadRange
) -> Iterator[list[Event]]:
    """The events of the plan's tables in one partition range, in commit order, a chunk at a
    time. Their read timestamp is the range's end, so a replay produces the same events."""
    for groups in _range_groups(plan, db, change_stream, read):
        events: list[Event] = []
        for table, records in groups:
            events += record_events(
                plan.stream_name, plan.schema, table, records, read.end, plan.origin_of(table)
            )
        yield events


def range_columns(
    plan: TaskPlan, db: PipelineDatabase, change_stream: str, read: ReadRange
) -> Iterator[EventColumns | ArrowEventColumns]:
    """:func:`range_events` as columns, encoded in the plan's format, a table's at a time:
    built by DuckDB from the change log's JSON where the database has it at hand, the
    events are JSON lines and there are enough of them (see :class:`_StoredRange`), else in
    Python."""
    if isinstance(db, StoredPayloadSource) and plan.format in _STORED_FORMATS:
        yield from _StoredRange(plan, db, change_stream, read)
    else:
        for groups in _range_groups(plan, db, change_stream, read):
            yield from _python_columns(plan, groups, read.end)


def _python_columns(plan: TaskPlan, groups: _Groups, read_end: int) -> Iterator[EventColumns]:
    for table, records in groups:
        columns = record_columns(
            plan.stream_name,
            plan.schema,
            table,
            records,
            read_end,
            plan.origin_of(table),
            encoding=plan.format,
        )
        if columns is not None:
            yield columns


#: The file formats whose events DuckDB builds (it writes JSON lines only).
_STORED_FORMATS: Final = frozenset({"json", "json.gz"})
#: Stored JSON read before its events are built (bounds a task's memory like
#: _EVENTS_PER_CHUNK).
_STORED_BYTES_PER_CHUNK: Final = 4 * 1024 * 1024
#: A table's stored records of a chunk holding less JSON than this are built in Python, not by
#: DuckDB: its query costs 12-17 ms however little it builds, and Python's path costs less
#: below about 5,000 events (0.8-1.4 MB of stored JSON). Built and staged, 2,500 events of a
#: live micro-batch's task (5-mod records) took 25 ms in Python against 38 ms by DuckDB, 53
#: events 2 ms against 18; 10,000 events took 124 ms in Python against 75 ms by DuckDB.
_DUCKDB_MIN_BYTES = 1024 * 1024


class _StoredRange:
    """The event columns of one partition range read as the change log stores it, a chunk at
    a time: the records :class:`StoredColumns` accepts built by DuckDB (when a table's hold
    :data:`_DUCKDB_MIN_BYTES` at least), the others (and a chunk DuckDB does not build)
    decoded and built in Python. Each path keeps a table's events in commit order; in a chunk
    holding both, DuckDB's come first (readers order events by ``sort_keys``, as
    Datastream's do)."""

    def __init__(
        self, plan: TaskPlan, db: StoredPayloadSource, change_stream: str, read: ReadRange
    ) -> None:
        self.plan, self.db, self.change_stream, self.read = plan, db, change_stream, read
        self.connection = _duckdb_connection()
        self.builders: dict[str, StoredColumns | None] = {}

    def __iter__(self) -> Iterator[EventColumns | ArrowEventColumns]:
        read = self.read
        stored: dict[str, list[tuple[int, StoredHeader, bytes]]] = defaultdict(list)
        decoded: list[DataChangeRecord] = []
        size = 0
        for ts, payload in self.db.read_change_payloads(
            self.change_stream, read.start, read.end, read.token
        ):
            header = stored_header(payload)
            builder = None if header is None else self._builder(header.table_name, ts)
            if builder is not None and header is not None and builder.accepts(ts, header):
                stored[header.table_name].append((ts, header, payload))
            else:
                decoded.append(DataChangeRecord.from_payload(ts, payload, read.token))
            size += len(payload)
            if size >= _STORED_BYTES_PER_CHUNK:
                yield from self._chunk(stored, decoded)
                stored, decoded, size = defaultdict(list), [], 0
        yield from self._chunk(stored, decoded)

    def _builder(self, name: str, commit_ts: int) -> StoredColumns | None:
        table = self.plan.current(name, commit_ts)
        if table is None:
            return None
        if name not in self.builders:
            plan = self.plan
            self.builders[name] = (
                StoredColumns(
                    self.connection,
                    plan.stream_name,
                    plan.schema,
                    table,
                    self.read.end,
                    plan.origin_of(table),
                )
                if accepts_table(table)
                else None
            )
        return self.builders[name]

    def _chunk(
        self,
        stored: Mapping[str, list[tuple[int, StoredHeader, bytes]]],
        decoded: list[DataChangeRecord],
    ) -> Iterator[EventColumns | ArrowEventColumns]:
        """The events of one chunk: ``stored`` records by table, ``decoded`` the others
        (in commit order, as read)."""
        fell_back = False
        for name, records in stored.items():
            builder = self.builders[name]
            assert builder is not None
            built = None
            if sum(len(payload) for _, _, payload in records) >= _DUCKDB_MIN_BYTES:
                built = builder.build([(ts, header) for ts, header, _ in records])
            if built is not None:
                yield built
            else:
                token = self.read.token
                decoded += (DataChangeRecord.from_payload(ts, p, token) for ts, _, p in records)
                fell_back = True
        if decoded:
            if fell_back:  # the records DuckDB did not build went after the others
                decoded.sort(key=lambda r: (r.commit_timestamp, r.record_sequence))
            groups = _grouped(self.plan, decoded)
            yield from _python_columns(self.plan, groups, self.read.end)


#: One DuckDB connection per Python worker, which runs one task at a time (a connection took
#: 25 ms to open).
_duckdb_connection: Final = functools.cache(connect)


@dataclass(frozen=True, slots=True)
class CdcTask:
    """``mapPartitions`` function of micro-batch ``batch_id`` over the indexes of ``groups``:
    each index reads the partition ranges of that group from ``database`` and turns them into
    events, so the changes cross no process boundary on their way to events; summary rows
    out."""

    plan: TaskPlan
    batch_id: int
    database: str
    token: str | None
    change_stream: str
    groups: tuple[tuple[ReadRange, ...], ...]

    def __call__(self, indexes: Iterable[int]) -> Iterator[Summary]:
        context = TaskContext.get()
        task = 0 if context is None else context.partitionId()
        writer = self.plan.writer(CDC_LANE, self.batch_id, task)
        staging = _Staging(self.plan)
        db = open_database(self.database, self.token)
        reads = [read for i in indexes for read in self.groups[i]]
        with collection_paused():
            try:
                for read in reads:
                    for events in self._events(db, read):
                        _write_and_stage(events, writer, staging)
            except BaseException:
                writer.abort()
                raise
            finally:
                db.close()
            rows = _segments(writer.close(), self.batch_id)
            rows += staging.write(f"cdc-{self.batch_id}", task)
        if reads:
            # Where the task's read ranges begin: no change it read is older.
            rows.append((WINDOW, "*", "", 0, self.batch_id, min(r.start for r in reads)))
        yield from rows

    def _events(
        self, db: PipelineDatabase, read: ReadRange
    ) -> Iterator[EventColumns | ArrowEventColumns | list[Event]]:
        """The events of one read range, a table's (or a chunk's) at a time."""
        if self.plan.by_columns:
            yield from range_columns(self.plan, db, self.change_stream, read)
        else:
            yield from range_events(self.plan, db, self.change_stream, read)


#: The summary row kind of a CDC task's read window (``read_timestamp``: where it begins).
WINDOW: Final = "window"


@dataclass(frozen=True, slots=True)
class BackfillTask:
    """``mapPartitions`` function reading backfill chunks of ``table`` from ``database``."""

    plan: TaskPlan
    database: str
    token: str | None
    table: str
    #: A filtered re-snapshot's keys: only these rows become events (None: every row).
    kept: frozenset[tuple[Any, ...]] | None = None

    def __call__(self, chunks: Iterable[Chunk]) -> Iterator[Summary]:
        table = self.plan.tables[self.table]
        db = open_database(self.database, self.token)
        try:
            for chunk in chunks:
                with collection_paused():
                    summaries = self._chunk(db, table, chunk)
                yield from summaries
        finally:
            db.close()

    def _chunk(self, db: PipelineDatabase, table: Table, chunk: Chunk) -> list[Summary]:
        """Read one chunk, write its events and stage its replica rows; the summary rows."""
        # The stream's own columns of the table (an include list may keep only some).
        columns = [c.name for c in table.columns]
        snapshot = db.read_snapshot(self.table, chunk.key_range(), columns)
        at = snapshot.read_timestamp
        rows = snapshot.rows
        if self.kept is not None:
            key = [columns.index(k) for k in table.primary_key]
            rows = [r for r in rows if tuple(r[i] for i in key) in self.kept]
        plan = self.plan
        origin = plan.origins.get(self.table)
        events: EventColumns | list[Event] | None
        if plan.by_columns:
            events = backfill_columns(
                plan.stream_name, plan.schema, table, rows, at, at, origin, encoding=plan.format
            )
        else:
            events = backfill_events(plan.stream_name, plan.schema, table, rows, at, at, origin)
        writer = plan.writer(BACKFILL_LANE, chunk.index, 0)
        staging = _Staging(plan)
        try:
            _write_and_stage(events, writer, staging)
        except BaseException:
            writer.abort()
            raise
        summaries = _segments(writer.close(), chunk.index)
        obj = plan.replicas[self.table].object
        summaries += staging.write(f"backfill-{obj}-{chunk.index}", 0)
        count = 0 if events is None else len(events)
        summaries.append(("chunk", obj, "", count, chunk.index, at))
        return summaries


def _write_and_stage(
    events: EventColumns | ArrowEventColumns | list[Event] | None,
    writer: SegmentWriter,
    staging: _Staging,
) -> None:
    """Write ``events`` to segments and stage their replica rows."""
    if isinstance(events, ArrowEventColumns):
        writer.write_lines(events.first, events.lines)
        staging.add_columns(events)
    elif isinstance(events, EventColumns):
        writer.write_encoded(events.first, events.encoded)
        staging.add_columns(events)
    elif events:
        writer.write(events)
        staging.add(events)


@dataclass(frozen=True, slots=True)
class PublishTask:
    """``mapPartitions`` function over the indexes of ``directories``: each publishes that
    lane directory (see ``datastream.segments``) and reports the files it wrote as
    ``events`` summary rows (``events`` is 0: the count is not read back)."""

    directories: tuple[str, ...]
    destination: str
    incarnation: str
    format: str
    max_file_bytes: int

    def __call__(self, indexes: Iterable[int]) -> Iterator[Summary]:
        for index in indexes:
            directory = Path(self.directories[index])
            written = publish_lane(
                directory,
                Path(self.destination),
                self.incarnation,
                self.format,
                self.max_file_bytes,
            )
            yield from (("events", directory.parent.name, str(f), 0, 0, 0) for f in written)


def run_tasks(
    context: SparkContext,
    task: Callable[[Iterable[Any]], Iterator[Summary]],
    items: int | Sequence[Any],
) -> list[dict[str, Any]]:
    """Run ``task`` over ``items`` (or the indexes ``range(items)``) in Spark tasks, one item
    each; the summary rows they report, as dicts.

    Plain RDD tasks, not a DataFrame's: a pipeline's jobs need no query planning, and the
    first one of a session starts sooner without it."""
    data = range(items) if isinstance(items, int) else list(items)
    rows = context.parallelize(data, len(data)).mapPartitions(task).collect()
    return [dict(zip(SUMMARY_SCHEMA.names, row, strict=True)) for row in rows]


def read_staged(paths: Iterable[str]) -> pa.Table | None:
    """The staged MERGE sources at ``paths``, concatenated (None when there are none)."""
    tables = [pa.ipc.open_file(pa.memory_map(p)).read_all() for p in paths]
    return pa.concat_tables(tables) if tables else None
