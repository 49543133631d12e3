"""The bodies the server answers with; unknown fields are accepted, so a newer server may add
some."""

from __future__ import annotations

from typing import Any

import msgspec

from changestream.store.models import Lease
from changestream.wire.models.base import Model


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
    not_databases: list[NotDatabase] = msgspec.field(default_factory=list)


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
    #: The commit timestamp of the ADD COLUMN that added it (absent: created with the table).
    added_at: int | None = None


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
    indexes: list[IndexBody] = msgspec.field(default_factory=list)
    row_deletion_policy: RowDeletionPolicyBody | None = None
    #: The commit timestamp of the CREATE TABLE that made it (absent: not recorded).
    created_at: int | None = None


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


class ChangeSizes(Model):
    """Per commit timestamp, in order (parallel lists): records, mods, bytes as stored."""

    commit_timestamps: list[int]
    records: list[int]
    mods: list[int]
    bytes: list[int]


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
    include: list[str] = msgspec.field(default_factory=list)
    exclude: list[str] = msgspec.field(default_factory=list)
    format: str = "json"
    replica: str | None = None
    backfill: str = "automatic"
    file_rotation_mb: float = 50.0
    file_rotation_interval: float = 60.0
    replica_dropped_columns: str = "keep"
    compression: str = "none"
    replica_mode: str = "merge"
    schema_file: str = "none"
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


# -- what the console reads (usable by scripts as well) ---------------------------------------


class Identity(Model):
    """Who the caller is to this server: the scopes of its token (all of them, and no name,
    under ``--insecure-no-auth``)."""

    scopes: list[str]
    authenticated: bool


class StreamActivity(Model):
    """A change stream at a glance: live partitions, and how far the server's open reads of
    it trail the newest commit (null when none is open)."""

    name: str
    live_partitions: int
    open_reads: int
    reader_lag_seconds: float | None


class DatabaseOverview(Model):
    """A database's activity now: write rate over the split policy's window, the newest
    commit, and each change stream's partitions and readers. Change records are written in
    the commit's own transaction, so the log never trails the commits: ``reader_lag_seconds``
    is the lag that matters, commit to reader."""

    database: str
    now: str
    last_commit_timestamp: str | None
    write_rate: float
    window_seconds: float
    streams: list[StreamActivity]


class LineagePartitionBody(Model):
    """A partition of a lineage window (``Partition``'s fields), with its retained record
    count and where its key range lies among the window's boundaries."""

    token: str
    start_timestamp: str
    end_timestamp: str | None
    start_key: str
    end_key: str
    parent_tokens: list[str]
    child_tokens: list[str]
    write_rate: float
    record_count: int
    key_rank_start: int
    key_rank_end: int


class Lineage(Model):
    """The partitions live at some moment of ``[start, end]``; when more than ``limit`` were,
    the newest ``limit`` (``total`` counts them all)."""

    stream: str
    created: str
    start: str
    end: str
    total: int
    key_ranks: int
    partitions: list[LineagePartitionBody]


class LeaseStatusBody(Model):
    """A lease as ``changestream leases`` shows it, with the lag in seconds."""

    partition: str
    parents: list[str]
    owner: str | None
    stealer: str | None
    checkpoint: str | None
    lag_seconds: float | None
    state: str
    start_timestamp: str


class ConsumerStatus(Model):
    """A consumer group: its leases, and how many of them each worker holds."""

    consumer: str
    leases: list[LeaseStatusBody]
    workers: dict[str, int]


class ConsumerStatuses(Model):
    consumers: list[ConsumerStatus]


class StreamErrorBody(Model):
    """One error a stream's pipeline recorded."""

    time: str
    object: str
    message: str
    retriable: bool


class StreamErrors(Model):
    errors: list[StreamErrorBody]
