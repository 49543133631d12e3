"""Column types, and the check that turns a written value into its canonical Python form
(the other forms a value takes are in :mod:`changestream.codecs`)."""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from changestream.clock import parse_ts, to_datetime
from changestream.deprecation import moved
from changestream.errors import InvalidArgument
from changestream.values import (
    INT64_MAX,
    INT64_MIN,
    float_problem,
    json_problem,
    numeric_problem,
    shown,
    text_problem,
)

SCALAR_CODES = frozenset(
    {"BOOL", "INT64", "FLOAT64", "NUMERIC", "STRING", "BYTES", "DATE", "TIMESTAMP", "JSON"}
)
_SIZED_CODES = frozenset({"STRING", "BYTES"})
#: How a FLOAT64 NaN is stored (SQLite turns a NaN REAL into NULL).
NAN_TEXT = "NaN"
#: The one NaN every FLOAT64 NaN becomes, so keys holding it compare equal by identity.
NAN = float("nan")
_DATE_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")


class _CommitTimestamp:
    """Sentinel replaced by the transaction's commit timestamp (see ``COMMIT_TIMESTAMP``)."""

    _instance: _CommitTimestamp | None = None

    def __new__(cls) -> _CommitTimestamp:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "changestream.COMMIT_TIMESTAMP"


#: Write this value to a ``TIMESTAMP OPTIONS (allow_commit_timestamp = true)`` column to store
#: the transaction's commit timestamp.
COMMIT_TIMESTAMP = _CommitTimestamp()


@dataclass(frozen=True, slots=True)
class ColumnType:
    """A column type: a scalar code with an optional length, or ARRAY of an element type."""

    code: str
    length: int | None = None
    element: ColumnType | None = None

    def __str__(self) -> str:
        if self.code == "ARRAY":
            return f"ARRAY<{self.element}>"
        if self.code in _SIZED_CODES:
            return f"{self.code}({'MAX' if self.length is None else self.length})"
        return self.code

    def to_json(self) -> dict[str, Any]:
        """The type in the Spanner API's ``Type`` shape, as used in ``column_types``."""
        if self.code == "ARRAY":
            assert self.element is not None
            return {"code": "ARRAY", "array_element_type": self.element.to_json()}
        return {"code": self.code}

    @staticmethod
    def from_json(data: dict[str, Any]) -> ColumnType:
        if data["code"] == "ARRAY":
            return ColumnType("ARRAY", element=ColumnType.from_json(data["array_element_type"]))
        return ColumnType(data["code"], data.get("length"))

    def to_catalog(self) -> dict[str, Any]:
        """Everything needed to rebuild the type, lengths included (for the schema catalog)."""
        if self.code == "ARRAY":
            assert self.element is not None
            return {"code": "ARRAY", "array_element_type": self.element.to_catalog()}
        return {"code": self.code, "length": self.length}


def _bad(column: str, ctype: ColumnType, value: object, why: str = "") -> InvalidArgument:
    subject = column if column.startswith(PARAMETER) else f"column {column!r}"
    extra = f": {why}" if why else ""
    return InvalidArgument(
        f"{subject} of type {ctype} cannot hold {type(value).__name__} {shown(value)}{extra}"
    )


#: How :func:`normalize` is told the value is a query parameter rather than a column's.
PARAMETER = "query parameter "


def normalize(ctype: ColumnType, value: Any, column: str = "?") -> Any:
    """Validate a Python value for a column and return its canonical Python form.

    ``column`` names the column, or is ``PARAMETER + "@name"`` for a query parameter.
    The one check every written value and typed parameter passes; README's table lists what
    each type accepts (Spanner's Python client rules). Anything else raises InvalidArgument.
    """
    if value is None:
        return None
    check = _CHECKS.get(ctype.code)
    if check is None:
        raise _bad(column, ctype, value, "unknown type")
    return check(ctype, value, column)


def _bool(ctype: ColumnType, value: Any, column: str) -> Any:
    if isinstance(value, bool):
        return value
    raise _bad(column, ctype, value, "allowed: bool")


