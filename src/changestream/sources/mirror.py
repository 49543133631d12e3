"""The mirror tables of a source: each source transaction applied as one changestream
transaction, together with the source position it reaches (so a restart neither loses nor
repeats a transaction)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from changestream.errors import FailedPrecondition
from changestream.sources.definition import POSITION_KIND, SourceDefinition, SourcePosition
from changestream.sources.pg_catalog import MirroredTable
from changestream.sources.pg_types import parser
from changestream.sources.pgoutput import (
    UNCHANGED,
    Delete,
    Insert,
    Relation,
    Truncate,
    Update,
    lsn_text,
)
from changestream.store.keys import KeyRange
from changestream.streams.origins import source_tag
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
        self._shapes: dict[int, _Shape] = {}

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
        self._shapes.pop(relation.relation_id, None)
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
        tag = source_tag(
            self._definition.name, str(transaction.xid), lsn_text(transaction.commit_lsn)
        )
        with self._db.transaction(tag=tag) as tx:
            # Consecutive inserts into one table go in as one mutation.
            inserting: int | None = None
            rows: list[list[Any]] = []
            for change in transaction.changes:
                if isinstance(change, Insert) and change.relation_id == inserting:
                    rows.append(self._shape(inserting).row(change.new))
                    continue
                if inserting is not None:
                    self._insert(tx, inserting, rows)
                    inserting, rows = None, []
                if isinstance(change, Insert):
                    inserting = change.relation_id
                    rows.append(self._shape(inserting).row(change.new))
                else:
                    self._apply(tx, change)
            if inserting is not None:
                self._insert(tx, inserting, rows)
            position = SourcePosition("streaming", transaction.end_lsn)
            tx.put_system_document(POSITION_KIND, self._definition.name, position.to_json())

    def _insert(self, tx: Transaction, relation_id: int, rows: list[list[Any]]) -> None:
        shape = self._shape(relation_id)
        tx.insert(shape.table.mirror, shape.names, rows)

    def _apply(self, tx: Transaction, change: Update | Delete | Truncate) -> None:
        if isinstance(change, Truncate):
            for relation_id in change.relation_ids:
                table = self._shape(relation_id).table
                tx.delete(table.mirror, KeyRange(start_closed=(), end_closed=()))
            return
        shape = self._shape(change.relation_id)
        if isinstance(change, Update):
            self._update(tx, shape, change)
        else:
            tx.delete(shape.table.mirror, [shape.key(change.old)])

    def _update(self, tx: Transaction, shape: _Shape, change: Update) -> None:
        table = shape.table
        new_key = shape.key(change.new)
        old_key = new_key if change.old is None else shape.key(change.old)
        kept = [i for i, v in enumerate(change.new) if v is not UNCHANGED]
        columns = [shape.names[i] for i in kept]
        row = [shape.value(i, change.new[i]) for i in kept]
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

    def _shape(self, relation_id: int) -> _Shape:
        shape = self._shapes.get(relation_id)
        if shape is None:
            relation = self._relations[relation_id]
            table = self._tables[f"{relation.schema}.{relation.table}"]
            shape = self._shapes[relation_id] = _Shape(table, relation)
        return shape


class _Shape:
    """How the rows of one relation message become mirror rows: its column names, a parser
    per column and where the key columns are."""

    def __init__(self, table: MirroredTable, relation: Relation) -> None:
        self.table = table
        self.names = [c.name for c in relation.columns]
        types = dict(zip(table.columns, table.types, strict=True))
        self._parsers = [parser(types[name]) for name in self.names]
        self._key_positions = [self.names.index(k) for k in table.primary_key]

    def value(self, position: int, text: object) -> Any:
        return None if text is None else self._parsers[position](str(text))

    def row(self, texts: tuple[object, ...]) -> list[Any]:
        return [
            None if text is None else parse(cast(str, text))
            for parse, text in zip(self._parsers, texts, strict=True)
        ]

    def key(self, texts: tuple[object, ...]) -> list[Any]:
        return [self.value(i, texts[i]) for i in self._key_positions]
