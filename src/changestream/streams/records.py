"""The three change stream record types, with the seed's JSON shape."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import msgspec
import orjson

from changestream.clock import format_ts
from changestream.streams.mods import Mod, compact_decoder, decode_mods


@dataclass(frozen=True, slots=True)
class ColumnTypeInfo:
    """One entry of ``column_types``: name, Spanner type JSON, key flag, 1-based position."""

    name: str
    type: dict[str, Any]
    is_primary_key: bool
    ordinal_position: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "is_primary_key": self.is_primary_key,
            "ordinal_position": self.ordinal_position,
        }


#: Column types already decoded, by their JSON (bounded: cleared when full).
_KNOWN_COLUMN_TYPES: dict[bytes, tuple[ColumnTypeInfo, ...]] = {}
_MAX_KNOWN_COLUMN_TYPES = 4096


def _column_types(columns: list[dict[str, Any]]) -> tuple[ColumnTypeInfo, ...]:
    """``column_types`` of a record, shared with earlier records of the same columns.

    Records of a table nearly always carry the same column types; sharing the (immutable)
    objects makes decoding cheaper and leaves fewer objects per record for the garbage
    collector to walk while batches of records are alive.
    """
    key = orjson.dumps(columns)
    return _KNOWN_COLUMN_TYPES.get(key) or _known_column_types(key, columns)


def _column_types_of(columns_json: bytes) -> tuple[ColumnTypeInfo, ...]:
    """:func:`_column_types` of the columns whose JSON is ``columns_json``."""
    known = _KNOWN_COLUMN_TYPES.get(columns_json)
    return known or _known_column_types(columns_json, orjson.loads(columns_json))


def _known_column_types(key: bytes, columns: list[dict[str, Any]]) -> tuple[ColumnTypeInfo, ...]:
    known = tuple(
        ColumnTypeInfo(c["name"], c["type"], c["is_primary_key"], c["ordinal_position"])
        for c in columns
    )
    if len(_KNOWN_COLUMN_TYPES) >= _MAX_KNOWN_COLUMN_TYPES:
        _KNOWN_COLUMN_TYPES.clear()
    _KNOWN_COLUMN_TYPES[key] = known
    return known


_T_co = TypeVar("_T_co", covariant=True)


class RecordActions(Protocol[_T_co]):
    """What a reader does with each type of record (Beam's one action per record type);
    ``record.handle(actions)`` calls the one that fits."""

    def on_data_change(self, record: DataChangeRecord) -> _T_co: ...

    def on_heartbeat(self, record: HeartbeatRecord) -> _T_co: ...

    def on_child_partitions(self, record: ChildPartitionsRecord) -> _T_co: ...


class _JsonRecord:
    """What every record type answers: its JSON, whether it is a change, and whether (and
    into which children) it ends the partition's query."""

    __slots__ = ()

    #: Whether the record is a data change (the other two carry no row).
    is_data_change: ClassVar[bool] = False
    #: Whether the record ends its partition's query (only a child partitions record does).
    ends_partition: ClassVar[bool] = False

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self) -> str:
        """The record as the seed's JSON object, as text."""
        return orjson.dumps(self.to_dict()).decode()


