"""The HTTP interface, declared once: every endpoint with its path, scope and models.

From these declarations come the request validation and the handlers' arguments (the server
decodes each body into its request model), ``/openapi.json`` (:mod:`.openapi`), and the
remote client's encoding (it builds the same request models). The models are in
:mod:`.models`; this module imports nothing from the server either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from changestream.wire.models import (
    Actions,
    AppendLogRequest,
    ChangeSizes,
    ChangeSizesRequest,
    ChangeStreams,
    CommitRequest,
    CommitTimestamp,
    ConsumerRequest,
    Consumers,
    ConsumerStatuses,
    CreateStreamRequest,
    DatabaseList,
    DatabaseOverview,
    DdlRequest,
    Deleted,
    DeleteDocumentRequest,
    Documents,
    Empty,
    Entries,
    ExecuteUpdateRequest,
    ExecuteUpdateResponse,
    Identity,
    Inserted,
    KeyRequest,
    KindRequest,
    LeaseChangeRequest,
    LeaseGetRequest,
    Leases,
    Lineage,
    ListLogRequest,
    MaybeLease,
    NoBody,
    Partitions,
    PutDocumentRequest,
    ReadChangeStreamRequest,
    Readiness,
    ReadRequest,
    ReadSnapshotRequest,
    RecordStream,
    Request,
    RollbackRequest,
    Rows,
    SetSplitPolicyRequest,
    SnapshotRows,
    SplitPolicyBody,
    SqlRequest,
    SqlStream,
    Status,
    StreamDescription,
    StreamErrors,
    StreamList,
    StreamState,
    StreamStateRequest,
    StreamSummary,
    Tables,
    Timestamp,
    Version,
    WatchSourceResponse,
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
    #: Optional request headers the endpoint reads, as (name, what it does) pairs.
    headers: tuple[tuple[str, str], ...] = ()


#: Sent with ``read_change_stream`` with the value ``stored``: data change records may carry
#: their mods as the change log stores a batch of inserts (``mod_columns`` and
#: ``mod_values``, see :mod:`changestream.streams.mods`), sent on without being decoded. A
#: header rather than a body field, because servers that predate it ignore it (and send the
#: seed's form, which clients read too) where they refuse a body field they do not know.
MODS_HEADER = "changestream-mods"
STORED_MODS = "stored"


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
        "current_timestamp",
        "GET",
        DB + "/current_timestamp",
        "read",
        "The database's clock (microseconds since the epoch)",
        response=Timestamp,
    ),
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
        headers=(
            (
                MODS_HEADER,
                f"`{STORED_MODS}`: a batch of inserts may come as stored, with `mod_columns` "
                "and `mod_values` instead of `mods`",
            ),
        ),
    ),
    Endpoint("split", "POST", DB + "/split", "admin", "Split at a key", KeyRequest, Timestamp),
    Endpoint("merge", "POST", DB + "/merge", "admin", "Merge at a key", KeyRequest, Timestamp),
    Endpoint(
        "get_split_policy",
        "GET",
        DB + "/split_policy",
        "read",
        "The split policy",
        response=SplitPolicyBody,
    ),
    Endpoint(
        "set_split_policy",
        "PUT",
        DB + "/split_policy",
        "admin",
        "Replace or change the split policy",
        SetSplitPolicyRequest,
        SplitPolicyBody,
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
        "change_sizes",
        "POST",
        STREAM + "/change_sizes",
        "read",
        "Per commit timestamp of one partition range: records, mods and bytes as stored",
        ChangeSizesRequest,
        ChangeSizes,
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
        response=StreamDescription,
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

#: What the console (``/console``) reads beyond the endpoints above; scripts may use them too.
CONSOLE: tuple[Endpoint, ...] = (
    Endpoint(
        "console",
        "GET",
        "/console",
        None,
        "The web console (its data needs a token)",
        media_type="text/html",
    ),
    Endpoint(
        "whoami",
        "GET",
        "/v1/whoami",
        "read",
        "The scopes of the caller's token",
        response=Identity,
    ),
    Endpoint(
        "overview",
        "GET",
        DB + "/overview",
        "read",
        "Write rate, newest commit, and each change stream's partitions and readers' lag",
        response=DatabaseOverview,
    ),
    Endpoint(
        "lineage",
        "GET",
        STREAM + "/lineage",
        "read",
        "Partitions live in a time window (?start=&end=, default the stream's life), the "
        "newest ?limit= (default 2000), with record counts and key ranks",
        response=Lineage,
        query=("start", "end", "limit"),
    ),
    Endpoint(
        "consumer_status",
        "GET",
        STREAM + "/consumer_status",
        "read",
        "Every consumer group's leases with state and lag, and the leases each worker holds",
        response=ConsumerStatuses,
    ),
    Endpoint(
        "stream_errors",
        "GET",
        STREAM + "/errors",
        "read",
        "A Datastream stream's last ?limit= errors (default 20), oldest first",
        response=StreamErrors,
        query=("limit",),
    ),
    Endpoint(
        "tail",
        "GET",
        STREAM + "/tail",
        "read",
        "The data change records of every partition in commit order from ?start= (default "
        "now), live or to ?end=, only those of ?table=, ?mod_type= and whose keys contain "
        "?key= (NDJSON)",
        response=RecordStream,
        stream=True,
        query=("start", "end", "table", "mod_type", "key"),
    ),
)

ENDPOINTS = ENDPOINTS + STREAM_RESOURCES + CONSOLE

BY_NAME = {endpoint.name: endpoint for endpoint in ENDPOINTS}

#: How a server's 404 for a request it has no endpoint for ends (``METHOD PATH: <this>``), so
#: a client can tell a request its server does not know (an older server) from a missing
#: database or stream. Servers before this marker said ``Not Found`` (Starlette's text).
NO_SUCH_REQUEST = "this server has no such request"
OLDER_NO_SUCH_REQUEST = "Not Found"
