"""Rows of user tables: validating written values and turning keys into SQL conditions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from changestream.ddl.schema import Table
from changestream.errors import InvalidArgument
from changestream.store.keys import quote
from changestream.types import normalize, to_sqlite


def key_condition(table: Table) -> str:
    """``"k1" = ? AND "k2" = ?`` over the table's primary key."""
    return " AND ".join(f"{quote(name)} = ?" for name in table.primary_key)


def normalized_key(table: Table, key: Sequence[Any]) -> tuple[Any, ...]:
    """A full primary key, validated and in canonical Python form."""
    if isinstance(key, str | bytes) or not isinstance(key, Sequence):
        raise InvalidArgument(f"a key of table {table.name!r} must be a tuple, got {key!r}")
    columns = table.key_columns
    if len(key) != len(columns):
        raise InvalidArgument(
            f"table {table.name!r} has key ({', '.join(table.primary_key)}); got {tuple(key)!r}"
        )
    return tuple(normalize(c.type, v, c.name) for c, v in zip(columns, key, strict=True))


def storage_key(table: Table, key: Sequence[Any]) -> list[Any]:
    """A full primary key in SQLite storage form."""
    normalized = normalized_key(table, key)
    return [to_sqlite(c.type, v) for c, v in zip(table.key_columns, normalized, strict=True)]


def check_columns(table: Table, columns: Sequence[str], *, need_key: bool) -> tuple[str, ...]:
    """Validate a mutation's column list: known, no repeats, and the key columns present."""
    if isinstance(columns, str):
        raise InvalidArgument(f"columns must be a list of names, got the string {columns!r}")
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
