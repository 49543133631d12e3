"""Changing an existing table: columns added, dropped or altered, secondary indexes created and
dropped — each checked as Spanner checks it, then applied to the SQLite table in the DDL's own
transaction.

``ADD COLUMN`` and ``DROP COLUMN`` are SQLite's own ``ALTER TABLE`` (adding a column does not
rewrite the table); a change of ``NOT NULL`` rebuilds the table, since SQLite cannot alter a
constraint. Indexes are SQLite indexes (``NULL_FILTERED`` a partial index), so reads and SQL
use them; their definitions live in the table's catalog entry.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import replace

from changestream.ddl.schema import (
    AddColumn,
    AlterColumn,
    ChangeStream,
    Column,
    DropColumn,
    Index,
    RowDeletionPolicy,
    Table,
)
from changestream.errors import AlreadyExists, FailedPrecondition, NotFound
from changestream.store.keys import quote
from changestream.store.sqlite_layout import (
    create_table_sql,
    declared_type,
    default_sql,
    key_index_sql,
)

_MAX_COLUMNS = 1024
_UNINDEXABLE = frozenset({"ARRAY", "JSON"})
_SIZED = frozenset({"STRING", "BYTES"})


def add_column(
    conn: sqlite3.Connection, table: Table, statement: AddColumn, commit_ts: int
) -> Table | None:
    """The table with the column added at ``commit_ts`` (None: it exists and ``IF NOT
    EXISTS`` was given)."""
    column = statement.column
    existing = _named(table, column.name)
    if existing is not None:
        if statement.if_not_exists:
            return None
        raise AlreadyExists(f"table {table.name!r} already has a column {existing.name!r}")
    if len(table.columns) >= _MAX_COLUMNS:
        raise FailedPrecondition(f"table {table.name!r} has {_MAX_COLUMNS} columns already")
    column = replace(column, ordinal=len(table.columns) + 1, added_at=commit_ts)
    altered = replace(table, columns=(*table.columns, column))
    if column.not_null and column.default is None and column.default_function is None:
        if _has_rows(conn, table):
            raise FailedPrecondition(
                f"cannot add NOT NULL column {column.name!r} to table {table.name!r}, which "
                "has rows: give it a DEFAULT, or add it nullable"
            )
        _rebuild(conn, table, altered)
        return altered
    if column.default_function is not None:
        # SQLite's ADD COLUMN takes constant defaults only; the copy fills every row.
        _rebuild(conn, table, altered)
        return altered
    definition = f"{quote(column.name)} {declared_type(column.type)}"
    if column.not_null:
        definition += " NOT NULL"
    definition += default_sql(column)
    conn.execute(f"ALTER TABLE {quote(table.name)} ADD COLUMN {definition}")
    return altered


def drop_column(
    conn: sqlite3.Connection,
    table: Table,
    statement: DropColumn,
    streams: Mapping[str, ChangeStream],
) -> Table:
    """The table without the column; refused for key columns, and for columns an index or a
    change stream names explicitly (as Spanner refuses them)."""
    column = _column(table, statement.name)
    if column.name in table.primary_key:
        raise FailedPrecondition(
            f"cannot drop column {column.name!r}: it is part of the primary key of {table.name!r}"
        )
    _check_policy_column(table, column.name, "drop")
    using = [i.name for i in table.indexes if column.name in i.names()]
    if using:
        raise FailedPrecondition(
            f"cannot drop column {column.name!r} of {table.name!r}: index(es) "
            f"{', '.join(using)} use it; drop them first"
        )
    listing = [
        name
        for name, stream in streams.items()
        for target in stream.targets
        if target.table == table.name and column.name in (target.columns or ())
    ]
    if listing:
        raise FailedPrecondition(
            f"cannot drop column {column.name!r} of {table.name!r}: change stream(s) "
            f"{', '.join(listing)} track it by name; change them with ALTER CHANGE STREAM "
            "... SET FOR first"
        )
    conn.execute(f"ALTER TABLE {quote(table.name)} DROP COLUMN {quote(column.name)}")
    kept = [c for c in table.columns if c.name != column.name]
    return replace(table, columns=tuple(replace(c, ordinal=n) for n, c in enumerate(kept, start=1)))


def alter_column(conn: sqlite3.Connection, table: Table, statement: AlterColumn) -> Table:
    """The table with the column's new type or nullability: a STRING or BYTES length may
    change (a shorter one only when every value fits), NOT NULL may be dropped, or added
    when no value is NULL. Key columns cannot change."""
    old = _column(table, statement.column.name)
    new = replace(
        statement.column,
        name=old.name,
        ordinal=old.ordinal,
        allow_commit_timestamp=statement.column.allow_commit_timestamp
        or old.allow_commit_timestamp,
        default=old.default,
        added_at=old.added_at,
    )
    if old.name in table.primary_key:
        raise FailedPrecondition(
            f"cannot alter column {old.name!r}: it is part of the primary key of {table.name!r}"
        )
    if old.not_null != new.not_null or old.type != new.type:
        _check_policy_column(table, old.name, "alter")
    if (old.type.code, old.type.element) != (new.type.code, new.type.element):
        raise FailedPrecondition(
            f"cannot change column {old.name!r} of {table.name!r} from {old.type} to "
            f"{new.type}: only a STRING or BYTES length, and NOT NULL, can change"
        )
    target = quote(old.name)
    shorter = new.type.length is not None and (
        old.type.length is None or new.type.length < old.type.length
    )
    if new.type.code in _SIZED and shorter:
        _refuse_if(
            conn,
            table,
            f"length({target}) > {new.type.length}",
            f"values of {old.name!r} longer than {new.type.length}",
        )
    if new.not_null and not old.not_null:
        _refuse_if(conn, table, f"{target} IS NULL", f"NULL values in {old.name!r}")
    altered = replace(table, columns=tuple(new if c.name == old.name else c for c in table.columns))
    if new.not_null != old.not_null:
        _rebuild(conn, table, altered)
    return altered


def create_index(conn: sqlite3.Connection, table: Table, index: Index) -> Table:
    """The table with the index, built now (a UNIQUE one only when no two rows collide)."""
    for name, _ in index.columns:
        column = _column(table, name)
        if column.type.code in _UNINDEXABLE:
            raise FailedPrecondition(
                f"index {index.name!r}: column {name!r} of type {column.type} cannot be indexed"
            )
    for name in index.storing:
        _column(table, name)
        if name in table.primary_key or any(name == c for c, _ in index.columns):
            raise FailedPrecondition(
                f"index {index.name!r}: STORING column {name!r} is already in the index "
                "or the primary key"
            )
    keys = ", ".join(f"{quote(n)}{' DESC' if desc else ''}" for n, desc in index.columns)
    sql = f"CREATE {'UNIQUE ' if index.unique else ''}INDEX {quote(index.name)} "
    sql += f"ON {quote(table.name)} ({keys})"
    if index.null_filtered:
        sql += " WHERE " + " AND ".join(f"{quote(n)} IS NOT NULL" for n, _ in index.columns)
    try:
        conn.execute(sql)
    except sqlite3.IntegrityError as exc:
        raise FailedPrecondition(
            f"cannot create UNIQUE index {index.name!r}: rows of {table.name!r} share a value "
            f"of ({', '.join(n for n, _ in index.columns)})"
        ) from exc
    return replace(table, indexes=(*table.indexes, index))


def drop_index(conn: sqlite3.Connection, table: Table, name: str) -> Table:
    conn.execute(f"DROP INDEX {quote(name)}")
    return replace(table, indexes=tuple(i for i in table.indexes if i.name != name))


def check_row_deletion_policy(table: Table, policy: RowDeletionPolicy) -> None:
    """The policy's column must be a TIMESTAMP column of the table."""
    column = _column(table, policy.column)
    if column.type.code != "TIMESTAMP":
        raise FailedPrecondition(
            f"the row deletion policy of {table.name!r} needs a TIMESTAMP column; "
            f"{column.name!r} is {column.type}"
        )


