"""watch() and table(), written once for every database (embedded, remote) and table handle."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from changestream.errors import InvalidArgument
from changestream.streams.roles import WatchedDatabase
from changestream.streams.watch_arguments import WatchCursor
from changestream.watch.cursor import ChangeStreamCursor

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from changestream.streams.watch_arguments import WatchArguments

#: watch()'s first argument: ``$match`` / ``$project`` stages.
Stages = Sequence[Mapping[str, object]] | None


class Watchable:
    """Something to watch: ``watch()`` takes ``pipeline`` and then the keyword arguments of
    :class:`~changestream.streams.watch_arguments.WatchArguments`; subclasses say what the
    cursor follows (:meth:`_open_cursor`)."""

    def watch(self, pipeline: Stages = None, **arguments: Unpack[WatchArguments]) -> WatchCursor:
        """A MongoDB-style cursor over the changes, in commit order.

        ``pipeline``: ``$match``/``$project`` stages; the keyword arguments are
        ``full_document``, ``full_document_before_change``, ``resume_after``, ``start_after``,
        ``start_at_operation_time``, ``max_await_time_ms``, ``batch_size``,
        ``show_expanded_events``, ``null_as_missing`` and ``comment`` (see
        :class:`~changestream.streams.watch_arguments.WatchArguments`).
        """
        return self._open_cursor(pipeline, arguments)

    def _open_cursor(self, pipeline: Stages, arguments: WatchArguments) -> WatchCursor:
        raise NotImplementedError


class WatchableDatabase(Watchable):
    """A database's ``watch()`` (every table) and ``table(name)`` (a handle to watch one)."""

    def table(self: WatchedDatabase, name: str) -> TableHandle:
        """A handle on table ``name``: ``db.table("T").watch()`` watches it alone."""
        return TableHandle(self, name)

    def _open_cursor(
        self: WatchedDatabase, pipeline: Stages, arguments: WatchArguments
    ) -> WatchCursor:
        return ChangeStreamCursor(self, None, pipeline, **arguments)


class TableHandle(Watchable):
    """One table of a database, by name (it need not exist yet, as in MongoDB). A drop or
    rename of the table emits ``drop`` or ``rename``, then ``invalidate``, and closes its
    cursors. A table that does not exist yet is watched all the same (as in MongoDB), with a
    warning naming the tables there are, in case its name is mistyped."""

    def __init__(self, db: WatchedDatabase, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"a table name must be a non-empty string, got {name!r}")
        self._db = db
        self.name = name

    def _open_cursor(self, pipeline: Stages, arguments: WatchArguments) -> WatchCursor:
        tables = [t.name for t in self._db.tables()]
        if self.name not in tables:
            warnings.warn(
                f"table {self.name!r} does not exist (yet): the cursor waits for its changes; "
                f"tables: {', '.join(tables) or 'none'}",
                UserWarning,
                stacklevel=3,
            )
        return ChangeStreamCursor(self._db, self.name, pipeline, **arguments)
