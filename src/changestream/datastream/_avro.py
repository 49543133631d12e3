"""Avro form of events: one schema per object (table definition), and each event written as
a record of it (binary, by an encoder compiled from the schema: see ``avro_binary``).

The schema is a record ``Event`` with the generic metadata, a ``SourceMetadata`` record and a
``Payload`` record whose fields are the table's columns in ordinal order, so a column's value is
found by its index as the seed describes. Every payload field is a ``["null", T]`` union:

======================  ==============================================================
column type             Avro type
======================  ==============================================================
BOOL / INT64 / FLOAT64  boolean / long / double
STRING / BYTES          string / bytes
DATE                    int, logicalType date
TIMESTAMP               long, logicalType timestamp-micros
NUMERIC                 string (plain decimal text: lossless at any precision and scale,
                        which a fixed Avro decimal(p, s) is not)
JSON                    string (the JSON text, keys sorted)
ARRAY<T>                array of ["null", T]
======================  ==============================================================

``read_timestamp`` and ``source_timestamp`` are timestamp-millis longs, ``sort_keys`` is
``{"type": "array", "items": ["string", "long"]}`` and ``source_metadata.commit_timestamp`` is
timestamp-micros. Avro names allow only ``[A-Za-z_][A-Za-z0-9_]*``, so a payload field name is
the column name with other characters replaced by ``_``; each field also carries the real name
(``sqlName``) and type (``sqlType``), which :func:`event_dict` uses to rebuild the JSON form.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import fastavro

from changestream.clock import parse_ts
from changestream.codecs import (
    Codec,
    event_encoder,
    identity,
    micros_text,
    millis_text,
    text_decoder,
    text_encoder,
)
from changestream.datastream.avro_binary import (
    Encoder,
    compile_encoder,
    long_bytes,
    name_bytes,
    string_bytes,
)
from changestream.datastream.events import Change, Event, SourceMetadata
from changestream.ddl.schema import Table
from changestream.errors import InvalidArgument
from changestream.types import ColumnType

_SCALAR_TYPES: dict[str, Any] = {
    "BOOL": "boolean",
    "INT64": "long",
    "FLOAT64": "double",
    "NUMERIC": "string",
    "STRING": "string",
    "BYTES": "bytes",
    "DATE": {"type": "int", "logicalType": "date"},
    "TIMESTAMP": {"type": "long", "logicalType": "timestamp-micros"},
    "JSON": "string",
}
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")
_MILLIS = {"type": "long", "logicalType": "timestamp-millis"}


def avro_type(ctype: ColumnType) -> Any:
    """The (non-null) Avro type of a column type."""
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        return {"type": "array", "items": ["null", avro_type(ctype.element)]}
    return _SCALAR_TYPES[ctype.code]


def _field_names(table: Table) -> list[str]:
    names: list[str] = []
    for column in table.columns:
        name = _INVALID_NAME_CHARS.sub("_", column.name)
        if not name or name[0].isdigit():
            name = "_" + name
        while name in names:
            name += "_"
        names.append(name)
    return names


#: The ``source_metadata`` record of each flavor (changestream's own, or a source's kind).
_SOURCE_METADATA: dict[str, dict[str, Any]] = {
    "changestream": {
        "type": "record",
        "name": "SourceMetadata",
        "fields": [
            {"name": "database", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "is_deleted", "type": "boolean"},
            {"name": "change_type", "type": "string"},
            {"name": "tx_id", "type": ["null", "string"]},
            {
                "name": "commit_timestamp",
                "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
            },
            {"name": "record_sequence", "type": ["null", "string"]},
            {"name": "mod_index", "type": ["null", "long"]},
            {"name": "primary_keys", "type": {"type": "array", "items": "string"}},
        ],
    },
    "postgresql": {
        "type": "record",
        "name": "PostgresqlSourceMetadata",
        "fields": [
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "is_deleted", "type": "boolean"},
            {"name": "change_type", "type": "string"},
            {"name": "tx_id", "type": ["null", "string"]},
            {"name": "lsn", "type": ["null", "string"]},
            {"name": "primary_keys", "type": {"type": "array", "items": "string"}},
        ],
    },
    "mysql": {
        "type": "record",
        "name": "MysqlSourceMetadata",
        "fields": [
            {"name": "database", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "is_deleted", "type": "boolean"},
            {"name": "change_type", "type": "string"},
            {"name": "log_file", "type": ["null", "string"]},
            {"name": "log_position", "type": ["null", "long"]},
            {"name": "primary_keys", "type": {"type": "array", "items": "string"}},
        ],
    },
}


def avro_schema(table: Table, flavor: str = "changestream") -> dict[str, Any]:
    """The Avro schema of the events of one table definition (with ``flavor``'s source
    metadata)."""
    payload_fields = [
        {
            "name": field_name,
            "type": ["null", avro_type(column.type)],
            "default": None,
            "sqlName": column.name,
            "sqlType": column.type.to_catalog(),
        }
        for field_name, column in zip(_field_names(table), table.columns, strict=True)
    ]
    return {
        "type": "record",
        "name": "Event",
        "namespace": "changestream.datastream",
        "fields": [
            {"name": "stream_name", "type": "string"},
            {"name": "read_method", "type": "string"},
            {"name": "object", "type": "string"},
            {"name": "schema_key", "type": "string"},
            {"name": "uuid", "type": "string"},
            {"name": "read_timestamp", "type": _MILLIS},
            {"name": "source_timestamp", "type": _MILLIS},
            {"name": "sort_keys", "type": {"type": "array", "items": ["string", "long"]}},
            {"name": "source_metadata", "type": _SOURCE_METADATA[flavor]},
            {
                "name": "payload",
                "type": {"type": "record", "name": "Payload", "fields": payload_fields},
            },
        ],
    }


@dataclass(frozen=True, slots=True)
class AvroPlan:
    """A table's parsed Avro schema and the function writing an event of it as an Avro
    record of that schema (binary)."""

    schema: dict[str, Any]
    encode: Callable[[Event], bytes]
    #: The records of events alike but for their :class:`Change` (one change record's, or
    #: one backfill chunk's): the first event, and each one's change (see
    #: :meth:`_EventEncoder.encode_record`).
    encode_record: Callable[[Event, Sequence[Change]], list[bytes]]


# By schema key, for the reason given at changestream.datastream.events.plan_of.
_PLANS: dict[str, AvroPlan] = {}


def avro_plan_of(event: Event) -> AvroPlan:
    """The :class:`AvroPlan` of an event's table (the schema key tells flavors apart)."""
    plan = _PLANS.get(event.schema_key)
    if plan is None:
        flavor = event.source_metadata.flavor
        plan = _PLANS.setdefault(event.schema_key, avro_plan(event.table, flavor))
    return plan


