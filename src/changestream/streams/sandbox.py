"""Running a SELECT for a caller who is not trusted with the whole of SQLite.

An SQLite authorizer lets a statement read user tables (and the common table expressions it
defines) and call functions from an allow-list, nothing else: no system tables (``_cs_*``,
``sqlite_*``), no virtual tables such as ``dbstat``, no ``PRAGMA`` or ``ATTACH``, no
``fts3_tokenizer`` or ``load_extension``. A progress handler holds each statement to a budget
of virtual-machine steps and of seconds spent stepping, and stops it once ``cancelled()``
says nobody waits for the answer. Rows come lazily, in batches, up to ``max_rows``.

Without a sandbox the same code runs the statement lazily, held only to the database's
``SqlLimits`` (embedded callers trust their own SQL, but a runaway query still ends).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from changestream.errors import ChangeStreamError, InvalidArgument, ResourceExhausted
from changestream.sql.limits import SqlLimits
from changestream.store.budget import StatementBudget

#: Rows fetched from SQLite at a time.
BATCH = 256
#: VM instructions between two calls of the progress handler.
_PROGRESS_EVERY = 1000

#: Functions a sandboxed query may call: SQLite's core scalar, aggregate, window, date and
#: math functions, and JSON functions that build or read values (not table-valued ones).
_FUNCTION_NAMES = """
    abs char coalesce concat concat_ws format glob hex ifnull iif instr length like likelihood
    likely lower ltrim max min nullif octet_length printf quote random replace round rtrim sign
    soundex substr substring trim typeof unhex unicode unlikely upper avg count group_concat
    string_agg sum total row_number rank dense_rank percent_rank cume_dist ntile lag lead
    first_value last_value nth_value date time datetime julianday strftime unixepoch timediff
    acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10
    log2 mod pi pow power radians sin sinh sqrt tan tanh trunc json json_array
    json_array_length json_extract json_insert json_object json_patch json_remove json_replace
    json_set json_type json_valid json_quote json_group_array json_group_object