def _check_policy_column(table: Table, column: str, action: str) -> None:
    policy = table.row_deletion_policy
    if policy is not None and policy.column == column:
        raise FailedPrecondition(
            f"cannot {action} column {column!r} of {table.name!r}: its row deletion policy "
            "uses it; drop or replace the policy first"
        )


def _named(table: Table, name: str) -> Column | None:
    """The column whose name matches ``name`` ignoring case (SQLite's and Spanner's rule)."""
    return next((c for c in table.columns if c.name.lower() == name.lower()), None)


def _column(table: Table, name: str) -> Column:
    column = table.column(name)
    if column is None:
        raise NotFound(
            f"table {table.name!r} has no column {name!r} "
            f"(columns: {', '.join(c.name for c in table.columns)})"
        )
    return column


def _has_rows(conn: sqlite3.Connection, table: Table) -> bool:
    return conn.execute(f"SELECT 1 FROM {quote(table.name)} LIMIT 1").fetchone() is not None


def _refuse_if(conn: sqlite3.Connection, table: Table, condition: str, what: str) -> None:
    found = conn.execute(f"SELECT 1 FROM {quote(table.name)} WHERE {condition} LIMIT 1")
    if found.fetchone() is not None:
        raise FailedPrecondition(f"cannot alter table {table.name!r}: it has {what}")


def _rebuild(conn: sqlite3.Connection, table: Table, altered: Table) -> None:
    """Copy the table into one created from ``altered`` (SQLite cannot change constraints)."""
    temporary = replace(altered, name=f"_cs_rebuild_{table.name}")
    kept = ", ".join(quote(c.name) for c in table.columns if altered.column(c.name) is not None)
    conn.execute(create_table_sql(temporary))
    try:
        conn.execute(
            f"INSERT INTO {quote(temporary.name)} ({kept}) SELECT {kept} FROM {quote(table.name)}"
        )
    except sqlite3.IntegrityError as exc:
        raise FailedPrecondition(f"cannot alter table {table.name!r}: {exc}") from exc
    conn.execute(f"DROP TABLE {quote(table.name)}")
    conn.execute(f"ALTER TABLE {quote(temporary.name)} RENAME TO {quote(table.name)}")
    key_index = key_index_sql(altered)
    if key_index is not None:
        conn.execute(key_index)
    for index in altered.indexes:
        create_index(conn, replace(altered, indexes=()), index)
