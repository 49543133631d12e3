"""``db.table("T")``: a handle on one table, to watch it alone."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from changestream.errors import InvalidArgument
from changestream.streams.interface import Database
from changestream.watch.cursor import ChangeStreamCursor

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from changestream.streams.watch_arguments import WatchArguments


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
        **arguments: Unpack[WatchArguments],
    ) -> ChangeStreamCursor:
        """A cursor over this table's changes; a drop or rename of the table emits ``drop`` or
        ``rename``, then ``invalidate``, and closes it. Arguments as for ``db.watch()``. A
        table that does not exist yet is watched all the same (as in MongoDB), with a warning
        naming the tables there are, in case its name is mistyped."""
        tables = [t.name for t in self._db.tables()]
        if self.name not in tables:
            warnings.warn(
                f"table {self.name!r} does not exist (yet): the cursor waits for its changes; "
                f"tables: {', '.join(tables) or 'none'}",
                UserWarning,
                stacklevel=2,
            )
        return ChangeStreamCursor(self._db, self.name, pipeline, **arguments)
