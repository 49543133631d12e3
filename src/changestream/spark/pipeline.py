"""The Datastream-style pipeline: one Spark job in micro-batches per stream.

The driver plans micro-batches from the position ``streams start`` fixed, with the
``changestream`` source's own planning (see ``micro_batches``): each batch's end offset is
logged to the checkpoint before it runs, and the batch's partition ranges are planned from the
logged offsets (see ``offset_log``). The work happens in Spark tasks (see ``_tasks``): each
task reads its ranges' changes, turns them into events, writes them to segments and stages the
newest change per key for the Delta replica. The driver then, per micro-batch:

1. backfills the objects that need it (chunks read, turned into events and written by tasks;
   the driver records which chunks are done);
2. runs the batch's tasks, retrying with backoff and recording each error;
3. MERGEs the staged rows into the replicas (one MERGE per object; replays are idempotent);
4. publishes the segments whose rotation is due as event files (by tasks again);
5. records progress (a replayed batch is counted once).

A micro-batch is committed only after all of that succeeded, so a crash replays it: nothing
is lost, a replay rewrites the same segments and the same replica rows, and every change
committed after ``streams start`` becomes an event. A heartbeat tells ``streams describe``
that a pipeline is attached. The run never hangs: a micro-batch with no progress for
``batch_timeout_seconds``, or a Spark driver that goes away, ends it with a recorded error.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import tenacity
from pyspark import SparkContext
from pyspark.sql import SparkSession

from changestream.clock import format_ts
from changestream.datastream.backfill_jobs import ACTIVE_STATUSES, WHERE, filtered_keys
from changestream.datastream.catalog import (
    CDC_GENERATION,
    FRESHNESS,
    ObjectBackfill,
    StreamCatalog,
)
from changestream.datastream.definition import StreamDefinition, table_and_columns
from changestream.datastream.layout import WORK_DIRECTORY
from changestream.datastream.segments import due, pending_lanes
from changestream.datastream.states import StreamState
from changestream.ddl.schema import Table
from changestream.deprecation import renamed
from changestream.errors import (
    ChangeStreamError,
    FailedPrecondition,
    NotFound,
)
from changestream.retry import retrying
from changestream.spark._backfill import DONE_PREFIX, PLAN, KeyCodec, chunks, plan_boundaries
from changestream.spark._options import parse_options
from changestream.spark._query_control import Background, Heartbeat, spark_is_gone, stop_context
from changestream.spark._run_status import (
    DEFAULT_MAX_BYTES_PER_TRIGGER as DEFAULT_MAX_BYTES_PER_TRIGGER,
)
from changestream.spark._run_status import (
    DEFAULT_MAX_RECORDS_PER_TRIGGER as DEFAULT_MAX_RECORDS_PER_TRIGGER,
)
from changestream.spark._run_status import DELETED, BatchError, classify
from changestream.spark._run_status import PipelineFailed as PipelineFailed
from changestream.spark._run_status import PipelineOptions as PipelineOptions
from changestream.spark._run_status import PipelineStatus as PipelineStatus
from changestream.spark._session import local_context, warm_workers
from changestream.spark._source import ChangeStreamStreamReader, check_stream
from changestream.spark._tasks import (
    WINDOW,
    BackfillTask,
    CdcTask,
    PublishTask,
    TaskPlan,
    read_staged,
    run_tasks,
)
from changestream.spark.micro_batches import MicroBatchQuery
from changestream.spark.offset_log import batch_offsets
from changestream.spark.replica import DeltaReplica
from changestream.streams.opening import open_database
from changestream.streams.origins import table_origins
from changestream.streams.roles import PipelineDatabase

log = logging.getLogger(__name__)

T = TypeVar("T")


class SparkPipeline:
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
        self.db: PipelineDatabase = open_database(database, self.options.token)
        self.catalog = StreamCatalog(self.db)
        self.definition: StreamDefinition = self.catalog.get(name).definition
        self._generation = int(self.catalog.progress(name).detail.get(CDC_GENERATION, 0))
        self._failure: BatchError | None = None
        self._merges: dict[str, int] = defaultdict(int)
        self._reported: int | None = None
        self._lag: float | None = None
        self._last = PipelineStatus(state=StreamState.STARTING.value)
        self._stop_requested = threading.Event()
        #: Set when the watchdog cancelled the running micro-batch: its jobs are not retried.
        self._cancelled = threading.Event()
        self._runner: threading.Thread | None = None
        self._outcome: PipelineStatus | BaseException | None = None
        self._planner: ChangeStreamStreamReader | None = None
        self._replicas: dict[tuple[Any, ...], DeltaReplica] = {}
        self._publication: Background | None = None
        #: Held while a micro-batch writes the sinks, or while the monitor brings the replicas
        #: of an idle stream to a new table shape: one at a time.
        self._sinks = threading.Lock()

    @property
    def checkpoint(self) -> Path:
        """Where the micro-batches' offsets and commits are kept (see ``offset_log``): one
        directory per stream incarnation, so a stream deleted and created again under the same
        name starts anew."""
        return self._work / "checkpoint"

    @property
    def spark_log(self) -> Path:
        """Where the JVM's own output goes when the pipeline starts its Spark context
        (``PipelineOptions.spark_log``, or ``spark.log`` beside the checkpoint)."""
        if self.options.spark_log is not None:
            return Path(self.options.spark_log)
        return self._work / "spark.log"

    @property
    def _work(self) -> Path:
        return Path(self.definition.destination) / WORK_DIRECTORY / self._incarnation

    @property
    def _incarnation(self) -> str:
        """The stream's work directory name: a CDC restart from a chosen position (``streams
        resume --cdc-start``) reads into a new one, with a checkpoint of its own."""
        base = f"{self.name}-{self.definition.created_at}"
        return base if not self._generation else f"{base}-cdc{self._generation}"

    # -- running -------------------------------------------------------------------------

    def start(self) -> SparkPipeline:
        """Run in a background thread and return at once; follow it with :meth:`status`, end
        it with :meth:`stop`, or wait for it with :meth:`wait`."""
        if self._runner is not None:
            raise FailedPrecondition(f"pipeline {self.name!r} was already started")
        self._runner = threading.Thread(
            target=self._run_in_background, name=f"pipeline-{self.name}", daemon=True
        )
        self._runner.start()
        return self

    def status(self) -> PipelineStatus:
        """The last status polled (state, rows processed, frontier, backfill)."""
        return self._last

    @property
    def running(self) -> bool:
        """Whether a run started with :meth:`start` is still going."""
        return self._runner is not None and self._runner.is_alive()

    def wait(self, timeout: float | None = None) -> PipelineStatus:
        """Wait (at most ``timeout`` seconds) for a run started with :meth:`start` to end;
        returns its last status, or raises its failure (:class:`PipelineFailed`)."""
        if self._runner is None:
            raise FailedPrecondition(f"pipeline {self.name!r} was not started")
        self._runner.join(timeout)
        if self._runner.is_alive():
            raise TimeoutError(f"pipeline {self.name!r} still running after {timeout:g}s")
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None
        return self._outcome

    def stop(self, timeout: float | None = 120.0) -> PipelineStatus:
        """Stop between micro-batches, publish what landed, and return the last status (the
        stream's state is left as it is: ``streams pause`` pauses it)."""
        self._stop_requested.set()
        return self.wait(timeout)

    def _run_in_background(self) -> None:
        try:
            self._outcome = self.run()
        except BaseException as exc:  # handed to wait()
            self._outcome = exc

    def run(self) -> PipelineStatus:
        """Run until the stream is paused, drained, deleted, caught up (``until_caught_up``),
        stopped (:meth:`stop`) or fails; returns the last status. Raises
        :class:`PipelineFailed` on a failure."""
        self._prepare()
        progress = self.catalog.progress(self.name)
        self._generation = int(progress.detail.get(CDC_GENERATION, 0))
        start = progress.cdc_start_timestamp
        if start is None:
            # Changes from the moment the stream was started on (``streams start``).
            start = self.catalog.get(self.name).state_changed_at
            self.catalog.update_progress(self.name, cdc_start_timestamp=start)
        target = self.db.current_timestamp() if self.options.until_caught_up else None
        if self._spark is None:
            context = local_context(
                self.options.master, f"changestream-{self.name}", log=self.spark_log, warm=True
            )
        else:
            context = self._spark.sparkContext
            warm_workers(context)
        heartbeat = Heartbeat(self, self.options.heartbeat_seconds)
        backoff = self.options.backoff_seconds
        restarts = retrying(
            lambda exc: isinstance(exc, PipelineFailed) and exc.retriable and exc.while_running,
            first=backoff * 2,
            most=backoff * 2 ** max(1, self.options.restarts),
            attempts=self.options.restarts + 1,
            before_sleep=self._restarting,
        )
        try:
            status: PipelineStatus = restarts(self._run_query, context, start, target)
            return status
        finally:
            heartbeat.stop()
            self._stop_planner()
            self._drop_publication()
            if self._spark is None:
                stop_context(context)
            self.db.close()

    def _run_query(self, context: SparkContext, start: int, target: int | None) -> PipelineStatus:
        """One run of the streaming query, from backfill to a stop or a failure."""
        if self.catalog.get(self.name).state is StreamState.FAILED:
            self.catalog.transition(self.name, "retry")  # a restart after a failure
        self._failure = None
        self._cancelled.clear()
        self._drop_publication()  # a failed run's, before a restart
        try:
            self._guard(lambda: self._begin(context))
            query = self._start_query(context, start, available_now=target is not None)
            self._mark_running()
        except Exception as exc:
            failure = self._failure or self._source_failure(exc)
            self.catalog.fail(self.name, failure.obj, failure.message, failure.retriable)
            message = f"stream {self.name!r} failed: {failure.message}"
            raise PipelineFailed(message, failure.retriable) from exc
        try:
            try:
                status = self._monitor(context, query, target)
            finally:
                self._end(context, query)
                self._stop_planner()
            # Close the files of every event landed so far (their rotation may not be due):
            # a stopped pipeline leaves nothing unpublished.
            self._guard(lambda: self._publish(context, force=True))
            return status
        except PipelineFailed as failure:
            failure.while_running = True
            raise

    def _restarting(self, state: tenacity.RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "pipeline %s failed (%s); restart %d of %d in %.1fs",
            self.name,
            failure,
            state.attempt_number,
            self.options.restarts,
            delay,
        )

    def _guard(self, work: Callable[[], None]) -> None:
        """Run driver-side work outside a micro-batch, failing the run as a batch would."""
        try:
            work()
        except BatchError as error:
            self._failure = error
            self.catalog.fail(self.name, error.obj, error.message, error.retriable)
            message = f"stream {self.name!r} failed: {error.message}"
            raise PipelineFailed(message, error.retriable) from error

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

    def _mark_running(self) -> None:
        if self.catalog.get(self.name).state is StreamState.STARTING:
            self.catalog.transition(self.name, "started")

    def _source_options(self, start: int) -> dict[str, str]:
        """The ``changestream`` source's options of this pipeline's query."""
        options = {
            "database": self.database,
            "stream": self.definition.change_stream,
            "startingTimestamp": format_ts(start),
            "rowPerRange": "true",
        }
        if self.options.token:
            options["token"] = self.options.token
        if self.options.max_records_per_trigger:
            options["maxRecordsPerTrigger"] = str(self.options.max_records_per_trigger)
        if self.options.max_bytes_per_trigger:
            options["maxBytesPerTrigger"] = str(self.options.max_bytes_per_trigger)
        return options

    def _begin(self, context: SparkContext) -> None:
        """Before the query: the replicas take their tables' shapes, then backfill runs."""
        plan = self._plan(self._tables())
        self._follow_schemas(plan)
        self._backfill(context, plan)

    def _start_query(
        self, context: SparkContext, start: int, available_now: bool
    ) -> MicroBatchQuery:
        options = self._source_options(start)
        checked = parse_options(options)
        # What a Spark query's load() checks: the stream exists, the start is in retention.
        check_stream(checked)
        self._stop_planner()
        self._planner = ChangeStreamStreamReader(checked)
        trigger = 0.0 if available_now else self.trigger_seconds
        return MicroBatchQuery(
            self.checkpoint,
            self._planner,
            functools.partial(self._process, context),
            trigger,
            available_now,
            f"pipeline-{self.name}-batches",
        ).start()

    def _stop_planner(self) -> None:
        if self._planner is not None:
            self._planner.stop()  # closes its database
            self._planner = None

    @property
    def trigger_seconds(self) -> float:
        """The micro-batch interval: a third of the stream's data freshness when it has one
        (a change waits at most that long for its batch, which has the rest to land it), else
        the options' ``trigger_seconds``."""
        freshness = self.definition.data_freshness
        return self.options.trigger_seconds if freshness is None else freshness / 3

    def _monitor(
        self, context: SparkContext, query: MicroBatchQuery, target: int | None, drain: bool = True
    ) -> PipelineStatus:
        """Watch ``query`` until it ends, fails, or the stream is paused, deleted or (with
        ``drain``) draining."""
        while True:
            ended = query.wait(self.options.poll_seconds)
            try:
                status = self._status(query, target)
            except ChangeStreamError as exc:  # the source is away
                message, retriable = classify(exc)
                raise PipelineFailed(f"stream {self.name!r} failed: {message}", retriable) from exc
            running = query.running_seconds()
            stuck = running is not None and running > self.options.batch_timeout_seconds
            gone = spark_is_gone(context)
            if gone is not None:
                message = f"Spark failed: {gone}"
                self.catalog.fail(self.name, "*", message, True)
                raise PipelineFailed(f"stream {self.name!r} failed: {message}", False)
            self._last = status
            if self._on_status is not None:
                self._on_status(status)
            if query.idle:
                self._follow_while_idle()
            if self._stop_requested.is_set():
                return status
            if stuck:
                self._cancel_batch(context)
                message = (
                    f"a micro-batch made no progress for {self.options.batch_timeout_seconds:g}s"
                )
                self.catalog.fail(self.name, "*", message, True)
                raise PipelineFailed(f"stream {self.name!r} failed: {message}", True)
            if ended:
                error = query.error
                if error is None and target is not None:
                    return status  # availableNow: everything up to the target has landed
                failure = self._failure or self._source_failure(error or "the query stopped")
                self.catalog.fail(self.name, failure.obj, failure.message, failure.retriable)
                raise PipelineFailed(
                    f"stream {self.name!r} failed: {failure.message}", failure.retriable
                )
            if status.state in (StreamState.PAUSED.value, DELETED):
                return status
            if drain and status.state == StreamState.DRAINING.value:
                return self._drain(context, query)

    @property
    def _job_group(self) -> str:
        return f"changestream-pipeline-{self.name}"

    def _end(self, context: SparkContext, query: MicroBatchQuery) -> None:
        """Stop ``query`` between micro-batches; a batch still running after the patience
        has its jobs cancelled, so no other query of the checkpoint runs beside it."""
        if not query.stop():
            log.warning("stream %s: a micro-batch still runs; cancelling its jobs", self.name)
            self._cancel_batch(context)
            query.stop()

    def _cancel_batch(self, context: SparkContext) -> None:
        """Cancel the Spark jobs of the micro-batch running now (they fail it, untried)."""
        self._cancelled.set()
        try:
            context.cancelJobGroup(self._job_group)
        except Exception as exc:  # the JVM is gone: nothing left to cancel
            log.debug("cancelling the micro-batch's jobs failed: %s", exc)

    def _drain(self, context: SparkContext, query: MicroBatchQuery) -> PipelineStatus:
        """Finish everything committed until now with an ``availableNow`` query, then Paused."""
        self._end(context, query)
        start = self.catalog.progress(self.name).cdc_start_timestamp
        assert start is not None
        final = self._start_query(context, start, available_now=True)
        try:
            status = self._monitor(context, final, target=self.db.current_timestamp(), drain=False)
        finally:
            self._end(context, final)
        self._guard(lambda: self._publish(context, force=True))
        self.catalog.transition(self.name, "drained")
        status.state = StreamState.PAUSED.value
        return status

    def _source_failure(self, error: object) -> BatchError:
        """Why the query failed outside a micro-batch's sink work: permanent when the stream's
        source is gone (its change stream dropped), else as the error says."""
        try:
            self.definition.tables(self.db)
        except ChangeStreamError as exc:
            return BatchError("*", f"{type(exc).__name__}: {exc}", False)
        if isinstance(error, BaseException):
            message, retriable = classify(error)
            return BatchError("*", message, retriable)
        return BatchError("*", str(error).splitlines()[0], True)

    def _status(self, query: MicroBatchQuery, target: int | None) -> PipelineStatus:
        try:
            state = self.catalog.get(self.name).state.value
        except NotFound:
            state = DELETED
        frontier = query.frontier
        if frontier is not None and frontier != self._reported and state != DELETED:
            self.catalog.update_progress(self.name, last_commit_timestamp=frontier)
            self._reported = frontier
        progress = self.catalog.progress(self.name) if state != DELETED else None
        status = PipelineStatus(
            state=state,
            rows_processed=0 if progress is None else progress.rows_processed,
            frontier=frontier,
            target=target,
            backfill={} if progress is None else {k: v.status for k, v in progress.objects.items()},
            idle=query.idle,
            now=self.db.current_timestamp(),
        )
        self._lag = status.lag_seconds
        return status

    # -- one micro-batch ----------------------------------------------------------------------

    def _plan(self, tables: dict[str, Table]) -> TaskPlan:
        return TaskPlan(
            stream_name=self.definition.name,
            schema=self.definition.schema,
            tables=tables,
            format=self.definition.file_format,
            max_file_bytes=self.definition.max_file_bytes,
            segments=str(self._work / "segments"),
            staging=str(self._work / "staging"),
            replica=self.definition.replica,
            drop_dropped_columns=self.definition.replica_dropped_columns == "drop",
            append_only=self.definition.replica_mode == "append-only",
            schema_files=self.definition.schema_file == "avro",
            origins={
                name: origin for name, origin in table_origins(self.db).items() if name in tables
            },
            include=dict(table_and_columns(entry) for entry in self.definition.include),
            exclude=frozenset(self.definition.exclude),
        )

    def _tables(self) -> dict[str, Table]:
        return {t.name: t for t in self.definition.tables(self.db)}

    def _follow_while_idle(self) -> None:
        """Bring the replicas to a table shape a DDL changed while no row changes: an idle
        stream has no micro-batch to do it. Only when a shape changed does this hold the
        sinks (a micro-batch that starts meanwhile waits for it)."""
        if self.definition.replica is None:
            return
        try:
            plan = self._plan(self._tables())
        except ChangeStreamError as exc:  # the next micro-batch or status says what
            log.debug("stream %s: its tables could not be read: %s", self.name, exc)
            return
        if all(self._replica_key(plan, table) in self._replicas for table in plan.tables):
            return
        if not self._sinks.acquire(blocking=False):
            return  # a micro-batch runs: it follows the shapes itself
        try:
            self._guard(lambda: self._follow_schemas(plan))
        finally:
            self._sinks.release()

    def _process(self, context: SparkContext, batch_id: int) -> dict[str, float]:
        with self._sinks:
            return self._process_batch(context, batch_id)

    def _process_batch(self, context: SparkContext, batch_id: int) -> dict[str, float]:
        """Run micro-batch ``batch_id``; how long its CDC tasks (``cdcTasks``) and its
        replica MERGEs (``replicaMerge``) took, in seconds, which its commit keeps."""
        try:
            # The micro-batch thread's jobs, which a stuck batch's watchdog cancels.
            description = f"changestream pipeline {self.name}, micro-batch {batch_id}"
            context.setJobGroup(self._job_group, description, interruptOnCancel=True)
            # `streams update` may have changed the objects, rotation or format meanwhile (a
            # deleted stream keeps its last definition: the monitor stops the run).
            with contextlib.suppress(NotFound):
                self.definition = self.catalog.get(self.name).definition
            plan = self._plan(self._tables())
            self._backfill(context, plan)
            began = time.monotonic()
            summary = self._attempts("*", lambda: self._run_cdc_tasks(context, plan, batch_id))
            tasks_done = time.monotonic()
            self._merge(plan, summary, f"cdc-{batch_id}")
            parts = {"cdcTasks": tasks_done - began, "replicaMerge": time.monotonic() - tasks_done}
            self._publish(context, force=False)
            events = sum(row["events"] for row in summary if row["kind"] == "events")
            windows = [row["read_timestamp"] for row in summary if row["kind"] == WINDOW]
            detail = None
            if windows and events:
                age = (self.db.current_timestamp() - min(windows)) / 1e6
                detail = {FRESHNESS: self._freshness(age)}
            self.catalog.update_progress(
                self.name, add_rows=events, batch_id=batch_id, detail=detail
            )
            return parts
        except BatchError as error:
            self._failure = error
            raise
        except Exception as exc:
            message, retriable = classify(exc)
            self._failure = BatchError("*", message, retriable)
            raise

    def _freshness(self, seconds: float) -> dict[str, Any]:
        """The observed freshness after a micro-batch whose oldest possible change waited
        ``seconds`` until the replica and files reflected it (its read window's start to now:
        an upper bound), with the figures of the batches before."""
        limit = self.definition.data_freshness
        over = limit is not None and seconds > limit
        if over:
            log.warning(
                "stream %s: data freshness %.1f s, above its %s s", self.name, seconds, limit
            )
        previous = self.catalog.progress(self.name).detail.get(FRESHNESS) or {}
        return {
            "last_seconds": round(seconds, 3),
            "max_seconds": round(max(seconds, previous.get("max_seconds", 0.0)), 3),
            "batches": int(previous.get("batches", 0)) + 1,
            "over_limit": int(previous.get("over_limit", 0)) + int(over),
        }

    def _run_cdc_tasks(
        self, context: SparkContext, plan: TaskPlan, batch_id: int
    ) -> list[dict[str, Any]]:
        """Run micro-batch ``batch_id``'s CDC tasks, one per group of partition ranges the
        source plans between the offsets Spark logged for it; their summary rows."""
        planner = self._planner
        assert planner is not None, "the query was started"
        start, end = batch_offsets(self.checkpoint, batch_id, planner.initialOffset)
        groups = tuple(tuple(p.value) for p in planner.partitions(start, end))
        if not groups:
            return []
        task = CdcTask(
            plan,
            batch_id,
            self.database,
            self.options.token,
            self.definition.change_stream,
            groups,
        )
        return run_tasks(context, task, len(groups))

    def _attempts(self, obj: str, work: Callable[[], T]) -> T:
        """``work()``, tried ``attempts`` times with jittered backoff while it fails retriably;
        each failure is recorded in the stream's errors."""

        def record(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            message = classify(error)[0] if error else "failed"
            self.catalog.record_error(
                self.name, obj, f"{message} (attempt {state.attempt_number})", retriable=True
            )

        backoff = self.options.backoff_seconds
        try:
            for attempt in retrying(
                lambda exc: classify(exc)[1] and not self._cancelled.is_set(),
                first=backoff,
                most=backoff * 2 ** max(0, self.options.attempts - 1),
                attempts=self.options.attempts,
                before_sleep=record,
            ):
                with attempt:
                    return work()
        except Exception as exc:
            message, retriable = classify(exc)
            if retriable:
                message = f"{message} (attempt {self.options.attempts})"
                self.catalog.record_error(self.name, obj, message, retriable=True)
            raise BatchError(obj, message, retriable) from exc
        raise AssertionError("unreachable: tenacity returns or raises")

    def _merge(self, plan: TaskPlan, summary: list[dict[str, Any]], batch_key: str) -> None:
        """One MERGE per object of the rows the tasks staged, then the staging is removed."""
        if self.definition.replica is None:
            return
        staged: dict[str, list[str]] = defaultdict(list)
        for row in summary:
            if row["kind"] == "replica":
                staged[row["object"]].append(row["path"])
        by_object = {self.definition.object_name(t): t for t in plan.tables}
        self._follow_schemas(plan, skip=staged.keys())
        for obj, paths in sorted(staged.items()):
            rows = read_staged(paths)
            if rows is None or obj not in by_object:
                continue
            replica = self._replica(plan, by_object[obj])
            self._attempts(obj, functools.partial(replica.apply_arrow, rows))
            self._merges[obj] += 1
            every = self.options.compact_every
            if every and self._merges[obj] % every == 0:
                maintain = functools.partial(replica.maintain, self.options.vacuum_retention_hours)
                log.info("replica %s maintained: %s", obj, self._attempts(obj, maintain))
        for directory in {Path(p).parent.parent for paths in staged.values() for p in paths}:
            shutil.rmtree(directory, ignore_errors=True)

    def _follow_schemas(self, plan: TaskPlan, skip: Collection[str] = ()) -> None:
        """Bring the replicas of tables whose shape this run has not seen yet to it (objects
        in ``skip`` get their rows now, which brings them too)."""
        if self.definition.replica is None:
            return
        for table in plan.tables:
            obj = self.definition.object_name(table)
            if obj not in skip and self._replica_key(plan, table) not in self._replicas:
                self._attempts(obj, self._replica(plan, table).follow_schema)

    def _replica_key(self, plan: TaskPlan, table: str) -> tuple[Any, ...]:
        settings = (plan.replica, plan.append_only, plan.drop_dropped_columns)
        found = plan.tables[table]
        # A table created again with the same shape is another table (see Table.created_at).
        return (plan.schema, found, found.created_at, *settings)

    def _replica(self, plan: TaskPlan, table: str) -> DeltaReplica:
        """``plan``'s replica of ``table``: the same object from one micro-batch to the next
        while the table and the replica settings stay the same, so its Delta table stays
        open."""
        key = self._replica_key(plan, table)
        replica = self._replicas.get(key)
        if replica is None:
            replica = self._replicas[key] = plan.replicas[table]
        return replica

    def _publish(self, context: SparkContext, force: bool) -> None:
        """Publish the segment lanes whose rotation is due (all of them with ``force``).

        The previous publication is waited for first: one runs at a time, and its failure
        fails this call. Without ``force`` the publication runs in the background, so a
        micro-batch does not wait for the files it rotates (about 0.3 s for a 50 MB file):
        its segments are durable already, and a publication a crash cuts short is finished
        by the next one (see ``datastream.segments``)."""
        self._await_publication()
        definition = self.definition
        root = self._work / "segments"
        now = time.time()
        lanes = [
            lane
            for lane in pending_lanes(root)
            if force or due(lane, definition.max_file_bytes, definition.file_rotation_interval, now)
        ]
        if not lanes:
            return
        task = PublishTask(
            tuple(str(lane.directory) for lane in lanes),
            definition.destination,
            self._incarnation,
            definition.file_format,
            definition.max_file_bytes,
        )
        obj = lanes[0].obj if len({lane.obj for lane in lanes}) == 1 else "*"

        def publish() -> None:
            self._attempts(obj, lambda: run_tasks(context, task, len(lanes)))

        if force:
            publish()
        else:
            self._publication = Background(publish, f"pipeline-{self.name}-publish")

    def _await_publication(self) -> None:
        """Wait for the background publication, if any (at most the batch timeout); raises
        its failure."""
        publication, self._publication = self._publication, None
        if publication is None:
            return
        timeout = self.options.batch_timeout_seconds
        if not publication.wait(timeout):
            raise BatchError("*", f"publishing event files took over {timeout:g}s", True)
        publication.result()

    def _drop_publication(self) -> None:
        """Let a background publication end (at most the batch timeout) when the run it
        belonged to is over; its failure is only logged (the next one finishes its work)."""
        try:
            self._await_publication()
        except Exception as exc:
            log.warning("stream %s: publishing event files failed: %s", self.name, exc)

    def _backfill(self, context: SparkContext, plan: TaskPlan) -> None:
        """Run the backfill job of every object of ``plan`` that has one to run (an automatic
        stream's objects, and those started with ``streams backfill start``), in waves of
        chunks read by tasks; a job stopped meanwhile ends before its next wave."""
        progress = self.catalog.progress(self.name)
        wave = max(2, context.defaultParallelism * 2)
        for table in plan.tables.values():
            obj = self.definition.object_name(table.name)
            entry = progress.objects.get(obj)
            if entry is None:
                if self.definition.backfill != "automatic":
                    continue
                entry = ObjectBackfill()
            if entry.status not in (*ACTIVE_STATUSES, "failed"):
                continue  # a failed job is tried again (its unread chunks) when the run is
            try:
                self._backfill_object(context, plan, table, obj, entry, wave)
            except Exception:
                self.catalog.set_object_backfill(self.name, obj, "failed")
                raise

    def _backfill_object(
        self,
        context: SparkContext,
        plan: TaskPlan,
        table: Table,
        obj: str,
        entry: ObjectBackfill,
        wave: int,
    ) -> None:
        codec = KeyCodec(table)
        if PLAN not in entry.detail:
            boundaries = plan_boundaries(self.db, table, self.options.chunk_rows)
            detail = {PLAN: [codec.dump(b) for b in boundaries]}
            entry = self.catalog.set_object_backfill(
                self.name, obj, "running", rows=0, detail=detail
            )
        elif entry.status != "running":  # started or tried again: the chunks unread
            entry = self.catalog.set_object_backfill(self.name, obj, "running")
        planned = chunks([codec.load(b) for b in entry.detail[PLAN]])
        todo = [c for c in planned if f"{DONE_PREFIX}{c.index}" not in entry.detail]
        log.info("backfill %s: %d of %d chunks to read", obj, len(todo), len(planned))
        where = entry.detail.get(WHERE)
        kept = None if where is None else filtered_keys(self.db, table, where)
        task = BackfillTask(plan, self.database, self.options.token, table.name, kept)
        for first in range(0, len(todo), wave):
            current = self.catalog.progress(self.name).objects.get(obj)
            if current is not None and current.status == "stopped":
                log.info("backfill %s stopped with %d chunks unread", obj, len(todo) - first)
                return
            part = todo[first : first + wave]
            summary = self._attempts(obj, functools.partial(run_tasks, context, task, part))
            self._merge(plan, summary, f"backfill-{obj}")
            done = [row for row in summary if row["kind"] == "chunk"]
            self.catalog.set_object_backfill(
                self.name,
                obj,
                None,  # a stop that came during the wave stays
                add_rows=sum(row["events"] for row in done),
                detail={f"{DONE_PREFIX}{row['seq']}": row["read_timestamp"] for row in done},
            )
            self.catalog.update_progress(self.name, add_rows=sum(row["events"] for row in done))
            self._publish(context, force=False)
        self.catalog.set_object_backfill(self.name, obj, "done")  # every chunk is read


def run_pipeline(
    name: str,
    database: str,
    options: PipelineOptions | None = None,
    on_status: Callable[[PipelineStatus], None] | None = None,
) -> PipelineStatus:
    """Run the pipeline of stream ``name`` (see :class:`SparkPipeline`)."""
    return SparkPipeline(name, database, options, on_status=on_status).run()


# The old name, shared with watch()'s aggregation pipeline until they were told apart.
__getattr__ = renamed(__name__, "Pipeline", SparkPipeline)
