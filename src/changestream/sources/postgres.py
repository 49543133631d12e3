"""The PostgreSQL connector: an initial copy consistent with a new replication slot, then the
slot's ``pgoutput`` stream, one changestream transaction per source transaction.

The slot streams over a replication connection and is confirmed (flush LSN) only after the
transactions read from it have committed here, and transactions that end at or before the
recorded position are skipped, so a connector killed at any moment resumes without losing or
repeating a change. The copy goes in key order, a chunk per transaction here with the key it
reached; one cut short resumes after that key from a later snapshot (the slot's own snapshot
is gone with its session), applying the slot's changes up to that snapshot idempotently. A
lost connection to the server ends the run with :class:`~changestream.errors.Unavailable`.
"""

from __future__ import annotations

import functools
import logging
import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from changestream.errors import FailedPrecondition
from changestream.sources import pg_catalog, pg_columns
from changestream.sources.connector import Connector, key_page, key_pages
from changestream.sources.definition import MirroredTable, SourceDefinition, SourcePosition
from changestream.sources.mirror import RowChange, SourceTransaction
from changestream.sources.pg_catalog import MARKER_PREFIX
from changestream.sources.pg_rows import PgChange, RowShapes
from changestream.sources.pg_types import parser
from changestream.sources.pgoutput import (
    Begin,
    Commit,
    LogicalMessage,
    Relation,
    Truncate,
    decode,
    lsn_text,
    parse_lsn,
)
from changestream.sources.summary import Progress, RunSummary
from changestream.streams.origins import source_tag
from changestream.types import ColumnType

if TYPE_CHECKING:
    from changestream.embedded import EmbeddedDatabase

log = logging.getLogger("changestream.sources")


#: How long to wait for the next message before looking at the stop request (seconds).
WAIT_S = 0.5
#: How many times a table made anew is published before its copy gives up (it is made anew
#: again each time between its publication and the copy's snapshot).
_PUBLISH_ATTEMPTS = 10


class _MadeAnew(Exception):
    """The stream met a table made anew under a captured name: it stops, for the copy."""


