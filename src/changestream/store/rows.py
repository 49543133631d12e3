"""Rows of user tables: validating written values and turning keys into SQL conditions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from changestream.codecs import to_sqlite
from changestream.ddl.schema import Table
from changestream.errors import InvalidArgument
from changestream.store.keys import quote
from changestream.types import NAN, NAN_TEXT, normalize
from changestream.values import shown


def key_condition(table: Table) -> str:
    """``"k1" = ? AND "k2" IS ?`` over the table's primary key: ``IS`` for nullable columns,
    so a NULL key part matches NULL (SQLite uses the key's index for both)."""
    return " AND ".join(
        f"{quote(c.name)} {'=' if c.not_null else 'IS'} ?" for c in table.key_columns
    )


def normalized_key(table: Table, key: Sequence[Any]) -> tuple[Any, ...]:
    """A full primary key, validated and in canonical Python form."""
    if isinstance(key, str | bytes) or not isinstance(key, Sequence):
        raise InvalidArgument(f"a key of table {table.name!r} must be a tuple, got {shown(key)}")
    columns = table.key_columns
    if len(key) != len(columns):
        raise InvalidArgument(
            f"table {table.name!r} has key ({', '.join(table.primary_key)}); "
            f"got {shown(tuple(key))}"
        )
    return tuple(normalize(c.type, v, c.name) for c, v in zip(columns, key, strict=True))


def storage_key(table: Table, key: Sequence[Any]) -> list[Any]:
    """A full primary key in SQLite storage form."""
    normalized = normalized_key(table, key)
    return [to_sqlite(c.type, v) for c, v in zip(table.key_columns, normalized, strict=True)]


def restore_nans(
    table: Table, names: Sequence[str], rows: list[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """``rows`` (of columns ``names``) with FLOAT64 NaN back as a float.

    SQLite cannot store a NaN REAL, so it is kept as the text ``'NaN'``, and the column's
    REAL values are read without a converter so they keep every bit.
    """
    floats = [i for i, name in enumerate(names) if _is_float(table, name)]
    if not floats or not rows:
        return rows
    fixed = []
    for row in rows:
        if any(row[i] == NAN_TEXT for i in floats):
            row = tuple(NAN if i in floats and v == NAN_TEXT else v for i, v in enumerate(row))
        fixed.append(row)
    return fixed


def _is_float(table: Table, name: str) -> bool:
    column = table.column(name)
    return column is not None and column.type.code == "FLOAT64"


def check_columns(table: Table, columns: Sequence[str], *, need_key: bool) -> tuple[str, ...]:
    """Validate a mutation's column list: known, no repeats, and the key columns present."""
    if isinstance(columns, str):
        raise InvalidArgument(f"columns must be a list of names, got the string {shown(columns)}")
    names = tuple(columns)
    for name in names:
        if table.column(name) is None:
            raise InvalidArgument(
                f"table {table.name!r} has no column {name!r} "
                f"(columns: {', '.join(c.name for c in table.columns)})"
            )
    if len(set(names)) != len(names):
        raise InvalidArgument(f"a column is named twice in {list(names)!r}")
    if need_key:
        missing = [k for k in table.primary_key if k not in names]
        if missing:
            raise InvalidArgument(
                f"writes to {table.name!r} must include its key column(s) {', '.join(missing)}"
            )
    return names
