"""Around a pipeline's micro-batches: the heartbeat ``streams describe`` shows, whether Spark is
still there, stopping the session, and work run beside the micro-batches."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark import SparkContext

from changestream.errors import (
    ChangeStreamError,
)

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


def spark_is_gone(context: SparkContext) -> str | None:
    """Why ``context`` cannot run jobs any more (its driver JVM gone, it stopped), or None
    while it can."""
    try:
        stopped = context._jsc.sc().isStopped()
    except Exception as exc:  # py4j: the JVM is gone
        lines = str(exc).strip().splitlines() or ["no answer"]
        return f"{type(exc).__name__}: {lines[0]}"
    return "the Spark context was stopped" if stopped else None


def stop_context(context: SparkContext) -> None:
    """Stop the context the pipeline started. PySpark's accumulator server (private to it)
    stops only once its connection handler next wakes, which it does every second, and
    ``SparkContext.stop`` waits for that; the pipeline uses no accumulators, so the server
    is stopped in the background instead (about 0.8 s sooner at the end of every run)."""
    accumulators = getattr(context, "_accumulatorServer", None)
    if accumulators is not None:
        context._accumulatorServer = None  # type: ignore[assignment]
    try:
        context.stop()
    except Exception as exc:  # the JVM is gone: nothing left to stop
        log.debug("stopping Spark failed: %s", exc)
    if accumulators is not None:
        threading.Thread(
            target=accumulators.shutdown, name="spark-accumulators-stop", daemon=True
        ).start()


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
