"""SQLite connections: one per thread, configured for WAL, the durability mode and busy waits."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from changestream.errors import DatabaseBusy, DatabaseClosed, InvalidArgument
from changestream.store.sqlite_layout import register_converters, register_functions

DURABILITY_MODES = {"normal": "NORMAL", "full": "FULL"}

register_converters()


class ConnectionPool:
    """Hands each thread its own connection to one database file and closes them all at the end."""

    def __init__(self, path: str, durability: str, busy_timeout: float) -> None:
        if durability not in DURABILITY_MODES:
            raise InvalidArgument(
                f"durability must be one of {', '.join(DURABILITY_MODES)}, got {durability!r}"
            )
        if busy_timeout <= 0:
            raise InvalidArgument(f"busy_timeout must be positive seconds, got {busy_timeout!r}")
        self.path = path
        self.busy_timeout = busy_timeout
        self._synchronous = DURABILITY_MODES[durability]
        self._local = threading.local()
        self._lock = threading.Lock()
        #: Every connection and the thread that owns it.
        self._all: list[tuple[sqlite3.Connection, threading.Thread]] = []
        self._closed = False
        #: The connection any thread may use, one at a time (see :meth:`shared`).
        self._shared: sqlite3.Connection | None = None
        self._shared_lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and not self._closed:
            return conn
        if conn is not None:
            # The pool was closed while this thread was busy: close its connection here.
            self._local.conn = None
            conn.close()
        return self._open()

    @contextmanager
    def shared(self) -> Iterator[sqlite3.Connection]:
        """The pool's one connection that is not a thread's own, held by the calling thread
        until the block ends. Small statements that many threads run often keep one warm
        page cache on it: a connection drops its cache whenever another one commits, so
        writes spread over many threads' connections each start cold (and each thread first
        opens its own, half a millisecond)."""
        with self._shared_lock:
            if self._closed:
                raise DatabaseClosed(f"database {self.path!r} is closed")
            if self._shared is None:
                self._shared = self._connect()
            yield self._shared

    def _open(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise DatabaseClosed(f"database {self.path!r} is closed")
            conn = self._connect()
            self._all.append((conn, threading.current_thread()))
        self._local.conn = conn
        return conn

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            detect_types=sqlite3.PARSE_DECLTYPES,
        )
        with translate_busy(self.busy_timeout):
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        register_functions(conn)
        return conn

    def close(self) -> None:
        """Close this thread's connection and those of finished threads. Closing a connection
        another thread is running a statement on crashes sqlite3, so a live thread's connection
        is closed by that thread when it next uses the pool (or when the pool is collected)."""
        with self._lock:
            self._closed = True
            connections, self._all = self._all, []
        me = threading.current_thread()
        for conn, owner in connections:
            if owner is me or not owner.is_alive():
                conn.close()
        # Nobody runs a statement on the shared connection while this holds its lock.
        with self._shared_lock:
            if self._shared is not None:
                self._shared.close()
                self._shared = None

    @property
    def closed(self) -> bool:
        return self._closed


@contextmanager
def translate_busy(timeout: float) -> Iterator[None]:
    """Turn SQLite's "database is locked" into a DatabaseBusy that says what happened."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise DatabaseBusy(
                f"the database stayed locked by another writer for more than {timeout:g} s "
                "(raise busy_timeout, or keep write transactions shorter)"
            ) from exc
        raise