"""
ALLOWED_FUNCTIONS = frozenset(_FUNCTION_NAMES.split())


@dataclass(frozen=True, slots=True)
class SqlSandbox:
    """What one sandboxed statement may touch and spend."""

    #: VM instructions one statement may run (counted in steps of 1000).
    max_steps: int = 200_000_000
    #: Seconds one statement may spend running (time waiting for the reader is not counted).
    max_seconds: float = 10.0
    #: Rows one statement may return.
    max_rows: int = 100_000
    #: Largest string or blob a statement may make, in bytes (SQLITE_LIMIT_LENGTH).
    max_value_bytes: int = 16 << 20
    #: Polled while the statement runs: True stops it (the client went away).
    cancelled: Callable[[], bool] = lambda: False


class _Guard:
    """The authorizer and progress handler of one statement, and why it was stopped."""

    def __init__(self, tables: Collection[str], sandbox: SqlSandbox) -> None:
        self._tables = {t.lower() for t in tables}
        self._sandbox = sandbox
        self._refusal: str | None = None
        self._stop: ChangeStreamError | None = None
        self._steps = 0
        self._spent = 0.0
        self._since = 0.0

    def authorize(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, _: str | None
    ) -> int:
        if action == sqlite3.SQLITE_SELECT or action == sqlite3.SQLITE_RECURSIVE:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            # arg1 is the table; a common table expression reads as a table of no database.
            if db is None or (db == "main" and arg1 is not None and arg1.lower() in self._tables):
                return sqlite3.SQLITE_OK
            return self._refuse(f"table {arg1!r} is not accessible from SQL (user tables only)")
        if action == sqlite3.SQLITE_FUNCTION:
            if arg2 is not None and arg2.lower() in ALLOWED_FUNCTIONS:
                return sqlite3.SQLITE_OK
            return self._refuse(
                f"function {arg2!r} is not allowed in SQL over the server "
                "(core scalar, aggregate, window, date, math and JSON functions are)"
            )
        if action == sqlite3.SQLITE_PRAGMA:
            return self._refuse("PRAGMA is not allowed: execute_sql runs SELECT queries only")
        if action == sqlite3.SQLITE_ATTACH:
            return self._refuse("ATTACH is not allowed: execute_sql reads this database only")
        return self._refuse(
            "execute_sql runs SELECT queries over user tables only "
            "(no virtual tables such as dbstat, no writes)"
        )

    def _refuse(self, reason: str) -> int:
        self._refusal = self._refusal or reason
        return sqlite3.SQLITE_DENY

    def progress(self) -> int:
        self._steps += _PROGRESS_EVERY
        sandbox = self._sandbox
        if sandbox.cancelled():
            self._stop = ResourceExhausted("the query was cancelled: the client went away")
        elif self._steps > sandbox.max_steps:
            self._stop = ResourceExhausted(
                f"the query ran more than {sandbox.max_steps} steps, the most one statement "
                "may run; narrow it with WHERE or LIMIT"
            )
        elif self._spent + time.monotonic() - self._since > sandbox.max_seconds:
            self._stop = ResourceExhausted(
                f"the query ran longer than {sandbox.max_seconds:g} s, the most one statement "
                "may run; narrow it with WHERE or LIMIT"
            )
        return 1 if self._stop is not None else 0

    @contextmanager
    def armed(self, conn: sqlite3.Connection, preparing: bool) -> Iterator[None]:
        """Guard ``conn`` for the statement's work inside the block, and only then: the
        connection is the thread's own and serves the engine between two batches."""
        if preparing:
            conn.set_authorizer(self.authorize)
        length = conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self._sandbox.max_value_bytes)
        conn.set_progress_handler(self.progress, _PROGRESS_EVERY)
        self._since = time.monotonic()
        try:
            yield
        except sqlite3.Error as exc:
            if self._stop is not None:
                raise self._stop from exc
            if self._refusal is not None:
                raise InvalidArgument(f"query refused: {self._refusal}") from exc
            raise
        finally:
            self._spent += time.monotonic() - self._since
            conn.set_progress_handler(None, 0)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, length)
            if preparing:
                conn.set_authorizer(None)


def run_select(
    conn: sqlite3.Connection,
    sql: str,
    params: Sequence[Any],
    tables: Collection[str],
    sandbox: SqlSandbox | None,
    translate: Callable[[sqlite3.Error], ChangeStreamError],
    limits: SqlLimits | None = None,
) -> tuple[list[str], Iterator[list[Any]]]:
    """(column names, rows) of a SELECT, rows fetched lazily; ``translate`` turns SQLite's
    errors into the engine's (a refusal or a spent budget says so itself). Without a sandbox,
    the statement is held to ``limits`` (time and steps), counted over all its batches."""
    guard = None if sandbox is None else _Guard(tables, sandbox)
    budget = None if limits is None else StatementBudget(limits, "the query")

    @contextmanager
    def step(preparing: bool) -> Iterator[None]:
        try:
            if guard is None and budget is not None:
                with budget.running(conn):
                    yield
            elif guard is None:
                yield
            else:
                with guard.armed(conn, preparing):
                    yield
        except sqlite3.Error as exc:
            raise translate(exc) from exc

    with step(True):
        cursor = conn.execute(sql, params)
    fields = [d[0] for d in cursor.description or ()]
    limit = None if sandbox is None else sandbox.max_rows

    def rows() -> Iterator[list[Any]]:
        count = 0
        try:
            while True:
                with step(False):
                    batch = cursor.fetchmany(BATCH)
                if not batch:
                    return
                for row in batch:
                    count += 1
                    if limit is not None and count > limit:
                        raise ResourceExhausted(
                            f"the query returned more than {limit} rows, the most one "
                            "response may carry; add a LIMIT or page by key"
                        )
                    yield list(row)
        finally:
            cursor.close()

    return fields, rows()
