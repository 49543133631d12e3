"""What each DDL statement does to a table, as the engine's own streams record it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from changestream.ddl.schema import (
    AddColumn,
    AlterColumn,
    CreateIndex,
    CreateTable,
    DropColumn,
    DropIndex,
    DropTable,
    RenameTable,
    Statement,
)
from changestream.store.catalog import Catalog
from changestream.store.changes import SchemaChange

_ACTIONS = {AddColumn: "ADD COLUMN", DropColumn: "DROP COLUMN", AlterColumn: "ALTER COLUMN"}


def schema_change(
    catalog: Catalog, statement: Statement, split_of: Callable[[str], int]
) -> SchemaChange | None:
    """The change ``statement`` is about to make (read from ``catalog`` before it applies),
    or None for statements about change streams and for no-ops (``IF [NOT] EXISTS``).
    ``split_of`` gives the split holding a table's first key."""
    if isinstance(statement, CreateTable):
        name = statement.table.name
        return SchemaChange(name, None, split_of(name), "CREATE_TABLE")
    if isinstance(statement, DropTable):
        return SchemaChange(statement.name, None, split_of(statement.name), "DROP_TABLE")
    if isinstance(statement, RenameTable):
        name = statement.name
        return SchemaChange(name, statement.new_name, split_of(name), "RENAME_TABLE")
    if isinstance(statement, AddColumn | DropColumn | AlterColumn):
        column = statement.column.name if not isinstance(statement, DropColumn) else statement.name
        table = catalog.tables.get(statement.table)
        exists = table is not None and any(c.name.lower() == column.lower() for c in table.columns)
        if isinstance(statement, AddColumn) and statement.if_not_exists and exists:
            return None
        detail: dict[str, Any] = {"action": _ACTIONS[type(statement)], "column": column}
        return SchemaChange(statement.table, None, split_of(statement.table), "ALTER_TABLE", detail)
    if isinstance(statement, CreateIndex):
        index = statement.index
        if statement.if_not_exists and catalog.index_table(index.name) is not None:
            return None
        detail = {"index": index.to_catalog()}
        return SchemaChange(index.table, None, split_of(index.table), "CREATE_INDEX", detail)
    if isinstance(statement, DropIndex):
        table = catalog.index_table(statement.name)
        if table is None:
            return None  # IF EXISTS, or an error as the statement applies
        (index,) = [i for i in table.indexes if i.name.lower() == statement.name.lower()]
        detail = {"index": index.to_catalog()}
        return SchemaChange(table.name, None, split_of(table.name), "DROP_INDEX", detail)
    return None
