"""A pool of daemon threads that are kept and reused: each holds its own database connection
(the engine gives every thread one until the database closes), so a long-lived process keeps
as many connections as it ever ran jobs at once, not one per job. Daemon threads never keep
the interpreter from exiting (a job blocked in a long heartbeat wait, say)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

_log = logging.getLogger(__name__)

Job = Callable[[], None]


class ThreadPool:
    """Runs each submitted job on an idle thread, or on a new one when none is idle; threads
    are named ``name``, and a job's unexpected exception is logged as ``what`` failing."""

    def __init__(self, name: str, what: str) -> None:
        self._name = name
        self._what = what
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, job: Job) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._jobs.put(job)
                return
        threading.Thread(target=self._work, args=(job,), name=self._name, daemon=True).start()

    def _work(self, job: Job) -> None:
        while True:
            try:
                job()
            except BaseException:  # jobs report their own errors; this keeps the thread alive
                _log.exception("%s failed", self._what)
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
