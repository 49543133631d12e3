"""The mirror tables of a source: each source transaction applied as one changestream
transaction, together with the source position it reaches (so a restart neither loses nor
repeats a transaction)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from changestream.errors import FailedPrecondition
from changestream.sources.definition import POSITION_KIND, SourceDefinition, SourcePosition
from changestream.sources.pg_catalog import MirroredTable
from changestream.sources.pg_types import parser
from changestream.sources.pgoutput import UNCHANGED, Delete, Insert, Relation, Truncate, Update
from changestream.store.keys import KeyRange
from changestream.types import ColumnType

if TYPE_CHECKING:
    from changestream.embedded import EmbeddedDatabase
    from changestream.store.transaction import Transaction

Change = Insert | Update | Delete | Truncate


@dataclass(frozen=True, slots=True)
class SourceTransaction:
    """One committed source transaction: its id, where it ended, and its row changes."""

    xid: int
    commit_lsn: int
    end_lsn: int
    changes: tuple[Change, ...]


class Mirror:
    """Writes a source's changes into its mirror tables."""

    def __init__(self, db: EmbeddedDatabase, definition: SourceDefinition) -> None:
        self._db = db
        self._definition = definition
        self._tables: dict[str, MirroredTable] = {}
        self._relations: dict[int, Relation] = {}

    def add_table(self, table: MirroredTable) -> None:
        """Mirror ``table``: its mirror exists, and gets the columns the source table gained
        while no connector ran."""
        (mirror,) = [t for t in self._db.tables() if t.name == table.mirror]
        present = {c.name for c in mirror.columns}
        for name, ctype in zip(table.columns, table.types, strict=True):
            if name not in present:
                self._db.execute_ddl(f"ALTER TABLE {table.mirror} ADD COLUMN {name} {ctype}")
        self._tables[table.source] = table

    def table(self, source: str) -> MirroredTable:
        return self._tables[source]

    def relation(self, relation: Relation) -> MirroredTable:
        """Note the shape the source now sends for a table; the mirror's table as known."""
        self._relations[relation.relation_id] = relation
        return self._tables[f"{relation.schema}.{relation.table}"]

    def add_column(self, source: str, column: str, ctype: ColumnType) -> None:
        """Add a column the source table gained to its mirror (once)."""
        table = self._tables[source]
        if column in table.columns:
            return
        self._db.execute_ddl(f"ALTER TABLE {table.mirror} ADD COLUMN {column} {ctype}")
        self._tables[source] = replace(
            table, columns=(*table.columns, column), types=(*table.types, ctype)
        )

    def copy_rows(self, source: str, rows: Sequence[Sequence[str | None]]) -> None:
        """Rows of the initial copy (text forms, in the table's column order), written
        without change records: they are the mirror's starting state, not changes."""
        table = self._tables[source]
        parsers = [parser(t) for t in table.types]
        values = [
            [None if v is None else p(v) for p, v in zip(parsers, row, strict=True)] for row in rows
        ]
        with self._db.transaction(exclude_txn_from_change_streams=True) as tx:
            tx.insert(table.mirror, list(table.columns), values)

    def clear(self) -> None:
        """Empty every mirror table (a copy that must start again)."""
        with self._db.transaction(exclude_txn_from_change_streams=True) as tx:
            for table in self._tables.values():
                tx.delete(table.mirror, KeyRange(start_closed=(), end_closed=()))

    def save_position(self, position: SourcePosition) -> None:
        with self._db.transaction(exclude_txn_from_change_streams=True) as tx:
            tx.put_system_document(POSITION_KIND, self._definition.name, position.to_json())

    def apply(self, transaction: SourceTransaction) -> None:
        """Apply one source transaction and record its end as the source's position."""
        tag = f"source={self._definition.name},xid={transaction.xid}"
        with self._db.transaction(tag=tag) as tx:
            for change in transaction.changes:
                self._apply(tx, change)
            position = SourcePosition("streaming", transaction.end_lsn)
            tx.put_system_document(POSITION_KIND, self._definition.name, position.to_json())

    def _apply(self, tx: Transaction, change: Change) -> None:
        if isinstance(change, Truncate):
            for relation_id in change.relation_ids:
                table = self._table_of(relation_id)
                tx.delete(table.mirror, KeyRange(start_closed=(), end_closed=()))
            return
        relation = self._relations[change.relation_id]
        table = self._table_of(change.relation_id)
        names = [c.name for c in relation.columns]
        if isinstance(change, Insert):
            tx.insert(table.mirror, names, [self._values(table, names, change.new)])
        elif isinstance(change, Update):
            self._update(tx, table, names, change)
        else:
            tx.delete(table.mirror, [self._key(table, names, change.old)])

    def _update(
        self, tx: Transaction, table: MirroredTable, names: list[str], change: Update
    ) -> None:
        new_key = self._key(table, names, change.new)
        old_key = new_key if change.old is None else self._key(table, names, change.old)
        kept = [(n, v) for n, v in zip(names, change.new, strict=True) if v is not UNCHANGED]
        columns = [n for n, _ in kept]
        row = self._values(table, columns, tuple(v for _, v in kept))
        if old_key == new_key:
            tx.update(table.mirror, columns, [row])
            return
        # The key changed: the row moves. Values the message left out (unchanged TOAST) are
        # the old row's.
        missing = [n for n in table.columns if n not in columns]
        if missing:
            found = self._db.read(table.mirror, [old_key], missing)
            if not found:
                raise FailedPrecondition(
                    f"mirror {table.mirror} has no row {old_key} for an update that moves it"
                )
            columns, row = [*columns, *missing], [*row, *found[0]]
        tx.delete(table.mirror, [old_key])
        tx.insert(table.mirror, columns, [row])

    def _table_of(self, relation_id: int) -> MirroredTable:
        relation = self._relations[relation_id]
        return self._tables[f"{relation.schema}.{relation.table}"]

    @staticmethod
    def _values(table: MirroredTable, names: Sequence[str], texts: tuple[object, ...]) -> list[Any]:
        types = dict(zip(table.columns, table.types, strict=True))
        return [
            None if text is None else parser(types[name])(str(text))
            for name, text in zip(names, texts, strict=True)
        ]

    def _key(self, table: MirroredTable, names: list[str], texts: tuple[object, ...]) -> list[Any]:
        positions = [names.index(k) for k in table.primary_key]
        return self._values(table, table.primary_key, tuple(texts[i] for i in positions))
