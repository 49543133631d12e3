"""The Datastream event envelope: one event per changed row, from CDC mods or backfill rows.

An :class:`Event` holds the seed's generic metadata (``stream_name``, ``read_method``, ``object``,
``schema_key``, ``uuid``, ``read_timestamp``, ``source_timestamp``, ``sort_keys``), this source's
``source_metadata`` and the whole row as ``payload``. In memory, timestamps are integer
microseconds and payload values are the Python values ``Database.read`` returns (``int``,
``float``, ``Decimal``, ``bytes``, ``date``, aware UTC ``datetime``, parsed JSON, lists);
:meth:`Event.to_json_dict` gives the JSON form written to ``.jsonl`` files.

``sort_keys`` is ``[source_timestamp_us, rank, record_sequence, mod_index]``, all longs:

- ``source_timestamp_us``: the commit timestamp (CDC) or the snapshot timestamp (backfill);
- ``rank``: 0 for backfill, 1 for CDC, so a backfill row sorts before a CDC change committed at
  the snapshot timestamp itself (re-applying that change is harmless: it carries the whole row);
- ``record_sequence``: the record's place in its transaction (0 for backfill);
- ``mod_index``: the mod's place in its record (0 for backfill).

Commit timestamps are unique per transaction, so these four numbers order every event of a row.

``uuid`` is a UUID 5 of what identifies the change — (stream, object, commit timestamp,
transaction id, record sequence, mod index) for CDC, (stream, object, the row's values) for
backfill — so an event re-emitted after a crash has the same uuid, and a backfill chunk read
again after a crash gives each unchanged row the uuid of its first read (uuids follow what was
read, not when).
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import orjson

from changestream.codecs import (
    Codec,
    event_encoder,
    identity,
    micros_text,
    millis_text,
    record_decoder,
    record_encoder,
    record_to_event,
)
from changestream.ddl.schema import Column, Table
from changestream.errors import InvalidArgument
from changestream.streams.origins import TableOrigin, source_of_tag
from changestream.streams.records import DataChangeRecord
from changestream.types import ColumnType

CDC_READ_METHOD: Final = "changestream-cdc"
BACKFILL_READ_METHOD: Final = "changestream-backfill"
#: The read methods of the tables a source database feeds, by the source's kind.
SOURCE_READ_METHODS: Final = {
    "postgresql": ("postgresql-cdc-wal", "postgresql-backfill"),
    "mysql": ("mysql-cdc-binlog", "mysql-backfill"),
}
#: The ``source_metadata`` of each kind of source (the seed's names, in its order).
SOURCE_METADATA_FIELDS: Final = {
    "changestream": (
        "database",
        "table",
        "is_deleted",
        "change_type",
        "tx_id",
        "commit_timestamp",
        "record_sequence",
        "mod_index",
        "primary_keys",
    ),
    "postgresql": ("schema", "table", "is_deleted", "change_type", "tx_id", "lsn", "primary_keys"),
    "mysql": (
        "database",
        "table",
        "is_deleted",
        "change_type",
        "log_file",
        "log_position",
        "primary_keys",
    ),
}
CHANGE_TYPES: Final = ("INSERT", "UPDATE", "DELETE")
#: ``sort_keys[1]`` of backfill and CDC events.
BACKFILL_RANK: Final = 0
CDC_RANK: Final = 1

#: The value capture types whose records carry whole rows (what events need).
WHOLE_ROWS: Final = frozenset({"NEW_ROW", "NEW_ROW_AND_OLD_VALUES"})

# Fixed so uuids stay the same across processes and releases.
UUID_NAMESPACE_BYTES: Final = uuid.UUID("6b19f7f1-b143-460a-aabc-117f902a791b").bytes
#: SHA-1 having read the namespace: each uuid's digest goes on from a copy of it (0.76-0.85
#: µs a uuid against 0.94-0.98 hashing the namespace and the parts joined).
_UUID_SEED = hashlib.sha1(UUID_NAMESPACE_BYTES)


@dataclass(frozen=True, slots=True)
class CdcMod:
    """One mod of a data change record, with the record fields an event needs.

    ``keys``, ``new_values`` and ``old_values`` are in the change records' JSON encoding.
    """

    commit_timestamp: int
    server_transaction_id: str
    record_sequence: str
    mod_index: int
    mod_type: str
    keys: Mapping[str, Any]
    new_values: Mapping[str, Any]
    old_values: Mapping[str, Any]


class SourceMetadata(msgspec.Struct, frozen=True, gc=False):
    """The source-specific metadata; the CDC-only fields are None for backfill events.

    Immutable and compared field by field, like :class:`Event` (see there why a struct).
    """

    database: str
    table: str
    is_deleted: bool
    change_type: str
    tx_id: str | None
    commit_timestamp: int | None
    record_sequence: str | None
    mod_index: int | None
    primary_keys: tuple[str, ...]
    #: For a table a source database feeds: that table, whose metadata the event carries
    #: instead (the source's schema, table, transaction id and ``lsn``).
    origin: TableOrigin | None = None
    #: The source's position of the change (PostgreSQL's LSN, MySQL's ``file:offset``); None
    #: for backfill events.
    lsn: str | None = None

    @property
    def flavor(self) -> str:
        """Whose metadata this is: ``changestream``'s own or the source's kind."""
        return _flavor(self.origin)

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON form (``commit_timestamp`` as RFC 3339 with microseconds)."""
        if self.origin is not None and self.origin.kind == "mysql":
            log_file, _, offset = (self.lsn or "").rpartition(":")
            return {
                "database": self.origin.schema,
                "table": self.origin.table,
                "is_deleted": self.is_deleted,
                "change_type": self.change_type,
                "log_file": log_file or None,
                "log_position": int(offset) if offset else None,
                "primary_keys": list(self.primary_keys),
            }
        if self.origin is not None:
            return {
                "schema": self.origin.schema,
                "table": self.origin.table,
                "is_deleted": self.is_deleted,
                "change_type": self.change_type,
                "tx_id": self.tx_id,
                "lsn": self.lsn,
                "primary_keys": list(self.primary_keys),
            }
        return {
            "database": self.database,
            "table": self.table,
            "is_deleted": self.is_deleted,
            "change_type": self.change_type,
            "tx_id": self.tx_id,
            "commit_timestamp": (
                None if self.commit_timestamp is None else micros_text(self.commit_timestamp)
            ),
            "record_sequence": self.record_sequence,
            "mod_index": self.mod_index,
            "primary_keys": list(self.primary_keys),
        }


