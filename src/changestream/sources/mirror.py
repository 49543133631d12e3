"""The mirror tables of a source: each source transaction applied as one changestream
transaction, together with the source position it reaches (so a restart neither loses nor
repeats a transaction).

Connectors hand the mirror :class:`RowChange` s whose values are already the mirror's Python
values; how a source encodes rows stays with its connector."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from changestream.ddl.literals import default_literal
from changestream.errors import FailedPrecondition
from changestream.sources.definition import (
    COLUMNS_KIND,
    POSITION_KIND,
    UNCHANGED,
    MirroredTable,
    SourceDefinition,
    SourcePosition,
)
from changestream.store.keys import KeyRange
from changestream.streams.origins import source_tag
from changestream.types import ColumnType

if TYPE_CHECKING:
    from changestream.embedded import EmbeddedDatabase
    from changestream.store.transaction import Transaction

log = logging.getLogger(__name__)

Operation = Literal["insert", "update", "delete", "truncate"]
#: Rows a column rename copies per transaction.
RENAME_PAGE_ROWS = 5_000


def _staging(column: str) -> str:
    """Where a renamed column waits while another takes its name (see follow_statement)."""
    return column if column.endswith(_STAGING) else column + _STAGING


_STAGING = "_cs_renaming"


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row change of source table ``table`` (``schema.table``).

    ``new`` holds the values of ``columns`` after an insert or update (``UNCHANGED`` where the
    source left one out); ``old_key`` the primary key before an update or delete. A truncate
    carries neither."""

    table: str
    operation: Operation
    columns: tuple[str, ...] = ()
    new: tuple[Any, ...] | None = None
    old_key: tuple[Any, ...] | None = None


@dataclass(frozen=True, slots=True)
class SourceTransaction:
    """One committed source transaction: its id and position as the tag shows them, the
    position after it, and its row changes."""

    tx_id: str
    position: str
    end: SourcePosition
    changes: tuple[RowChange, ...]


