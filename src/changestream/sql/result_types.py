"""Which columns of a query's result hold FLOAT64 values.

SQLite cannot store a NaN REAL, so a FLOAT64 NaN is kept as the text ``'NaN'``. A query
reading such a column would hand that text back; knowing the result column's type (inferred
by sqlglot from the table schemas) lets the reader return the float NaN the caller wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from sqlglot import exp, parse_one
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from changestream.ddl.schema import Table
from changestream.types import NAN, NAN_TEXT

# Only DOUBLE matters here; the other types are named so that expressions type-check.
_SQLGLOT_TYPES = {
    "BOOL": "BOOLEAN",
    "INT64": "BIGINT",
    "FLOAT64": "DOUBLE",
    "NUMERIC": "TEXT",
    "STRING": "TEXT",
    "BYTES": "BLOB",
    "DATE": "TEXT",
    "TIMESTAMP": "TEXT",
    "JSON": "TEXT",
    "ARRAY": "TEXT",
}


def float_result_columns(
    sqlite_sql: str, tables: Mapping[str, Table], width: int
) -> frozenset[int]:
    """Positions of the result columns of ``sqlite_sql`` (a SELECT in SQLite's dialect) whose
    type is FLOAT64; empty when the query's shape cannot be worked out (or is not ``width``
    columns wide), so nothing is converted on a guess."""
    schema = MappingSchema(
        {
            name: {c.name: _SQLGLOT_TYPES[c.type.code] for c in table.columns}
            for name, table in tables.items()
        },
        dialect="sqlite",
    )
    try:
        tree = qualify(
            parse_one(sqlite_sql, read="sqlite"),
            schema=schema,
            dialect="sqlite",
            validate_qualify_columns=False,
        )
        typed = annotate_types(tree, schema=schema, dialect="sqlite")
    except (SqlglotError, RecursionError):
        return frozenset()
    selects = typed.selects if isinstance(typed, exp.Query) else []
    if len(selects) != width:
        return frozenset()
    return frozenset(
        i for i, select in enumerate(selects) if select.type and select.type.is_type("double")
    )


def with_float_nans(
    rows: Iterable[list[object]], sqlite_sql: str, tables: Mapping[str, Table], width: int
) -> Iterator[list[object]]:
    """``rows`` with the text ``'NaN'`` in FLOAT64 result columns read back as a float NaN.
    The columns' types are worked out once, and only if a row holds that text at all."""
    floats: frozenset[int] | None = None
    for row in rows:
        if NAN_TEXT in row:
            if floats is None:
                floats = float_result_columns(sqlite_sql, tables, width)
            row = [NAN if i in floats and v == NAN_TEXT else v for i, v in enumerate(row)]
        yield row
