"""The ``changestream`` Spark data source (PySpark Python Data Source API, no JVM jars).

Batch::

    spark.read.format("changestream").option("database", PATH_OR_URL).option("stream", "S")
        .option("startingTimestamp", ISO_OR_EARLIEST).option("endingTimestamp", ISO).load()

Streaming::

    spark.readStream.format("changestream").option("database", ...).option("stream", "S")
        .option("startingTimestamp", ISO_OR_LATEST).option("maxRecordsPerTrigger", N).load()

``startingTimestamp`` defaults to ``earliest`` (the oldest retained change) in batch and to
``latest`` (now) in streaming; ``startTimestamp`` / ``endTimestamp`` are older names.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from changestream.errors import InvalidArgument
from changestream.spark._options import EARLIEST, LATEST, SourceOptions, parse_options
from changestream.spark._rows import range_batch, record_batches, spark_schema
from changestream.spark.frontier import Frontier, ReadRange, ranges
from changestream.spark.planning import (
    batch_ranges,
    group,
    live_tokens,
    next_frontier,
    read_records,
    resolve_position,
)
from changestream.streams.opening import open_database
from changestream.streams.roles import ChangeStreamSource


class ChangeStreamDataSource(DataSource):
    """Reads a change stream, one row per data change record (or per mod, ``rowPerMod``; or
    per partition range to read, ``rowPerRange``, for jobs that read the ranges themselves)."""

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        self.checked = parse_options(options)

    @classmethod
    def name(cls) -> str:
        return "changestream"

    def schema(self) -> str:
        check_stream(self.checked)
        return spark_schema(self.checked.row_per_mod, self.checked.row_per_range)

    def reader(self, schema: StructType) -> DataSourceReader:
        self.checked.require_mode(streaming=False)
        return ChangeStreamBatchReader(self.checked)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self.checked.require_mode(streaming=True)
        return ChangeStreamStreamReader(self.checked)


def register(spark: SparkSession) -> None:
    """Register the source as format ``"changestream"`` on ``spark``.

    A small Spark job first checks that Spark's Python workers can import changestream; when
    they cannot (``PYSPARK_PYTHON`` names another interpreter, say), the format is registered
    all the same but fails at ``load()`` with a message saying so and how to fix it."""
    problem = _worker_import_problem(spark)
    if problem is None:
        spark.dataSource.register(ChangeStreamDataSource)
        _WORKERS_READY.add(spark)
    else:
        spark.dataSource.register(_unavailable_source(problem))
        _WORKERS_READY.discard(spark)


#: The sessions :func:`register` gave the real source (their workers import changestream).
_WORKERS_READY: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def workers_import_changestream(spark: SparkSession) -> bool:
    """Whether :func:`register` found that ``spark``'s Python workers import changestream
    (so format ``changestream`` is the real source, not the stand-in that explains why not)."""
    return spark in _WORKERS_READY


def _worker_import_problem(spark: SparkSession) -> str | None:
    """Why Spark's Python workers cannot import changestream, or None when they can."""

    def probe(_: object) -> str:
        # Runs on a worker, pickled by value: it must not need changestream itself.
        import sys

        try:
            import changestream.spark._source  # noqa: F401
        except Exception as exc:
            return f"{sys.executable}: {type(exc).__name__}: {exc}"
        return ""

    worker = spark.sparkContext.pythonExec
    if (spark.sparkContext.master or "").startswith("local") and worker == sys.executable:
        return None  # the workers run this very interpreter, which imports changestream
    try:
        (found,) = spark.sparkContext.parallelize([0], 1).map(probe).collect()
    except Exception as exc:
        found = f"{worker}: {str(exc).strip().splitlines()[-1]}"
    if not found:
        return None
    return (
        f"format 'changestream' is not usable: Spark's Python workers cannot import "
        f"changestream ({found}). Install changestream with its spark extra into the "
        f"interpreter the workers run (spark.pyspark.python or PYSPARK_PYTHON, now "
        f"{worker!r}), or point them at one that has it, e.g. {sys.executable!r}"
    )