class Event(msgspec.Struct, frozen=True, gc=False):
    """One changed row in the seed's envelope (timestamps in microseconds).

    ``table`` is the definition the payload follows; it is not part of the event's data, but
    lets writers derive per-object schemas (Avro, Delta) without another lookup. Two events
    are equal when their data is (``table``, ``record_payload`` and ``record_old_values``
    aside); ``msgspec.structs.replace(event, ...)`` copies one with changes.

    A msgspec struct rather than a frozen dataclass: every change becomes an event, and a
    frozen dataclass sets each field through ``object.__setattr__`` (an event and its
    metadata took 3.1 µs to build that way, 0.23 µs as structs). The garbage collector does
    not track events (they hold no reference back to themselves), so the thousands a task
    holds at a time cost it no collections.
    """

    stream_name: str
    read_method: str
    object: str
    schema_key: str
    uuid: str
    read_timestamp: int
    source_timestamp: int
    sort_keys: tuple[int, int, int, int]
    source_metadata: SourceMetadata
    payload: dict[str, Any]
    table: Table
    #: The payload as the change record holds it (CDC events): written to JSON files as it is
    #: but for JSON columns, rather than encoded again from ``payload``.
    record_payload: dict[str, Any] | None = None
    #: An UPDATE's old values as the change record holds them (the columns it changed, with
    #: ``NEW_ROW_AND_OLD_VALUES`` capture), for :meth:`row_before`; None otherwise.
    record_old_values: Mapping[str, Any] | None = None

    def __eq__(self, other: Any) -> bool:  # ``object`` is a field here
        if not isinstance(other, Event):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _EVENT_DATA)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _EVENT_DATA)
        return f"Event({fields})"

    def row_before(self) -> dict[str, Any] | None:
        """An UPDATE's whole row before it (the payload with the changed columns' old
        values), decoded as ``payload`` is; None when the record holds no old values."""
        if not self.record_old_values or self.record_payload is None:
            return None
        plan = table_plan(self.table, self.source_metadata.flavor)
        return _decode_row(plan, self.table, (self.record_payload, self.record_old_values))[1]

    @property
    def is_deleted(self) -> bool:
        return self.source_metadata.is_deleted

    def to_json_dict(self) -> dict[str, Any]:
        """The event as the seed's JSON object."""
        plan = plan_of(self)
        if self.record_payload is not None:
            payload = encoded_values(self.record_payload, plan.record_to_event)
        else:
            payload = encoded_values(self.payload, plan.json_encoders)
        return {
            "stream_name": self.stream_name,
            "read_method": self.read_method,
            "object": self.object,
            "schema_key": self.schema_key,
            "uuid": self.uuid,
            "read_timestamp": millis_text(self.read_timestamp),
            "source_timestamp": millis_text(self.source_timestamp),
            "sort_keys": list(self.sort_keys),
            "source_metadata": self.source_metadata.to_json_dict(),
            "payload": payload,
        }


