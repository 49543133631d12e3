"""The MySQL / MariaDB connector: an initial copy from a consistent snapshot at a known binlog
position, then the row-based binlog from there, one changestream transaction per source
transaction.

The binlog is read with python-mysql-replication as a replica would (``server_id`` of the
definition). The position after each transaction (binlog file and offset) is written with
its changes, and reading resumes there, so a connector killed at any moment neither loses
nor repeats a change. The copy goes in key order, a chunk per transaction here with the key
it reached; one cut short resumes after that key from a later snapshot, applying the binlog's
changes up to that snapshot idempotently. A lost connection ends the run with
:class:`~changestream.errors.Unavailable`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from changestream.errors import NotFound
from changestream.sources import binlog_rows, mysql_catalog
from changestream.sources.connector import Connector, Row, key_page, key_pages
from changestream.sources.definition import MirroredTable, SourceDefinition, SourcePosition
from changestream.sources.mirror import RowChange, SourceTransaction
from changestream.sources.mysql_ddl import column_changes, emptied_tables, renamed_tables
from changestream.sources.mysql_types import (
    Convert,
    MySqlColumn,
    binlog_column,
    binlog_converter,
    column_type,
    converter,
)
from changestream.sources.row_parsers import RowParser, row_parser
from changestream.sources.summary import Progress, RunSummary
from changestream.streams.origins import source_tag
from changestream.types import ColumnType

if TYPE_CHECKING:
    from changestream.embedded import EmbeddedDatabase

log = logging.getLogger("changestream.sources")

#: How often an idle server sends a heartbeat, so a stop request is seen (seconds).
HEARTBEAT_S = 0.5


class MySqlConnector(Connector):
    """Keeps the mirror tables of one MySQL or MariaDB source up to date."""

    def __init__(
        self,
        db: EmbeddedDatabase,
        definition: SourceDefinition,
        position: SourcePosition | None,
        progress: Progress | None = None,
    ) -> None:
        super().__init__(db, definition, position, progress)
        self._columns: dict[str, dict[str, Convert]] = {}
        self._binlog_columns: dict[str, dict[str, Convert | None]] = {}
        self._parsers: dict[str, tuple[RowParser, RowParser]] = {}

    def _server_error(self) -> type[Exception]:
        return mysql_catalog.server_error()

    def _reason(self, error: BaseException) -> str:
        return mysql_catalog.reason(error)

    def _run(self, stop: threading.Event, until_caught_up: bool) -> RunSummary:
        definition = self._definition
        with mysql_catalog.session(definition.dsn) as conn:
            mysql_catalog.check_server(conn)
            mysql_catalog.lock_source(conn, definition.name)
            mysql_catalog.check_server_id(conn, definition.server_id, definition.name)
            with mysql_catalog.definitions_held(conn, definition.tables):
                described = [
                    (
                        mysql_catalog.describe(conn, t, definition.mirror(t)),
                        mysql_catalog.columns(conn, t),
                    )
                    for t in definition.tables
                ]
            copied = self._position is not None and self._position.state == "streaming"
            for table, columns in described:
                self._mirror.add_table(table)
                if copied:
                    # The shape the mirror follows: columns added or dropped while the
                    # connector was stopped are followed when the binlog's rows bring them.
                    mirrored = self._mirror.table(table.source).columns
                    columns = [c for c in columns if c.name in mirrored]
                self._learn(table.source, columns)
            if not copied and not self._copy([t for t, _ in described], stop):
                return self.summary  # stopped mid-copy: the next run resumes it
            target = mysql_catalog.binlog_position(conn) if until_caught_up else None
            self._follow(conn, stop, target)
        return self.summary

    def _learn(self, table: str, columns: list[MySqlColumn]) -> None:
        self._columns[table] = {c.name: converter(c) for c in columns}
        self._binlog_columns[table] = {c.name: binlog_converter(c) for c in columns}
        self._parsers.pop(table, None)

    def _row_parsers(self, table: str) -> tuple[RowParser, RowParser]:
        """Row and key parsers of ``table``'s binlog rows, compiled once per shape."""
        parsers = self._parsers.get(table)
        if parsers is None:
            columns = self._binlog_columns[table]
            convert = list(columns.values())
            key = [list(columns).index(k) for k in self._mirror.table(table).primary_key]
            parsers = self._parsers[table] = (
                row_parser(convert),
                row_parser([convert[i] for i in key], key),
            )
        return parsers

    # -- the initial copy ----------------------------------------------------------------

    def _copy(self, described: list[MirroredTable], stop: threading.Event) -> bool:
        """Copy every table, in key order and in chunks, from a consistent snapshot at a known
        binlog position; False when ``stop`` cut it short.

        A copy cut short resumes after the last key it wrote, from a later snapshot; the
        binlog's changes up to that snapshot may then be in the mirror already and are applied
        idempotently."""
        position = self._position
        for table in described:
            self._mirror.reshape(table)
        resuming = position is not None and position.log_file is not None
        if not resuming:
            self._mirror.save_position(SourcePosition("copying", 0))
            self._mirror.clear()
        with mysql_catalog.session(self._definition.dsn) as snap:
            log_file, offset = mysql_catalog.start_snapshot(snap)
            if position is not None and position.log_file is not None:
                overlap = max((log_file, offset), (position.overlap or ("", 0)))
                self._position = replace(position, overlap=overlap)
            else:
                self._position = SourcePosition("copying", offset, log_file)
                self._mirror.save_position(self._position)
            whole = all(self._copy_table(snap, t, stop) for t in self._definition.tables)
            snap.rollback()
        if not whole:
            return False
        self._position = replace(self._position, state="streaming", progress={})
        self._mirror.save_position(self._position)
        self.summary.lsn = self._position.lsn
        return True

    def _copy_table(self, snap: Any, table: str, stop: threading.Event) -> bool:
        names, select, keys, convert = self._select(table)
        at = [names.index(k) for k in self._mirror.table(table).primary_key]
        with snap.cursor() as cur:

            def fetch(last: Any) -> list[Row]:
                after = None if last is None else [_key_param(v) for v in last]
                return key_page(cur, select, keys, after)

            return self._copy_chunks(
                table, names, fetch, convert, lambda row: [_key_json(row[i]) for i in at], stop
            )

    def _select(self, table: str) -> tuple[tuple[str, ...], str, str, Callable[[Row], list[Any]]]:
        """The columns of ``table`` the connector knows, a query of them, its key columns
        (to order and page it by) and what turns one of its rows into mirror values."""
        converters = self._columns[table]
        names = tuple(converters)
        convert = [converters[n] for n in names]
        keys = ", ".join(f"`{k}`" for k in self._mirror.table(table).primary_key)
        database, _, name = table.partition(".")
        select = f"SELECT {', '.join(f'`{n}`' for n in names)} FROM `{database}`.`{name}`"
        return (
            names,
            select,
            keys,
            lambda row: [None if v is None else c(v) for c, v in zip(convert, row, strict=True)],
        )

    def _copy_anew(self, table: str, tag: str) -> None:
        """Another table has the captured name ``table`` now (renamed to it): its mirror is
        emptied and gets its rows, as changes tagged ``tag``, from a consistent snapshot; the
        binlog's events up to the snapshot's position, which the copy may hold, are applied
        idempotently."""
        definition = self._definition
        with mysql_catalog.session(definition.dsn) as snap:
            log_file, offset = mysql_catalog.start_snapshot(snap)
            described = mysql_catalog.describe(snap, table, definition.mirror(table))
            self._mirror.reshape(described)
            self._learn(table, mysql_catalog.columns(snap, table))
            names, select, keys, convert = self._select(table)
            at = [names.index(k) for k in described.primary_key]
            with snap.cursor() as cur:
                pages = (
                    [convert(row) for row in rows] for rows in key_pages(cur, select, keys, at)
                )
                self._mirror.replace_rows(table, names, pages, tag)
            snap.rollback()
        assert self._position is not None
        overlap = max((log_file, offset), self._position.overlap or ("", 0))
        self._position = replace(self._position, overlap=overlap)
        self._mirror.save_position(self._position)
        log.info("source %s: table %s copied again, as another table", definition.name, table)

    # -- following the binlog ------------------------------------------------------------

    def _follow(self, conn: Any, stop: threading.Event, target: tuple[str, int] | None) -> None:
        """Apply the binlog's transactions until ``stop`` or, given a ``target`` position,
        until everything before it is applied."""
        from pymysqlreplication import BinLogStreamReader  # type: ignore[import-untyped]
        from pymysqlreplication.event import (  # type: ignore[import-untyped]
            GtidEvent,
            HeartbeatLogEvent,
            MariadbGtidEvent,
            QueryEvent,
            RotateEvent,
            XidEvent,
        )
        from pymysqlreplication.row_event import (  # type: ignore[import-untyped]
            DeleteRowsEvent,
            UpdateRowsEvent,
            WriteRowsEvent,
        )

        definition = self._definition
        assert self._position is not None and self._position.log_file is not None
        if target is not None and target <= (self._position.log_file, self._position.lsn):
            return
        settings = mysql_catalog.connect_args(definition.dsn)
        reader = BinLogStreamReader(
            connection_settings=settings,
            server_id=definition.server_id,
            report_slave=mysql_catalog.replica_host(definition.name),
            resume_stream=True,
            log_file=self._position.log_file,
            log_pos=self._position.lsn,
            blocking=True,
            slave_heartbeat=HEARTBEAT_S,
            only_schemas=sorted({t.partition(".")[0] for t in definition.tables}),
            only_events=[
                WriteRowsEvent,
                UpdateRowsEvent,
                DeleteRowsEvent,
                XidEvent,
                QueryEvent,
                GtidEvent,
                MariadbGtidEvent,
                RotateEvent,
                HeartbeatLogEvent,
            ],
        )
        tx_id: str | None = None
        changes: list[RowChange] = []
        pinged = time.monotonic()
        try:
            while not stop.is_set():
                event = reader.fetchone()
                if time.monotonic() - pinged >= HEARTBEAT_S:
                    # The reader reconnects on its own; the session holding the source's lock
                    # must not be lost unseen, or a second connector could start.
                    conn.ping(reconnect=False)
                    pinged = time.monotonic()
                if isinstance(event, (GtidEvent, MariadbGtidEvent)):
                    tx_id, changes = str(event.gtid), []
                elif isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                    changes.extend(self._row_changes(conn, event))
                elif isinstance(event, XidEvent) or (
                    isinstance(event, QueryEvent) and _query(event) == "COMMIT"
                ):
                    self._commit(tx_id, reader.log_pos, reader.log_file, changes)
                    tx_id, changes = None, []
                elif isinstance(event, QueryEvent):
                    self._follow_statement(conn, event, tx_id, reader.log_file, reader.log_pos)
                if (
                    target is not None
                    and not changes
                    and (reader.log_file, reader.log_pos) >= target
                ):
                    return
        finally:
            reader.close()

    def _commit(
        self, tx_id: str | None, offset: int, log_file: str, changes: list[RowChange]
    ) -> None:
        assert self._position is not None
        position = f"{log_file}:{offset}"
        end = self._position.after(offset, log_file)
        transaction = SourceTransaction(tx_id or position, position, end, tuple(changes))
        self._apply(transaction, self._position.in_overlap(offset, log_file))

    def _follow_statement(
        self, conn: Any, event: Any, tx_id: str | None, log_file: str, offset: int
    ) -> None:
        """A statement of the binlog: the mirror follows the captured tables it empties and
        the columns it drops, renames or gives a type, there in the binlog's order (row events
        alone cannot tell a column dropped and added again, renamed or converted from one left
        as it was)."""
        schema = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema)
        query = event.query.decode() if isinstance(event.query, bytes) else str(event.query)
        position = f"{log_file}:{offset}"
        tag = source_tag(self._definition.name, tx_id or position, position)
        # A captured name another table was renamed to: that table's rows, copied now (a
        # crash before the statement's position is kept copies them again).
        renamed = renamed_tables(query, schema)
        made_anew = {new for _, new in renamed if new in self._columns}
        for table in made_anew:
            self._copy_anew(table, tag)
        # TRUNCATE is logged as a statement whatever the binlog's format, and DROP TABLE has
        # no row events either: their mirrors are emptied as one transaction, there, as are
        # those of tables renamed away from a captured name.
        emptied = [t for t in emptied_tables(query, schema) if t in self._columns]
        emptied += [old for old, _ in renamed if old in self._columns and old not in made_anew]
        if emptied:
            self._commit(tx_id, offset, log_file, [RowChange(t, "truncate") for t in emptied])
        changes = column_changes(query, schema)
        for table in dict.fromkeys(c.table for c in changes):
            if table not in self._columns:
                continue  # a table of the same database that the source does not capture
            # MySQL's column names are not case-sensitive.
            mirrored = {c.lower(): c for c in self._mirror.table(table).columns}
            mine = [c for c in changes if c.table == table]
            self._mirror.follow_statement(
                table,
                [mirrored.get(c.column.lower(), c.column) for c in mine if c.kind == "drop"],
                {
                    mirrored.get(c.column.lower(), c.column): c.new_name
                    for c in mine
                    if c.kind == "rename"
                },
                tag,
            )
            retyped = [c.column for c in mine if c.kind == "retype"]
            if retyped:
                self._follow_types(conn, table, retyped, tag)
            # The table's next row event brings its columns as they are now.
            self._columns[table] = {}

    def _follow_types(self, conn: Any, table: str, names: list[str], tag: str) -> None:
        """Columns the statement gave a type: the mirror's take the type the server's catalog
        gives them now, and the values the server holds now (it converted them in place),
        read while no other ALTER TABLE of the table can finish."""
        try:
            with mysql_catalog.definitions_held(conn, (table,)):
                described = {c.name.lower(): c for c in mysql_catalog.columns(conn, table)}
                key = [described[k.lower()] for k in self._mirror.table(table).primary_key]
                for name in names:
                    column = described.get(name.lower())
                    mirrored = {c.lower(): c for c in self._mirror.table(table).columns}
                    if column is None or name.lower() not in mirrored:
                        continue  # dropped since, or not mirrored
                    self._mirror.retype_column(
                        table,
                        mirrored[name.lower()],
                        column_type(column, table),
                        functools.partial(_current_values, conn, table, key, column),
                        tag,
                    )
        except NotFound:
            return  # the table was dropped since: its later statements say so

    def _row_changes(self, conn: Any, event: Any) -> list[RowChange]:
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

        source = f"{event.schema}.{event.table}"
        if source not in self._columns:
            return []  # a table of the same database that the source does not capture
        names = tuple(str(c.name) for c in event.columns)
        if names != tuple(self._columns[source]):
            self._follow_columns(conn, source, list(event.columns))
        row, key_of = self._row_parsers(source)

        updating = isinstance(event, UpdateRowsEvent)
        images = _images(event, names, 2 if updating else 1)
        if updating:
            return [
                RowChange(source, "update", names, row(after), key_of(before))
                for before, after in images
            ]
        if isinstance(event, DeleteRowsEvent):
            return [RowChange(source, "delete", old_key=key_of(old)) for (old,) in images]
        return [RowChange(source, "insert", names, row(new)) for (new,) in images]

    def _follow_columns(self, conn: Any, source: str, event_columns: list[Any]) -> None:
        """The source's rows now carry ``event_columns``: the mirror gains and loses the same
        columns. A column's type is the server catalog's while it has the column (it alone
        knows a MariaDB JSON column), else the binlog's."""
        try:
            described = {c.name: c for c in mysql_catalog.columns(conn, source)}
        except NotFound:
            described = {}
        columns = [described.get(str(c.name)) or _binlog_column(c) for c in event_columns]
        types = {c.name: column_type(c, source) for c in columns}
        by_name = {c.name: c for c in columns}

        def existing(name: str, _: ColumnType) -> Any:
            if name not in described:
                return None  # dropped again since: the server no longer says
            value = mysql_catalog.existing_rows_value(conn, source, name)
            return None if value is None else converter(by_name[name])(value)

        self._mirror.follow_columns(source, list(types), types.__getitem__, existing)
        self._learn(source, columns)


