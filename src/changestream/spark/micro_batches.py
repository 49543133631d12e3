"""The pipeline's micro-batches: planned on the driver, logged before they run, committed after.

Spark's micro-batch protocol, run by the pipeline itself (see ``offset_log`` for the
checkpoint): each trigger asks the source's planning (:class:`ChangeStreamStreamReader`, here
on the driver) where the next batch ends; when there is something to read, the end offset is
logged, the batch's work runs (its Spark jobs), and the batch is committed. A run resumes
after the last committed batch, and a batch logged but not committed runs again with the
offsets it logged, so its work must give the same result twice (the pipeline's does).

A Spark streaming query would do the same with the source in Python processes of its own,
started for each query (a data source process, then the streaming source's): about 3 s before
the first micro-batch on two cores, and a round trip to that process at every trigger. Here
the planning is a call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from changestream.spark._source import ChangeStreamStreamReader
from changestream.spark.frontier import Frontier
from changestream.spark.offset_log import (
    last_batch,
    log_commit,
    log_offset,
    logged_offset,
)

log = logging.getLogger(__name__)


class MicroBatchQuery:
    """Runs ``process(batch_id)`` for each micro-batch of ``planner``'s stream, in a thread,
    every ``trigger_seconds`` (at once when a batch took longer), checkpointed at
    ``checkpoint``. With ``available_now`` it reads what was committed when it started, in
    batches of at most the planner's read limit, then ends. ``process`` may return how long
    named parts of the batch's work took (seconds), which the batch's commit keeps beside its
    durations (as parts of ``addBatch``).

    :meth:`stop` ends it between batches; :attr:`error` is what ended it otherwise."""

    def __init__(
        self,
        checkpoint: Path,
        planner: ChangeStreamStreamReader,
        process: Callable[[int], Mapping[str, float] | None],
        trigger_seconds: float,
        available_now: bool,
        name: str,
    ) -> None:
        self.checkpoint = checkpoint
        self._planner = planner
        self._process = process
        self._trigger = trigger_seconds
        self._available_now = available_now
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._running_since: float | None = None
        self._idle = False
        self.error: BaseException | None = None
        #: The commit timestamp through which the last committed batch read every record.
        self.frontier: int | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> MicroBatchQuery:
        """Start the micro-batches in their thread; returns the query."""
        self._thread.start()
        return self

    @property
    def idle(self) -> bool:
        """Whether the last trigger found nothing to read and no batch runs."""
        with self._lock:
            return self._idle and self._running_since is None

    def running_seconds(self) -> float | None:
        """How long the batch running now has run, or None between batches."""
        with self._lock:
            if self._running_since is None:
                return None
            return time.monotonic() - self._running_since

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the query to end; whether it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self, patience: float = 30.0) -> bool:
        """End the query, letting a running batch finish first (so it is not replayed), for
        at most ``patience`` seconds; whether it ended."""
        self._stopping.set()
        self._thread.join(patience)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # the monitor reads it
            self.error = exc
            log.debug("micro-batches ended: %s", exc)

    def _loop(self) -> None:
        planner, checkpoint = self._planner, self.checkpoint
        if self._available_now:
            planner.prepareForTriggerAvailableNow()
        limit = planner.getDefaultReadLimit()
        committed = last_batch(checkpoint, "commits")
        batch_id = 0 if committed is None else committed + 1
        if batch_id:
            self.frontier = Frontier.from_offset(logged_offset(checkpoint, batch_id - 1)).watermark
        # Batches logged but not committed (by a run that stopped midway) are run again.
        logged = last_batch(checkpoint, "offsets")
        replay_through = -1 if logged is None else logged
        while not self._stopping.is_set():
            began = time.monotonic()
            began_ms = int(time.time() * 1000)
            if batch_id <= replay_through:
                end = logged_offset(checkpoint, batch_id)  # a replay: the batch it logged
                planned_s = 0.0
            else:
                start = logged_offset(checkpoint, batch_id - 1) if batch_id else None
                start = planner.initialOffset() if start is None else start
                end = planner.latestOffset(start, limit)
                planned_s = time.monotonic() - began
                if end == start:
                    if self._available_now:
                        return  # everything up to the target has landed
                    with self._lock:
                        self._idle = True
                    self._stopping.wait(max(0.0, began + self._trigger - time.monotonic()))
                    continue
                log_offset(checkpoint, batch_id, end, began_ms)
            with self._lock:
                self._idle, self._running_since = False, time.monotonic()
            logged_s = time.monotonic() - began - planned_s
            try:
                parts = self._process(batch_id) or {}
            finally:
                with self._lock:
                    self._running_since = None
            worked_s = time.monotonic() - began - planned_s - logged_s
            frontier = Frontier.from_offset(end).watermark
            timings = _progress(began_ms, planned_s, logged_s, worked_s, parts)
            log_commit(checkpoint, batch_id, {**timings, "watermark": frontier})
            self.frontier = frontier
            batch_id += 1
            if not self._available_now:
                self._stopping.wait(max(0.0, began + self._trigger - time.monotonic()))


def _progress(
    began_ms: int,
    planned_s: float,
    logged_s: float,
    worked_s: float,
    parts: Mapping[str, float],
) -> dict[str, Any]:
    """A committed batch's timings, in the shape of Spark's query progress, with the parts
    of ``addBatch`` the batch's work reported (not added to ``triggerExecution`` again)."""
    durations = {"latestOffset": planned_s, "walCommit": logged_s, "addBatch": worked_s}
    milliseconds = {k: round(v * 1000) for k, v in durations.items()}
    milliseconds["triggerExecution"] = sum(milliseconds.values())
    milliseconds.update({k: round(v * 1000) for k, v in parts.items()})
    return {"batchTimestampMs": began_ms, "durationMs": milliseconds}