def _unavailable_source(problem: str) -> type[DataSource]:
    """A stand-in format ``changestream`` whose ``load()`` fails with ``problem`` (or, given a
    schema, which skips that check, the query or the read). Defined here so Spark pickles it by
    value: workers that cannot import changestream can run it."""

    class ChangeStreamUnavailable(DataSource):
        @classmethod
        def name(cls) -> str:
            return "changestream"

        def schema(self) -> str:
            raise RuntimeError(problem)

        def reader(self, schema: StructType) -> DataSourceReader:
            raise RuntimeError(problem)

        def streamReader(self, schema: StructType) -> DataSourceStreamReader:
            raise RuntimeError(problem)

    return ChangeStreamUnavailable


def _open(options: SourceOptions) -> ChangeStreamSource:
    return open_database(options.database, options.token)


def check_stream(options: SourceOptions) -> None:
    """Fail (at ``load()``) when the database or the change stream does not exist, or the
    start is out of retention (with ``failOnDataLoss``)."""
    db = _open(options)
    try:
        db.partitions(options.stream)
        if isinstance(options.starting, int):
            resolve_position(db, options.stream, options.starting, options.fail_on_data_loss)
    finally:
        db.close()


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """One Spark task: its partition ranges (``partition.value``), one after another."""
    reads: list[ReadRange] = partition.value
    if options.row_per_range:
        yield range_batch(reads)
        return
    db = _open(options)
    try:
        for read in reads:
            records = read_records(db, options.stream, read)
            yield from record_batches(records, options.row_per_mod)
    finally:
        db.close()


class ChangeStreamBatchReader(DataSourceReader):
    """Every record committed in ``[startingTimestamp, endingTimestamp]``, each exactly once
    (by default from the oldest retained change to now)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        db = _open(options)
        try:
            self.start = resolve_position(
                db, options.stream, options.starting or EARLIEST, options.fail_on_data_loss
            )
            ending = options.ending
            if ending is None or ending == LATEST:
                self.end = db.current_timestamp()
            else:
                self.end = int(ending)
        finally:
            db.close()
        if self.end < self.start:
            raise InvalidArgument("option 'endingTimestamp' must not be before 'startingTimestamp'")

    def partitions(self) -> Sequence[InputPartition]:
        db = _open(self.options)
        try:
            reads = batch_ranges(db, self.options.stream, self.start, self.end)
        finally:
            db.close()
        return [InputPartition(g) for g in group(reads, self.options.tasks(streaming=False))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class ChangeStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between frontiers of the partition lineage (see ``frontier``).

    Under ``trigger(availableNow=True)`` the query reads what was committed when it started,
    in micro-batches of at most ``maxRecordsPerTrigger`` rows, then ends."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._db: ChangeStreamSource | None = None
        self._target: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the options only; each task opens its own database.
        return {"options": self.options, "_db": None, "_target": None}

    def prepareForTriggerAvailableNow(self) -> None:
        db = self._database()
        target = db.current_timestamp()
        live_tokens(db, self.options.stream, target)  # once ``target`` is safe
        self._target = target

    def _database(self) -> ChangeStreamSource:
        if self._db is None:
            self._db = _open(self.options)
        return self._db

    def initialOffset(self) -> dict[str, Any]:
        db = self._database()
        start = resolve_position(
            db, self.options.stream, self.options.starting or LATEST, self.options.fail_on_data_loss
        )
        tokens = live_tokens(db, self.options.stream, start)
        return Frontier.initial(start, tokens).to_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_records_per_trigger)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        frontier = Frontier.from_offset(start)
        db = self._database()
        if self._target is not None:
            if frontier.timestamp >= self._target:
                return start
            until = self._target
        else:
            until = max(db.current_timestamp(), frontier.timestamp)
            live_tokens(db, self.options.stream, until)  # returns once ``until`` is safe
        max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = next_frontier(
            db,
            self.options.stream,
            frontier,
            until,
            max_records,
            self.options.heartbeat_milliseconds * 1000,
            self.options.counts_mods,
            self.options.max_bytes_per_trigger,
        )
        return end.to_offset()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        reads = ranges(Frontier.from_offset(start), Frontier.from_offset(end))
        return [InputPartition(g) for g in group(reads, self.options.tasks(streaming=True))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def stop(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
