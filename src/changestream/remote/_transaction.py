"""A transaction on a remote database: mutations buffered here and sent with the commit; DML
run on the server when called (see :mod:`changestream.remote._database`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from changestream.clock import to_datetime
from changestream.errors import (
    ChangeStreamError,
    InvalidArgument,
)
from changestream.store.keys import KeyRange
from changestream.store.transaction_api import MutationMethods
from changestream.streams.models import Params
from changestream.wire import models
from changestream.wire.values import encode

if TYPE_CHECKING:
    from changestream.remote._database import RemoteDatabase


class RemoteTransaction(MutationMethods):
    """A transaction on a remote database (see the module docs for when things happen)."""

    def __init__(
        self,
        db: RemoteDatabase,
        tag: str | None = None,
        exclude_txn_from_change_streams: bool = False,
    ) -> None:
        if tag is not None and not isinstance(tag, str):
            raise InvalidArgument(f"tag must be a string, got {tag!r}")
        if not isinstance(exclude_txn_from_change_streams, bool):
            raise InvalidArgument(
                "exclude_txn_from_change_streams must be True or False, got "
                f"{exclude_txn_from_change_streams!r}"
            )
        self._db = db
        self.tag = tag or ""
        self.exclude_txn_from_change_streams = exclude_txn_from_change_streams
        self._mutations: list[models.Mutation] = []
        self._session: str | None = None
        self._done = False
        #: The commit timestamp, set by a successful commit.
        self.commit_timestamp: dt.datetime | None = None

    def _buffer(self, op: str, table: str, columns: Sequence[str], values: Any) -> None:
        self._check_open()
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise InvalidArgument(f"values must be a list of rows, got {values!r}")
        if isinstance(columns, str):
            raise InvalidArgument(f"columns must be a list of names, got the string {columns!r}")
        self._mutations.append(
            models.Mutation(op=op, table=table, columns=list(columns), values=encode(values))  # type: ignore[arg-type]
        )

    def delete(self, table: str, keys: Sequence[Sequence[Any]] | KeyRange) -> None:
        """Delete rows by key tuples or a KeyRange; missing rows are not an error."""
        self._check_open()
        if not isinstance(keys, KeyRange) and (
            isinstance(keys, str | bytes) or not isinstance(keys, Sequence)
        ):
            raise InvalidArgument(f"keys must be a list of key tuples or a KeyRange, got {keys!r}")
        self._mutations.append(models.Mutation(op="delete", table=table, keys=encode(keys)))

    def execute_update(self, dml: str, params: Params = None) -> int:
        """Run an INSERT, UPDATE or DELETE on the server now; returns the rows it changed."""
        self._check_open()
        body = models.ExecuteUpdateRequest(
            session=self._session,
            tag=self.tag,
            dml=dml,
            params=encode(params),
            client_session=self._db.session_id,
            exclude_txn_from_change_streams=self.exclude_txn_from_change_streams,
        )
        reply = self._db._invoke("execute_update", body, idempotent=False)
        self._session = reply.session
        return int(reply.row_count)

    def commit(self) -> dt.datetime:
        """Send the mutations and commit; returns the commit timestamp."""
        self._check_open()
        self._done = True
        body = models.CommitRequest(
            tag=self.tag,
            session=self._session,
            mutations=self._mutations,
            client_session=self._db.session_id,
            exclude_txn_from_change_streams=self.exclude_txn_from_change_streams,
        )
        reply = self._db._invoke("commit", body, idempotent=False)
        self.commit_timestamp = to_datetime(reply.commit_timestamp)
        return self.commit_timestamp

    def rollback(self) -> None:
        """Discard everything; the transaction cannot be used afterwards."""
        if self._done:
            return
        self._done = True
        if self._session is not None:
            # If this fails, the server rolls the abandoned transaction back after its timeout.
            with suppress(ChangeStreamError):
                self._db._invoke("rollback", models.RollbackRequest(session=self._session))
