"""Query parameter values in the form user columns store them: the one check per parameter.

A parameter assigned straight to a column (``INSERT ... VALUES (@p)``, ``SET c = @p``) is
checked against that column's type; any other takes the type Spanner's Python client infers
from its Python type (bool BOOL, int INT64, float FLOAT64, Decimal NUMERIC, str STRING, bytes
BYTES, date DATE, datetime TIMESTAMP, dict JSON, list/tuple ARRAY of its elements' type).
:class:`UntypedText` (text given without a type, as the CLI's ``--param k=v``) is read as
the type of the column it is assigned to or compared with.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import orjson

from changestream.codecs import to_sqlite
from changestream.errors import InvalidArgument
from changestream.types import PARAMETER, ColumnType, normalize
from changestream.values import shown

#: A column value as written or read (:mod:`changestream.types` gives each type's Python form).
Value: TypeAlias = object
#: Query parameters: by name (``@name`` / ``$name``) or by position.
Params: TypeAlias = Mapping[str, Value] | Sequence[Value] | None

_SCALARS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "BOOL"),
    (int, "INT64"),
    (float, "FLOAT64"),
    (decimal.Decimal, "NUMERIC"),
    (str, "STRING"),
    ((bytes, bytearray, memoryview), "BYTES"),
    (dt.datetime, "TIMESTAMP"),
    (dt.date, "DATE"),
    (dict, "JSON"),
)
_ALLOWED = "None, bool, int, float, Decimal, str, bytes, date, datetime, dict, list, tuple"


def inferred_type(value: Any, label: str) -> ColumnType:
    """The column type Spanner's Python client gives a parameter value of this Python type.

    A list whose elements do not share one scalar type (``[3, {"a": 1}]``, nested lists) is
    taken as a JSON array.
    """
    if isinstance(value, list | tuple):
        present = [item for item in value if item is not None]
        if not present:
            return ColumnType("ARRAY", element=ColumnType("INT64"))
        types = [_scalar_type(item) for item in present]
        if None in types:
            bad = present[types.index(None)]
            raise _unsupported(f"{label} holds a", bad)
        element = set(types)
        if len(element) == 1 and ColumnType("JSON") not in element:
            return ColumnType("ARRAY", element=element.pop())
        return ColumnType("JSON")
    type_ = _scalar_type(value)
    if type_ is None:
        raise _unsupported(f"{label} cannot be a", value)
    return type_


def _unsupported(what: str, value: Any) -> InvalidArgument:
    return InvalidArgument(
        f"query parameter {what} {type(value).__name__} ({shown(value)}); allowed: {_ALLOWED}"
    )


def _scalar_type(value: Any) -> ColumnType | None:
    """The type of a scalar value; JSON for a list or dict; None for anything else."""
    if isinstance(value, list | tuple):
        return ColumnType("JSON")
    for python_type, code in _SCALARS:
        if isinstance(value, python_type):
            return ColumnType(code)
    return None


class UntypedText(str):
    """A parameter given as text with no type (``changestream sql --param k=5``): it is read
    as the type of the column it is assigned to or compared with (``K = @k`` with K INT64
    makes it 5, and ``abc`` an error naming the column), and is a STRING anywhere else."""


def _from_text(ctype: ColumnType, text: str, label: str, column: str) -> Any:
    """``text`` read as a value of ``ctype``, as a literal of that type would be written."""
    code = ctype.code
    try:
        if code == "INT64":
            return int(text.strip())
        if code == "FLOAT64":
            return float(text.strip())
        if code == "NUMERIC":
            return decimal.Decimal(text.strip())
        if code == "BOOL":
            return {"true": True, "false": False}[text.strip().lower()]
        if code in ("JSON", "ARRAY"):
            return orjson.loads(text)
    except (ValueError, KeyError, ArithmeticError, orjson.JSONDecodeError) as exc:
        raise InvalidArgument(
            f"query parameter {label}: {shown(text)} is not a valid {ctype} value, the type of "
            f"column {column!r} it is compared with or assigned to"
        ) from exc
    return str(text)  # STRING, BYTES, DATE, TIMESTAMP: the column's own check reads the text


def stored_parameter(value: Any, label: str, column: tuple[str, ColumnType] | None = None) -> Any:
    """``value`` checked as the type of ``column`` (name, type) it is assigned to, or else as
    the type inferred from its Python type; in storage form."""
    if value is None:
        return None
    if column is not None:
        name, ctype = column
        if isinstance(value, UntypedText):
            value = _from_text(ctype, value, label, name)
        return to_sqlite(ctype, normalize(ctype, value, name))
    if isinstance(value, UntypedText):
        value = str(value)
    ctype = inferred_type(value, label)
    if ctype.code == "JSON" and isinstance(value, tuple):
        value = list(value)
    return to_sqlite(ctype, normalize(ctype, value, PARAMETER + label))
