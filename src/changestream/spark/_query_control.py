"""Watching and stopping a pipeline's streaming query: the heartbeat ``streams describe``
shows, a watchdog for stuck micro-batches, stopping between batches, the frontier a batch
reached, and work run beside the micro-batches."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from changestream.errors import (
    ChangeStreamError,
)
from changestream.spark.frontier import Frontier

if TYPE_CHECKING:
    from changestream.spark.pipeline import SparkPipeline

log = logging.getLogger(__name__)


class Heartbeat:
    """Tells the catalog, every ``seconds``, that this process runs the pipeline."""

    def __init__(self, pipeline: SparkPipeline, seconds: float) -> None:
        self._pipeline, self._seconds = pipeline, seconds
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="pipeline-heartbeat", daemon=True)
        self._beat_once(True)
        self._thread.start()

    def _beat_once(self, attached: bool) -> None:
        try:
            self._pipeline.catalog.heartbeat(self._pipeline.name, self._pipeline._lag, attached)
        except ChangeStreamError as exc:  # the stream was deleted, or the source is away
            log.debug("heartbeat of %s not recorded: %s", self._pipeline.name, exc)

    def _beat(self) -> None:
        while not self._stopped.wait(self._seconds):
            self._beat_once(True)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=10)
        self._beat_once(False)


class Watchdog:
    """Notices a micro-batch that stays active without finishing for ``timeout`` seconds."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._since: float | None = None
        self._batch: object = None

    def stuck(self, query: StreamingQuery) -> bool:
        progress = query.lastProgress
        batch = None if not progress else progress.get("batchId")
        if not query.status.get("isTriggerActive") or batch != self._batch:
            self._since, self._batch = None, batch
            return False
        if self._since is None:
            self._since = time.monotonic()
        return time.monotonic() - self._since > self._timeout


def stop_between_batches(query: StreamingQuery, patience: float = 30.0) -> None:
    """Stop the query, letting a running micro-batch finish first (so it is not replayed)."""
    try:
        deadline = time.monotonic() + patience
        while (
            query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        if query.isActive:
            query.stop()
    except Exception as exc:  # the JVM is gone: nothing left to stop
        log.debug("stopping the query failed: %s", exc)


def stop_session(spark: SparkSession) -> None:
    """Stop the session the pipeline started. PySpark's accumulator server (private to it)
    stops only once its connection handler next wakes, which it does every second, and
    ``SparkContext.stop`` waits for that; the pipeline uses no accumulators, so the server
    is stopped in the background instead (about 0.8 s sooner at the end of every run)."""
    context = spark.sparkContext
    accumulators = getattr(context, "_accumulatorServer", None)
    if accumulators is not None:
        context._accumulatorServer = None  # type: ignore[assignment]
    try:
        spark.stop()
    except Exception as exc:  # the JVM is gone: nothing left to stop
        log.debug("stopping Spark failed: %s", exc)
    if accumulators is not None:
        threading.Thread(
            target=accumulators.shutdown, name="spark-accumulators-stop", daemon=True
        ).start()


def frontier_of(query: StreamingQuery) -> int | None:
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


class Background:
    """``work()`` running in a daemon thread (a publication beside the next micro-batch):
    :meth:`wait` waits for it, :meth:`result` raises what it raised."""

    def __init__(self, work: Callable[[], None], name: str) -> None:
        self._work = work
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # handed to result()
            self._error = exc

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds; whether the work ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def result(self) -> None:
        """Raise what the work raised (after it ended)."""
        if self._error is not None:
            raise self._error