class DataChangeRecord(msgspec.Struct, _JsonRecord, frozen=True, gc=False):
    """The mods of one transaction, one table and one mod type in one partition.

    Immutable, compared field by field, picklable; ``msgspec.structs.replace(record, ...)``
    copies one with changes. A msgspec struct rather than a frozen dataclass, which sets each
    of its 15 fields through ``object.__setattr__``: reading records with the read function
    took a third less time once records were structs (145k to 210k records/s,
    ``benchmarks/watch.py``'s baseline). The garbage collector does not track records
    (nothing in one refers back to it), though readers keep batches of them alive while a
    processor works.
    """

    commit_timestamp: int
    record_sequence: str
    server_transaction_id: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    column_types: tuple[ColumnTypeInfo, ...]
    mods: tuple[Mod, ...]
    mod_type: str
    value_capture_type: str
    number_of_records_in_transaction: int
    number_of_partitions_in_transaction: int
    transaction_tag: str
    is_system_transaction: bool
    #: The partition this record was read from (not part of the seed's JSON).
    partition_token: str = ""
    #: The session of the database handle that committed it, recorded by the engine's own
    #: streams only (not part of the seed's JSON; empty elsewhere).
    session_id: str = ""

    record_type = "data_change_record"
    is_data_change: ClassVar[bool] = True

    @property
    def timestamp(self) -> int:
        """The commit timestamp, in microseconds."""
        return self.commit_timestamp

    @property
    def children(self) -> tuple[ChildPartition, ...]:
        """The partitions that carry on after this one: none (only a child partitions
        record names them)."""
        return ()

    def handle(self, actions: RecordActions[_T_co]) -> _T_co:
        """``actions.on_data_change(self)``."""
        return actions.on_data_change(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "commit_timestamp": format_ts(self.commit_timestamp),
            "record_sequence": self.record_sequence,
            "server_transaction_id": self.server_transaction_id,
            "is_last_record_in_transaction_in_partition": (
                self.is_last_record_in_transaction_in_partition
            ),
            "table_name": self.table_name,
            "column_types": [c.to_dict() for c in self.column_types],
            "mods": [m.to_dict() for m in self.mods],
            "mod_type": self.mod_type,
            "value_capture_type": self.value_capture_type,
            "number_of_records_in_transaction": self.number_of_records_in_transaction,
            "number_of_partitions_in_transaction": self.number_of_partitions_in_transaction,
            "transaction_tag": self.transaction_tag,
            "is_system_transaction": self.is_system_transaction,
        }

    @staticmethod
    def from_payload(
        commit_timestamp: int, payload: bytes | memoryview, partition_token: str = ""
    ) -> DataChangeRecord:
        """Rebuild a record from its change-log payload (the JSON fields but the timestamp;
        any ``commit_timestamp`` field is ignored)."""
        try:
            stored = _decode_stored(payload)
        except msgspec.MsgspecError:
            stored = None  # not a payload this shape holds: from_dict says what is wrong
        # Exactly one form of mods, or from_dict decides (and says what is wrong).
        compact = stored is not None and len(stored.mod_columns) > 0
        if (
            stored is None
            or compact == (stored.mods is not None)
            or compact != (len(stored.mod_values) > 0)
        ):
            data = orjson.loads(payload)
            return DataChangeRecord.from_dict(commit_timestamp, data, partition_token)
        if compact:
            rows = orjson.loads(memoryview(stored.mod_values))
            mods = compact_decoder(bytes(stored.mod_columns))(rows)
        else:
            mods = tuple(stored.mods or ())
        return DataChangeRecord(
            commit_timestamp=commit_timestamp,
            record_sequence=stored.record_sequence,
            server_transaction_id=stored.server_transaction_id,
            is_last_record_in_transaction_in_partition=(
                stored.is_last_record_in_transaction_in_partition
            ),
            table_name=stored.table_name,
            column_types=_column_types_of(bytes(stored.column_types)),
            mods=mods,
            mod_type=stored.mod_type,
            value_capture_type=stored.value_capture_type,
            number_of_records_in_transaction=stored.number_of_records_in_transaction,
            number_of_partitions_in_transaction=stored.number_of_partitions_in_transaction,
            transaction_tag=stored.transaction_tag,
            is_system_transaction=stored.is_system_transaction,
            partition_token=partition_token,
            session_id=stored.session_id,
        )

    @staticmethod
    def from_dict(
        commit_timestamp: int, data: dict[str, Any], partition_token: str = ""
    ) -> DataChangeRecord:
        """Rebuild a record from its JSON fields (any ``commit_timestamp`` field is ignored)."""
        return DataChangeRecord(
            commit_timestamp=commit_timestamp,
            record_sequence=data["record_sequence"],
            server_transaction_id=data["server_transaction_id"],
            is_last_record_in_transaction_in_partition=data[
                "is_last_record_in_transaction_in_partition"
            ],
            table_name=data["table_name"],
            column_types=_column_types(data["column_types"]),
            mods=decode_mods(data),
            mod_type=data["mod_type"],
            value_capture_type=data["value_capture_type"],
            number_of_records_in_transaction=data["number_of_records_in_transaction"],
            number_of_partitions_in_transaction=data["number_of_partitions_in_transaction"],
            transaction_tag=data["transaction_tag"],
            is_system_transaction=data["is_system_transaction"],
            partition_token=partition_token,
            session_id=data.get("session_id", ""),
        )