class PostgresConnector(Connector):
    """Keeps the mirror tables of one PostgreSQL source up to date."""

    def __init__(
        self,
        db: EmbeddedDatabase,
        definition: SourceDefinition,
        position: SourcePosition | None,
        progress: Progress | None = None,
    ) -> None:
        super().__init__(db, definition, position, progress)
        self._shapes = RowShapes()
        #: Which column and table is which, as of where the connector has read.
        self._followed = pg_columns.Followed()
        #: The tables whose statements the transaction being read has had followed already
        #: (it is read again): its relation messages may be older than their mirrors.
        self._read_again: frozenset[str] = frozenset()

    def _server_error(self) -> type[Exception]:
        return pg_catalog.server_error()

    def _reason(self, error: BaseException) -> str:
        return pg_catalog.reason(error)

    def _run(self, stop: threading.Event, until_caught_up: bool) -> RunSummary:
        definition = self._definition
        with pg_catalog.session(definition.dsn) as conn:
            conn.autocommit = True
            pg_catalog.check_server(conn)
            pg_catalog.lock_source(conn, definition.slot)
            described = [
                pg_catalog.describe(conn, t, definition.mirror(t)) for t in definition.tables
            ]
            for table in described:
                self._mirror.add_table(table)
            pg_columns.ensure_trigger(conn)
            copied = self._position is not None and self._position.state == "streaming"
            # As of where streaming starts: the copy's snapshot (about now), or where the
            # last run left off (a source of an earlier version kept none: now).
            kept = self._mirror.column_identities() if copied else None
            self._followed = pg_columns.Followed.from_json(kept or {})
            for name in definition.tables:
                if name not in self._followed.columns:
                    self._followed.columns[name] = pg_columns.identities(conn, name)
                if name not in self._followed.oids:
                    self._followed.follow(name, pg_catalog.table_oid(conn, name))
            if not copied and not self._copy(conn, described, stop):
                return self.summary  # stopped mid-copy: the next run resumes it
            while True:
                self._copy_made_anew(conn)
                marker = pg_catalog.emit_marker(conn) if until_caught_up else None
                try:
                    self._follow(conn, stop, marker)
                except _MadeAnew:
                    continue
                return self.summary

    # -- the initial copy ----------------------------------------------------------------

    def _copy(self, conn: Any, described: list[MirroredTable], stop: threading.Event) -> bool:
        """Copy every table, in key order and in chunks, consistent with where the slot
        starts; False when ``stop`` cut it short.

        A new copy reads the snapshot a new slot exports. A copy cut short resumes after the
        last key it wrote, from a later snapshot; the slot's changes up to that snapshot may
        then be in the mirror already and are applied idempotently."""
        definition = self._definition
        position = self._position
        for table in described:
            self._mirror.reshape(table)
        resuming = (
            position is not None
            and position.lsn > 0
            and pg_catalog.slot_exists(conn, definition.slot)
        )
        if resuming:
            assert position is not None
            with pg_catalog.session(definition.dsn) as snap:
                snap.set_session(isolation_level="REPEATABLE READ", readonly=True)
                with snap.cursor() as cur:
                    cur.execute("SELECT pg_current_wal_lsn()::text")
                    (snapshot_lsn,) = cur.fetchone()
                overlap = max(
                    parse_lsn(snapshot_lsn), position.overlap[1] if position.overlap else 0
                )
                self._position = replace(position, overlap=(None, overlap))
                whole = self._copy_tables(snap, stop)
                snap.rollback()
        else:
            self._mirror.save_position(SourcePosition("copying", 0))
            self._mirror.clear()
            pg_catalog.drop_slot(conn, definition.slot)
            replication = pg_catalog.connect(definition.dsn, replication=True)
            try:
                with replication.cursor() as cur:
                    cur.execute(
                        f"CREATE_REPLICATION_SLOT {definition.slot} LOGICAL pgoutput "
                        "EXPORT_SNAPSHOT"
                    )
                    _, consistent_point, snapshot, _ = cur.fetchone()
                self._position = SourcePosition("copying", parse_lsn(consistent_point))
                self._mirror.save_position(self._position)
                # The snapshot lives as long as the replication session runs no other command.
                with pg_catalog.session(definition.dsn) as snap:
                    snap.set_session(isolation_level="REPEATABLE READ", readonly=True)
                    with snap.cursor() as cur:
                        cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
                    whole = self._copy_tables(snap, stop)
                    snap.rollback()
            finally:
                replication.close()
        if not whole:
            return False
        assert self._position is not None
        self._mirror.save_column_identities(self._followed.to_json())
        self._position = replace(self._position, state="streaming", progress={})
        self._mirror.save_position(self._position)
        self.summary.lsn = self._position.lsn
        return True

    def _copy_tables(self, snap: Any, stop: threading.Event) -> bool:
        return all(self._copy_table(snap, table, stop) for table in self._definition.tables)

    def _copy_table(self, snap: Any, table: str, stop: threading.Event) -> bool:
        mirrored = self._mirror.table(table)
        select, keys = _select(mirrored, mirrored.columns)
        at = [mirrored.columns.index(k) for k in mirrored.primary_key]
        with snap.cursor() as cur:
            return self._copy_chunks(
                table,
                mirrored.columns,
                lambda last: key_page(cur, select, keys, last),
                _row_parser(mirrored.types),
                lambda row: [row[i] for i in at],
                stop,
            )

    # -- following the slot --------------------------------------------------------------

    def _follow(self, conn: Any, stop: threading.Event, marker: bytes | None) -> None:
        """Apply the slot's transactions until ``stop`` or, given a ``marker``, until the
        transaction that emitted it (committed after everything the run must catch up with).

        The slot streams ``pgoutput`` messages over a replication connection, from the
        recorded position. A transaction is confirmed to the server (flush LSN) only once it
        has committed here, so the slot never gives up one this database does not hold; those
        that end at or before the recorded position are skipped."""
        definition = self._definition
        assert self._position is not None
        applied = self._position.lsn
        begin: Begin | None = None
        changes: list[RowChange] = []
        replication = pg_catalog.connect(definition.dsn, replication=True)
        try:
            with replication.cursor() as stream:
                stream.start_replication(
                    slot_name=definition.slot,
                    decode=False,
                    start_lsn=applied,
                    options={
                        "proto_version": "1",
                        "publication_names": definition.publication,
                        "messages": "true",
                    },
                )
                checked = time.monotonic()
                while not stop.is_set():
                    if time.monotonic() - checked >= WAIT_S:
                        # The session holding the source's lock must not be lost unseen, or
                        # a second connector could start.
                        pg_catalog.check_alive(conn)
                        checked = time.monotonic()
                    message = stream.read_message()
                    if message is None:
                        select.select([stream], [], [], WAIT_S)
                        continue
                    decoded = decode(bytes(message.payload))
                    if isinstance(decoded, Begin):
                        begin, changes = decoded, []
                        self._read_again = frozenset(
                            self._followed.rewind(begin.final_lsn)
                            if begin.final_lsn >= applied
                            else ()
                        )
                    elif isinstance(decoded, Commit):
                        assert begin is not None, "a commit without its begin"
                        if decoded.end_lsn <= applied:
                            self.summary.skipped_transactions += 1
                        else:
                            position = lsn_text(decoded.commit_lsn)
                            self._apply(
                                SourceTransaction(
                                    str(begin.xid),
                                    position,
                                    self._position.after(decoded.end_lsn),
                                    tuple(changes),
                                ),
                                self._position.in_overlap(decoded.end_lsn),
                            )
                            applied = decoded.end_lsn
                            stream.send_feedback(flush_lsn=applied)
                        if self._followed.applied(decoded.commit_lsn):
                            self._mirror.save_column_identities(self._followed.to_json())
                        begin, changes = None, []
                    elif isinstance(decoded, Relation):
                        if self._followed.follows(decoded.relation_id):
                            self._follow_shape(conn, decoded)
                    elif isinstance(decoded, LogicalMessage):
                        if decoded.prefix == MARKER_PREFIX and decoded.content == marker:
                            break
                        # Of a transaction not applied yet (one applied is read again when
                        # the slot resends it; what is kept is already past it).
                        if begin is not None and begin.final_lsn >= applied:
                            changes = self._follow_message(conn, decoded, begin, changes)
                    elif decoded is not None:
                        changes.extend(self._followed_changes(decoded))
                stream.send_feedback(flush_lsn=applied, force=True)
        finally:
            replication.close()

    def _followed_changes(self, change: PgChange) -> list[RowChange]:
        """The row changes of ``change`` of the tables the mirrors follow (not of a table
        since dropped, read again after its mirror was copied from the one made anew)."""
        if isinstance(change, Truncate):
            kept = tuple(r for r in change.relation_ids if self._followed.follows(r))
            return self._shapes.changes(Truncate(kept)) if kept else []
        if not self._followed.follows(change.relation_id):
            return []
        return self._shapes.changes(change)

    def _follow_message(
        self, conn: Any, message: LogicalMessage, begin: Begin, changes: list[RowChange]
    ) -> list[RowChange]:
        """A message of the source's event triggers, in a transaction not applied yet;
        returns the transaction's ``changes`` so far as they stand after it."""
        tag = source_tag(self._definition.name, str(begin.xid), lsn_text(begin.final_lsn))
        if message.prefix == pg_columns.DROPPED_PREFIX:
            return self._follow_drop(pg_columns.read_dropped(message.content), begin, tag, changes)
        if message.prefix != pg_columns.COLUMNS_PREFIX:
            return changes
        found = pg_columns.read_message(message.content)
        table = found.table
        # A table renamed (or moved to another schema) is no longer the one of its old name.
        if found.oid is not None:
            moved = {t: o for t, o in self._followed.oids.items() if o == found.oid and t != table}
            changes = self._follow_drop(moved, begin, tag, changes)
        if table not in self._definition.tables or self._followed.copied_by(table, begin.final_lsn):
            return changes
        if found.oid is not None and found.oid != self._followed.oids.get(table):
            # Another table has the name now (created, or renamed to it): it is copied with
            # the stream stopped (the server ends a stream that sends no feedback for a
            # minute), which then starts again where this transaction does.
            self._followed.follow(table, None)
            self._mirror.save_column_identities(self._followed.to_json())
            raise _MadeAnew
        return self._follow_columns(conn, found, begin, tag, changes)

    def _follow_drop(
        self, dropped: dict[str, int], begin: Begin, tag: str, changes: list[RowChange]
    ) -> list[RowChange]:
        """Source tables (by name, with their oids) dropped or renamed: the mirror of each one
        it follows loses its rows now, and the transaction's changes of it read so far are
        left out."""
        gone = [
            table
            for table, oid in dropped.items()
            if table in self._definition.tables
            and self._followed.oids.get(table) == oid
            and not self._followed.copied_by(table, begin.final_lsn)
        ]
        for table in gone:
            self._mirror.empty(table, tag)
            self._followed.follow(table, None)
        if gone:
            self._mirror.save_column_identities(self._followed.to_json())
            log.info("source %s: tables %s dropped or renamed", self._definition.name, gone)
        return [change for change in changes if change.table not in gone]

    def _copy_made_anew(self, conn: Any) -> None:
        """Before streaming: copy again each table that is not the one its mirror follows
        (made anew: while the stream ran, or while no connector ran) or that the publication
        lost (a drop does that), or whose copy again was cut short."""
        published = pg_catalog.published_tables(conn, self._definition.publication)
        for table in self._definition.tables:
            now = pg_catalog.table_oid(conn, table)
            if self._followed.oids.get(table) != now or table not in published:
                self._copy_anew(conn, table)

    def _copy_anew(self, conn: Any, table: str) -> None:
        """Source table ``table`` is another table than the mirror follows (created again, or
        renamed to the name): publish it, then make its mirror equal to it (emptied, then
        copied in key order, as changes tagged with the LSN of the copy) from a snapshot taken
        after the publication did, so every change after the snapshot comes in the stream.
        Changes up to there may be in both: applied idempotently. Trigger messages of the
        table up to the LSN before the snapshot are in the copy and left out."""
        definition = self._definition
        self._followed.follow(table, None)  # a copy cut short is made again
        self._followed.started.pop(table, None)
        self._mirror.save_column_identities(self._followed.to_json())
        with pg_catalog.session(definition.dsn) as snap:
            before = self._published_snapshot(conn, snap, table)
            tag = source_tag(definition.name, lsn_text(before), lsn_text(before))
            described = pg_catalog.describe(snap, table, definition.mirror(table))
            self._mirror.reshape(described)
            self._followed.columns[table] = pg_columns.identities(snap, table)
            oid = pg_catalog.table_oid(snap, table)
            with snap.cursor() as cur:
                self._mirror.replace_rows(
                    table, described.columns, _copy_pages(cur, described), tag
                )
            snap.rollback()
        after = pg_catalog.current_lsn(conn)
        assert self._position is not None
        overlap = max(after, self._position.overlap[1] if self._position.overlap else 0)
        self._position = replace(self._position, overlap=(None, overlap))
        self._mirror.save_position(self._position)
        self._followed.follow(table, oid)
        self._followed.copied[table] = before
        self._mirror.save_column_identities(self._followed.to_json())
        log.info("source %s: table %s copied again, as another table", definition.name, table)

    def _published_snapshot(self, conn: Any, snap: Any, table: str) -> int:
        """Publish ``table``, then open on ``snap`` a read-only snapshot holding it (a drop or
        rename of it waits until ``snap`` ends) in which it is published; returns the LSN
        read between the two. A table made anew between them is published in turn."""
        schema, _, name = table.partition(".")
        for _ in range(_PUBLISH_ATTEMPTS):
            pg_catalog.publish(conn, self._definition.publication, table)
            before = pg_catalog.current_lsn(conn)
            snap.set_session(isolation_level="REPEATABLE READ", readonly=True)
            with snap.cursor() as cur:
                # LOCK takes no snapshot: the query after it does, holding this table.
                cur.execute(f'LOCK TABLE "{schema}"."{name}" IN ACCESS SHARE MODE')
            if table in pg_catalog.published_tables(snap, self._definition.publication):
                return before
            snap.rollback()
        raise FailedPrecondition(
            f"source {self._definition.name}: table {table} was made anew "
            f"{_PUBLISH_ATTEMPTS} times while it was being published"
        )

    def _follow_columns(
        self,
        conn: Any,
        message: pg_columns.ColumnsMessage,
        begin: Begin,
        tag: str,
        changes: list[RowChange],
    ) -> list[RowChange]:
        """An ``ALTER TABLE`` of the source, with its table's column identities after it: a
        column whose number is gone was dropped (so a column added again under its name is
        a new one, which the next relation message brings), one whose number has another
        name was renamed (the mirror renames it, keeping its values), one whose type changed
        holds converted values (the mirror takes the type and the values the source holds).
        Returns the transaction's ``changes`` so far in the table's new shape."""
        table, now = message.table, message.columns
        before = self._followed.columns.get(table, {})
        by_number = {identity[0]: name for name, identity in now.items()}
        renamed: dict[str, str | None] = {
            name: by_number.get(identity[0]) for name, identity in before.items()
        }
        renamed = {old: new for old, new in renamed.items() if new != old}
        self._mirror.follow_statement(
            table,
            [old for old, new in renamed.items() if new is None],
            {old: new for old, new in renamed.items() if new is not None},
            tag,
        )
        retyped = [
            (now_name, now[now_name])
            for name, identity in before.items()
            if (now_name := renamed.get(name, name)) is not None
            and now[now_name][1:] != identity[1:]
        ]
        for name, (_, oid, _) in retyped:
            ctype = pg_catalog.type_of(conn, oid, name, table)
            mirrored = self._mirror.table(table)
            pages = functools.partial(_current_values, conn, mirrored, name, ctype)
            self._mirror.retype_column(table, name, ctype, pages, tag)
        self._followed.change(table, begin.final_lsn, now)
        self._mirror.save_column_identities(self._followed.to_json())
        reshaped = [
            _reshaped(change, renamed) if change.table == table else change for change in changes
        ]
        return _converted(conn, self._mirror.table(table), [name for name, _ in retyped], reshaped)

    def _follow_shape(self, conn: Any, relation: Relation) -> None:
        """Follow the columns the source now sends for a table: the mirror gains and loses
        the same ones.

        In a transaction read again whose statements were followed already, the mirror may
        be ahead of the message (a column renamed or dropped, or given another type, later
        in the transaction): the mirror then only gains columns (the statements, followed
        again, drop what they dropped), and the row changes are read by the message's own
        column types (the statements' values are converted when they are followed)."""
        source = f"{relation.schema}.{relation.table}"
        oids = {c.name: c.type_oid for c in relation.columns}
        names = [c.name for c in relation.columns]

        def type_of(name: str) -> ColumnType:
            return pg_catalog.type_of(conn, oids[name], name, source)

        def existing(name: str, ctype: ColumnType) -> Any:
            text = pg_catalog.existing_rows_value(conn, source, name)
            return None if text is None else parser(ctype)(text)

        read_again = source in self._read_again
        self._mirror.follow_columns(source, names, type_of, existing, drop=not read_again)
        mirrored = self._mirror.table(source)
        if read_again:
            mirrored = replace(mirrored, columns=tuple(names), types=tuple(map(type_of, names)))
        self._shapes.relation(relation, mirrored)


