"""The whole interface of a database, embedded or remote: every role of
:mod:`changestream.streams.roles`, and watch(). Consumers should name the roles they use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

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
from changestream.streams.watch_arguments import TableWatcher, WatchCursor

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from changestream.streams.watch_arguments import WatchArguments

__all__ = ["Database", "LeaseTableLike", "Params", "TransactionLike", "WatchSource"]


@runtime_checkable
class Database(
    TableStore,
    ChangeStreamSource,
    SplitAdministration,
    LeaseStore,
    DocumentStore,
    WatchSourceProvider,
    Protocol,
):
    """A change-stream database: every role, and MongoDB-style watch() on it or one table.

    ``changestream.open(path)`` gives the embedded implementation, ``changestream.connect(url)``
    the remote one.
    """

    def watch(
        self,
        pipeline: Sequence[Mapping[str, object]] | None = None,
        **arguments: Unpack[WatchArguments],
    ) -> WatchCursor: ...
    def table(self, name: str) -> TableWatcher: ...
