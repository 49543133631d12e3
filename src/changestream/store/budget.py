"""Run one SQLite statement under a budget: the ``execute_seconds`` and ``max_steps`` SQL limits."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

from changestream.errors import ResourceExhausted
from changestream.sql.limits import SqlLimits

#: SQLite virtual machine instructions between looks at the clock.
_STEPS = 10_000


class StatementBudget:
    """The work one statement may do: seconds spent inside SQLite and virtual-machine steps,
    each counted over every call made under :meth:`running` (a query's rows are fetched in
    several calls; time the caller spends between them does not count)."""

    def __init__(self, limits: SqlLimits, what: str) -> None:
        self._what = what
        self._seconds = limits.execute_seconds
        self._max_steps = limits.max_steps
        self._spent = 0.0
        self._steps = 0

    @contextmanager
    def running(self, conn: sqlite3.Connection) -> Iterator[None]:
        """Statements run on ``conn`` inside the block stop with ResourceExhausted once the
        budget is spent."""
        started = time.monotonic()
        deadline = started + self._seconds - self._spent

        def spent() -> bool:
            self._steps += _STEPS
            return self._steps > self._max_steps or time.monotonic() > deadline

        conn.set_progress_handler(spent, _STEPS)
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "interrupted" not in str(exc):
                raise
            if self._steps > self._max_steps:
                raise ResourceExhausted(
                    f"{self._what} ran more than {self._max_steps:,} steps, the limit "
                    "(SqlLimits.max_steps)"
                ) from exc
            if time.monotonic() <= deadline:
                raise
            raise ResourceExhausted(
                f"{self._what} ran longer than the {self._seconds:g} s limit "
                "(SqlLimits.execute_seconds)"
            ) from exc
        finally:
            self._spent += time.monotonic() - started
            conn.set_progress_handler(None, 0)
