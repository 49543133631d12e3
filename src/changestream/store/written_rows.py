"""Fast validation and storage conversion of written rows, compiled once per column list."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter, ne
from typing import Any

from changestream.codecs import to_sqlite
from changestream.ddl.defaults import generated_value
from changestream.ddl.schema import Column, Table
from changestream.errors import InvalidArgument
from changestream.types import COMMIT_TIMESTAMP, normalize
from changestream.values import shown, text_problem

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_STORED_AS_IS = frozenset({"INT64", "FLOAT64", "STRING", "BYTES"})

Check = Callable[[Any], Any]


def _slow(column: Column) -> Check:
    def check(value: Any) -> Any:
        if value is COMMIT_TIMESTAMP and not column.allow_commit_timestamp:
            raise InvalidArgument(
                "COMMIT_TIMESTAMP needs a TIMESTAMP column with allow_commit_timestamp = true; "
                f"{column.name!r} is not one"
            )
        return normalize(column.type, value, column.name)

    return check


def _fast_types(column: Column) -> frozenset[type]:
    """Python types whose values need no conversion for this column (bounds aside)."""
    code = column.type.code
    fast: dict[str, frozenset[type]] = {
        "INT64": frozenset({int}),
        "STRING": frozenset({str}),
        "FLOAT64": frozenset({float}),
        "BOOL": frozenset({bool}),
        "BYTES": frozenset({bytes}),
    }
    return fast.get(code, frozenset()) | {type(None)}


def _within_bounds(column: Column, values: tuple[Any, ...]) -> bool:
    present = [v for v in values if v is not None]
    if not present:
        return True
    code, length = column.type.code, column.type.length
    if code == "INT64":
        return bool(min(present) >= _INT64_MIN and max(present) <= _INT64_MAX)
    if code == "STRING" and text_problem("".join(present)) is not None:
        return False
    if code == "FLOAT64" and any(map(ne, present, present)):
        return False  # a NaN (not equal to itself): normalize gives every NaN one identity
    if length is not None:
        return max(map(len, present)) <= length
    return True


def _store_for(column: Column) -> Callable[[Any], Any]:
    ctype = column.type
    return lambda v: to_sqlite(ctype, v)


class RowCodec:
    """Validates rows written to ``columns`` of ``table`` and converts them for SQLite."""

    def __init__(self, table: Table, columns: tuple[str, ...]) -> None:
        self.table = table
        self.columns = columns
        described = [table.column(name) for name in columns]
        assert all(c is not None for c in described)
        chosen: list[Column] = [c for c in described if c is not None]
        self._described = chosen
        self._checks = [_slow(c) for c in chosen]
        self._fast = [_fast_types(c) for c in chosen]
        self._stores_as_is = all(c.type.code in _STORED_AS_IS for c in chosen)
        self._float_positions = [i for i, c in enumerate(chosen) if c.type.code == "FLOAT64"]
        self._converted_positions = [
            i for i, c in enumerate(chosen) if c.type.code not in _STORED_AS_IS
        ]
        self._stores = [_store_for(c) for c in chosen]
        self.key_positions = tuple(columns.index(k) for k in table.primary_key)
        self.covers_all_columns = len(columns) == len(table.columns)
        self.may_hold_commit_timestamp = any(c.allow_commit_timestamp for c in chosen)
        #: Columns with a generated DEFAULT that these writes leave out.
        self.generated = tuple(
            c for c in table.columns if c.default_function is not None and c.name not in columns
        )

    def with_generated(self, rows: list[tuple[Any, ...]]) -> tuple[RowCodec, list[tuple[Any, ...]]]:
        """New rows with a fresh value for each generated DEFAULT they leave out, and the
        codec for the wider rows (so the change record holds the values the rows got)."""
        if not self.generated:
            return self, rows
        wider = RowCodec(self.table, (*self.columns, *(c.name for c in self.generated)))
        functions = [c.default_function for c in self.generated]
        return wider, [
            (*row, *(generated_value(f) for f in functions if f is not None)) for row in rows
        ]

    def rows(self, values: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """Validated rows in canonical Python form.

        Works column by column so the common case (every value already of the column's
        exact Python type) costs a few C-level passes instead of a call per value.
        """
        width = len(self.columns)
        if not set(map(type, values)) <= {list, tuple}:
            for row in values:
                if isinstance(row, str | bytes) or not isinstance(row, Sequence):
                    raise InvalidArgument(f"a row must be a list of values, got {shown(row)}")
        rows = list(map(tuple, values))
        if not rows:
            return rows
        if set(map(len, rows)) != {width}:
            bad = next(row for row in rows if len(row) != width)
            raise InvalidArgument(
                f"row {shown(list(bad))} has {len(bad)} value(s) for the {width} column(s) "
                f"{list(self.columns)!r}"
            )
        columns = list(zip(*rows, strict=True))
        converted = False
        for index, column in enumerate(self._described):
            values_of_column = columns[index]
            if set(map(type, values_of_column)) <= self._fast[index] and _within_bounds(
                column, values_of_column
            ):
                continue
            columns[index] = tuple(map(self._checks[index], values_of_column))
            converted = True
        return list(zip(*columns, strict=True)) if converted else rows

    def stored(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Rows in SQLite storage form (column by column: only those stored otherwise than
        as they are get converted)."""
        if self._stores_as_is and not self._has_nan(rows):
            return rows
        if not rows:
            return rows
        columns = list(zip(*rows, strict=True))
        for position in self._converted_positions:
            columns[position] = tuple(map(self._stores[position], columns[position]))
        for position in self._float_positions:
            values = columns[position]
            if any(map(ne, values, values)):
                columns[position] = tuple(map(self._stores[position], values))
        return list(zip(*columns, strict=True))

    def _has_nan(self, rows: list[tuple[Any, ...]]) -> bool:
        """Whether a FLOAT64 value is NaN (SQLite would store it as NULL unless converted)."""
        for position in self._float_positions:
            column = tuple(map(itemgetter(position), rows))
            if any(map(ne, column, column)):
                return True
        return False

    def key(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple([row[i] for i in self.key_positions])

    def full_row(self, row: tuple[Any, ...]) -> dict[str, Any]:
        """The whole row after writing ``row`` to a new key (absent columns hold their
        DEFAULT, or NULL)."""
        if self.covers_all_columns:
            return dict(zip(self.columns, row, strict=True))
        full = {c.name: c.default for c in self.table.columns}
        full.update(zip(self.columns, row, strict=True))
        return full
