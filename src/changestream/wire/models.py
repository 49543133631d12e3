"""The typed bodies of the HTTP interface: requests, responses and stream lines.

msgspec Structs: values JSON cannot carry travel in the typed encoding of :mod:`.values`, so
fields holding such values are ``Any`` here and decoded by the handler (as are arguments the
engine checks itself, so remote callers get the embedded messages). Requests refuse fields
they do not know; responses do not, so a newer server may add some. This module imports
nothing from the server, so clients can use it without Starlette.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from changestream.store.models import Lease


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


class TypeBody(Model):
    """A column type in the Spanner API's ``Type`` shape; ``length`` for STRING/BYTES(n)."""

    code: str
    length: int | None = None
    array_element_type: TypeBody | None = None


class ColumnBody(Model):
    name: str
    type: TypeBody
    ordinal: int
    not_null: bool
    allow_commit_timestamp: bool
    #: The DEFAULT constant, in the change records' JSON form of the column's type.
    default: Any = None
    #: A generated DEFAULT: ``CURRENT_TIMESTAMP()``, ``CURRENT_DATE()`` or ``GENERATE_UUID()``.
    default_function: str | None = None


class IndexBody(Model):
    name: str
    table: str
    #: (column, descending) pairs.
    columns: list[tuple[str, bool]]
    unique: bool
    null_filtered: bool
    storing: list[str]


class RowDeletionPolicyBody(Model):
    column: str
    days: int


class TableBody(Model):
    name: str
    columns: list[ColumnBody]
    primary_key: list[str]
    indexes: list[IndexBody] = []
    row_deletion_policy: RowDeletionPolicyBody | None = None


class Tables(Model):
    tables: list[TableBody]


class StreamTargetBody(Model):
    table: str
    #: The columns named (``FOR T(a, b)``), or null for every column.
    columns: list[str] | None


class ChangeStreamBody(Model):
    name: str
    for_all: bool
    targets: list[StreamTargetBody]
    retention_seconds: int
    value_capture_type: str
    exclude_insert: bool = False
    exclude_update: bool = False
    exclude_delete: bool = False
    allow_txn_exclusion: bool = False
    exclude_ttl_deletes: bool = False


class ChangeStreams(Model):
    change_streams: list[ChangeStreamBody]


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


class ActionBody(Model):
    """A split (``merge`` false) or merge the split policy made or would make."""

    merge: bool
    #: The key boundary, in the typed encoding of :mod:`.values`.
    boundary: Any
    reason: str


class Actions(Model):
    actions: list[ActionBody]


class Consumers(Model):
    consumers: list[str]


class Leases(Model):
    """Lease rows, each with the seed's columns (``changestream.Lease``)."""

    leases: list[Lease]


class MaybeLease(Model):
    lease: Lease | None


class WatchSourceResponse(Model):
    stream: str
    database: str
    now: int


class Empty(Model):
    pass


class StreamDefinitionBody(Model):
    """What a Datastream-style stream reads and where it writes (``StreamDefinition``)."""

    name: str
    database: str
    change_stream: str
    destination: str
    include: list[str] = []
    exclude: list[str] = []
    format: str = "json"
    replica: str | None = None
    backfill: str = "automatic"
    file_rotation_mb: float = 50.0
    file_rotation_interval: float = 60.0
    replica_dropped_columns: str = "keep"
    compression: str = "none"
    replica_mode: str = "merge"
    #: When the stream was defined: microseconds since the epoch in listings, RFC 3339 text
    #: in a description.
    created_at: int | str = 0


class StreamSummary(Model):
    name: str
    state: str
    definition: StreamDefinitionBody


class ObjectProgressBody(Model):
    """One object (table) of a stream: its backfill status and the rows backfilled."""

    object: str
    table: str | None
    status: str
    rows: int


class PipelineBody(Model):
    host: str
    pid: int
    lag_seconds: float | None


class StreamDescription(Model):
    """A stream for people and scripts; timestamps in RFC 3339."""

    name: str
    state: str
    state_changed_at: str
    definition: StreamDefinitionBody
    objects: list[ObjectProgressBody]
    rows_processed: int
    last_processed_commit_timestamp: str | None
    cdc_start_timestamp: str | None
    #: When CDC was last restarted from a chosen position (``--cdc-start``), if ever.
    cdc_recovered_at: str | None
    pipeline_attached: bool
    #: The attached pipeline (null while none is).
    pipeline: PipelineBody | None
    lag_seconds: float | None


class SplitPolicyBody(Model):
    """The split policy (see ``changestream.SplitPolicy`` for each setting)."""

    enabled: bool
    max_rows: int
    max_write_rate: float
    window_seconds: float
    merge_max_rows: int
    merge_max_write_rate: float
    min_lifetime_seconds: float
    check_interval_seconds: float


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


class ColumnTypeBody(Model):
    name: str
    type: TypeBody
    is_primary_key: bool
    ordinal_position: int


class ModBody(Model):
    """One modified row; values are in the change records' JSON form of their types."""

    keys: dict[str, Any]
    new_values: dict[str, Any]
    old_values: dict[str, Any]


class DataChangeRecordBody(Model):
    """The seed's data change record."""

    commit_timestamp: str
    record_sequence: str
    server_transaction_id: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    column_types: list[ColumnTypeBody]
    mods: list[ModBody]
    mod_type: str
    value_capture_type: str
    number_of_records_in_transaction: int
    number_of_partitions_in_transaction: int
    transaction_tag: str
    is_system_transaction: bool
    #: The committing handle's session (the engine's own streams only).
    session_id: str = ""


class HeartbeatRecordBody(Model):
    timestamp: str


class ChildPartitionBody(Model):
    token: str
    parent_partition_tokens: list[str]


class ChildPartitionsRecordBody(Model):
    start_timestamp: str
    record_sequence: str
    child_partitions: list[ChildPartitionBody]


class Line(msgspec.Struct, tag_field="type", kw_only=True):
    """One line of a streamed (NDJSON) response."""


class RecordLine(Line, tag="data_change_record"):
    record: DataChangeRecordBody
    timestamp_us: int
    partition_token: str | None = None


class HeartbeatLine(Line, tag="heartbeat_record"):
    record: HeartbeatRecordBody
    timestamp_us: int
    partition_token: str | None = None


class ChildPartitionsLine(Line, tag="child_partitions_record"):
    record: ChildPartitionsRecordBody
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