#: The fields that are the event's data: what equality compares and ``repr`` shows.
_EVENT_DATA: Final = Event.__struct_fields__[: Event.__struct_fields__.index("table")]


def encoded_values(values: dict[str, Any], encoders: Mapping[str, Codec]) -> dict[str, Any]:
    """``values`` with each value whose column has an encoder in ``encoders`` encoded (a
    copy)."""
    out = dict(values)
    for name, encode in encoders.items():
        out[name] = encode(out[name])
    return out


def object_name(database: str, table: str) -> str:
    """The event ``object`` of a table: ``<schema>_<table>``, the database being the schema."""
    return f"{database}_{table}"


def schema_key(table: Table) -> str:
    """A stable hash of the table's column names and types and its primary key."""
    return table_plan(table).schema_key


@dataclass(frozen=True, slots=True)
class TablePlan:
    """Per-table facts computed once: column names, codecs and the schema key."""

    names: tuple[str, ...]
    non_key: frozenset[str]
    #: The JSON encoders and change-record decoders of the columns whose values change
    #: (columns whose value is its own encoding are left out).
    json_encoders: Mapping[str, Codec]
    decoders: Mapping[str, Codec]
    #: Change-record value → event JSON value, for the columns where the two differ.
    record_to_event: Mapping[str, Codec]
    schema_key: str


# Plans by schema key: equal keys mean equal column names, types and primary key, so equal
# plans. Looking up an event's plan by its (cached-hash) string is much cheaper than hashing
# its Table, which matters once per event when writing files.
_PLANS: dict[str, TablePlan] = {}


def plan_of(event: Event) -> TablePlan:
    """The :class:`TablePlan` of an event's table."""
    return _PLANS.get(event.schema_key) or table_plan(event.table, event.source_metadata.flavor)


@functools.lru_cache(maxsize=256)
def table_plan(table: Table, flavor: str = "changestream") -> TablePlan:
    """The cached :class:`TablePlan` of a table definition whose events carry ``flavor``'s
    source metadata (a source's kind changes the events' schema, so their schema key)."""
    shape: dict[str, Any] = {
        "columns": [[c.name, str(c.type)] for c in table.columns],
        "primary_key": list(table.primary_key),
    }
    if flavor != "changestream":
        shape["source_metadata"] = flavor
    plan = TablePlan(
        names=tuple(c.name for c in table.columns),
        non_key=frozenset(c.name for c in table.non_key_columns),
        json_encoders=_changing({c.name: event_encoder(c.type) for c in table.columns}),
        decoders=_changing({c.name: record_decoder(c.type) for c in table.columns}),
        record_to_event=_changing({c.name: record_to_event(c.type) for c in table.columns}),
        schema_key=hashlib.sha256(orjson.dumps(shape)).hexdigest()[:32],
    )
    _PLANS.setdefault(plan.schema_key, plan)
    return plan


def _flavor(origin: TableOrigin | None) -> str:
    return "changestream" if origin is None else origin.kind


def _read_methods(origin: TableOrigin | None) -> tuple[str, str]:
    """The (CDC, backfill) read methods of a table with ``origin``."""
    if origin is None:
        return CDC_READ_METHOD, BACKFILL_READ_METHOD
    return SOURCE_READ_METHODS[origin.kind]


def _changing(codecs: dict[str, Codec]) -> dict[str, Codec]:
    return {name: codec for name, codec in codecs.items() if codec is not identity}


def _uuid(*parts: Any) -> str:
    """``str(uuid.uuid5(namespace, json(parts)))``, spelled out: the stdlib's is several times
    slower, and this runs once per event."""
    return _uuid_of(orjson.dumps(parts))


