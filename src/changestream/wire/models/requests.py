"""The bodies clients send: one Struct per endpoint that takes a body; unknown fields are
refused."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from changestream.streams.models import DEFAULT_HEARTBEAT_MS
from changestream.streams.sizes import DEFAULT_SIZES
from changestream.wire.models.base import Request


class DdlRequest(Request):
    """DDL statements, applied atomically."""

    statements: str | list[str]


class Mutation(Request):
    """One buffered mutation: ``insert``/``update``/``insert_or_update``/``replace`` take
    ``columns`` and ``values`` (rows), ``delete`` takes ``keys`` (key lists or a $key_range)."""

    op: Literal["insert", "update", "insert_or_update", "replace", "delete"]
    table: str
    columns: list[str] | None = None
    values: Any = None
    keys: Any = None


class CommitRequest(Request):
    """Mutations to apply and commit; with ``session``, the transaction DML opened."""

    mutations: list[Mutation] = msgspec.field(default_factory=list)
    tag: str | None = None
    session: str | None = None
    #: The client handle's session (a UUID), recorded with the commit (watch()'s ``lsid``).
    client_session: str | None = None
    exclude_txn_from_change_streams: bool = False


class ExecuteUpdateRequest(Request):
    """DML to run now, in a new server-side transaction or in ``session``."""

    dml: str
    params: Any = None
    session: str | None = None
    tag: str | None = None
    client_session: str | None = None
    exclude_txn_from_change_streams: bool = False


class RollbackRequest(Request):
    session: str


class ReadRequest(Request):
    """Rows of a table: all, the given keys, or a $key_range; some columns or all."""

    table: str
    keys: Any = None
    columns: list[str] | None = None


class ReadSnapshotRequest(Request):
    table: str
    keys: Any = None
    columns: list[str] | None = None
    limit: Any = None


class KindRequest(Request):
    kind: str


class PutDocumentRequest(Request):
    kind: str
    name: str
    body: Any = None
    expected_version: Any = None


class DeleteDocumentRequest(Request):
    kind: str
    name: str
    expected_version: Any = None


class AppendLogRequest(Request):
    kind: str
    name: str
    entry: Any = None


class ListLogRequest(Request):
    kind: str
    name: str
    limit: Any = 100


class SqlRequest(Request):
    """A SELECT over user tables, or the read function in GoogleSQL or PostgreSQL syntax."""

    sql: str
    params: Any = None


class ReadChangeStreamRequest(Request):
    """The read function's arguments (timestamps: microseconds, RFC 3339 or $datetime)."""

    stream: str
    start_timestamp: Any = None
    end_timestamp: Any = None
    partition_token: Any = None
    heartbeat_milliseconds: Any = DEFAULT_HEARTBEAT_MS
    read_options: Any = None
    #: True: as the ``changestream-mods: stored`` header (see ``wire.api.MODS_HEADER``), which
    #: clients send instead: servers that predate both refuse this field but ignore the header.
    stored_mods: bool = False


class ChangeSizesRequest(Request):
    """One partition range whose size is asked for (timestamps as the read function takes
    them), and the most commit timestamps to answer with."""

    partition_token: Any = None
    start_timestamp: Any = None
    end_timestamp: Any = None
    limit: Any = DEFAULT_SIZES


class KeyRequest(Request):
    """A split point: a table and a key (a list of key values)."""

    table: str
    key: Any = None


class SetSplitPolicyRequest(Request):
    """A whole policy, or changes to some of its fields."""

    policy: dict[str, Any] | None = None
    changes: dict[str, Any] | None = None


class ConsumerRequest(Request):
    consumer: str


class LeaseGetRequest(Request):
    consumer: str
    status_type: str
    status_value: str


class LeaseChangeRequest(Request):
    consumer: str
    lease: dict[str, Any]


class CreateStreamRequest(Request):
    """A Datastream-style stream: ``definition`` has the fields of
    ``changestream.datastream.StreamDefinition`` (name, change_stream, destination, ...)."""

    definition: dict[str, Any]


class StreamStateRequest(Request):
    """A user's lifecycle verb: start (Not started/Paused → Starting), pause, resume, drain."""

    verb: Literal["start", "pause", "resume", "drain"]


class NoBody(Request):
    """An empty object (or no body at all)."""