def avro_plan(table: Table, flavor: str = "changestream") -> AvroPlan:
    """The :class:`AvroPlan` of a table definition."""
    schema = avro_schema(table, flavor)
    encoder = _EventEncoder(table, flavor, schema)
    return AvroPlan(
        schema=cast(dict[str, Any], fastavro.parse_schema(schema)),
        encode=encoder.encode,
        encode_record=encoder.encode_record,
    )


_optional_string = compile_encoder(["null", "string"])
_optional_long = compile_encoder(["null", "long"])
_names = compile_encoder({"type": "array", "items": "string"})


def _sort_keys(keys: tuple[int, ...]) -> bytes:
    """``sort_keys``, an array of ``["string", "long"]`` whose items are all longs."""
    return long_bytes(len(keys)) + b"".join([b"\x02" + long_bytes(key) for key in keys]) + b"\x00"


class _EventEncoder:
    """Writes an event as a record of :func:`avro_schema` of its table, with the values
    :meth:`Event.to_json_dict` holds (timestamps as longs, the payload's NUMERIC and JSON as
    text). The envelope and changestream's own metadata are laid out here in the schema's
    field order, the rest is compiled from the schema (``tests/test_avro_binary.py`` checks
    every flavor against fastavro's bytes)."""

    def __init__(self, table: Table, flavor: str, schema: dict[str, Any]) -> None:
        fields = {f["name"]: f["type"] for f in schema["fields"]}
        self._own_metadata = flavor == "changestream"
        self._source_metadata = compile_encoder(fields["source_metadata"])
        self._payload = [(column.name, _payload_field(column.type)) for column in table.columns]
        self._keys: dict[tuple[str, ...], bytes] = {}

    def encode(self, event: Event) -> bytes:
        payload = event.payload
        try:
            return b"".join(
                [
                    self._envelope(event),
                    string_bytes(event.uuid),
                    long_bytes(event.read_timestamp // 1000),
                    long_bytes(event.source_timestamp // 1000),
                    _sort_keys(event.sort_keys),
                    self._metadata(event.source_metadata),
                    *[encode(payload[name]) for name, encode in self._payload],
                ]
            )
        except (AttributeError, TypeError, ValueError, struct.error) as exc:
            raise self._fault(event.uuid, event.table, payload) from exc

    def encode_record(self, first: Event, changes: Sequence[Change]) -> list[bytes]:
        """:meth:`encode` of the events of one change record's mods (or one chunk's backfill
        rows), ``first`` being the event of ``changes[0]``: what the events share is
        encoded once."""
        head = self._envelope(first)
        # The sort keys up to the mod index: four items, the first three the record's.
        keys = first.sort_keys
        times = b"".join(
            [
                long_bytes(first.read_timestamp // 1000),
                long_bytes(first.source_timestamp // 1000),
                long_bytes(len(keys)),
                *[b"\x02" + long_bytes(key) for key in keys[:-1]],
                b"\x02",
            ]
        )
        meta = first.source_metadata
        if self._own_metadata and meta.mod_index is not None:
            before, after = self._own_parts(meta)
        else:  # the same for every change: a source's, or a backfill row's (no mod index)
            before, after = self._metadata(meta), None
        out: list[bytes] = []
        for change in changes:
            index = long_bytes(change.mod_index)
            row = change.row
            try:
                payload = [encode(row[name]) for name, encode in self._payload]
            except (AttributeError, TypeError, ValueError, struct.error) as exc:
                raise self._fault(change.uuid, first.table, row) from exc
            metadata = before if after is None else before + _optional_index(index) + after
            out.append(
                b"".join(
                    [head, string_bytes(change.uuid), times, index, b"\x00", metadata, *payload]
                )
            )
        return out

    def _envelope(self, event: Event) -> bytes:
        """The envelope's fields before the uuid."""
        return b"".join(
            [
                name_bytes(event.stream_name),
                name_bytes(event.read_method),
                name_bytes(event.object),
                name_bytes(event.schema_key),
            ]
        )

    def _fault(self, uuid: str, table: Table, payload: dict[str, Any]) -> InvalidArgument:
        """The error of an event that does not fit its schema: what in it does not (only
        looked for once it failed)."""
        for name, encode in self._payload:
            try:
                encode(payload[name])
            except (AttributeError, TypeError, ValueError, struct.error):
                value = payload[name]
                column = table.column(name)
                kind = "" if column is None else f" ({column.type})"
                fault = f"column {name}{kind} holds {value!r}"
                break
        else:
            fault = "its envelope or source metadata does not fit the event schema"
        return InvalidArgument(f"event {uuid} cannot be written as Avro: {fault}")

    def _metadata(self, meta: SourceMetadata) -> bytes:
        if not self._own_metadata:
            return self._source_metadata(meta.to_json_dict())
        before, after = self._own_parts(meta)
        return before + _optional_long(meta.mod_index) + after

    def _own_parts(self, meta: SourceMetadata) -> tuple[bytes, bytes]:
        """changestream's own metadata before its ``mod_index`` and after it."""
        keys = self._keys.get(meta.primary_keys)
        if keys is None:
            keys = self._keys[meta.primary_keys] = _names(meta.primary_keys)
        before = b"".join(
            [
                name_bytes(meta.database),
                name_bytes(meta.table),
                b"\x01" if meta.is_deleted else b"\x00",
                name_bytes(meta.change_type),
                _optional_string(meta.tx_id),
                _optional_long(meta.commit_timestamp),
                _optional_string(meta.record_sequence),
            ]
        )
        return before, keys


def _optional_index(index: bytes) -> bytes:
    """A mod index already written as a long (``index``) as its ``["null", "long"]``."""
    return b"\x02" + index


def _payload_field(ctype: ColumnType) -> Encoder:
    """A payload field of a column of ``ctype``: its ``["null", T]`` union of the value's
    columnar form (see ``codecs.text_encoder``)."""
    encode = compile_encoder(["null", avro_type(ctype)])
    to_text = text_encoder(ctype)
    if to_text is identity:
        return encode
    return lambda value: encode(to_text(value))


def payload_converter(writer_schema: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A function turning a read Avro payload into the event JSON payload (real column names)."""
    fields = next(f for f in writer_schema["fields"] if f["name"] == "payload")["type"]["fields"]
    plan: list[tuple[str, str, Codec, Codec]] = []
    for field in fields:
        ctype = ColumnType.from_json(field["sqlType"])
        plan.append((field["sqlName"], field["name"], text_decoder(ctype), event_encoder(ctype)))

    def convert(payload: dict[str, Any]) -> dict[str, Any]:
        return {name: to_json(decode(payload[key])) for name, key, decode, to_json in plan}

    return convert


def event_dict(
    record: dict[str, Any], convert_payload: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """A record read by fastavro in the JSON form of :meth:`Event.to_json_dict`."""
    meta = dict(record["source_metadata"])
    if meta.get("commit_timestamp") is not None:
        meta["commit_timestamp"] = micros_text(parse_ts(meta["commit_timestamp"]))
    return {
        **record,
        "read_timestamp": millis_text(parse_ts(record["read_timestamp"])),
        "source_timestamp": millis_text(parse_ts(record["source_timestamp"])),
        "source_metadata": meta,
        "payload": convert_payload(record["payload"]),
    }