class Mirror:
    """Writes a source's changes into its mirror tables."""

    def __init__(self, db: EmbeddedDatabase, definition: SourceDefinition) -> None:
        self._db = db
        self._definition = definition
        self._tables: dict[str, MirroredTable] = {}

    def add_table(self, table: MirroredTable) -> None:
        """Mirror ``table`` into its mirror, with the columns the mirror has now (the source's
        changes tell which columns it gained or dropped since; :meth:`reshape` before a
        copy)."""
        (mirror,) = [t for t in self._db.tables() if t.name == table.mirror]
        self._tables[table.source] = replace(
            table,
            columns=tuple(c.name for c in mirror.columns),
            types=tuple(c.type for c in mirror.columns),
        )

    def reshape(self, table: MirroredTable) -> None:
        """Give the mirror of ``table`` exactly its columns as described now."""
        types = dict(zip(table.columns, table.types, strict=True))
        self.follow_columns(table.source, table.columns, types.__getitem__)

    def table(self, source: str) -> MirroredTable:
        return self._tables[source]

    def follow_columns(
        self,
        source: str,
        columns: Sequence[str],
        type_of: Callable[[str], ColumnType],
        existing: Callable[[str, ColumnType], Any] | None = None,
        drop: bool = True,
    ) -> None:
        """Make the mirror of ``source`` have exactly ``columns``, the ones the source's
        changes now carry: add the new ones (``type_of`` tells their type), drop the ones the
        source dropped (unless not ``drop``). ``existing(name, type)`` tells the value the
        source's existing rows read in an added column (its ``ADD COLUMN ... DEFAULT``,
        which the source applies without sending a change per row); the mirror's rows then
        read it too."""
        table = self._tables[source]
        for name in columns:
            if name not in table.columns:
                ctype = type_of(name)
                value = None if existing is None else existing(name, ctype)
                self._add_column(source, name, ctype, value)
        if not drop:
            return
        for name in [c for c in self._tables[source].columns if c not in columns]:
            self.drop_column(source, name)

    def drop_column(self, source: str, name: str) -> None:
        """The source dropped column ``name`` of ``source``: so does the mirror (nothing when
        it has no such column)."""
        table = self._tables[source]
        if name not in table.columns:
            return
        self._check_not_key(table, name, "no longer has")
        self._db.execute_ddl(f"ALTER TABLE {table.mirror} DROP COLUMN {name}")
        kept = [i for i, c in enumerate(table.columns) if c != name]
        self._tables[source] = replace(
            table,
            columns=tuple(table.columns[i] for i in kept),
            types=tuple(table.types[i] for i in kept),
        )

    def rename_column(self, source: str, old: str, new: str, tag: str) -> None:
        """The source renamed column ``old`` of ``source`` to ``new``, which keeps every row's
        value without a row change: the mirror gains ``new`` with the values of ``old``
        (updates tagged ``tag``, a page of rows at a time), then drops ``old``. Nothing when
        the mirror has no ``old`` (done already: after a crash it is done again from the
        start, until ``old`` is gone)."""
        table = self._tables[source]
        if old not in table.columns:
            return
        self._check_not_key(table, old, "renamed")
        if new not in table.columns:
            self._add_column(source, new, table.types[table.columns.index(old)])
            table = self._tables[source]
        key = list(table.primary_key)
        pages = KeyRange(start_closed=(), end_closed=())
        while True:
            rows = self._db.read_snapshot(table.mirror, pages, [*key, old], RENAME_PAGE_ROWS).rows
            values = [list(row) for row in rows if row[-1] is not None]
            if values:
                with self._db.transaction(tag=tag) as tx:
                    tx.update(table.mirror, [*key, new], values)
            if len(rows) < RENAME_PAGE_ROWS:
                break
            pages = KeyRange(start_open=tuple(rows[-1][: len(key)]), end_closed=())
        self.drop_column(source, old)

    def retype_column(
        self,
        source: str,
        name: str,
        ctype: ColumnType,
        pages: Callable[[], Iterable[Sequence[Sequence[Any]]]],
        tag: str,
    ) -> None:
        """The source gave column ``name`` of ``source`` another type, converting every row's
        value without a row change. The mirror's column gets the mirrored type ``ctype``
        (dropped and added again when it is another), then each row the mirror has takes the
        value the source holds now, where it differs (updates tagged ``tag``). ``pages()``
        reads the source's rows, a page at a time: the key's values, then the column's.
        Rows the mirror does not have yet come with their own changes; the changes after the
        statement that the mirror has yet to apply bring their rows to their values again.
        Read again after a crash, it finishes what it left."""
        table = self._tables[source]
        if name not in table.columns:
            return
        if name in table.primary_key:
            # A key keeps its values when its mirrored type stays (INT to BIGINT, say).
            if table.types[table.columns.index(name)] != ctype:
                self._check_not_key(table, name, "changed the type of")
            return
        if table.types[table.columns.index(name)] != ctype:
            self.drop_column(source, name)
            self._add_column(source, name, ctype)
            table = self._tables[source]
        key = list(table.primary_key)
        width = len(key)
        for page in pages():
            keys = [list(row[:width]) for row in page]
            held = {
                tuple(r[:width]): r[width] for r in self._db.read(table.mirror, keys, [*key, name])
            }
            changed = [
                list(row)
                for row in page
                if tuple(row[:width]) in held and held[tuple(row[:width])] != row[width]
            ]
            if changed:
                with self._db.transaction(tag=tag) as tx:
                    tx.update(table.mirror, [*key, name], changed)

    def follow_statement(
        self, source: str, dropped: Sequence[str], renamed: Mapping[str, str], tag: str
    ) -> None:
        """The columns one statement of the source dropped and renamed (old name: new name),
        all at once as the source applies them: the drops first, then each renamed column
        takes its new name even when that was another column's (a swap, or a chain, goes
        through staging names; a statement read again after a crash between the two steps
        carries on from the staging names)."""
        for name in dropped:
            self.drop_column(source, name)
        columns = self._tables[source].columns
        moves = {
            (old if old in columns else _staging(old)): new
            for old, new in renamed.items()
            if old != new and (old in columns or _staging(old) in columns)
        }
        if set(moves.values()) & set(moves):
            for old in list(moves):
                if old != _staging(old) and _staging(old) not in columns:
                    self.rename_column(source, old, _staging(old), tag)
            moves = {_staging(old): new for old, new in moves.items()}
        for old, new in moves.items():
            self.rename_column(source, old, new, tag)

    @staticmethod
    def _check_not_key(table: MirroredTable, name: str, what: str) -> None:
        if name in table.primary_key:
            raise FailedPrecondition(
                f"source table {table.source} {what} key column {name}; the mirror "
                f"{table.mirror} cannot follow a changed primary key"
            )

    def _add_column(self, source: str, name: str, ctype: ColumnType, value: Any = None) -> None:
        table = self._tables[source]
        if name in table.columns:
            return
        default = ""
        if value is not None:
            literal = default_literal(value, ctype)
            if literal is None:
                log.warning(
                    "source table %s: the rows it had when column %s was added read %r, which "
                    "the mirror %s cannot take as a default; they read NULL there until they "
                    "change",
                    source,
                    name,
                    value,
                    table.mirror,
                )
            else:
                default = f" DEFAULT ({literal})"
        self._db.execute_ddl(f"ALTER TABLE {table.mirror} ADD COLUMN {name} {ctype}{default}")
        self._tables[source] = replace(
            table, columns=(*table.columns, name), types=(*table.types, ctype)
        )

    def copy_rows(
        self,
        source: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        position: SourcePosition,
    ) -> None:
        """A chunk of the initial copy, written without change records (they are the
        mirror's starting state, not changes) together with the copy's ``position``."""
        table = self._tables[source]
        with self._db.transaction(exclude_txn_from_change_streams=True) as tx:
            tx.insert(table.mirror, list(columns), [list(r) for r in rows])
            tx.put_system_document(POSITION_KIND, self._definition.name, position.to_json())

    def empty(self, source: str, tag: str) -> None:
        """Source table ``source`` is gone (dropped, or renamed away): its mirror's rows are
        deleted in one transaction tagged ``tag`` (the deletions reach the change stream)."""
        with self._db.transaction(tag=tag) as tx:
            tx.delete(self._tables[source].mirror, KeyRange(start_closed=(), end_closed=()))

    def replace_rows(
        self,
        source: str,
        columns: Sequence[str],
        pages: Iterable[Sequence[Sequence[Any]]],
        tag: str,
    ) -> None:
        """Source table ``source`` is a table made anew: its mirror is emptied, then gets the
        rows of ``pages``, a transaction tagged ``tag`` a page (changes, unlike the initial
        copy's rows: whatever follows the stream lost the old rows and gains these)."""
        self.empty(source, tag)
        mirror = self._tables[source].mirror
        for rows in pages:
            with self._db.transaction(tag=tag) as tx:
                tx.insert(mirror, list(columns), [list(r) for r in rows])

    def clear(self) -> None:
        """Empty every mirror table (a copy that must start again)."""
        with self._db.transaction(exclude_txn_from_change_streams=True) as tx:
            for table in self._tables.values():
                tx.delete(table.mirror, KeyRange(start_closed=(), end_closed=()))

    def column_identities(self) -> dict[str, Any] | None:
        """What the connector kept of which source column and table is which, as of the
        source's position (see :meth:`save_column_identities`), or None when it kept
        nothing."""
        document = self._db.system_documents(COLUMNS_KIND).get(self._definition.name)
        return None if document is None else dict(document.body)

    def save_column_identities(self, body: Mapping[str, Any]) -> None:
        """Keep which source column and table is which (PostgreSQL: each column's number and
        type, each table's oid; see ``pg_columns.Followed``): saved after the mirror followed
        the statement that changed them, so one read again after a crash changes nothing
        twice."""
        with self._db.transaction(exclude_txn_from_change_streams=True) as tx:
            tx.put_system_document(COLUMNS_KIND, self._definition.name, body)

    def save_position(self, position: SourcePosition) -> None:
        with self._db.transaction(exclude_txn_from_change_streams=True) as tx:
            tx.put_system_document(POSITION_KIND, self._definition.name, position.to_json())

    def apply(self, transaction: SourceTransaction, idempotent: bool = False) -> None:
        """Apply one source transaction and record its end as the source's position.
        ``idempotent`` when its changes may already be in the mirror (a resumed copy read them
        from a later snapshot): inserts and whole-row updates become upserts."""
        if not transaction.changes:
            self.save_position(transaction.end)
            return
        tag = source_tag(self._definition.name, transaction.tx_id, transaction.position)
        with self._db.transaction(tag=tag) as tx:
            insert = tx.insert_or_update if idempotent else tx.insert
            # Rows this transaction writes (idempotent only): there, whatever the mirror held.
            touched: set[tuple[str, tuple[Any, ...]]] = set()
            # Consecutive inserts into one table go in as one mutation.
            inserting: RowChange | None = None
            rows: list[list[Any]] = []
            for change in transaction.changes:
                assert change.operation != "insert" or change.new is not None
                if idempotent and change.operation == "insert":
                    touched.add((change.table, self._key(change)))
                if (
                    inserting is not None
                    and change.operation == "insert"
                    and change.table == inserting.table
                    and change.columns == inserting.columns
                ):
                    rows.append(list(change.new or ()))
                    continue
                if inserting is not None:
                    insert(self._tables[inserting.table].mirror, list(inserting.columns), rows)
                    inserting, rows = None, []
                if change.operation == "insert":
                    inserting, rows = change, [list(change.new or ())]
                elif self._apply(tx, change, idempotent, touched) and idempotent:
                    touched.add((change.table, self._key(change)))
            if inserting is not None:
                insert(self._tables[inserting.table].mirror, list(inserting.columns), rows)
            name = self._definition.name
            tx.put_system_document(POSITION_KIND, name, transaction.end.to_json())

    def _key(self, change: RowChange) -> tuple[Any, ...]:
        """The key of the row a change writes."""
        assert change.new is not None
        key = self._tables[change.table].primary_key
        return tuple(change.new[change.columns.index(k)] for k in key)

    def _apply(
        self,
        tx: Transaction,
        change: RowChange,
        idempotent: bool,
        touched: set[tuple[str, tuple[Any, ...]]],
    ) -> bool:
        """Apply a truncate, delete or update; whether it wrote a row (an update)."""
        table = self._tables[change.table]
        if change.operation == "truncate":
            tx.delete(table.mirror, KeyRange(start_closed=(), end_closed=()))
            return False
        if change.operation == "delete":
            assert change.old_key is not None
            tx.delete(table.mirror, [list(change.old_key)])
            return False
        return self._update(tx, table, change, idempotent, touched)

    def _update(
        self,
        tx: Transaction,
        table: MirroredTable,
        change: RowChange,
        idempotent: bool,
        touched: set[tuple[str, tuple[Any, ...]]],
    ) -> bool:
        assert change.new is not None
        values = dict(zip(change.columns, change.new, strict=True))
        new_key = [values[k] for k in table.primary_key]
        old_key = new_key if change.old_key is None else list(change.old_key)
        columns = [c for c, v in values.items() if v is not UNCHANGED]
        row = [values[c] for c in columns]
        whole = len(columns) == len(values)
        if (
            idempotent
            and not whole
            and (change.table, tuple(old_key)) not in touched
            and not self._db.read(table.mirror, [old_key], columns[:1])
        ):
            # A row the resumed copy did not find (deleted by a later change being replayed
            # too): a partial update has nothing to apply to.
            return False
        if old_key == new_key:
            (tx.insert_or_update if idempotent and whole else tx.update)(
                table.mirror, columns, [row]
            )
            return True
        if idempotent and whole:
            tx.delete(table.mirror, [old_key])
            tx.insert_or_update(table.mirror, columns, [row])
            return True
        # The key changed: the row moves. Values the source left out are the old row's.
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
        return True
