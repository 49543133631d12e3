"""The whole interface of a database, embedded or remote: every role of
:mod:`changestream.streams.roles`, and watch(). Consumers should name the roles they use."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from changestream.streams.models import Params
from changestream.streams.roles import (
    ChangeStreamSource,
    DocumentStore,
    LeaseStore,
    LeaseTableLike,
    SplitAdministration,
    TableStore,
    TransactionLike,
    WatchSource,
    WatchSourceProvider,
)
from changestream.streams.watch_arguments import TableWatcher, Watcher

__all__ = ["Database", "LeaseTableLike", "Params", "TransactionLike", "WatchSource"]


@runtime_checkable
class Database(
    TableStore,
    ChangeStreamSource,
    SplitAdministration,
    LeaseStore,
    DocumentStore,
    WatchSourceProvider,
    Watcher,
    Protocol,
):
    """A change-stream database: every role, and MongoDB-style watch() on it or one table.

    ``changestream.open(path)`` gives the embedded implementation, ``changestream.connect(url)``
    the remote one.
    """

    def table(self, name: str) -> TableWatcher: ...
