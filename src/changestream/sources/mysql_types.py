"""MySQL / MariaDB column types as changestream column types, and a column's value — as the
binlog reader decodes it or as a ``SELECT`` returns it — as the Python value the mirror stores.

The mapping (README, "Sources"): integer types (signed, and unsigned up to ``int``), ``year``
and ``bit`` → INT64; ``bigint unsigned``, ``decimal``/``numeric`` → NUMERIC;
``float``/``double`` → FLOAT64; ``char``/``varchar``/``text`` types, ``enum``, ``set`` (its
members joined by commas, in definition order) and ``time`` (``HH:MM:SS[.ffffff]``) → STRING;
``binary``/``varbinary``/``blob`` types → BYTES; ``date`` → DATE; ``datetime`` (read as UTC)
and ``timestamp`` → TIMESTAMP; ``json`` (MariaDB: a text column checked with ``json_valid``)
→ JSON. Anything else is refused when the source is added, naming the column and its type.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from changestream.errors import InvalidArgument
from changestream.types import ColumnType

Convert = Callable[[Any], Any]

_CODES: dict[str, str] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "year"), "INT64"),
    "bigint": "INT64",
    "bit": "INT64",
    **dict.fromkeys(("decimal", "numeric"), "NUMERIC"),
    **dict.fromkeys(("float", "double", "real"), "FLOAT64"),
    **dict.fromkeys(
        ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "time"),
        "STRING",
    ),
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"), "BYTES"),
    "date": "DATE",
    **dict.fromkeys(("datetime", "timestamp"), "TIMESTAMP"),
    "json": "JSON",
}


@dataclass(frozen=True, slots=True)
class MySqlColumn:
    """A source column as ``information_schema.columns`` describes it."""

    name: str
    #: ``data_type``: the bare type name (``bigint``, ``enum``).
    data_type: str
    #: ``column_type``: the full spelling (``bigint(20) unsigned``, ``enum('a','b')``).
    column_type: str
    #: A MariaDB text column whose values a ``json_valid`` check constrains.
    is_json: bool = False


#: The binlog's column type codes (MySQL's ``enum_field_types``) as ``data_type`` names.
_BINLOG_TYPES: dict[int, str] = {
    0: "decimal",
    1: "tinyint",
    2: "smallint",
    3: "int",
    4: "float",
    5: "double",
    7: "timestamp",
    8: "bigint",
    9: "mediumint",
    10: "date",
    11: "time",
    12: "datetime",
    13: "year",
    14: "date",
    15: "varchar",
    16: "bit",
    17: "timestamp",
    18: "datetime",
    19: "time",
    245: "json",
    246: "decimal",
    247: "enum",
    248: "set",
    **dict.fromkeys((249, 250, 251, 252), "blob"),
    253: "varchar",
    254: "char",
}
_TEXT_OF = {"blob": "longtext", "varchar": "varchar", "char": "char"}
_BINARY_OF = {"blob": "blob", "varchar": "varbinary", "char": "binary"}


def binlog_column(
    name: str,
    type_code: int,
    *,
    unsigned: bool,
    charset: str | None,
    members: Sequence[str] | None,
) -> MySqlColumn:
    """A column as a binlog table map describes it (with ``binlog_row_metadata = FULL``)."""
    data_type = _BINLOG_TYPES.get(type_code, f"binlog type {type_code}")
    if data_type in _TEXT_OF:
        data_type = (_BINARY_OF if charset in (None, "binary") else _TEXT_OF)[data_type]
    spelled = data_type
    if data_type in ("enum", "set"):
        quoted = ",".join("'" + m.replace("'", "''") + "'" for m in members or ())
        spelled = f"{data_type}({quoted})"
    elif unsigned:
        spelled = f"{data_type} unsigned"
    return MySqlColumn(name, data_type, spelled)


def column_type(column: MySqlColumn, table: str) -> ColumnType:
    """The changestream type mirroring ``column``; InvalidArgument for a type with none."""
    code = _CODES.get(column.data_type.lower())
    if code is None:
        raise InvalidArgument(
            f"column {column.name!r} of {table} has type {column.column_type}, which a source "
            f"cannot mirror (supported: {', '.join(sorted(_CODES))})"
        )
    if code == "NUMERIC" and "(" in column.column_type:
        precision, _, scale = column.column_type.partition("(")[2].partition(")")[0].partition(",")
        integral, fraction = int(precision) - int(scale or 0), int(scale or 0)
        if integral > 29 or fraction > 9:
            raise InvalidArgument(
                f"column {column.name!r} of {table} has type {column.column_type}, wider than "
                "a NUMERIC mirror holds (at most 29 digits before the point and 9 after)"
            )
    if column.is_json:
        code = "JSON"
    if column.data_type.lower() == "bigint" and "unsigned" in column.column_type.lower():
        code = "NUMERIC"
    return ColumnType(code)


def converter(column: MySqlColumn) -> Convert:
    """A function from a value of ``column`` (as the binlog reader or a SELECT gives it; never
    None) to the mirror's Python value."""
    kind = column.data_type.lower()
    if kind == "bit":
        return _bit
    if kind == "set":
        return _set_of(_members(column.column_type))
    if kind == "time":
        return _time
    code = column_type(column, "").code
    return _BY_CODE[code]


