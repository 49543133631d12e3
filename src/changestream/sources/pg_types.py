"""PostgreSQL column types as changestream column types, and PostgreSQL's text form of a value
(what ``pgoutput`` sends and ``::text`` returns) as the Python value the mirror table stores.

The mapping (README, "Sources"): integers and ``oid`` → INT64; ``real``/``double precision``
→ FLOAT64; ``numeric`` → NUMERIC; ``boolean`` → BOOL; ``bytea`` → BYTES; ``date`` → DATE;
``timestamp`` (read as UTC) and ``timestamptz`` → TIMESTAMP; ``json``/``jsonb`` → JSON;
text types, ``uuid``, enums, ``time``, ``timetz``, ``interval``, ``inet``, ``cidr`` and
``macaddr`` → STRING (their text); one-dimensional arrays of any of these → ARRAY. Anything
else is refused when the source is added, naming the column and its type.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from changestream.errors import InvalidArgument
from changestream.types import ColumnType

Parse = Callable[[str], Any]

_SCALARS: dict[str, str] = {
    **dict.fromkeys(("int2", "int4", "int8", "oid"), "INT64"),
    **dict.fromkeys(("float4", "float8"), "FLOAT64"),
    "numeric": "NUMERIC",
    "bool": "BOOL",
    "bytea": "BYTES",
    "date": "DATE",
    **dict.fromkeys(("timestamp", "timestamptz"), "TIMESTAMP"),
    **dict.fromkeys(("json", "jsonb"), "JSON"),
    **dict.fromkeys(
        (
            "text",
            "varchar",
            "bpchar",
            "name",
            "uuid",
            "time",
            "timetz",
            "interval",
            "inet",
            "cidr",
            "macaddr",
            "citext",
        ),
        "STRING",
    ),
}


@dataclass(frozen=True, slots=True)
class PgColumn:
    """A source column as the catalog describes it."""

    name: str
    #: The type's name in ``pg_type`` (for an array, its element's, with ``is_array``).
    type_name: str
    is_array: bool
    is_enum: bool
    #: ``format_type()``'s spelling, for messages.
    shown_type: str


def column_type(column: PgColumn, table: str) -> ColumnType:
    """The changestream type mirroring ``column``; InvalidArgument for a type with none."""
    code = "STRING" if column.is_enum else _SCALARS.get(column.type_name)
    if code is None:
        raise InvalidArgument(
            f"column {column.name!r} of {table} has type {column.shown_type}, which a source "
            f"cannot mirror (supported: {', '.join(sorted(_SCALARS))}, enums and their arrays)"
        )
    scalar = ColumnType(code)
    return ColumnType("ARRAY", element=scalar) if column.is_array else scalar


def _bool(text: str) -> bool:
    return text in ("t", "true")


def _bytes(text: str) -> bytes:
    if not text.startswith("\\x"):
        raise ValueError("bytea must be in hex form (bytea_output = hex)")
    return bytes.fromhex(text[2:])


def _timestamp(text: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(text)
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


_PARSERS: dict[str, Parse] = {
    "INT64": int,
    "FLOAT64": float,
    "NUMERIC": decimal.Decimal,
    "BOOL": _bool,
    "BYTES": _bytes,
    "DATE": dt.date.fromisoformat,
    "TIMESTAMP": _timestamp,
    "JSON": orjson.loads,
    "STRING": str,
}


def parser(ctype: ColumnType) -> Parse:
    """A function from PostgreSQL's text form of a value of ``ctype`` to its Python value."""
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        element = _PARSERS[ctype.element.code]
        return lambda text: [None if item is None else element(item) for item in array_items(text)]
    return _PARSERS[ctype.code]


def array_items(text: str) -> list[str | None]:
    """The elements of a one-dimensional array literal (``{1,NULL,"a b"}``), as text."""
    if text.startswith("["):  # explicit bounds: [0:2]={...}
        text = text[text.index("=") + 1 :]
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"not an array literal: {text!r}")
    body = text[1:-1]
    if body.startswith("{"):
        raise ValueError("multi-dimensional arrays cannot be mirrored")
    items: list[str | None] = []
    at = 0
    while at < len(body):
        if body[at] == '"':
            at += 1
            chars: list[str] = []
            while body[at] != '"':
                if body[at] == "\\":
                    at += 1
                chars.append(body[at])
                at += 1
            items.append("".join(chars))
            at += 1
        else:
            end = body.find(",", at)
            end = len(body) if end < 0 else end
            word = body[at:end]
            items.append(None if word == "NULL" else word)
            at = end
        at += 1  # the comma
    return items
