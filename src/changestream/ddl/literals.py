"""A value as the GoogleSQL literal a ``DEFAULT (...)`` reads back as that value: how code that
adds a column for existing rows to read (a source's mirror following ``ADD COLUMN ...
DEFAULT``) says the value in DDL.

Each literal is checked by reading it back with :func:`changestream.ddl.defaults.parse_default`;
a value whose literal does not give it back exactly has none (None).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import orjson

from changestream.ddl.defaults import parse_default
from changestream.errors import ChangeStreamError
from changestream.types import ColumnType, normalize


def default_literal(value: Any, ctype: ColumnType) -> str | None:
    """The literal that ``DEFAULT (...)`` of a ``ctype`` column reads as ``value``, or None
    when it has none."""
    try:
        wanted = normalize(ctype, value, "column")
        text = _literal(wanted, ctype)
        if text is not None and _same(parse_default(text, ctype, "column").value, wanted):
            return text
    except ChangeStreamError:
        pass
    return None


def _same(read: Any, wanted: Any) -> bool:
    if isinstance(read, float) and isinstance(wanted, float) and math.isnan(wanted):
        return math.isnan(read)
    return bool(read == wanted)


def _literal(value: Any, ctype: ColumnType) -> str | None:
    if value is None:
        return "NULL"
    code = ctype.code
    if code == "ARRAY":
        assert ctype.element is not None
        items = [_literal(item, ctype.element) for item in value]
        return None if None in items else f"[{', '.join(str(item) for item in items)}]"
    if code == "BOOL":
        return "TRUE" if value else "FALSE"
    if code == "INT64":
        return str(value)
    if code == "FLOAT64":
        if math.isnan(value):
            return "'NaN'"
        if math.isinf(value):
            return "'Infinity'" if value > 0 else "'-Infinity'"
        return repr(float(value))
    if code == "NUMERIC" and isinstance(value, decimal.Decimal):
        return _string(str(value))
    if code == "DATE" and isinstance(value, dt.date):
        return _string(value.isoformat())
    if code == "TIMESTAMP" and isinstance(value, dt.datetime):
        return _string(value.isoformat())
    if code == "STRING":
        return _string(value)
    if code == "JSON":
        return f"JSON {_string(orjson.dumps(value).decode())}"
    if code == "BYTES":
        return "b'" + "".join(f"\\x{byte:02x}" for byte in value) + "'"
    return None


def _string(text: str) -> str:
    """A GoogleSQL string literal of ``text`` (sqlglot quotes and escapes it)."""
    from sqlglot import exp

    return exp.Literal.string(text).sql(dialect="bigquery")