def _binlog_column(column: Any) -> MySqlColumn:
    return binlog_column(
        str(column.name),
        int(column.type),
        unsigned=bool(column.unsigned),
        charset=column.character_set_name,
        members=column.set_values or column.enum_values,
    )


def _query(event: Any) -> str:
    query = event.query
    return (query.decode() if isinstance(query, bytes) else str(query)).strip().upper()


def _key_json(value: Any) -> Any:
    """A key value of a SELECT as JSON for the copy's progress (the server compares the text
    forms with the column's type)."""
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    return value if isinstance(value, (int, str)) else str(value)


def _key_param(value: Any) -> Any:
    return bytes.fromhex(value["hex"]) if isinstance(value, dict) else value


def _images(event: Any, names: tuple[str, ...], count: int) -> list[tuple[tuple[Any, ...], ...]]:
    """Each row's images (before and after for an update) in column order: decoded in bulk,
    or by the library for what :mod:`binlog_rows` does not read."""
    decoded = binlog_rows.decode(event, count)
    if decoded is not None:
        return decoded
    fields = ("before_values", "after_values") if count == 2 else ("values",)
    return [tuple(tuple(r[f][n] for n in names) for f in fields) for r in event.rows]


def _current_values(
    conn: Any, table: str, key: list[MySqlColumn], column: MySqlColumn
) -> Iterator[list[list[Any]]]:
    """Every row's key values and ``column``'s value of ``table`` as the server holds them
    now, as mirror values, in key order, a page at a time."""
    database, _, name = table.partition(".")
    keys = ", ".join(f"`{k.name}`" for k in key)
    select = f"SELECT {keys}, `{column.name}` FROM `{database}`.`{name}`"
    convert = [converter(c) for c in (*key, column)]
    with conn.cursor() as cur:
        for rows in key_pages(cur, select, keys, range(len(key))):
            yield [
                [None if v is None else c(v) for c, v in zip(convert, row, strict=True)]
                for row in rows
            ]
