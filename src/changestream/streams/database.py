"""The embedded database: the store plus change capture, the read function and SQL."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changestream.clock import Clock, format_ts, parse_ts
from changestream.ddl.schema import SYSTEM_VALUE_CAPTURE_TYPE
from changestream.errors import (
    ChangeStreamError,
    InvalidArgument,
    NotFound,
    OutOfRange,
    reported,
    reported_items,
)
from changestream.sql.limits import DEFAULT_LIMITS, SqlLimits
from changestream.sql.result_types import with_float_nans
from changestream.sql.statements import (
    DmlStatement,
    ReadFunctionCall,
    SelectQuery,
    parse_statement,
)
from changestream.store.database import Store
from changestream.store.keys import describe_key
from changestream.store.leases import LeaseTable, check_consumer, lease_consumers
from changestream.store.load import write_rates
from changestream.store.splits import Split, all_splits, splits_live_at
from changestream.store.transaction import Transaction
from changestream.streams.capture import ChangeCapture
from changestream.streams.interface import WatchSource
from changestream.streams.read import ChangeStreamReader, validate
from changestream.streams.records import ChangeRecord, googlesql_row, postgresql_row
from changestream.streams.sandbox import SqlSandbox, run_select
from changestream.streams.tokens import PartitionId, encode_token

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from changestream.streams.watch_arguments import WatchArguments
    from changestream.watch import ChangeStreamCursor, TableHandle

Params = Mapping[str, Any] | Sequence[Any] | None

#: The internal change stream watch() reads (see :meth:`EmbeddedDatabase.ensure_watch_stream`).
WATCH_STREAM = "_cs_watch"


@dataclass(frozen=True, slots=True)
class Partition:
    """A change stream partition: one split's key range over one time range."""

    token: str
    start_timestamp: int
    end_timestamp: int | None
    start_key: str
    end_key: str
    parent_tokens: tuple[str, ...]
    child_tokens: tuple[str, ...]
    #: Mods per second written to the partition over the split policy's window (live ones).
    write_rate: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "start_timestamp": format_ts(self.start_timestamp),
            "end_timestamp": None if self.end_timestamp is None else format_ts(self.end_timestamp),
            "start_key": self.start_key,
            "end_key": self.end_key,
            "parent_tokens": list(self.parent_tokens),
            "child_tokens": list(self.child_tokens),
            "write_rate": round(self.write_rate, 3),
        }


class ResultSet:
    """Rows of a query, produced lazily; ``fields`` names the columns."""

    def __init__(self, fields: list[str], rows: Iterator[list[Any]]) -> None:
        self.fields = fields
        self._rows = reported_items(rows, "iterating a query's rows")

    def __iter__(self) -> Iterator[list[Any]]:
        return self._rows


