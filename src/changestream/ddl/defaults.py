"""A column's ``DEFAULT (expression)``: a constant of the column's type, or a function
evaluated for each new row (``CURRENT_TIMESTAMP()``, ``CURRENT_DATE()``, ``GENERATE_UUID()``).

The expression is read with sqlglot's GoogleSQL (BigQuery) parser, so every literal form
Spanner accepts is understood: typed literals (``DATE '2024-01-01'``, ``NUMERIC '1.5'``,
``JSON '{"a": 1}'``, ``b'..'``), negative numbers and arrays (``[1, 2]``). sqlglot is
imported when a DEFAULT is parsed, not with this module: a process that only reads and writes
rows never loads it (its classes and functions are most of such a process's long-lived
objects, which every full garbage collection walks: 28,000 of 41,000).
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from changestream.clock import format_ts, now_us, to_datetime
from changestream.errors import ChangeStreamError, InvalidArgument
from changestream.types import ColumnType, normalize

if TYPE_CHECKING:
    from sqlglot import exp


@functools.cache
def generated_functions() -> dict[type[exp.Expr], tuple[str, str]]:
    """The functions a DEFAULT may call, each with the column type it fills and its SQL
    name."""
    from sqlglot import exp

    return {
        exp.CurrentTimestamp: ("TIMESTAMP", "CURRENT_TIMESTAMP()"),
        exp.CurrentDate: ("DATE", "CURRENT_DATE()"),
        exp.Uuid: ("STRING", "GENERATE_UUID()"),
    }


_FORMS = (
    "a literal of the column's type (typed literals such as DATE '2024-01-01' included), "
    "NULL, an array of literals, CURRENT_TIMESTAMP(), CURRENT_DATE() or GENERATE_UUID()"
)


@dataclass(frozen=True, slots=True)
class Default:
    """What ``DEFAULT (...)`` says: a ``value`` (normalized, of the column's type) or a
    ``function`` (one of the names in :func:`generated_functions`) evaluated for each new row."""

    value: Any = None
    function: str | None = None


def parse_default(text: str, ctype: ColumnType, column: str) -> Default:
    """The DEFAULT of ``column`` from the expression ``text``; InvalidArgument if it is not
    one of the forms supported, or does not fit ``ctype``."""
    import sqlglot
    from sqlglot.errors import SqlglotError

    try:
        tree = sqlglot.parse_one(text, read="bigquery")
    except (SqlglotError, RecursionError) as exc:
        raise InvalidArgument(f"DEFAULT of column {column!r} is not an expression: {text}") from exc
    generated = generated_functions().get(type(tree))
    if generated is not None:
        code, name = generated
        if ctype.code != code:
            raise InvalidArgument(
                f"DEFAULT {name} gives a {code}, but column {column!r} is {ctype}"
            )
        return Default(function=name)
    try:
        return Default(value=normalize(ctype, _constant(tree, ctype), column))
    except ChangeStreamError as exc:
        raise InvalidArgument(f"DEFAULT ({text}) does not fit column {column!r}: {exc}") from exc


def _constant(node: exp.Expr, ctype: ColumnType) -> Any:
    from sqlglot import exp

    code = ctype.code
    if isinstance(node, exp.Paren):
        return _constant(node.this, ctype)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and node.this.is_number:
        return -_number(node.this.this, code)
    if isinstance(node, exp.Literal):
        if node.is_number:
            return _number(node.this, code)
        return _typed_text(node.this, code)
    if isinstance(node, exp.ByteString | exp.RawString):
        text = str(node.this)
        # sqlglot reads a bytes literal's bytes as Latin-1 characters (b'\xff' is "ÿ", b'é'
        # the two characters of its UTF-8 bytes): encoding them back gives those bytes.
        return text.encode("latin-1") if isinstance(node, exp.ByteString) else text
    if isinstance(node, exp.ParseJSON) and isinstance(node.this, exp.Literal):
        return _json(node.this.this)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal | exp.Array):
        return _constant(node.this, ctype)
    if isinstance(node, exp.Array) and ctype.element is not None:
        return [_constant(item, ctype.element) for item in node.expressions]
    raise InvalidArgument(f"a DEFAULT must be {_FORMS}; got {node.sql(dialect='bigquery')}")


def _number(text: str, code: str) -> int | float | decimal.Decimal:
    if code == "NUMERIC":
        return decimal.Decimal(text)
    if code == "FLOAT64":
        return float(text)
    try:
        return int(text)
    except ValueError:
        return float(text)  # refused by the column's check unless the column is FLOAT64


def _typed_text(text: str, code: str) -> Any:
    """A string literal where the column's type reads one (as Spanner coerces literals)."""
    if code == "NUMERIC":
        try:
            return decimal.Decimal(text)
        except decimal.InvalidOperation as exc:
            raise InvalidArgument(f"{text!r} is not a number") from exc
    if code == "JSON":
        return _json(text)
    if code == "FLOAT64" and text in ("NaN", "Infinity", "-Infinity", "inf", "-inf"):
        return float(text.replace("Infinity", "inf"))
    return text


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(f"{text!r} is not JSON: {exc}") from exc


def generated_value(function: str) -> Any:
    """A fresh value of a generated DEFAULT, in Python form (the time is the write's)."""
    if function == "CURRENT_TIMESTAMP()":
        return to_datetime(now_us())
    if function == "CURRENT_DATE()":
        return dt.datetime.now(dt.UTC).date()
    return str(uuid.uuid4())


def generated_stored(function: str) -> str:
    """A fresh value of a generated DEFAULT in its SQLite storage form: SQLite's own DEFAULT
    clause calls this (as ``_cs_default(name)``) for rows inserted by DML."""
    if function == "CURRENT_TIMESTAMP()":
        return format_ts(now_us())
    if function == "CURRENT_DATE()":
        return dt.datetime.now(dt.UTC).date().isoformat()
    return str(uuid.uuid4())
