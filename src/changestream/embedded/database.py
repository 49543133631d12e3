"""The embedded database: the store plus change capture, the read function, SQL and watch()."""

from __future__ import annotations

import os
import sqlite3
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from changestream.clock import Clock
from changestream.ddl.schema import SYSTEM_VALUE_CAPTURE_TYPE, ChangeStream, Table
from changestream.errors import (
    ChangeStreamError,
    InvalidArgument,
    NotFound,
    reported,
    reported_items,
)
from changestream.sql.limits import DEFAULT_LIMITS, SqlLimits
from changestream.store.database import SnapshotRead, Store
from changestream.store.documents import SystemDocument
from changestream.store.keys import KeyRange
from changestream.store.leases import LeaseTable, check_consumer, lease_consumers
from changestream.store.policy import Action, SplitPolicy
from changestream.store.transaction import Transaction
from changestream.streams import partitions
from changestream.streams.capture import ChangeCapture
from changestream.streams.interface import WatchSource
from changestream.streams.models import (
    DEFAULT_HEARTBEAT_MS,
    Params,
    Partition,
    ResultSet,
    Timestamp,
)
from changestream.streams.read import MIN_HEARTBEAT_MS, ChangeStreamReader, validate
from changestream.streams.read_function_rows import read_function_rows
from changestream.streams.records import ChangeRecord
from changestream.streams.sandbox import SqlSandbox, run_select
from changestream.streams.sizes import DEFAULT_SIZES, ChangeSize
from changestream.streams.stored_changes import StoredRecord, stored_change
from changestream.watch.watchable import WatchableDatabase

#: The internal change stream watch() reads (see :meth:`EmbeddedDatabase.ensure_watch_stream`).
WATCH_STREAM = "_cs_watch"


#: What the object :func:`changestream.open` returns once exposed, now the engine's own (see
#: :func:`store_of`): reached through the database, each warns and forwards.
_MOVED_TO_STORE = frozenset(
    {
        "advance_safe_ts",
        "begin_write",
        "capture",
        "catalog",
        "change_split_boundary",
        "codec",
        "column_type",
        "commit_write",
        "connection",
        "ensure_system_stream",
        "last_commit_ts",
        "live_splits",
        "locked",
        "now",
        "read_meta",
        "snapshot",
        "sql_limits",
        "write",
    }
)