class EmbeddedDatabase(Store):
    """A change-stream database in one SQLite file (see :func:`changestream.open`)."""

    def __init__(
        self,
        path: str,
        durability: str = "normal",
        busy_timeout: float = 5.0,
        clock: Clock | None = None,
        sql_limits: SqlLimits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__(
            path,
            durability,
            busy_timeout,
            capture=ChangeCapture(),
            clock=clock,
            sql_limits=sql_limits,
        )

    def __enter__(self) -> EmbeddedDatabase:
        return self

    @property
    def name(self) -> str:
        """The database's name: its file name without the extension (``"memory"`` for
        ``":memory:"``)."""
        return os.path.splitext(os.path.basename(self.path))[0]

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
        return Transaction(self, tag, session_id, exclude_txn_from_change_streams)

    def ensure_watch_stream(self) -> WatchSource:
        """The internal change stream watch() reads, created on first use: FOR ALL, with full
        old and new rows, and out of reach of user DDL. From then on every commit also writes
        its records."""
        self.ensure_system_stream(WATCH_STREAM, SYSTEM_VALUE_CAPTURE_TYPE)
        created = self.catalog().stream(WATCH_STREAM).created_ts
        return WatchSource(WATCH_STREAM, self.name, max(self.now(), created))

    def watch(
        self,
        pipeline: Sequence[Mapping[str, Any]] | None = None,
        **arguments: Unpack[WatchArguments],
    ) -> ChangeStreamCursor:
        """A MongoDB-style cursor over every change to every table, in commit order.

        ``pipeline``: ``$match``/``$project`` stages; the keyword arguments are those of
        :class:`~changestream.streams.watch_arguments.WatchArguments` (``full_document``,
        ``resume_after``, ``show_expanded_events``, ...).
        """
        from changestream.watch import ChangeStreamCursor  # watch builds on this layer

        return ChangeStreamCursor(self, None, pipeline, **arguments)

    def table(self, name: str) -> TableHandle:
        """A handle on table ``name``: ``db.table("T").watch()`` watches it alone."""
        from changestream.watch import TableHandle  # watch builds on this layer

        return TableHandle(self, name)

    @reported
    def read_change_stream(
        self,
        stream: str,
        start_timestamp: Any,
        end_timestamp: Any = None,
        partition_token: str | None = None,
        heartbeat_milliseconds: int = 10_000,
        read_options: Any = None,
    ) -> Iterator[ChangeRecord]:
        """The read function: child partitions for the initial query (no token), or one
        partition's records in commit order with heartbeats, ending with child partitions."""
        request = validate(
            self,
            stream,
            start_timestamp,
            end_timestamp,
            partition_token,
            heartbeat_milliseconds,
            read_options,
        )
        return reported_items(ChangeStreamReader(self, request), "reading a change stream")

    @reported
    def execute_sql(
        self, sql: str, params: Params = None, *, sandbox: SqlSandbox | None = None
    ) -> ResultSet:
        """Run a SELECT over user tables, or a change stream read function in either dialect.

        Rows are fetched as they are iterated. ``sandbox`` holds a SELECT to user tables,
        allowed functions and a budget (see :mod:`changestream.streams.sandbox`): pass one
        for SQL from callers you do not trust; the server always does. Without one, the
        database's ``SqlLimits`` bound the statement's parse and run time."""
        statement = parse_statement(
            sql, params, limits=self.sql_limits, column_types=self.column_type
        )
        if isinstance(statement, ReadFunctionCall):
            records = self.read_change_stream(
                statement.stream,
                statement.start_timestamp,
                statement.end_timestamp,
                statement.partition_token,
                statement.heartbeat_milliseconds,
                statement.read_options,
            )
            if statement.dialect == "postgresql":
                return ResultSet(["read_json_" + statement.stream], map(postgresql_row, records))
            return ResultSet(["ChangeRecord"], map(googlesql_row, records))
        if isinstance(statement, DmlStatement):
            raise InvalidArgument(
                "execute_sql does not change data; run DML with tx.execute_update() inside "
                "db.transaction()"
            )
        assert isinstance(statement, SelectQuery)
        tables = self.catalog().tables

        def translate(exc: sqlite3.Error) -> ChangeStreamError:
            if "no such table" in str(exc):
                known = ", ".join(sorted(tables)) or "none"
                return NotFound(f"query failed: {exc} (tables: {known})")
            return InvalidArgument(f"query failed: {exc}")

        fields, rows = run_select(
            self.connection(),
            statement.sql,
            statement.params,
            tables,
            sandbox,
            translate,
            self.sql_limits,
        )
        return ResultSet(fields, with_float_nans(rows, statement.sql, tables, len(fields)))

    def _partitions(self, stream: str, pick: Callable[[int], list[Split]]) -> list[Partition]:
        entry = self.catalog().stream(stream)
        tables = self.catalog().tables
        secret = self.secret
        conn = self.connection()
        rates = write_rates(conn, self.now(), self.split_policy().window_seconds)

        def token(split_id: int) -> str:
            return encode_token(secret, PartitionId(entry.stream_id, split_id))

        return [
            Partition(
                token=token(split.split_id),
                start_timestamp=max(split.start_ts, entry.created_ts),
                end_timestamp=split.end_ts,
                start_key=describe_key(split.start_key, tables),
                end_key=describe_key(split.end_key, tables),
                parent_tokens=tuple(token(p) for p in split.parents),
                child_tokens=tuple(token(c) for c in split.children),
                write_rate=rates.get(split.split_id, 0.0) if split.end_ts is None else 0.0,
            )
            for split in pick(entry.created_ts)
        ]

    def partitions(self, stream: str, at: Any = None) -> list[Partition]:
        """The partitions of ``stream`` live now (or at timestamp ``at``, which must fall in
        the stream's life: from its creation to now), in key order."""
        now = self.last_commit_ts()
        moment = now if at is None else parse_ts(at, "at")
        if at is not None:
            created = self.catalog().stream(stream).created_ts
            if not created <= moment <= max(now, self.now()):
                raise OutOfRange(
                    f"at {format_ts(moment)} is outside the life of change stream {stream!r}: "
                    f"it was created at {format_ts(created)}, and it is now {format_ts(self.now())}"
                )
        conn = self.connection()
        return self._partitions(stream, lambda created: splits_live_at(conn, max(moment, created)))

    def partition_history(self, stream: str) -> list[Partition]:
        """Every partition of ``stream`` since it was created, oldest first (the lineage)."""
        conn = self.connection()
        return self._partitions(
            stream,
            lambda created: [s for s in all_splits(conn) if s.end_ts is None or s.end_ts > created],
        )

    def leases(self, stream: str, consumer: str) -> LeaseTable:
        """The lease table of consumer group ``consumer`` on ``stream`` (the Stream Client's)."""
        return LeaseTable(self, self.catalog().stream(stream).stream_id, check_consumer(consumer))

    def lease_consumers(self, stream: str) -> list[str]:
        """The consumer groups that keep leases on ``stream``, sorted."""
        return lease_consumers(self.connection(), self.catalog().stream(stream).stream_id)
