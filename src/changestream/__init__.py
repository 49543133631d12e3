"""changestream: Spanner-style partitioned change streams over an embedded table store."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from changestream.clock import Clock
from changestream.embedded.database import EmbeddedDatabase
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
    ResourceExhausted,
)
from changestream.extras import needs
from changestream.sql.limits import DEFAULT_LIMITS, SqlLimits
from changestream.store.inspection import inspect
from changestream.store.keys import KeyRange
from changestream.store.leases import Lease
from changestream.store.transaction import Transaction
from changestream.streams.interface import Database, LeaseTableLike, TransactionLike
from changestream.streams.lineage import (
    PartitionWalk,
    WalkedPartition,
    parents_finished,
    walk_partitions,
)
from changestream.streams.models import Partition, ResultSet
from changestream.streams.mods import Mod
from changestream.streams.opening import register_opener
from changestream.streams.records import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    ColumnTypeInfo,
    DataChangeRecord,
    HeartbeatRecord,
    RecordActions,
    data_changes,
)
from changestream.streams.sandbox import SqlSandbox
from changestream.types import COMMIT_TIMESTAMP
from changestream.watch import ChangeStreamCursor, ClusterTime

if TYPE_CHECKING:
    from changestream.remote import RemoteDatabase

    def _both_databases_have_every_role(
        embedded: EmbeddedDatabase, remote: RemoteDatabase
    ) -> tuple[Database, Database]:
        return embedded, remote  # mypy checks both against every role's signatures


__version__ = "0.1.0"


def open(
    path: str,
    durability: str = "normal",
    busy_timeout: float = 5.0,
    clock: Clock | None = None,
    *,
    sql_limits: SqlLimits = DEFAULT_LIMITS,
) -> EmbeddedDatabase:
    """Open (creating if needed) the database in the SQLite file ``path``, or ``":memory:"``.

    ``durability="normal"`` survives a process crash; ``"full"`` also survives a power cut.
    ``busy_timeout`` is how long a writer waits for another writer's lock, in seconds.
    ``clock`` (microseconds since the epoch) replaces the wall clock, for tests and replays.
    ``sql_limits`` bounds each SQL statement's size, nesting, parse and run time.
    """
    return EmbeddedDatabase(path, durability, busy_timeout, clock, sql_limits)


def connect(
    url: str,
    token: str | None = None,
    *,
    timeout: float = 60.0,
    reconnect_timeout: float = 30.0,
    verify: bool | str = True,
) -> RemoteDatabase:
    """Connect to a database on a ``changestream serve`` server: the same interface as
    :func:`open`, over HTTP (needs the ``client`` extra; ``server`` includes it).

    ``url`` is ``http(s)://host:port/NAME`` (NAME may be left out when the server serves one
    database); ``token`` is a bearer token (default: ``$CHANGESTREAM_TOKEN``). ``timeout``
    bounds each request and each silence of a stream; ``reconnect_timeout`` is how long calls
    and streams retry an unreachable server. ``verify``: check the server's TLS certificate
    (or the path of a CA bundle to trust).
    """
    with needs("client", "connect(url)"):
        from changestream.remote import connect as remote

    return remote(url, token, timeout=timeout, reconnect_timeout=reconnect_timeout, verify=verify)


def open_path_or_url(
    target: str, token: str | None = None, *, create: bool = False, verify: bool | str = True
) -> EmbeddedDatabase | RemoteDatabase:
    """:func:`open` a database file, or :func:`connect` when ``target`` is an ``http(s)://``
    URL (with ``token`` and ``verify``). Unless ``create``, a missing file is a
    :class:`NotFound` error and a file that is not a changestream database (empty, plain
    SQLite, an older layout, not SQLite) an :class:`InvalidArgument` one, left as it is."""
    if target.startswith(("http://", "https://")):
        return connect(target, token, verify=verify)
    if not create and target != ":memory:":
        if not os.path.exists(target):
            raise NotFound(f"no database file at {target!r} (create one with `changestream ddl`)")
        # Reading must not change a file's layout: only DDL makes a file a database.
        problem = inspect(target)
        if problem is not None:
            how = " (`changestream ddl` makes it one)" if problem.fixable else ""
            raise InvalidArgument(f"{target} is not a changestream database: {problem.reason}{how}")
    return open(target)


register_opener(open_path_or_url)

__all__ = [
    "COMMIT_TIMESTAMP",
    "AlreadyExists",
    "ChangeRecord",
    "ChangeStreamCursor",
    "ChangeStreamError",
    "ChildPartition",
    "ChildPartitionsRecord",
    "ClusterTime",
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
    "Lease",
    "LeaseTableLike",
    "Mod",
    "NotFound",
    "OutOfRange",
    "Partition",
    "PartitionWalk",
    "RecordActions",
    "ResourceExhausted",
    "ResultSet",
    "SqlLimits",
    "SqlSandbox",
    "Transaction",
    "TransactionLike",
    "WalkedPartition",
    "__version__",
    "connect",
    "data_changes",
    "open",
    "open_path_or_url",
    "parents_finished",
    "walk_partitions",
]