class _StoredRecord(msgspec.Struct):
    """A change-log payload as msgspec reads it, in one pass: mods in the seed's form
    straight into :class:`Mod` objects, the rest of the mods and ``column_types`` left as
    their JSON (compact rows of values parse faster with orjson; the JSON of columns keys
    the caches of their decoded forms). Half the time of parsing a payload into dicts and
    building the record from those."""

    record_sequence: str
    server_transaction_id: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    column_types: msgspec.Raw
    mod_type: str
    value_capture_type: str
    number_of_records_in_transaction: int
    number_of_partitions_in_transaction: int
    transaction_tag: str
    is_system_transaction: bool
    mods: list[Mod] | None = None
    #: Empty when absent (msgspec takes no union with Raw).
    mod_columns: msgspec.Raw = msgspec.Raw()
    mod_values: msgspec.Raw = msgspec.Raw()
    session_id: str = ""


_decode_stored = msgspec.json.Decoder(_StoredRecord).decode


@dataclass(frozen=True, slots=True)
class HeartbeatRecord(_JsonRecord):
    """Every record of the partition with a commit timestamp at or below ``timestamp`` was
    returned, and no later record will have one.

    Every record has ``timestamp`` (microseconds): a data change's commit timestamp, a
    heartbeat's timestamp, a child partitions record's start timestamp."""

    timestamp: int
    partition_token: str = ""

    record_type = "heartbeat_record"

    @property
    def children(self) -> tuple[ChildPartition, ...]:
        """The partitions that carry on after this one: none (only a child partitions
        record names them)."""
        return ()

    def handle(self, actions: RecordActions[_T_co]) -> _T_co:
        """``actions.on_heartbeat(self)``."""
        return actions.on_heartbeat(self)

    def to_dict(self) -> dict[str, Any]:
        return {"timestamp": format_ts(self.timestamp)}


@dataclass(frozen=True, slots=True)
class ChildPartition:
    """A partition to read next, and the partitions that must be finished before it."""

    token: str
    parent_partition_tokens: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"token": self.token, "parent_partition_tokens": list(self.parent_partition_tokens)}


@dataclass(frozen=True, slots=True)
class ChildPartitionsRecord(_JsonRecord):
    """The partitions that carry on from ``start_timestamp``; the query ends after these."""

    start_timestamp: int
    record_sequence: str
    child_partitions: tuple[ChildPartition, ...]
    partition_token: str = ""

    record_type = "child_partitions_record"
    ends_partition: ClassVar[bool] = True

    @property
    def timestamp(self) -> int:
        """When the children start (``start_timestamp``), in microseconds."""
        return self.start_timestamp

    @property
    def children(self) -> tuple[ChildPartition, ...]:
        """The partitions that carry on after this one (``child_partitions``)."""
        return self.child_partitions

    def handle(self, actions: RecordActions[_T_co]) -> _T_co:
        """``actions.on_child_partitions(self)``."""
        return actions.on_child_partitions(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_timestamp": format_ts(self.start_timestamp),
            "record_sequence": self.record_sequence,
            "child_partitions": [c.to_dict() for c in self.child_partitions],
        }


ChangeRecord = DataChangeRecord | HeartbeatRecord | ChildPartitionsRecord


def data_changes(records: Iterable[ChangeRecord]) -> Iterator[DataChangeRecord]:
    """The data change records among ``records`` (a partition's read, read to its end: a
    walked partition finishes only when its records are)."""
    for record in records:
        if isinstance(record, DataChangeRecord):
            yield record


def sequence_text(number: int) -> str:
    """A record sequence number as the seed writes it: eight digits, zero-padded."""
    return f"{number:08d}"


def googlesql_row(record: ChangeRecord) -> list[Any]:
    """A GoogleSQL result row: one ChangeRecord column holding one struct of three arrays."""
    struct: dict[str, list[Any]] = {
        "data_change_record": [],
        "heartbeat_record": [],
        "child_partitions_record": [],
    }
    struct[record.record_type].append(record.to_dict())
    return [[struct]]


def postgresql_row(record: ChangeRecord) -> list[Any]:
    """A PostgreSQL result row: one JSON object with exactly one key."""
    return [{record.record_type: record.to_dict()}]
