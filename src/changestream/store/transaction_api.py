"""What every transaction offers, embedded or remote: the four row-writing mutations (each
buffered by the implementation's ``_buffer``) and the context manager that commits, or rolls
back on an error. It imports nothing of the engine, so the remote client builds on it too."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Self

from changestream.errors import FailedPrecondition


class MutationMethods:
    """What every transaction shares (embedded and remote): the four row-writing mutations,
    buffered by ``_buffer``, and the context manager that commits, or rolls back on an error."""

    _done: bool

    def commit(self) -> dt.datetime:
        raise NotImplementedError

    def rollback(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._done:
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()

    def _check_open(self) -> None:
        if self._done:
            raise FailedPrecondition("the transaction has already committed or rolled back")

    def _buffer(
        self, op: str, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]
    ) -> None:
        raise NotImplementedError

    def insert(self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]) -> None:
        """Insert rows; the commit fails with AlreadyExists if any row exists."""
        self._buffer("insert", table, columns, values)

    def update(self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]) -> None:
        """Update rows; the commit fails with NotFound if any row is missing."""
        self._buffer("update", table, columns, values)

    def insert_or_update(
        self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]
    ) -> None:
        """Insert rows, or update the given columns of rows that exist."""
        self._buffer("insert_or_update", table, columns, values)

    def replace(self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]) -> None:
        """Insert rows, or replace existing rows whole (columns not given become NULL)."""
        self._buffer("replace", table, columns, values)
