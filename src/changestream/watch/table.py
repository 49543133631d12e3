"""``db.table("T")``: a handle on one table, to watch it alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from changestream.errors import InvalidArgument
from changestream.streams.interface import Database
from changestream.watch.cursor import ChangeStreamCursor


class TableHandle:
    """One table of a database, by name (it need not exist yet, as in MongoDB)."""

    def __init__(self, db: Database, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"a table name must be a non-empty string, got {name!r}")
        self._db = db
        self.name = name

    def watch(
        self,
        pipeline: Sequence[Mapping[str, Any]] | None = None,
        full_document: str = "default",
        full_document_before_change: str = "off",
        resume_after: Mapping[str, str] | None = None,
        start_after: Mapping[str, str] | None = None,
        start_at_operation_time: Any = None,
        max_await_time_ms: int | None = None,
        batch_size: int | None = None,
    ) -> ChangeStreamCursor:
        """A cursor over this table's changes; a drop or rename of the table emits ``drop`` or
        ``rename``, then ``invalidate``, and closes it. Arguments as for ``db.watch()``."""
        return ChangeStreamCursor(
            self._db,
            self.name,
            pipeline,
            full_document,
            full_document_before_change,
            resume_after,
            start_after,
            start_at_operation_time,
            max_await_time_ms,
            batch_size,
        )
