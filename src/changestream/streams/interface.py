"""The one interface every consumer is written against, embedded or remote."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from changestream.store.keys import KeyRange
from changestream.streams.records import ChangeRecord

Params = Mapping[str, Any] | Sequence[Any] | None


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
class Database(Protocol):
    """A change-stream database: DDL, transactions, reads, SQL, the read function and splits.

    ``changestream.open(path)`` gives the embedded implementation.
    """

    def close(self) -> None: ...
    def execute_ddl(self, statements: str | Sequence[str]) -> int: ...
    def transaction(self, tag: str | None = None) -> TransactionLike: ...
    def read(
        self,
        table: str,
        keys: Sequence[Sequence[Any]] | KeyRange | None = None,
        columns: Sequence[str] | None = None,
    ) -> list[tuple[Any, ...]]: ...
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
    def split_at(self, table: str, key: Sequence[Any]) -> int: ...
    def merge_at(self, table: str, key: Sequence[Any]) -> int: ...