def _uuid_of(parts_json: bytes) -> str:
    """:func:`_uuid` of the parts whose JSON (as ``orjson`` writes it) is ``parts_json``."""
    hasher = _UUID_SEED.copy()
    hasher.update(parts_json)
    h = hasher.hexdigest()
    # Version 5 in the 13th digit, the RFC 4122 variant in the two top bits of the 17th.
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


_VARIANT: Final = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def _decode_row(
    plan: TablePlan, table: Table, values: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The row as the change record holds it, and decoded."""
    stored: dict[str, Any] = dict.fromkeys(plan.names)
    width = len(stored)
    for part in values:
        stored.update(part)
    if len(stored) != width:
        unknown = next(name for name in stored if name not in plan.names)
        raise InvalidArgument(
            f"column {unknown!r} is not in table {table.name!r} (columns: {', '.join(plan.names)})"
        )
    row = dict(stored)
    for name, decode in plan.decoders.items():
        value = row[name]
        if value is not None:
            try:
                row[name] = decode(value)
            except (ValueError, TypeError, ArithmeticError) as exc:
                column = table.column(name)
                assert column is not None
                raise InvalidArgument(
                    f"column {name!r} of type {column.type} in table {table.name!r} cannot "
                    f"hold the change-record value {value!r}"
                ) from exc
    return stored, row


#: A mod's (keys, values) → its row as stored and decoded, or None (see _row_decoder).
_RowDecoder = Callable[
    [Mapping[str, Any], Mapping[str, Any]], tuple[dict[str, Any], dict[str, Any]] | None
]
#: Compiled row decoders by schema key (bounded: cleared when full).
_ROW_DECODERS: dict[str, _RowDecoder] = {}
_MOST_ROW_DECODERS: Final = 1024


def _row_decoder(plan: TablePlan, table: Table) -> _RowDecoder:
    """:func:`_decode_row` of a mod's keys and values, compiled for the table: one dict
    display per row form, the decoders called inline (0.67 µs a row against 1.2 for four
    columns). It answers None where a mod is not exactly the table's key columns and
    non-key columns, or a value does not decode: :func:`_decode_row` then decides (and says
    what is wrong). The generated source holds only ``repr``s of column names."""
    decoder = _ROW_DECODERS.get(plan.schema_key)
    if decoder is not None:
        return decoder
    keys = tuple(table.primary_key)
    values = tuple(name for name in plan.names if name not in keys)
    reads = [f"v{i} = keys[{name!r}]" for i, name in enumerate(keys)]
    reads += [f"v{len(keys) + i} = values[{name!r}]" for i, name in enumerate(values)]
    at = {name: i for i, name in enumerate((*keys, *values))}
    stored = ", ".join(f"{name!r}: v{at[name]}" for name in plan.names)
    decoded = ", ".join(
        f"{name!r}: d{at[name]}(v{at[name]})" if name in plan.decoders else f"{name!r}: v{at[name]}"
        for name in plan.names
    )
    body = "\n        ".join(reads) or "pass"
    source = (
        "def decode(keys, values):\n"
        f"    if len(keys) != {len(keys)} or len(values) != {len(values)}:\n"
        "        return None\n"
        "    try:\n"
        f"        {body}\n"
        f"        return {{{stored}}}, {{{decoded}}}\n"
        "    except (KeyError, ValueError, TypeError, ArithmeticError):\n"
        "        return None\n"
    )
    namespace: dict[str, Any] = {
        f"d{at[name]}": decode for name, decode in plan.decoders.items() if name in at
    }
    exec(compile(source, "<changestream row decoder>", "exec"), namespace)
    compiled: _RowDecoder = namespace["decode"]
    if len(_ROW_DECODERS) >= _MOST_ROW_DECODERS:
        _ROW_DECODERS.clear()
    _ROW_DECODERS[plan.schema_key] = compiled
    return compiled


def cdc_events(
    stream_name: str,
    database: str,
    table: Table,
    mods: Iterable[CdcMod],
    read_timestamp_us: int,
) -> list[Event]:
    """Events of data change record mods of ``table``, in the order given.

    The change stream must capture whole rows (``NEW_ROW`` or ``NEW_ROW_AND_OLD_VALUES``): an
    INSERT or UPDATE payload is the keys plus the new values; a DELETE payload is the keys plus
    the old values, which are empty under ``NEW_ROW`` (the other columns are then null).
    """
    build = CdcBuilder(stream_name, database, table, read_timestamp_us)
    return [
        build(
            mod.commit_timestamp,
            mod.server_transaction_id,
            mod.record_sequence,
            mod.mod_index,
            mod.mod_type,
            mod.keys,
            mod.new_values,
            mod.old_values,
        )
        for mod in mods
    ]


def record_events(
    stream_name: str,
    database: str,
    table: Table,
    records: Iterable[DataChangeRecord],
    read_timestamp_us: int,
    origin: TableOrigin | None = None,
) -> list[Event]:
    """:func:`cdc_events` of every mod of ``records`` (data change records of ``table``; with
    ``origin``, a mirror table of a source database, whose metadata the events carry)."""
    build = CdcBuilder(stream_name, database, table, read_timestamp_us, origin)
    events: list[Event] = []
    for record, mods in fitted_mods(table, records):
        events += build.record(
            record.commit_timestamp,
            record.server_transaction_id,
            record.record_sequence,
            record.mod_type,
            mods,
            record.transaction_tag,
        )
    return events


#: The mods of a record as (keys, new values, old values), in the change records' encoding.
Mods = Iterable[tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]]


def fitted_mods(
    table: Table, records: Iterable[DataChangeRecord]
) -> Iterator[tuple[DataChangeRecord, Mods]]:
    """Each of ``records`` (of ``table``) with its mods' (keys, new values, old values), the
    values fitted to the table as it is now (see :func:`_fitting`)."""
    names = frozenset(c.name for c in table.columns)
    added = _AddedColumns(table)
    for record in records:
        fit = _fitting(record, names, added)
        mods: Mods = ((m.keys, m.new_values, m.old_values) for m in record.mods)
        if fit is not None:
            mods = ((keys, fit(new), fit(old)) for keys, new, old in mods)
        yield record, mods


def written_against(record: DataChangeRecord, columns: Iterable[str] | None = None) -> Table:
    """The table ``record`` was written against, as the record itself describes it (its
    ``column_types``; the key in the order its mods give it), with only ``columns`` and the
    key when given: how the changes of a table since dropped, or dropped and created again
    under its name, are read."""
    kept = None if columns is None else set(columns)
    described = [
        c for c in record.column_types if kept is None or c.is_primary_key or c.name in kept
    ]
    key = [c.name for c in described if c.is_primary_key]
    if record.mods and set(record.mods[0].keys) == set(key):
        key = list(record.mods[0].keys)
    return Table(
        name=record.table_name,
        columns=tuple(
            Column(c.name, ColumnType.from_json(c.type), ordinal)
            for ordinal, c in enumerate(described, 1)
        ),
        primary_key=tuple(key),
    )


class _AddedColumns:
    """What a row reads now in each column added to ``table`` after the table was made: its
    constant DEFAULT (the store gave every existing row that), else NULL; and when each of
    them was added, if the catalog says."""

    def __init__(self, table: Table) -> None:
        self.values = {
            c.name: None if c.default is None else record_encoder(c.type)(c.default)
            for c in table.columns
        }
        self.added_at = {c.name: c.added_at for c in table.columns if c.added_at is not None}
        self.newest = max(self.added_at.values(), default=-1)

    def after(self, commit_ts: int) -> frozenset[str]:
        """The columns added after ``commit_ts``: a value a record committed then holds under
        one of their names was a former column's."""
        if commit_ts >= self.newest:
            return frozenset()
        return frozenset(name for name, at in self.added_at.items() if commit_ts < at)


def _fitting(
    record: DataChangeRecord, names: frozenset[str], added: _AddedColumns
) -> Callable[[Mapping[str, Any]], dict[str, Any]] | None:
    """How to fit the values of a whole-row record committed before the table's columns
    changed to the table as it is now (None when they fit as they are): a column added since
    holds what the row reads in it now (:class:`_AddedColumns`), also when the record holds
    a value of a former column of that name; a column dropped since is left out, and a
    deleted row gets no added column. Records that do not carry whole rows are not fitted,
    so a change stream that cannot feed events still fails with its own error."""
    if record.value_capture_type not in WHOLE_ROWS:
        return None
    shape = frozenset(c.name for c in record.column_types)
    later = added.after(record.commit_timestamp)
    deleted = record.mod_type == "DELETE"
    if not later and (shape == names or (deleted and shape <= names)):
        return None
    kept = names - later
    filled = frozenset() if deleted else (names - shape) | later
    values_now = added.values
    return lambda values: {
        **{name: v for name, v in values.items() if name in kept},
        **{name: values_now[name] for name in filled if name in later or name not in values},
    }


class Change(msgspec.Struct, frozen=True, gc=False):
    """What one mod makes of its CDC event besides what its record gives: its index in the
    record, its uuid, its row as the change record holds it (``stored``) and decoded
    (``row``), and the mod's old values. (A backfill row's: see
    :meth:`BackfillBuilder.changes`.)"""

    mod_index: int
    uuid: str
    stored: dict[str, Any]
    row: dict[str, Any]
    old_values: Mapping[str, Any]


class _Builder:
    """What the events of one table read at one time share (computed once): CDC events
    (``read_kind`` 0) or backfill events (1)."""

    def __init__(
        self,
        stream_name: str,
        database: str,
        table: Table,
        read_us: int,
        origin: TableOrigin | None,
        read_kind: int,
    ) -> None:
        self.stream_name, self.database, self.table, self.read_us = (
            stream_name,
            database,
            table,
            read_us,
        )
        self.origin = origin
        self.read_method = _read_methods(origin)[read_kind]
        self.plan = table_plan(table, _flavor(origin))
        self.object = object_name(database, table.name)


class CdcBuilder(_Builder):
    """Builds the CDC events of one table read at one time (what they share, computed once)."""

    def __init__(
        self,
        stream_name: str,
        database: str,
        table: Table,
        read_us: int,
        origin: TableOrigin | None = None,
    ) -> None:
        super().__init__(stream_name, database, table, read_us, origin, 0)
        self.non_key_count = len(self.plan.non_key)
        self._decode = _row_decoder(self.plan, table)

    def __call__(
        self,
        ts: int,
        tx_id: str,
        record_sequence: str,
        mod_index: int,
        mod_type: str,
        keys: Mapping[str, Any],
        new_values: Mapping[str, Any],
        old_values: Mapping[str, Any],
        transaction_tag: str = "",
    ) -> Event:
        mods = ((keys, new_values, old_values),)
        (event,) = self.record(
            ts, tx_id, record_sequence, mod_type, mods, transaction_tag, mod_index
        )
        return event

    def record(
        self,
        ts: int,
        tx_id: str,
        record_sequence: str,
        mod_type: str,
        mods: Mods,
        transaction_tag: str = "",
        first_index: int = 0,
    ) -> list[Event]:
        """The events of one record's mods (keys, new values, old values), numbered from
        ``first_index``; what the mods share is worked out once."""
        changes = self.changes(ts, tx_id, record_sequence, mod_type, mods, first_index)
        return self.events(ts, tx_id, record_sequence, mod_type, transaction_tag, changes)

    def changes(
        self,
        ts: int,
        tx_id: str,
        record_sequence: str,
        mod_type: str,
        mods: Mods,
        first_index: int = 0,
    ) -> Iterator[Change]:
        """What each of one record's mods makes of its event: its :class:`Change`, the mods
        checked and their rows decoded."""
        plan, table = self.plan, self.table
        if mod_type not in CHANGE_TYPES:
            raise InvalidArgument(
                f"mod_type must be one of {', '.join(CHANGE_TYPES)}, got {mod_type!r}"
            )
        deleted = mod_type == "DELETE"
        decode = self._decode
        # The uuid's JSON parts but for the mod index, which closes them per mod.
        head = orjson.dumps(("cdc", self.stream_name, self.object, ts, tx_id, record_sequence))
        head = head[:-1] + b","
        for mod_index, (keys, new_values, old_values) in enumerate(mods, first_index):
            if deleted:
                stored, row = decode(keys, old_values) or _decode_row(
                    plan, table, (keys, old_values)
                )
            else:
                # Unknown columns fail in _decode_row, so a full count means none is missing.
                if len(new_values) < self.non_key_count:
                    missing = plan.non_key.difference(new_values)
                    raise InvalidArgument(
                        f"{mod_type} of table {table.name!r} lacks columns "
                        f"{', '.join(sorted(missing))}: the change stream must capture whole "
                        "rows (value_capture_type NEW_ROW or NEW_ROW_AND_OLD_VALUES) and "
                        "track every column"
                    )
                stored, row = decode(keys, new_values) or _decode_row(
                    plan, table, (keys, new_values)
                )
            uuid = _uuid_of(b"%s%d]" % (head, mod_index))
            yield Change(mod_index, uuid, stored, row, old_values)

    def events(
        self,
        ts: int,
        tx_id: str,
        record_sequence: str,
        mod_type: str,
        transaction_tag: str,
        changes: Iterable[Change],
    ) -> list[Event]:
        """The events of one record's :meth:`changes`."""
        plan, table = self.plan, self.table
        deleted = mod_type == "DELETE"
        updated = mod_type == "UPDATE"
        obj, stream_name = self.object, self.stream_name
        source_tx_id, lsn = tx_id, None
        if self.origin is not None:
            # What the source wrote in the tag: its own transaction id and position.
            source_tx_id, lsn = source_of_tag(transaction_tag) or (tx_id, None)
        sequence = int(record_sequence)
        return [
            Event(
                stream_name=stream_name,
                read_method=self.read_method,
                object=obj,
                schema_key=plan.schema_key,
                uuid=change.uuid,
                read_timestamp=self.read_us,
                source_timestamp=ts,
                sort_keys=(ts, CDC_RANK, sequence, change.mod_index),
                source_metadata=SourceMetadata(
                    database=self.database,
                    table=table.name,
                    is_deleted=deleted,
                    change_type=mod_type,
                    tx_id=source_tx_id,
                    commit_timestamp=ts,
                    record_sequence=record_sequence,
                    mod_index=change.mod_index,
                    primary_keys=table.primary_key,
                    origin=self.origin,
                    lsn=lsn,
                ),
                payload=change.row,
                table=table,
                record_payload=change.stored,
                record_old_values=change.old_values if updated and change.old_values else None,
            )
            for change in changes
        ]


def backfill_events(
    stream_name: str,
    database: str,
    table: Table,
    rows: Iterable[tuple[Any, ...]],
    snapshot_timestamp_us: int,
    read_timestamp_us: int,
    origin: TableOrigin | None = None,
) -> list[Event]:
    """INSERT events of rows read from a snapshot at ``snapshot_timestamp_us`` (``origin``:
    as for :func:`record_events`).

    ``rows`` hold every column in ``table.columns`` order, as ``Database.read`` returns them.
    """
    build = BackfillBuilder(
        stream_name, database, table, snapshot_timestamp_us, read_timestamp_us, origin
    )
    return build.events(build.changes(rows))


class BackfillBuilder(_Builder):
    """Builds the backfill events of one table's rows read from one snapshot (what they
    share, computed once)."""

    def __init__(
        self,
        stream_name: str,
        database: str,
        table: Table,
        snapshot_us: int,
        read_us: int,
        origin: TableOrigin | None = None,
    ) -> None:
        super().__init__(stream_name, database, table, read_us, origin, 1)
        self.snapshot_us = snapshot_us
        self.metadata = SourceMetadata(
            database=database,
            table=table.name,
            is_deleted=False,
            change_type="INSERT",
            tx_id=None,
            commit_timestamp=None,
            record_sequence=None,
            mod_index=None,
            primary_keys=table.primary_key,
            origin=origin,
        )

    def changes(self, rows: Iterable[tuple[Any, ...]]) -> Iterator[Change]:
        """Each row's :class:`Change`: ``stored`` is the row's event JSON form, whose values
        the uuid is derived from, and ``mod_index`` 0 (the sort keys' last)."""
        plan, names = self.plan, self.plan.names
        stream_name, obj = self.stream_name, self.object
        for row in rows:
            if len(row) != len(names):
                raise InvalidArgument(
                    f"a row of table {self.table.name!r} must have {len(names)} values "
                    f"({', '.join(names)}), got {len(row)}"
                )
            payload = dict(zip(names, row, strict=True))
            encoded = encoded_values(payload, plan.json_encoders)
            uuid = _uuid("backfill", stream_name, obj, list(encoded.values()))
            yield Change(0, uuid, encoded, payload, {})

    def events(self, changes: Iterable[Change]) -> list[Event]:
        """The events of rows' :meth:`changes`."""
        sort_keys = (self.snapshot_us, BACKFILL_RANK, 0, 0)
        return [
            Event(
                stream_name=self.stream_name,
                read_method=self.read_method,
                object=self.object,
                schema_key=self.plan.schema_key,
                uuid=change.uuid,
                read_timestamp=self.read_us,
                source_timestamp=self.snapshot_us,
                sort_keys=sort_keys,
                source_metadata=self.metadata,
                payload=change.row,
                table=self.table,
            )
            for change in changes
        ]
