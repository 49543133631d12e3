"""The database's interfaces, one per role. Every consumer is typed against the narrowest ones
it uses; the embedded database (:func:`changestream.open`) and the remote one
(:func:`changestream.connect`) satisfy them all but :class:`StoredPayloadSource`.

- :class:`TableStore`: DDL, transactions, reads and SQL over user tables.
- :class:`ChangeStreamSource`: the change streams, their read function and partitions.
- :class:`StoredPayloadSource`: the change log's JSON as stored (the embedded database only).
- :class:`SplitAdministration`: splitting and merging by hand, and the split policy.
- :class:`LeaseStore`: the Stream Client's consumer groups and their lease tables.
- :class:`DocumentStore`: versioned documents and logs the layers above keep their state in.
- :class:`WatchSourceProvider`: the internal change stream watch() reads.

Only plain types are named here (models of ``ddl``, ``store`` and ``streams``); nothing
imports an implementation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from changestream.ddl.schema import ChangeStream, Table
from changestream.store.keys import KeyRange
from changestream.store.models import Action, Lease, SnapshotRead, SplitPolicy, SystemDocument
from changestream.streams.models import (
    DEFAULT_HEARTBEAT_MS,
    Params,
    Partition,
    ResultSet,
    Timestamp,
    Value,
)
from changestream.streams.records import ChangeRecord
from changestream.streams.sizes import DEFAULT_SIZES, ChangeSize
from changestream.streams.stored_changes import StoredRecord

#: Rows to write: one sequence of values per row, in the order of the columns given.
Rows = Sequence[Sequence[Value]]
#: Rows to delete: their primary keys (one sequence of values each), or a key range.
Keys = Sequence[Sequence[Value]] | KeyRange


@dataclass(frozen=True, slots=True)
class WatchSource:
    """What watch() reads, from :meth:`WatchSourceProvider.ensure_watch_stream`: the internal
    change stream's name, the database's name (``ns.db`` in events), and the database clock
    in microseconds when asked (where a watch() without a resume point starts)."""

    stream: str
    database: str
    now: int


@runtime_checkable
class TransactionLike(Protocol):
    """A read-write transaction with Spanner mutation semantics."""

    commit_timestamp: dt.datetime | None

    def __enter__(self) -> TransactionLike: ...
    def __exit__(self, exc_type: object, exc: object, tb: object) -> None: ...
    def insert(self, table: str, columns: Sequence[str], values: Rows) -> None: ...
    def update(self, table: str, columns: Sequence[str], values: Rows) -> None: ...
    def insert_or_update(self, table: str, columns: Sequence[str], values: Rows) -> None: ...
    def replace(self, table: str, columns: Sequence[str], values: Rows) -> None: ...
    def delete(self, table: str, keys: Keys) -> None: ...
    def execute_update(self, dml: str, params: Params = None) -> int: ...
    def commit(self) -> dt.datetime: ...
    def rollback(self) -> None: ...


@runtime_checkable
class LeaseTableLike(Protocol):
    """One consumer group's lease rows on one change stream; every change is conditional on
    ``LeaseCounter`` and bumps it, so two writers never both succeed from the same view."""

    def list_leases(self) -> list[Lease]: ...
    def get(self, status_type: str, status_value: str) -> Lease | None: ...
    def insert_if_absent(self, lease: Lease) -> bool: ...
    def update(self, lease: Lease) -> Lease | None: ...
    def delete(self, lease: Lease) -> bool: ...


@runtime_checkable
class Named(Protocol):
    """A database handle: its name, and closing it."""

    @property
    def name(self) -> str: ...
    def close(self) -> None: ...


@runtime_checkable
class TableStore(Named, Protocol):
    """DDL, read-write transactions, reads and SQL over the user tables."""

    def execute_ddl(self, statements: str | Sequence[str]) -> int: ...
    def transaction(self, tag: str | None = None) -> TransactionLike: ...
    def read(
        self,
        table: str,
        keys: Keys | None = None,
        columns: Sequence[str] | None = None,
    ) -> list[tuple[Value, ...]]: ...
    def read_snapshot(
        self,
        table: str,
        keys: KeyRange | None = None,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> SnapshotRead: ...
    def tables(self) -> list[Table]: ...
    def execute_sql(self, sql: str, params: Params = None) -> ResultSet: ...


@runtime_checkable
class ChangeStreamSource(Named, Protocol):
    """The change streams: their definitions, the read function, partitions and how much a
    partition range holds (``change_sizes``, what a planner cuts micro-batches by); and the
    database's clock (``current_timestamp``, in microseconds: a commit after the call gets a
    later timestamp), which positions in the stream are taken from, whatever the reader's
    own clock says."""

    def current_timestamp(self) -> int: ...

    def change_streams(self) -> list[ChangeStream]: ...
    def read_change_stream(
        self,
        stream: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp | None = None,
        partition_token: str | None = None,
        heartbeat_milliseconds: int = DEFAULT_HEARTBEAT_MS,
        read_options: object = None,
    ) -> Iterator[ChangeRecord]: ...
    def read_stored_changes(
        self,
        stream: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp | None,
        partition_token: str | None,
        heartbeat_milliseconds: int,
    ) -> Iterator[StoredRecord]: ...
    def partitions(self, stream: str, at: Timestamp | None = None) -> list[Partition]: ...
    def partition_history(self, stream: str) -> list[Partition]: ...
    def change_sizes(
        self,
        stream: str,
        partition_token: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp,
        limit: int = DEFAULT_SIZES,
    ) -> list[ChangeSize]: ...


@runtime_checkable
class StoredPayloadSource(Protocol):
    """A database whose change log is at hand (the embedded one): one partition's data change
    records as it stores them, for readers that build from their JSON (see
    :mod:`changestream.datastream.stored_columns`)."""

    def read_change_payloads(
        self,
        stream: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp | None,
        partition_token: str,
    ) -> Iterator[tuple[int, bytes]]: ...


@runtime_checkable
class SplitAdministration(Protocol):
    """Splits and merges by hand, and the split policy that makes them by load."""

    def split_at(self, table: str, key: Sequence[Value]) -> int: ...
    def merge_at(self, table: str, key: Sequence[Value]) -> int: ...
    def split_policy(self) -> SplitPolicy: ...
    def set_split_policy(
        self, policy: SplitPolicy | None = None, **changes: float | bool
    ) -> SplitPolicy: ...
    def rebalance(self) -> list[Action]: ...


@runtime_checkable
class LeaseStore(Protocol):
    """The Stream Client's consumer groups, each with a lease table per change stream."""

    def leases(self, stream: str, consumer: str) -> LeaseTableLike: ...
    def lease_consumers(self, stream: str) -> list[str]: ...


