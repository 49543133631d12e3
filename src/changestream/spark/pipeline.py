"""The Datastream-style pipeline: one Spark Structured Streaming job per stream.

The job reads the stream's change stream with the ``changestream`` source (one row per mod)
from the stream's CDC start timestamp. Each micro-batch, on the driver:

1. backfills the objects that need it (chunks read in parallel on Spark, see ``backfill``);
2. turns the batch's mods into events, leaving out changes a backfill already holds;
3. writes them as event files (a replayed batch rewrites the same files) and MERGEs them into
   the Delta replicas (idempotent), retrying failed writes with backoff;
4. records progress in the source database.

Spark commits a micro-batch only after all of that succeeded, so a crash replays it: nothing
is lost, and replays produce the same files and the same replica rows.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

import changestream
from changestream.clock import format_ts, now_us
from changestream.datastream.catalog import ObjectBackfill, StreamCatalog
from changestream.datastream.definition import StreamDefinition
from changestream.datastream.events import CdcMod, Event, backfill_events, cdc_events
from changestream.datastream.files import EventFileWriter
from changestream.datastream.states import StreamState
from changestream.ddl.schema import Table
from changestream.errors import (
    ChangeStreamError,
    DatabaseBusy,
    FailedPrecondition,
    NotFound,
    Unavailable,
)
from changestream.retry import retrying
from changestream.spark.backfill import (
    DONE_PREFIX,
    PLAN,
    Coverage,
    KeyCodec,
    chunks,
    plan_boundaries,
    read_chunks,
)
from changestream.spark.frontier import Frontier
from changestream.spark.replica import DeltaReplica
from changestream.spark.session import local_session
from changestream.streams.interface import Database

log = logging.getLogger(__name__)

#: The state a status reports once the stream's definition is gone.
DELETED = "Deleted"

#: Errors worth retrying: the destination or the source may come back.
RETRIABLE = (OSError, Unavailable, DatabaseBusy, TimeoutError)


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """How ``pipeline run`` runs.

    ``until_caught_up``: stop once every change committed before the run started has landed.
    ``trigger_seconds``: the micro-batch interval. ``max_records_per_trigger``: admission
    control (records per micro-batch). ``chunk_rows``: rows per backfill chunk.
    ``attempts``: tries of each sink write (with backoff) before the batch fails.
    ``restarts``: automatic restarts of the query after a retriable failure.
    """

    master: str = "local[2]"
    token: str | None = None
    until_caught_up: bool = False
    trigger_seconds: float = 1.0
    max_records_per_trigger: int | None = None
    chunk_rows: int = 10_000
    attempts: int = 3
    backoff_seconds: float = 0.5
    restarts: int = 3
    poll_seconds: float = 0.5


@dataclass(slots=True)
class PipelineStatus:
    """What a running pipeline reports on every poll (for progress bars)."""

    state: str
    rows_processed: int = 0
    frontier: int | None = None
    target: int | None = None
    backfill: dict[str, str] = field(default_factory=dict)

    @property
    def lag_seconds(self) -> float | None:
        return None if self.frontier is None else max(0.0, (now_us() - self.frontier) / 1e6)


class PipelineFailed(FailedPrecondition):
    """The pipeline stopped on an error (recorded in the stream's errors); ``retriable``
    says whether running it again may succeed."""

    def __init__(self, message: str, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class _BatchError(Exception):
    """A micro-batch failed; carries what to record."""

    def __init__(self, obj: str, message: str, retriable: bool) -> None:
        super().__init__(message)
        self.obj, self.message, self.retriable = obj, message, retriable


class Pipeline:
    """Runs stream ``name`` of the source database ``database`` (a path or URL)."""

    def __init__(
        self,
        name: str,
        database: str,
        options: PipelineOptions | None = None,
        spark: SparkSession | None = None,
        on_status: Callable[[PipelineStatus], None] | None = None,
    ) -> None:
        self.name = name
        self.database = database
        self.options = options or PipelineOptions()
        self._spark = spark
        self._on_status = on_status
        self.db: Database = changestream.open_path_or_url(database, self.options.token)
        self.catalog = StreamCatalog(self.db)
        self.definition: StreamDefinition = self.catalog.get(name).definition
        self._files = EventFileWriter(self.definition.destination, self.definition.format)
        self._replicas: dict[tuple[str, str], DeltaReplica] = {}
        self._failure: _BatchError | None = None
        self._started = False
        self._reported: int | None = None

    @property
    def checkpoint(self) -> Path:
        """Where Spark keeps the query's offsets and commits: one directory per stream
        incarnation, so a stream deleted and created again under the same name starts anew."""
        return (
            Path(self.definition.destination) / "_changestream" / self._incarnation / "checkpoint"
        )

    @property
    def _incarnation(self) -> str:
        return f"{self.name}-{self.definition.created_at}"

    # -- running -------------------------------------------------------------------------

    def run(self) -> PipelineStatus:
        """Run until the stream is paused, drained, deleted, caught up (``until_caught_up``)
        or fails; returns the last status. Raises :class:`PipelineFailed` on a failure."""
        self._prepare()
        start = self.catalog.progress(self.name).cdc_start_timestamp
        if start is None:
            # Changes from the moment the stream was started on (``streams start``).
            start = self.catalog.get(self.name).state_changed_at
            self.catalog.update_progress(self.name, cdc_start_timestamp=start)
        target = now_us() if self.options.until_caught_up else None
        spark = self._spark or local_session(self.options.master, f"changestream-{self.name}")
        restarts = 0
        try:
            while True:
                self._failure, self._started = None, False
                try:
                    query = self._start_query(spark, start)
                except Exception as exc:
                    failure = self._source_failure(f"cannot start the query: {exc}")
                    self.catalog.fail(self.name, failure.obj, failure.message, failure.retriable)
                    message = f"stream {self.name!r} failed: {failure.message}"
                    raise PipelineFailed(message, failure.retriable) from exc
                try:
                    return self._monitor(query, target)
                except PipelineFailed as failure:
                    if not failure.retriable or restarts >= self.options.restarts:
                        raise
                    restarts += 1
                    delay = self.options.backoff_seconds * 2**restarts
                    log.warning(
                        "pipeline %s failed (%s); restart in %.1fs", self.name, failure, delay
                    )
                    time.sleep(delay)
                    self.catalog.transition(self.name, "retry")
                finally:
                    _stop_between_batches(query)
        finally:
            if self._spark is None:
                spark.stop()
            self.db.close()

    def _prepare(self) -> None:
        state = self.catalog.get(self.name).state
        if state is StreamState.FAILED:
            self.catalog.transition(self.name, "retry")
        elif state not in (StreamState.STARTING, StreamState.RUNNING, StreamState.DRAINING):
            hint = {
                StreamState.NOT_STARTED: "start it first: changestream streams start",
                StreamState.PAUSED: "resume it first: changestream streams resume",
            }.get(state, "create a new stream")
            raise FailedPrecondition(f"stream {self.name!r} is {state.value}; {hint}")

    def _start_query(self, spark: SparkSession, start: int) -> StreamingQuery:
        reader = (
            spark.readStream.format("changestream")
            .option("database", self.database)
            .option("stream", self.definition.change_stream)
            .option("startingTimestamp", format_ts(start))
            .option("rowPerMod", "true")
            .option("heartbeatMilliseconds", str(int(self.options.trigger_seconds * 1000)))
        )
        if self.options.token:
            reader = reader.option("token", self.options.token)
        if self.options.max_records_per_trigger:
            reader = reader.option(
                "maxRecordsPerTrigger", str(self.options.max_records_per_trigger)
            )
        return (
            reader.load()
            .writeStream.foreachBatch(self._process)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(processingTime=f"{int(self.options.trigger_seconds * 1000)} milliseconds")
            .queryName(f"changestream_{self.name}".replace("-", "_"))
            .start()
        )

    def _monitor(self, query: StreamingQuery, target: int | None) -> PipelineStatus:
        drain_target: int | None = None
        while True:
            time.sleep(self.options.poll_seconds)
            status = self._status(query, target)
            if self._on_status is not None:
                self._on_status(status)
            if not query.isActive:
                failure = self._failure or self._source_failure(
                    str(query.exception() or "the query stopped")
                )
                self.catalog.fail(self.name, failure.obj, failure.message, failure.retriable)
                raise PipelineFailed(
                    f"stream {self.name!r} failed: {failure.message}", failure.retriable
                )
            caught_up = status.frontier is not None and all(
                s == "done" for s in status.backfill.values()
            )
            if status.state in (StreamState.PAUSED.value, DELETED):
                return status
            if status.state == StreamState.DRAINING.value:
                drain_target = drain_target or now_us()
                if caught_up and status.frontier is not None and status.frontier >= drain_target:
                    self.catalog.transition(self.name, "drained")
                    status.state = StreamState.PAUSED.value
                    return status
            if target is not None and caught_up and (status.frontier or 0) >= target:
                return status

    def _source_failure(self, message: str) -> _BatchError:
        """Why the query failed outside a micro-batch's sink work: permanent when the stream's
        source is gone (its change stream dropped), else retriable (``message``)."""
        try:
            self.definition.tables(self.db)
        except ChangeStreamError as exc:
            return _BatchError("*", f"{type(exc).__name__}: {exc}", False)
        return _BatchError("*", message.splitlines()[0], True)

    def _status(self, query: StreamingQuery, target: int | None) -> PipelineStatus:
        try:
            state = self.catalog.get(self.name).state.value
        except NotFound:
            state = DELETED
        frontier = _frontier(query)
        if frontier is not None and frontier != self._reported and state != DELETED:
            self.catalog.update_progress(self.name, last_commit_timestamp=frontier)
            self._reported = frontier
        progress = self.catalog.progress(self.name) if state != DELETED else None
        return PipelineStatus(
            state=state,
            rows_processed=0 if progress is None else progress.rows_processed,
            frontier=frontier,
            target=target,
            backfill={} if progress is None else {k: v.status for k, v in progress.objects.items()},
        )

    # -- one micro-batch ----------------------------------------------------------------------

    def _process(self, batch: DataFrame, batch_id: int) -> None:
        try:
            tables = {t.name: t for t in self.definition.tables(self.db)}
            self._backfill(batch.sparkSession, tables)
            rows = batch.toArrow()
            stamps = rows.column("commit_timestamp").cast(pa.int64()).to_pylist()
            events = self._cdc_events(rows, stamps, tables)
            self._deliver(events, f"{self._incarnation}-cdc-{batch_id}")
            self.catalog.update_progress(
                self.name, add_rows=len(events), last_commit_timestamp=max(stamps, default=None)
            )
            if not self._started:
                if self.catalog.get(self.name).state is StreamState.STARTING:
                    self.catalog.transition(self.name, "started")
                self._started = True
        except _BatchError as error:
            self._failure = error
            raise
        except RETRIABLE as exc:
            self._failure = _BatchError("*", f"{type(exc).__name__}: {exc}", True)
            raise
        except Exception as exc:
            self._failure = _BatchError("*", f"{type(exc).__name__}: {exc}", False)
            raise

    def _backfill(self, spark: SparkSession, tables: dict[str, Table]) -> None:
        if self.definition.backfill == "none":
            return
        progress = self.catalog.progress(self.name)
        for table in tables.values():
            obj = self.definition.object_name(table.name)
            entry = progress.objects.get(obj, ObjectBackfill())
            if entry.status == "done":
                continue
            codec = KeyCodec(table)
            if PLAN not in entry.detail:
                boundaries = plan_boundaries(self.db, table, self.options.chunk_rows)
                plan = {PLAN: [codec.dump(b) for b in boundaries]}
                entry = self.catalog.set_object_backfill(
                    self.name, obj, "running", rows=0, detail=plan
                )
            planned = chunks([codec.load(b) for b in entry.detail[PLAN]])
            todo = [c for c in planned if f"{DONE_PREFIX}{c.index}" not in entry.detail]
            log.info("backfill %s: %d of %d chunks to read", obj, len(todo), len(planned))
            reads = read_chunks(spark, self.database, self.options.token, table.name, todo)
            for read in reads:
                events = backfill_events(
                    self.definition.name,
                    self.definition.schema,
                    table,
                    read.rows,
                    read.read_timestamp,
                    read.read_timestamp,
                )
                self._deliver(events, f"{self._incarnation}-backfill-{obj}-{read.chunk.index}")
                done = {f"{DONE_PREFIX}{read.chunk.index}": read.read_timestamp}
                self.catalog.set_object_backfill(
                    self.name, obj, "running", add_rows=len(events), detail=done
                )
                self.catalog.update_progress(self.name, add_rows=len(events))
            self.catalog.set_object_backfill(self.name, obj, "done")

    def _cdc_events(
        self, rows: pa.Table, stamps: list[int], tables: dict[str, Table]
    ) -> list[Event]:
        """Events of a micro-batch's rows (``stamps``: their commit timestamps in µs)."""
        mods: dict[str, list[CdcMod]] = defaultdict(list)
        columns = {
            name: rows.column(name).to_pylist()
            for name in (
                "table_name",
                "server_transaction_id",
                "record_sequence",
                "mod_index",
                "mod_type",
                "keys",
                "new_values",
                "old_values",
            )
        }
        for i, table in enumerate(columns["table_name"]):
            if table not in tables:
                continue
            mods[table].append(
                CdcMod(
                    commit_timestamp=stamps[i],
                    server_transaction_id=columns["server_transaction_id"][i],
                    record_sequence=columns["record_sequence"][i],
                    mod_index=columns["mod_index"][i],
                    mod_type=columns["mod_type"][i],
                    keys=orjson.loads(columns["keys"][i]),
                    new_values=orjson.loads(columns["new_values"][i]),
                    old_values=orjson.loads(columns["old_values"][i]),
                )
            )
        # The read timestamp is the batch's last commit, so a replay writes the same files.
        read_at = max(stamps, default=0)
        progress = self.catalog.progress(self.name)
        events: list[Event] = []
        for name, table_mods in mods.items():
            table = tables[name]
            produced = cdc_events(
                self.definition.name, self.definition.schema, table, table_mods, read_at
            )
            entry = progress.objects.get(self.definition.object_name(name))
            if self.definition.backfill == "automatic" and entry is not None:
                coverage = Coverage(table, entry)
                produced = [
                    e for e in produced if not coverage.covers(e.payload, e.source_timestamp)
                ]
            events.extend(produced)
        return events

    def _deliver(self, events: Iterable[Event], batch_key: str) -> None:
        """Write events to files and replicas, object by object, retrying with backoff."""
        by_object: dict[str, list[Event]] = defaultdict(list)
        for event in events:
            by_object[event.object].append(event)
        for obj, obj_events in sorted(by_object.items()):
            message = ""
            try:
                for attempt in retrying(
                    lambda exc: isinstance(exc, RETRIABLE),
                    first=self.options.backoff_seconds,
                    most=self.options.backoff_seconds * 2 ** (self.options.attempts - 1),
                    attempts=self.options.attempts,
                ):
                    with attempt:
                        try:
                            self._files.write_batch(obj_events, batch_key)
                            if self.definition.replica is not None:
                                self._replica(obj_events[0]).apply(obj_events)
                        except RETRIABLE as exc:
                            number = attempt.retry_state.attempt_number
                            message = f"{type(exc).__name__}: {exc} (attempt {number})"
                            self.catalog.record_error(self.name, obj, message, retriable=True)
                            raise
            except RETRIABLE as exc:
                raise _BatchError(obj, message, True) from exc
            except ChangeStreamError as exc:
                raise _BatchError(obj, f"{type(exc).__name__}: {exc}", False) from exc

    def _replica(self, event: Event) -> DeltaReplica:
        key = (event.object, event.schema_key)
        replica = self._replicas.get(key)
        if replica is None:
            assert self.definition.replica is not None and event.table is not None
            replica = DeltaReplica(self.definition.replica, self.definition.schema, event.table)
            self._replicas[key] = replica
        return replica


def _stop_between_batches(query: StreamingQuery, patience: float = 30.0) -> None:
    """Stop the query, letting a running micro-batch finish first (so it is not replayed)."""
    deadline = time.monotonic() + patience
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    if query.isActive:
        query.stop()


def _frontier(query: StreamingQuery) -> int | None:
    """The commit timestamp through which the last finished micro-batch read every record
    (the offset's watermark)."""
    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return None
    offset: Any = progress["sources"][0].get("endOffset")
    if isinstance(offset, str):
        offset = json.loads(offset)
    if not isinstance(offset, dict):
        return None
    return Frontier.from_offset(offset).watermark


def run_pipeline(
    name: str,
    database: str,
    options: PipelineOptions | None = None,
    on_status: Callable[[PipelineStatus], None] | None = None,
) -> PipelineStatus:
    """Run the pipeline of stream ``name`` (see :class:`Pipeline`)."""
    return Pipeline(name, database, options, on_status=on_status).run()
