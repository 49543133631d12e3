"""The database's clock as a worker tells it between calls: what how far behind a batch is,
and where a catch-up read ends, are measured against (the worker may run on another machine,
whose clock is not the database's)."""

from __future__ import annotations

from changestream.clock import now_us
from changestream.streams.roles import ChangeStreamSource


class DatabaseClock:
    """``db.current_timestamp()`` without a call per use: this machine's clock plus the offset
    to the database's, which :meth:`sync` measures (0 until it first does)."""

    def __init__(self, db: ChangeStreamSource) -> None:
        self._db = db
        self._offset_us = 0

    def sync(self) -> None:
        """Measure the offset again: one call to the database."""
        before = now_us()
        theirs = self._db.current_timestamp()
        after = now_us()
        # The database read its clock between this machine's two readings.
        self._offset_us = theirs - (before + after) // 2

    def now(self) -> int:
        """The database's clock now, in microseconds, as of the last :meth:`sync`."""
        return now_us() + self._offset_us