def _reshaped(change: RowChange, renamed: dict[str, str | None]) -> RowChange:
    """A row change read before an ``ALTER TABLE`` of its own transaction, with the columns
    the statement renamed under their new names and those it dropped (``None``) left out."""
    if not renamed or change.new is None:
        return change
    kept = [
        (renamed.get(column, column), value)
        for column, value in zip(change.columns, change.new, strict=True)
        if renamed.get(column, column) is not None
    ]
    return replace(
        change,
        columns=tuple(str(column) for column, _ in kept),
        new=tuple(value for _, value in kept),
    )


def _converted(
    conn: Any, mirrored: MirroredTable, columns: Sequence[str], changes: list[RowChange]
) -> list[RowChange]:
    """Row changes read before an ``ALTER TABLE`` of their own transaction that gave
    ``columns`` other types, with the values the server converted: each row's as the server
    holds it now (the mirror's columns have the new types, and the changes are applied at the
    commit, after the statement). A row gone since reads NULL there until the change that
    removed it. A key column keeps its mirrored type and its values."""
    key = mirrored.primary_key
    columns = [c for c in columns if c not in key and c in mirrored.columns]
    if not columns:
        return changes

    def key_of(change: RowChange) -> tuple[Any, ...] | None:
        """The key of a change that holds any of ``columns`` (None: one that holds none)."""
        if change.table != mirrored.source or change.new is None:
            return None
        if not any(c in change.columns for c in columns):
            return None
        return tuple(change.new[change.columns.index(k)] for k in key)

    keys = [key_of(change) for change in changes]
    wanted = list(dict.fromkeys(k for k in keys if k is not None))
    if not wanted:
        return changes
    values = _values_at(conn, mirrored, columns, wanted)
    out: list[RowChange] = []
    for change, found in zip(changes, keys, strict=True):
        if found is not None:
            assert change.new is not None
            held = values.get(found, (None,) * len(columns))
            new = list(change.new)
            for column, value in zip(columns, held, strict=True):
                if column in change.columns:
                    new[change.columns.index(column)] = value
            change = replace(change, new=tuple(new))
        out.append(change)
    return out


