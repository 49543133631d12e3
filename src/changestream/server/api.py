"""The HTTP interface, declared once: every endpoint with its path, scope and typed models.

From these declarations come the request validation and the handlers' arguments (the
server decodes each body into its request model), ``/openapi.json`` (:mod:`.openapi`), and
the remote client's encoding (it builds the same request models). Models are msgspec
Structs: values JSON cannot carry travel in the typed encoding of :mod:`.values`, so fields
holding such values are ``Any`` here and decoded by the handler.

This module imports nothing from the server, so clients can use it without Starlette.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec


class Model(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A response body (clients ignore fields they do not know, so the server may add some)."""


class Request(Model, forbid_unknown_fields=True):
    """A request body: a field the server does not know is an error, not silently dropped."""


# -- requests ---------------------------------------------------------------------------------


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

    mutations: list[Mutation] = []
    tag: str | None = None
    session: str | None = None


class ExecuteUpdateRequest(Request):
    """DML to run now, in a new server-side transaction or in ``session``."""

    dml: str
    params: Any = None
    session: str | None = None
    tag: str | None = None


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


# Arguments the engine checks itself are Any, so remote callers get the embedded messages.


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
    heartbeat_milliseconds: Any = 10_000
    read_options: Any = None


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


# -- responses --------------------------------------------------------------------------------


class Status(Model):
    status: str


class Readiness(Model):
    status: str
    databases: int | None = None


class NotDatabase(Model):
    """A file the server found but does not serve, and why."""

    name: str
    problem: str


class DatabaseList(Model):
    databases: list[str]
    not_databases: list[NotDatabase] = []


class CommitTimestamp(Model):
    commit_timestamp: int


class Timestamp(Model):
    timestamp: int


class ExecuteUpdateResponse(Model):
    session: str
    row_count: int


class Rows(Model):
    rows: list[Any]


class SnapshotRows(Model):
    rows: list[Any]
    read_timestamp: int


class Tables(Model):
    tables: list[dict[str, Any]]


class ChangeStreams(Model):
    change_streams: list[dict[str, Any]]


class Document(Model):
    name: str
    version: int
    body: Any


class Documents(Model):
    documents: list[Document]


class Version(Model):
    version: int


class Deleted(Model):
    deleted: bool


class Inserted(Model):
    inserted: bool


class Entries(Model):
    entries: list[Any]


class Partition(Model):
    token: str
    start_timestamp: int
    end_timestamp: int | None
    start_key: str
    end_key: str
    parent_tokens: list[str]
    child_tokens: list[str]
    write_rate: float = 0.0


class Partitions(Model):
    partitions: list[Partition]


class Actions(Model):
    actions: list[dict[str, Any]]


class Consumers(Model):
    consumers: list[str]


class Leases(Model):
    leases: list[dict[str, Any]]


class MaybeLease(Model):
    lease: dict[str, Any] | None


class WatchSourceResponse(Model):
    stream: str
    database: str
    now: int


class Empty(Model):
    pass


class StreamSummary(Model):
    name: str
    state: str
    definition: dict[str, Any]


class StreamList(Model):
    streams: list[StreamSummary]


class StreamState(Model):
    name: str
    state: str


class ErrorDetail(Model):
    code: str
    message: str
    statement: str | None = None
    position: int | None = None


class Error(Model):
    """Every error: ``code`` is the ``changestream.errors`` class, ``message`` says why."""

    error: ErrorDetail


# -- stream lines (NDJSON) ----------------------------------------------------------------------


class Line(msgspec.Struct, tag_field="type", kw_only=True):
    """One line of a streamed (NDJSON) response."""


class RecordLine(Line, tag="data_change_record"):
    record: dict[str, Any]
    timestamp_us: int
    partition_token: str | None = None


class HeartbeatLine(Line, tag="heartbeat_record"):
    record: dict[str, Any]
    timestamp_us: int
    partition_token: str | None = None


class ChildPartitionsLine(Line, tag="child_partitions_record"):
    record: dict[str, Any]
    timestamp_us: int
    partition_token: str | None = None


class FieldsLine(Line, tag="fields"):
    fields: list[str]


class RowLine(Line, tag="row"):
    row: list[Any]


