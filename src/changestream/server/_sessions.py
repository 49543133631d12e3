"""Interactive transactions: the server side of a remote transaction that runs DML.

DML answers with a row count, so it must run when the client calls ``execute_update``, in the
same SQLite write transaction the commit later finishes; that is exactly what the embedded
transaction does, holding the write lock from the first DML to the commit. A session keeps one
embedded :class:`~changestream.store.transaction.Transaction` on one worker thread (SQLite
connections belong to threads) and runs each request of the transaction there. A session left
idle for ``idle_timeout`` seconds is rolled back, so a vanished client cannot hold the lock.
"""

from __future__ import annotations

import asyncio
import queue
import secrets
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from changestream.embedded.database import EmbeddedDatabase
from changestream.errors import FailedPrecondition, Unavailable
from changestream.server._workers import WorkerThreads, settle
from changestream.store.transaction import Transaction

T = TypeVar("T")
Step = Callable[[Transaction], Any]
#: A step, whether the transaction ends with it, and where its outcome goes; None aborts.
_Job = tuple[Step, bool, asyncio.AbstractEventLoop, "asyncio.Future[Any]"] | None


class Session:
    """One open remote transaction, bound to one worker thread."""

    def __init__(
        self, sessions: Sessions, key: str, owner: str, database: str, idle_timeout: float
    ) -> None:
        self._sessions = sessions
        self.key = key
        self.owner = owner
        self.database = database
        #: Rows the transaction's DML changed so far (for the metrics).
        self.dml_rows = 0
        self._idle_timeout = idle_timeout
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False

    def run(
        self,
        db: EmbeddedDatabase,
        tag: Any,
        client_session: str | None = None,
        excluded: bool = False,
    ) -> None:
        """The worker thread's loop: each job is a step of the transaction."""
        tx: Transaction | None = None
        try:
            while True:
                try:
                    job = self._jobs.get(timeout=self._idle_timeout)
                except queue.Empty:
                    with self._lock:
                        if not self._jobs.empty():
                            continue
                        self._closed = True
                    return
                if job is None:
                    return
                step, final, loop, future = job
                try:
                    if tx is None:
                        tx = db.transaction(tag, client_session, excluded)
                    outcome: tuple[bool, Any] = (True, step(tx))
                except BaseException as exc:
                    outcome = (False, exc)
                finished = final or tx is None
                if finished:
                    with self._lock:
                        self._closed = True
                with suppress(RuntimeError):
                    loop.call_soon_threadsafe(settle, future, outcome)
                if finished:
                    return
        finally:
            with self._lock:
                self._closed = True
            if tx is not None:
                tx.rollback()
            self._sessions.forget(self.key)

    async def call(self, step: Callable[[Transaction], T], final: bool = False) -> T:
        """Run one step of the transaction on its thread; ``final`` ends the session after
        it (a commit or a rollback), whatever its outcome."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise _expired()
            self._jobs.put((step, final, loop, future))
        return await future

    def abort(self) -> None:
        """Roll back (on the session's thread) once the current step, if any, is done."""
        self._jobs.put(None)


def _expired() -> FailedPrecondition:
    return FailedPrecondition(
        "the transaction is no longer open on the server (it committed, failed, was idle "
        "too long or the server restarted) and was rolled back; start a new transaction"
    )


class Sessions:
    """The open interactive transactions of one server."""

    def __init__(self, threads: WorkerThreads, idle_timeout: float, limit: int) -> None:
        self._threads = threads
        self._idle_timeout = idle_timeout
        self._limit = limit
        self._lock = threading.Lock()
        self._open: dict[str, Session] = {}

    def begin(
        self,
        db: EmbeddedDatabase,
        tag: Any,
        owner: str,
        database: str,
        client_session: str | None = None,
        excluded: bool = False,
    ) -> Session:
        """Open a transaction on ``db`` for ``owner`` (a token hash); its steps come later."""
        with self._lock:
            if len(self._open) >= self._limit:
                raise Unavailable(
                    f"{self._limit} transactions with DML are open on this server; "
                    "commit or roll back some first"
                )
            key = secrets.token_urlsafe(18)
            session = Session(self, key, owner, database, self._idle_timeout)
            self._open[key] = session
        self._threads.submit(lambda: session.run(db, tag, client_session, excluded))
        return session

    def get(self, key: str, owner: str, database: str) -> Session:
        """The open session ``key`` of ``owner`` on ``database``, or FailedPrecondition."""
        with self._lock:
            session = self._open.get(key)
        # Another token's session is treated as unknown: its key is not to be guessed at.
        if session is None or session.owner != owner or session.database != database:
            raise _expired()
        return session

    def forget(self, key: str) -> None:
        with self._lock:
            self._open.pop(key, None)

    def abort_all(self) -> None:
        """Roll back every open transaction (the server is stopping)."""
        with self._lock:
            sessions = list(self._open.values())
        for session in sessions:
            session.abort()
