"""Threads that run the engine's blocking calls for the event loop: the shared pool
(:mod:`changestream.threads`: threads are reused, since each holds a database connection), and
a way to await a job's result from the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from changestream.threads import ThreadPool

T = TypeVar("T")


class WorkerThreads(ThreadPool):
    """The server's pool (:class:`~changestream.threads.ThreadPool`), awaitable from the
    event loop."""

    def __init__(self, name: str) -> None:
        super().__init__(name, "server worker job")

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