class EmbeddedDatabase(WatchableDatabase):
    """A change-stream database in one SQLite file (see :func:`changestream.open`).

    It offers what a user calls (tables, the change stream read function, splits, leases,
    documents, watch()); the engine under it is the layers' own (:func:`store_of`)."""

    def __init__(
        self,
        path: str,
        durability: str = "normal",
        busy_timeout: float = 5.0,
        clock: Clock | None = None,
        sql_limits: SqlLimits = DEFAULT_LIMITS,
    ) -> None:
        self._store = Store(
            path,
            durability,
            busy_timeout,
            capture=ChangeCapture(),
            clock=clock,
            sql_limits=sql_limits,
        )

    if not TYPE_CHECKING:  # type checkers must not see these names: nothing in src uses them

        def __getattr__(self, name: str) -> Any:
            if name == "secret":
                raise AttributeError(
                    "the key that signs partition tokens is not part of the database's interface"
                )
            if name in _MOVED_TO_STORE:
                warnings.warn(
                    f"EmbeddedDatabase.{name} is the engine's, not the database's; it will be "
                    f"removed (changestream.embedded.store_of(db).{name} for the "
                    "engine's own layers)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return getattr(self._store, name)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> EmbeddedDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection; the object cannot be used afterwards."""
        self._store.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._store.closed

    @property
    def path(self) -> str:
        """The SQLite file (a temporary one for ``":memory:"``)."""
        return self._store.path

    @property
    def name(self) -> str:
        """The database's name: its file name without the extension (``"memory"`` for
        ``":memory:"``)."""
        return os.path.splitext(os.path.basename(self.path))[0]

    @property
    def session_id(self) -> str:
        """This handle's session (a UUID): commits record it, and watch() shows it as
        ``lsid``."""
        return self._store.session_id

    # -- tables --------------------------------------------------------------------------------

    def execute_ddl(self, statements: str | Sequence[str]) -> int:
        """Apply one or more DDL statements atomically; returns their commit timestamp."""
        return self._store.execute_ddl(statements)

    def transaction(
        self,
        tag: str | None = None,
        session_id: str | None = None,
        exclude_txn_from_change_streams: bool = False,
    ) -> Transaction:
        """A read-write transaction: ``with db.transaction(tag="app=x") as tx: tx.insert(...)``.
        ``session_id`` (a UUID) records it under a client's own session instead of this
        handle's (:attr:`session_id`), as watch() shows in ``lsid``.
        ``exclude_txn_from_change_streams``: change streams with ``allow_txn_exclusion`` do not
        record it (how a replication loop is broken)."""
        return Transaction(self._store, tag, session_id, exclude_txn_from_change_streams)

    def read(
        self,
        table: str,
        keys: Sequence[Sequence[Any]] | KeyRange | None = None,
        columns: Sequence[str] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Rows of ``table`` in key order: all rows (keys None), the given keys, or a KeyRange."""
        return self._store.read(table, keys, columns)

    def read_snapshot(
        self,
        table: str,
        keys: KeyRange | None = None,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> SnapshotRead:
        """Rows of ``table`` in key order (all, or a KeyRange; the first ``limit`` of them)
        with the timestamp of the snapshot they were read in."""
        return self._store.read_snapshot(table, keys, columns, limit)

    def tables(self) -> list[Table]:
        """The user tables, by name."""
        return self._store.tables()

    def change_streams(self) -> list[ChangeStream]:
        """The user change streams, by name."""
        return self._store.change_streams()

    def delete_expired_rows(self) -> int:
        """Apply every table's row deletion policy now; returns the rows deleted (the
        background loop that runs the split policy also does this)."""
        return self._store.delete_expired_rows()

    # -- splits ----------------------------------------------------------------------------------

    def split_at(self, table: str, key: Sequence[Any]) -> int:
        """Split the split holding ``key`` of ``table`` at that key; returns the split time."""
        return self._store.split_at(table, key)

    def merge_at(self, table: str, key: Sequence[Any]) -> int:
        """Merge the two splits meeting at ``key`` of ``table``; returns the merge time."""
        return self._store.merge_at(table, key)

    def split_policy(self) -> SplitPolicy:
        """The database's split policy (shared by every process)."""
        return self._store.split_policy()

    def set_split_policy(self, policy: SplitPolicy | None = None, **changes: Any) -> SplitPolicy:
        """Replace the split policy, or change some of its settings; returns the new one."""
        return self._store.set_split_policy(policy, **changes)

    def rebalance(self) -> list[Action]:
        """Apply the split policy now; returns the splits and merges made."""
        return self._store.rebalance()

    # -- system documents ------------------------------------------------------------------------

    def system_documents(self, kind: str) -> dict[str, SystemDocument]:
        """Every document of ``kind``, by name (the layers above keep their state in them)."""
        return self._store.system_documents(kind)

    def put_system_document(
        self, kind: str, name: str, body: Mapping[str, Any], expected_version: int | None
    ) -> int:
        """Write a document when its version is ``expected_version`` (None: it must not
        exist); returns the new version."""
        return self._store.put_system_document(kind, name, body, expected_version)

    def delete_system_document(
        self, kind: str, name: str, expected_version: int | None = None
    ) -> bool:
        """Delete a document (at ``expected_version`` when given); whether it existed."""
        return self._store.delete_system_document(kind, name, expected_version)

    def append_system_log(self, kind: str, name: str, entry: Mapping[str, Any]) -> None:
        """Append ``entry`` to the log of kind/name."""
        self._store.append_system_log(kind, name, entry)

    def system_log(self, kind: str, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """The last ``limit`` entries of the log of kind/name, oldest first."""
        return self._store.system_log(kind, name, limit)

    # -- change streams --------------------------------------------------------------------------

    def ensure_watch_stream(self) -> WatchSource:
        """The internal change stream watch() reads, created on first use: FOR ALL, with full
        old and new rows, and out of reach of user DDL. From then on every commit also writes
        its records."""
        store = self._store
        store.ensure_system_stream(WATCH_STREAM, SYSTEM_VALUE_CAPTURE_TYPE)
        created = store.catalog().stream(WATCH_STREAM).created_ts
        return WatchSource(WATCH_STREAM, self.name, max(store.now(), created))

    @reported
    def read_change_stream(
        self,
        stream: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp | None = None,
        partition_token: str | None = None,
        heartbeat_milliseconds: int = DEFAULT_HEARTBEAT_MS,
        read_options: object = None,
    ) -> Iterator[ChangeRecord]:
        """The read function: child partitions for the initial query (no token), or one
        partition's records in commit order with heartbeats, ending with child partitions."""
        request = validate(
            self._store,
            stream,
            start_timestamp,
            end_timestamp,
            partition_token,
            heartbeat_milliseconds,
            read_options,
        )
        return reported_items(ChangeStreamReader(self._store, request), "reading a change stream")

    @reported
    def read_stored_changes(
        self,
        stream: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp | None,
        partition_token: str | None,
        heartbeat_milliseconds: int,
    ) -> Iterator[StoredRecord]:
        """The read function, but a batch of inserts stored compact comes as
        :class:`~changestream.streams.stored_changes.StoredInserts` (parsed, not built into
        a record): for readers that need only its rows, such as watch(). A live read also
        promises at once, with a heartbeat, when a commit it wakes for left its partition
        unchanged: a merge of many partitions then need not ask the idle ones."""
        query = (stream, start_timestamp, end_timestamp, partition_token, heartbeat_milliseconds)
        request = validate(self._store, *query, None)
        reader = ChangeStreamReader(self._store, request, stored_change, promptly=True)
        return reported_items(reader, "reading a change stream")

    @reported
    def read_change_payloads(
        self,
        stream: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp | None,
        partition_token: str,
    ) -> Iterator[tuple[int, bytes]]:
        """One partition's data change records in commit order, as the change log stores
        them: (commit timestamp, payload JSON), for readers that build from the JSON (see
        :mod:`changestream.datastream.stored_columns`)."""
        heartbeat = DEFAULT_HEARTBEAT_MS
        query = (stream, start_timestamp, end_timestamp, partition_token, heartbeat, None)
        reader = ChangeStreamReader(self._store, validate(self._store, *query), _stored_payload)
        items = reported_items(reader, "reading a change stream")
        return (item for item in items if isinstance(item, tuple))

    @reported
    def execute_sql(
        self, sql: str, params: Params = None, *, sandbox: SqlSandbox | None = None
    ) -> ResultSet:
        """Run a SELECT over user tables, or a change stream read function in either dialect.

        Rows are fetched as they are iterated. ``sandbox`` holds a SELECT to user tables,
        allowed functions and a budget (see :mod:`changestream.streams.sandbox`): pass one
        for SQL from callers you do not trust; the server always does. Without one, the
        database's ``SqlLimits`` bound the statement's parse and run time."""
        # Imported here: SQL is parsed with sqlglot, which a database that only reads and
        # writes rows never loads (see changestream.ddl.defaults).
        from changestream.sql.result_types import with_float_nans
        from changestream.sql.statements import (
            DmlStatement,
            ReadFunctionCall,
            SelectQuery,
            parse_statement,
        )

        statement = parse_statement(
            sql, params, limits=self._store.sql_limits, column_types=self._store.column_type
        )
        if isinstance(statement, ReadFunctionCall):
            return read_function_rows(self, statement)
        if isinstance(statement, DmlStatement):
            raise InvalidArgument(
                "execute_sql does not change data; run DML with tx.execute_update() inside "
                "db.transaction()"
            )
        assert isinstance(statement, SelectQuery)
        tables = self._store.catalog().tables

        def translate(exc: sqlite3.Error) -> ChangeStreamError:
            if "no such table" in str(exc):
                known = ", ".join(sorted(tables)) or "none"
                return NotFound(f"query failed: {exc} (tables: {known})")
            return InvalidArgument(f"query failed: {exc}")

        fields, rows = run_select(
            self._store.connection(),
            statement.sql,
            statement.params,
            tables,
            sandbox,
            translate,
            self._store.sql_limits,
        )
        return ResultSet(fields, with_float_nans(rows, statement.sql, tables, len(fields)))

    def partitions(self, stream: str, at: Timestamp | None = None) -> list[Partition]:
        """The partitions of ``stream`` live now (or at timestamp ``at``, which must fall in
        the stream's life: from its creation to now), in key order."""
        return partitions.live(self._store, stream, at)

    def partition_history(self, stream: str) -> list[Partition]:
        """Every partition of ``stream`` since it was created, oldest first (the lineage)."""
        return partitions.history(self._store, stream)

    def current_timestamp(self) -> int:
        """The database's clock, in microseconds since the epoch: a commit after this call
        gets a later timestamp."""
        return self._store.now()

    @reported
    def change_sizes(
        self,
        stream: str,
        partition_token: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp,
        limit: int = DEFAULT_SIZES,
    ) -> list[ChangeSize]:
        """How much the read of one partition from ``start_timestamp`` to ``end_timestamp``
        holds, without reading it: per commit timestamp (in order, at most ``limit``, only
        those already safe), its data change records, their mods and the bytes of their JSON
        as stored. The arguments are checked as the read function checks them."""
        request = validate(
            self._store,
            stream,
            start_timestamp,
            end_timestamp,
            partition_token,
            MIN_HEARTBEAT_MS,
            None,
        )
        return ChangeStreamReader(self._store, request).sizes(limit)

    # -- leases ----------------------------------------------------------------------------------

    def leases(self, stream: str, consumer: str) -> LeaseTable:
        """The lease table of consumer group ``consumer`` on ``stream`` (the Stream Client's)."""
        store = self._store
        return LeaseTable(store, store.catalog().stream(stream).stream_id, check_consumer(consumer))

    def lease_consumers(self, stream: str) -> list[str]:
        """The consumer groups that keep leases on ``stream``, sorted."""
        store = self._store
        return lease_consumers(store.connection(), store.catalog().stream(stream).stream_id)


def _stored_payload(commit_timestamp: int, payload: bytes, _token: str) -> tuple[int, bytes]:
    return commit_timestamp, payload


def store_of(db: EmbeddedDatabase) -> Store:
    """The engine under an embedded database, for the engine's own layers (the server, the
    tests): its connections, catalog, clock and write transactions are no user's to call."""
    return db._store
