"""watch(): MongoDB-style change stream cursors over every partition of the change log.

``db.watch()`` and ``db.table("T").watch()`` read the engine's internal ``_cs_watch`` stream
(FOR ALL, full old and new rows) through the read function only, merging its partitions in
commit order; see :mod:`changestream.watch.merge` for how, and :class:`ChangeStreamCursor` for
the cursor.
"""

from changestream.watch._cluster_time import ClusterTime
from changestream.watch.cursor import ChangeStreamCursor
from changestream.watch.watchable import TableHandle, Watchable, WatchableDatabase

__all__ = ["ChangeStreamCursor", "ClusterTime", "TableHandle", "Watchable", "WatchableDatabase"]
