"""changestream: Spanner-style partitioned change streams over an embedded table store."""

from __future__ import annotations

from changestream.clock import Clock
from changestream.errors import (
    AlreadyExists,
    ChangeStreamError,
    DatabaseBusy,
    DatabaseClosed,
    DDLError,
    FailedPrecondition,
    InvalidArgument,
    InvalidToken,
    NotFound,
    OutOfRange,
)
from changestream.store.keys import KeyRange
from changestream.store.transaction import Transaction
from changestream.streams.database import EmbeddedDatabase, Partition, ResultSet
from changestream.streams.interface import Database, TransactionLike
from changestream.streams.records import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    ColumnTypeInfo,
    DataChangeRecord,
    HeartbeatRecord,
    Mod,
)
from changestream.types import COMMIT_TIMESTAMP

__version__ = "0.1.0"


def open(
    path: str,
    durability: str = "normal",
    busy_timeout: float = 5.0,
    clock: Clock | None = None,
) -> EmbeddedDatabase:
    """Open (creating if needed) the database in the SQLite file ``path``, or ``":memory:"``.

    ``durability="normal"`` survives a process crash; ``"full"`` also survives a power cut.
    ``busy_timeout`` is how long a writer waits for another writer's lock, in seconds.
    ``clock`` (microseconds since the epoch) replaces the wall clock, for tests and replays.
    """
    return EmbeddedDatabase(path, durability, busy_timeout, clock)


__all__ = [
    "COMMIT_TIMESTAMP",
    "AlreadyExists",
    "ChangeRecord",
    "ChangeStreamError",
    "ChildPartition",
    "ChildPartitionsRecord",
    "ColumnTypeInfo",
    "DDLError",
    "DataChangeRecord",
    "Database",
    "DatabaseBusy",
    "DatabaseClosed",
    "EmbeddedDatabase",
    "FailedPrecondition",
    "HeartbeatRecord",
    "InvalidArgument",
    "InvalidToken",
    "KeyRange",
    "Mod",
    "NotFound",
    "OutOfRange",
    "Partition",
    "ResultSet",
    "Transaction",
    "TransactionLike",
    "__version__",
    "open",
]