#: Keys looked up in one query by :func:`_values_at`.
_KEYS_PER_QUERY = 1000


def _values_at(
    conn: Any, mirrored: MirroredTable, columns: Sequence[str], keys: Sequence[tuple[Any, ...]]
) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """The values of ``columns`` (as the mirror's types of them) in the rows of source table
    ``mirrored.source`` with ``keys``, as the server holds them now, by key."""
    types = [mirrored.types[mirrored.columns.index(name)] for name in columns]
    select, key_columns, convert = _key_and_columns(mirrored, columns, types)
    width = len(mirrored.primary_key)
    found: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    with conn.cursor() as cur:
        for first in range(0, len(keys), _KEYS_PER_QUERY):
            cur.execute(
                f"{select} WHERE ({key_columns}) IN %s",
                (tuple(keys[first : first + _KEYS_PER_QUERY]),),
            )
            for row in cur.fetchall():
                values = convert(row)
                found[tuple(values[:width])] = tuple(values[width:])
    return found


def _select(mirrored: MirroredTable, columns: Sequence[str]) -> tuple[str, str]:
    """A query of ``columns`` of source table ``mirrored.source`` as text, and the key
    columns to order and page it by."""
    # Qualified: a bare name in ORDER BY would be the text output column of that name.
    keys = ", ".join(f'source."{k}"' for k in mirrored.primary_key)
    schema, _, name = mirrored.source.partition(".")
    values = ", ".join(f'source."{c}"::text' for c in columns)
    return f'SELECT {values} FROM "{schema}"."{name}" AS source', keys


