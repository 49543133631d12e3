"""The one interface every consumer is written against, embedded or remote."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from changestream.ddl.schema import ChangeStream, Table
from changestream.store.database import SnapshotRead
from changestream.store.documents import SystemDocument
from changestream.store.keys import KeyRange
from changestream.store.leases import Lease
from changestream.streams.records import ChangeRecord

if TYPE_CHECKING:  # watch builds on this layer; only its types are named here
    from typing_extensions import Unpack

    from changestream.streams.watch_arguments import WatchArguments, WatchCursor
    from changestream.watch import TableHandle

Params = Mapping[str, Any] | Sequence[Any] | None


@dataclass(frozen=True, slots=True)
class WatchSource:
    """What watch() reads, from :meth:`Database.ensure_watch_stream`: the internal change
    stream's name, the database's name (``ns.db`` in events), and the database clock in
    microseconds when asked (where a watch() without a resume point starts)."""

    stream: str
    database: str
    now: int


@runtime_checkable
class TransactionLike(Protocol):
    """A read-write transaction with Spanner mutation semantics."""

    commit_timestamp: dt.datetime | None

    def __enter__(self) -> TransactionLike: ...
    def __exit__(self, exc_type: object, exc: object, tb: object) -> None: ...
    def insert(
        self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]
    ) -> None: ...
    def update(
        self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]
    ) -> None: ...
    def insert_or_update(
        self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]
    ) -> None: ...
    def replace(
        self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]
    ) -> None: ...
    def delete(self, table: str, keys: Sequence[Sequence[Any]] | KeyRange) -> None: ...
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
class Database(Protocol):
    """A change-stream database: DDL, transactions, reads, SQL, the read function, splits,
    the consumer groups' lease tables, and system documents for the layers above.

    ``changestream.open(path)`` gives the embedded implementation.
    """

    @property
    def name(self) -> str: ...
    def close(self) -> None: ...
    def execute_ddl(self, statements: str | Sequence[str]) -> int: ...
    def transaction(self, tag: str | None = None) -> TransactionLike: ...
    def read(
        self,
        table: str,
        keys: Sequence[Sequence[Any]] | KeyRange | None = None,
        columns: Sequence[str] | None = None,
    ) -> list[tuple[Any, ...]]: ...
    def read_snapshot(
        self,
        table: str,
        keys: KeyRange | None = None,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> SnapshotRead: ...
    def tables(self) -> list[Table]: ...
    def change_streams(self) -> list[ChangeStream]: ...
    def execute_sql(self, sql: str, params: Params = None) -> Any: ...
    def read_change_stream(
        self,
        stream: str,
        start_timestamp: Any,
        end_timestamp: Any = None,
        partition_token: str | None = None,
        heartbeat_milliseconds: int = 10_000,
        read_options: Any = None,
    ) -> Iterator[ChangeRecord]: ...
    def partitions(self, stream: str, at: Any = None) -> list[Any]: ...
    def partition_history(self, stream: str) -> list[Any]: ...
    def split_at(self, table: str, key: Sequence[Any]) -> int: ...
    def merge_at(self, table: str, key: Sequence[Any]) -> int: ...
    def leases(self, stream: str, consumer: str) -> LeaseTableLike: ...
    def lease_consumers(self, stream: str) -> list[str]: ...
    def ensure_watch_stream(self) -> WatchSource: ...
    def watch(
        self,
        pipeline: Sequence[Mapping[str, Any]] | None = None,
        **arguments: Unpack[WatchArguments],
    ) -> WatchCursor: ...
    def table(self, name: str) -> TableHandle: ...
    def system_documents(self, kind: str) -> dict[str, SystemDocument]: ...
    def put_system_document(
        self, kind: str, name: str, body: Mapping[str, Any], expected_version: int | None
    ) -> int: ...
    def delete_system_document(
        self, kind: str, name: str, expected_version: int | None = None
    ) -> bool: ...
    def append_system_log(self, kind: str, name: str, entry: Mapping[str, Any]) -> None: ...
    def system_log(self, kind: str, name: str, limit: int = 100) -> list[dict[str, Any]]: ...
