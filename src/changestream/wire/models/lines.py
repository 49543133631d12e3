"""The lines of streaming responses (NDJSON): records, SQL rows, keepalives, errors and the end."""

from __future__ import annotations

from typing import Any

import msgspec

from changestream.wire.models.base import Model
from changestream.wire.models.responses import ErrorDetail, TypeBody


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


class DataChangeRecordBody(Model, kw_only=True):
    """The seed's data change record. A read that asked for ``stored_mods`` may get a batch
    of inserts as the change log stores it instead of ``mods``: ``mod_columns`` (the key, new
    value and old value column names) and ``mod_values`` (per mod, those columns' values in
    that order)."""

    commit_timestamp: str
    record_sequence: str
    server_transaction_id: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    column_types: list[ColumnTypeBody]
    mods: list[ModBody] = msgspec.field(default_factory=list)
    mod_columns: list[list[str]] | None = None
    mod_values: list[list[Any]] | None = None
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
