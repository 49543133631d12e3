"""Threads that run the engine's blocking calls for the event loop.

The engine gives each thread its own SQLite connection and keeps it until the database is
closed, so threads must be reused rather than made per request: this pool keeps every thread
it starts and hands it the next job, so the server holds as many connections as it ever ran
blocking calls at once. Threads are daemons: a stream blocked in a long heartbeat wait never
keeps the process from exiting after shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

_log = logging.getLogger(__name__)

T = TypeVar("T")
Job = Callable[[], None]


class WorkerThreads:
    """Runs each submitted job on an idle thread, or on a new one when none is idle."""

    def __init__(self, name: str) -> None:
        self._name = name
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
                _log.exception("server worker job failed")
            with self._lock:
                self._idle += 1
            job = self._jobs.get()

    async def call(self, function: Callable[[], T]) -> T:
        """Run ``function`` on a worker thread and wait for its result (or exception)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def job() -> None:
            outcome: tuple[bool, Any]
            try:
                outcome = (True, function())
            except BaseException as exc:
                outcome = (False, exc)
            # The loop may have closed while the job ran (the server stopped): nobody waits.
            with suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, future, outcome)

        self.submit(job)
        return await future


def settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    """Give a waiting request the outcome of a job: (True, result) or (False, exception)."""
    if future.done():  # the request was cancelled meanwhile
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
