"""A process-wide pool of daemon threads that run partition readers.

A partition reader blocks in a live read-function query for the partition's whole life, so the
pool grows to as many threads as readers run at once. Threads are reused across partitions and
cursors because each thread holds its own database connection: a long-lived process that opens
and closes many cursors keeps as many connections as it ever ran readers at once, not one per
partition ever read. Daemon threads never keep the interpreter from exiting.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

_log = logging.getLogger(__name__)

Job = Callable[[], None]


class ReaderPool:
    """Runs each submitted job on an idle thread, or on a new one when none is idle."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, job: Job) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._jobs.put(job)
                return
        thread = threading.Thread(
            target=self._work, args=(job,), name="changestream-watch-reader", daemon=True
        )
        thread.start()

    def _work(self, job: Job) -> None:
        while True:
            try:
                job()
            except Exception:  # a job reports its own errors; this only keeps the thread alive
                _log.exception("watch() partition reader failed")
            with self._lock:
                self._idle += 1
            job = self._jobs.get()


READERS = ReaderPool()