@runtime_checkable
class DocumentStore(Protocol):
    """Versioned documents, and append-only logs, by kind and name."""

    def system_documents(self, kind: str) -> dict[str, SystemDocument]: ...
    def put_system_document(
        self, kind: str, name: str, body: Mapping[str, object], expected_version: int | None
    ) -> int: ...
    def delete_system_document(
        self, kind: str, name: str, expected_version: int | None = None
    ) -> bool: ...
    def append_system_log(self, kind: str, name: str, entry: Mapping[str, object]) -> None: ...
    def system_log(self, kind: str, name: str, limit: int = 100) -> list[dict[str, object]]: ...


@runtime_checkable
class WatchSourceProvider(Protocol):
    """The internal change stream watch() reads, created on first use."""

    def ensure_watch_stream(self) -> WatchSource: ...


@runtime_checkable
class WatchedDatabase(TableStore, ChangeStreamSource, WatchSourceProvider, Protocol):
    """What watch() reads from: the watch stream, its records, and the tables (for full
    documents)."""


@runtime_checkable
class StreamClientDatabase(ChangeStreamSource, LeaseStore, Protocol):
    """What the Stream Client uses: the read function and lease tables."""


@runtime_checkable
class PipelineDatabase(TableStore, ChangeStreamSource, DocumentStore, Protocol):
    """What streams and their pipeline use: tables (backfill), the read function (CDC), and
    documents (definitions, states, progress)."""
