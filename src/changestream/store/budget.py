"""Run one SQLite statement under a time budget (the ``execute_seconds`` SQL limit)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

from changestream.errors import ResourceExhausted

#: SQLite virtual machine instructions between looks at the clock.
_STEPS = 10_000


@contextmanager
def time_budget(conn: sqlite3.Connection, seconds: float, what: str) -> Iterator[None]:
    """Statements run on ``conn`` inside the block stop after ``seconds`` with
    ResourceExhausted, instead of running as long as they take."""
    deadline = time.monotonic() + seconds
    conn.set_progress_handler(lambda: time.monotonic() > deadline, _STEPS)
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "interrupted" not in str(exc) or time.monotonic() <= deadline:
            raise
        raise ResourceExhausted(
            f"{what} ran longer than the {seconds:g} s limit (SqlLimits.execute_seconds)"
        ) from exc
    finally:
        conn.set_progress_handler(None, 0)