class KeepaliveLine(Line, tag="keepalive"):
    pass


class ErrorLine(Line, tag="error"):
    error: ErrorDetail


class EndLine(Line, tag="end"):
    pass


class ShutdownLine(Line, tag="shutdown"):
    pass


RecordStream = (
    RecordLine
    | HeartbeatLine
    | ChildPartitionsLine
    | KeepaliveLine
    | ErrorLine
    | EndLine
    | ShutdownLine
)
SqlStream = (
    FieldsLine
    | RowLine
    | RecordLine
    | HeartbeatLine
    | ChildPartitionsLine
    | KeepaliveLine
    | ErrorLine
    | EndLine
    | ShutdownLine
)


# -- the endpoints --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One operation: ``scope`` None is public; ``response`` is the 200 body's type (a
    Struct, or a union of stream lines when ``stream``; None for non-JSON bodies)."""

    name: str
    method: str
    path: str
    scope: str | None
    summary: str
    request: type[Request] | None = None
    response: Any = None
    stream: bool = False
    query: tuple[str, ...] = ()
    media_type: str = "application/json"


DB = "/v1/databases/{database}"
STREAM = DB + "/streams/{stream}"

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("healthz", "GET", "/healthz", None, "The process is up", response=Status),
    Endpoint(
        "readyz", "GET", "/readyz", None, "Ready to serve (not shutting down)", response=Readiness
    ),
    Endpoint("metrics", "GET", "/metrics", "read", "Prometheus metrics", media_type="text/plain"),
    Endpoint("openapi", "GET", "/openapi.json", None, "This document", response=dict[str, Any]),
    Endpoint("docs", "GET", "/docs", None, "Swagger UI over this document", media_type="text/html"),
    Endpoint(
        "list_databases",
        "GET",
        "/v1/databases",
        "read",
        "The databases served, and the files found that are not served (and why)",
        response=DatabaseList,
    ),
    Endpoint("ddl", "POST", DB + "/ddl", "admin", "Apply DDL", DdlRequest, CommitTimestamp),
    Endpoint(
        "commit",
        "POST",
        DB + "/commit",
        "write",
        "Commit mutations",
        CommitRequest,
        CommitTimestamp,
    ),
    Endpoint(
        "execute_update",
        "POST",
        DB + "/execute_update",
        "write",
        "Run DML in a server-side transaction",
        ExecuteUpdateRequest,
        ExecuteUpdateResponse,
    ),
    Endpoint(
        "rollback",
        "POST",
        DB + "/rollback",
        "write",
        "Roll back a server-side transaction",
        RollbackRequest,
        Empty,
    ),
    Endpoint("read", "POST", DB + "/read", "read", "Read rows", ReadRequest, Rows),
    Endpoint(
        "read_snapshot",
        "POST",
        DB + "/read_snapshot",
        "read",
        "Read rows in one snapshot",
        ReadSnapshotRequest,
        SnapshotRows,
    ),
    Endpoint("tables", "GET", DB + "/tables", "read", "User tables", response=Tables),
    Endpoint(
        "change_streams",
        "GET",
        DB + "/change_streams",
        "read",
        "Change streams",
        response=ChangeStreams,
    ),
    Endpoint(
        "documents_list",
        "POST",
        DB + "/system_documents/list",
        "read",
        "System documents of a kind",
        KindRequest,
        Documents,
    ),
    Endpoint(
        "documents_put",
        "POST",
        DB + "/system_documents/put",
        "write",
        "Write a system document (optimistic version check)",
        PutDocumentRequest,
        Version,
    ),
    Endpoint(
        "documents_delete",
        "POST",
        DB + "/system_documents/delete",
        "write",
        "Delete a system document",
        DeleteDocumentRequest,
        Deleted,
    ),
    Endpoint(
        "log_append",
        "POST",
        DB + "/system_log/append",
        "write",
        "Append to a system log",
        AppendLogRequest,
        Empty,
    ),
    Endpoint(
        "log_list",
        "POST",
        DB + "/system_log/list",
        "read",
        "The newest entries of a system log",
        ListLogRequest,
        Entries,
    ),
    Endpoint(
        "sql",
        "POST",
        DB + "/sql",
        "read",
        "Run a sandboxed SELECT or the read function (NDJSON)",
        SqlRequest,
        SqlStream,
        stream=True,
    ),
    Endpoint(
        "read_change_stream",
        "POST",
        DB + "/read_change_stream",
        "read",
        "The read function (NDJSON)",
        ReadChangeStreamRequest,
        RecordStream,
        stream=True,
    ),
    Endpoint("split", "POST", DB + "/split", "admin", "Split at a key", KeyRequest, Timestamp),
    Endpoint("merge", "POST", DB + "/merge", "admin", "Merge at a key", KeyRequest, Timestamp),
    Endpoint(
        "get_split_policy",
        "GET",
        DB + "/split_policy",
        "read",
        "The split policy",
        response=dict[str, Any],
    ),
    Endpoint(
        "set_split_policy",
        "PUT",
        DB + "/split_policy",
        "admin",
        "Replace or change the split policy",
        SetSplitPolicyRequest,
        dict[str, Any],
    ),
    Endpoint(
        "rebalance",
        "POST",
        DB + "/rebalance",
        "admin",
        "Split and merge by load now",
        NoBody,
        Actions,
    ),
    Endpoint(
        "watch_source",
        "POST",
        DB + "/watch_source",
        "read",
        "The change stream watch() reads (created by an admin token's first call)",
        NoBody,
        WatchSourceResponse,
    ),
    Endpoint(
        "partitions",
        "GET",
        STREAM + "/partitions",
        "read",
        "Live partitions (now, or at ?at=)",
        response=Partitions,
        query=("at",),
    ),
    Endpoint(
        "partition_history",
        "GET",
        STREAM + "/partition_history",
        "read",
        "Every partition since the stream was created",
        response=Partitions,
    ),
    Endpoint(
        "consumers",
        "GET",
        STREAM + "/consumers",
        "read",
        "Consumer groups with leases",
        response=Consumers,
    ),
    Endpoint(
        "leases_list",
        "POST",
        STREAM + "/leases/list",
        "read",
        "A group's leases",
        ConsumerRequest,
        Leases,
    ),
    Endpoint(
        "leases_get",
        "POST",
        STREAM + "/leases/get",
        "read",
        "One lease",
        LeaseGetRequest,
        MaybeLease,
    ),
    Endpoint(
        "leases_insert_if_absent",
        "POST",
        STREAM + "/leases/insert_if_absent",
        "write",
        "Insert a lease unless it exists",
        LeaseChangeRequest,
        Inserted,
    ),
    Endpoint(
        "leases_update",
        "POST",
        STREAM + "/leases/update",
        "write",
        "Update a lease (counter check)",
        LeaseChangeRequest,
        MaybeLease,
    ),
    Endpoint(
        "leases_delete",
        "POST",
        STREAM + "/leases/delete",
        "write",
        "Delete a lease (counter check)",
        LeaseChangeRequest,
        Deleted,
    ),
)

#: Datastream-style streams as REST resources (as Kafka Connect's connectors): the pipeline
#: reads the same definitions.
STREAM_RESOURCES: tuple[Endpoint, ...] = (
    Endpoint(
        "list_streams",
        "GET",
        DB + "/streams",
        "read",
        "Datastream streams defined in the database",
        response=StreamList,
    ),
    Endpoint(
        "create_stream",
        "POST",
        DB + "/streams",
        "admin",
        "Define a stream (Not started)",
        CreateStreamRequest,
        StreamSummary,
    ),
    Endpoint(
        "describe_stream",
        "GET",
        STREAM,
        "read",
        "A stream: state, definition, backfill per object, progress and lag",
        response=dict[str, Any],
    ),
    Endpoint(
        "delete_stream",
        "DELETE",
        STREAM,
        "admin",
        "Delete a stream no pipeline works on (its files stay)",
        response=Empty,
    ),
    Endpoint(
        "change_stream_state",
        "PUT",
        STREAM + "/state",
        "write",
        "Move a stream through its lifecycle (start, pause, resume, drain)",
        StreamStateRequest,
        StreamState,
    ),
)

ENDPOINTS = ENDPOINTS + STREAM_RESOURCES

BY_NAME = {endpoint.name: endpoint for endpoint in ENDPOINTS}