def _int64(ctype: ColumnType, value: Any, column: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(column, ctype, value, "allowed: int")
    if not INT64_MIN <= value <= INT64_MAX:
        raise _bad(column, ctype, value, "out of the INT64 range")
    return int(value)


def _float64(ctype: ColumnType, value: Any, column: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(column, ctype, value, "allowed: float, or an int a float holds exactly")
    problem = float_problem(value)
    if problem:
        raise _bad(column, ctype, value, problem)
    return NAN if value != value else float(value)


def _numeric(ctype: ColumnType, value: Any, column: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | decimal.Decimal):
        raise _bad(column, ctype, value, "allowed: decimal.Decimal or int")
    number = decimal.Decimal(value) if isinstance(value, int) else value
    problem = numeric_problem(number)
    if problem:
        raise _bad(column, ctype, value, problem)
    return number


def _string(ctype: ColumnType, value: Any, column: str) -> Any:
    if not isinstance(value, str):
        raise _bad(column, ctype, value, "allowed: str")
    problem = text_problem(value)
    if problem:
        raise _bad(column, ctype, value, problem)
    if ctype.length is not None and len(value) > ctype.length:
        raise _bad(column, ctype, value, f"longer than {ctype.length} characters")
    return str(value)


def _bytes(ctype: ColumnType, value: Any, column: str) -> Any:
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise _bad(column, ctype, value, "allowed: bytes")
    if ctype.length is not None and len(value) > ctype.length:
        raise _bad(column, ctype, value, f"longer than {ctype.length} bytes")
    return bytes(value)


def _date(ctype: ColumnType, value: Any, column: str) -> Any:
    if isinstance(value, dt.datetime) or not isinstance(value, dt.date | str):
        raise _bad(column, ctype, value, "allowed: datetime.date or 'YYYY-MM-DD' text")
    if isinstance(value, str):
        # fromisoformat alone would also take 20240101 and week dates (2024-W01-1).
        try:
            if not _DATE_TEXT.match(value):
                raise ValueError(value)
            return dt.date.fromisoformat(value)
        except ValueError as exc:
            raise _bad(column, ctype, value, "expected YYYY-MM-DD") from exc
    return dt.date(value.year, value.month, value.day)


def _timestamp(ctype: ColumnType, value: Any, column: str) -> Any:
    if type(value) is dt.datetime and value.tzinfo is dt.UTC:
        return value  # already canonical (and every datetime lies in TIMESTAMP's range)
    if value is COMMIT_TIMESTAMP:
        return value
    if not isinstance(value, dt.datetime | str):
        raise _bad(column, ctype, value, "allowed: aware datetime.datetime or RFC 3339 text")
    subject = column if column.startswith(PARAMETER) else f"column {column!r}"
    return to_datetime(parse_ts(value, subject))


def _json(ctype: ColumnType, value: Any, column: str) -> Any:
    problem = json_problem(value)
    if problem:
        raise _bad(column, ctype, value, problem)
    return value


def _array(ctype: ColumnType, value: Any, column: str) -> Any:
    if not isinstance(value, list | tuple):
        raise _bad(column, ctype, value, "allowed: list or tuple")
    assert ctype.element is not None
    return [normalize(ctype.element, item, column) for item in value]


_CHECKS: dict[str, Callable[[ColumnType, Any, str], Any]] = {
    "BOOL": _bool,
    "INT64": _int64,
    "FLOAT64": _float64,
    "NUMERIC": _numeric,
    "STRING": _string,
    "BYTES": _bytes,
    "DATE": _date,
    "TIMESTAMP": _timestamp,
    "JSON": _json,
    "ARRAY": _array,
}


#: The encodings that lived here are in :mod:`changestream.codecs` now.
__getattr__ = moved(
    __name__,
    "changestream.codecs",
    {
        "to_json_value": "to_json_value",
        "from_json_value": "from_json_value",
        "to_sqlite": "to_sqlite",
        "from_sqlite": "from_sqlite",
        "identity": "identity",
        "json_encoder": "record_encoder",
    },
)