#: Types whose binlog values (as ``binlog_rows`` reads them) already are the mirror's.
_AS_READ = frozenset(
    {
        *("tinyint", "smallint", "mediumint", "int", "integer", "year", "bigint"),
        *("decimal", "numeric", "float", "double", "real"),
        *("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"),
        *("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"),
    }
)


def binlog_converter(column: MySqlColumn) -> Convert | None:
    """:func:`converter` for the values ``binlog_rows`` reads, None where they need none."""
    kind = column.data_type.lower()
    unsigned_bigint = kind == "bigint" and "unsigned" in column.column_type.lower()
    if kind in _AS_READ and not column.is_json and not unsigned_bigint:
        return None
    return converter(column)


def _bit(value: Any) -> int:
    if isinstance(value, bytes):  # a SELECT's form
        return int.from_bytes(value, "big")
    return int(str(value), 2)  # the binlog reader's: a string of 0s and 1s


def _members(spelled: str) -> tuple[str, ...]:
    """The members of ``set('a','b')`` (or ``enum(...)``), in definition order."""
    body = spelled[spelled.index("(") + 1 : spelled.rindex(")")]
    members: list[str] = []
    at = 0
    while at < len(body):
        end = at + 1
        chars: list[str] = []
        while end < len(body):
            if body[end] == "'" and body[end + 1 : end + 2] == "'":
                chars.append("'")
                end += 2
            elif body[end] == "'":
                break
            else:
                chars.append(body[end])
                end += 1
        members.append("".join(chars))
        at = end + 2  # the closing quote and the comma
    return tuple(members)


def _set_of(members: tuple[str, ...]) -> Convert:
    order = {m: i for i, m in enumerate(members)}

    def convert(value: Any) -> str:
        chosen = value.split(",") if isinstance(value, str) else list(value)
        return ",".join(sorted((m for m in chosen if m), key=lambda m: order.get(m, len(order))))

    return convert


def _time(value: Any) -> str:
    if isinstance(value, dt.timedelta):
        micros = value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds
        sign, micros = ("-", -micros) if micros < 0 else ("", micros)
        seconds, fraction = divmod(micros, 1_000_000)
        text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        return f"{text}.{fraction:06d}" if fraction else text
    return str(value)


def _timestamp(value: Any) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        raise ValueError(f"not a date and time: {value!r} (zero dates cannot be mirrored)")
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def _date(value: Any) -> dt.date:
    if not isinstance(value, dt.date):
        raise ValueError(f"not a date: {value!r} (zero dates cannot be mirrored)")
    return value


def _json(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, (str, bytes)) else value


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_BY_CODE: dict[str, Convert] = {
    "INT64": int,
    "NUMERIC": decimal.Decimal,
    "FLOAT64": float,
    "STRING": _text,
    "BYTES": bytes,
    "DATE": _date,
    "TIMESTAMP": _timestamp,
    "JSON": _json,
}