def _row_parser(types: Sequence[ColumnType]) -> Callable[[Sequence[Any]], list[Any]]:
    """Turns a row of PostgreSQL text values of ``types`` into mirror values."""
    parsers = [parser(t) for t in types]
    return lambda row: [None if v is None else p(v) for p, v in zip(parsers, row, strict=True)]


def _copy_pages(cur: Any, mirrored: MirroredTable) -> Iterator[list[list[Any]]]:
    """Every row of source table ``mirrored.source``, as mirror values, in key order, a page
    at a time."""
    select, keys = _select(mirrored, mirrored.columns)
    convert = _row_parser(mirrored.types)
    at = [mirrored.columns.index(k) for k in mirrored.primary_key]
    for rows in key_pages(cur, select, keys, at):
        yield [convert(row) for row in rows]


def _current_values(
    conn: Any, mirrored: MirroredTable, column: str, ctype: ColumnType
) -> Iterator[list[list[Any]]]:
    """Every row's key values and ``column``'s value (as type ``ctype``) of source table
    ``mirrored.source`` as the server holds them now, as mirror values, in key order, a page
    at a time."""
    select, keys, convert = _key_and_columns(mirrored, [column], [ctype])
    with conn.cursor() as cur:
        for rows in key_pages(cur, select, keys, range(len(mirrored.primary_key))):
            yield [convert(row) for row in rows]


def _key_and_columns(
    mirrored: MirroredTable, columns: Sequence[str], types: Sequence[ColumnType]
) -> tuple[str, str, Callable[[Sequence[Any]], list[Any]]]:
    """A query of the key columns and ``columns`` of source table ``mirrored.source`` (see
    :func:`_select`), its key columns, and the parser of its rows into mirror values, the
    key's by its mirrored types and ``columns``' by ``types``."""
    key = mirrored.primary_key
    key_types = [mirrored.types[mirrored.columns.index(k)] for k in key]
    select, key_columns = _select(mirrored, (*key, *columns))
    return select, key_columns, _row_parser([*key_types, *types])
