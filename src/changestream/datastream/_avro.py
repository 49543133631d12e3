"""Avro form of events: one schema per object (table definition), records for fastavro.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import fastavro

from changestream.clock import parse_ts
from changestream.codecs import (
    Codec,
    event_encoder,
    micros_text,
    millis_text,
    text_decoder,
    text_encoder,
)
from changestream.datastream.events import Event
from changestream.ddl.schema import Table
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
    """A table's parsed Avro schema and, in column order, the payload fields: column name,
    Avro field name, encoder and the name of the field's non-null union branch."""

    schema: dict[str, Any]
    fields: tuple[tuple[str, str, Codec, str], ...]


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
    return AvroPlan(
        schema=cast(dict[str, Any], fastavro.parse_schema(avro_schema(table, flavor))),
        fields=tuple(
            (column.name, field_name, text_encoder(column.type), _branch(avro_type(column.type)))
            for field_name, column in zip(_field_names(table), table.columns, strict=True)
        ),
    )


def _branch(avro: Any) -> str:
    """How fastavro names a union branch of type ``avro`` (its tuple notation)."""
    return avro if isinstance(avro, str) else str(avro["type"])


def _in(branch: str, value: Any) -> Any:
    """``value`` of a ``["null", branch]`` union in fastavro's tuple notation, which spares it
    trying the union's types one by one."""
    return None if value is None else (branch, value)


def avro_record(event: Event) -> dict[str, Any]:
    """The event as a record of :func:`avro_schema` of its table."""
    meta = event.source_metadata
    payload = event.payload
    return {
        "stream_name": event.stream_name,
        "read_method": event.read_method,
        "object": event.object,
        "schema_key": event.schema_key,
        "uuid": event.uuid,
        "read_timestamp": event.read_timestamp // 1000,
        "source_timestamp": event.source_timestamp // 1000,
        "sort_keys": [("long", key) for key in event.sort_keys],
        "source_metadata": (
            meta.to_json_dict()
            if meta.origin is not None
            else {
                "database": meta.database,
                "table": meta.table,
                "is_deleted": meta.is_deleted,
                "change_type": meta.change_type,
                "tx_id": _in("string", meta.tx_id),
                "commit_timestamp": _in("long", meta.commit_timestamp),
                "record_sequence": _in("string", meta.record_sequence),
                "mod_index": _in("long", meta.mod_index),
                "primary_keys": list(meta.primary_keys),
            }
        ),
        "payload": {
            field_name: _in(branch, encode(payload[name]))
            for name, field_name, encode, branch in avro_plan_of(event).fields
        },
    }


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
