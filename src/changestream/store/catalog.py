"""The schema catalog: user tables and change streams, validated and kept in system tables."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field, replace

import orjson

from changestream.ddl.schema import (
    AddColumn,
    AlterChangeStream,
    AlterColumn,
    ChangeStream,
    CreateChangeStream,
    CreateIndex,
    CreateTable,
    DropChangeStream,
    DropColumn,
    DropIndex,
    DropTable,
    RenameTable,
    SetRowDeletionPolicy,
    Statement,
    StreamOptions,
    StreamTarget,
    Table,
)
from changestream.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from changestream.store import alter
from changestream.store.keys import quote
from changestream.store.sqlite_layout import SYSTEM_PREFIX, create_table_sql, key_index_sql


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """A change stream as the engine knows it: its definition, id, and creation time."""

    stream_id: int
    definition: ChangeStream
    created_ts: int


@dataclass(slots=True)
class Catalog:
    """Tables and change streams by name, loaded from (and written to) the system tables."""

    tables: dict[str, Table] = field(default_factory=dict)
    streams: dict[str, StreamEntry] = field(default_factory=dict)

    @staticmethod
    def load(conn: sqlite3.Connection) -> Catalog:
        catalog = Catalog()
        for name, definition in conn.execute("SELECT name, definition FROM _cs_tables"):
            catalog.tables[name] = Table.from_catalog(orjson.loads(definition))
        rows = conn.execute("SELECT stream_id, name, definition, created_ts FROM _cs_streams")
        for stream_id, name, definition, created_ts in rows:
            stream = ChangeStream.from_catalog(orjson.loads(definition))
            catalog.streams[name] = StreamEntry(stream_id, stream, created_ts)
        return catalog

    def table(self, name: str) -> Table:
        """The table called ``name``, or NotFound listing the tables there are."""
        table = self.tables.get(name)
        if table is None:
            known = ", ".join(sorted(self.tables)) or "none"
            raise NotFound(f"table {name!r} does not exist (tables: {known})")
        return table

    def stream(self, name: str) -> StreamEntry:
        """The change stream called ``name``, or NotFound listing the streams there are."""
        entry = self.streams.get(name)
        if entry is None:
            known = ", ".join(sorted(self.user_streams())) or "none"
            raise NotFound(f"change stream {name!r} does not exist (change streams: {known})")
        return entry

    def user_streams(self) -> dict[str, StreamEntry]:
        """The change streams users created: the engine's own (``_cs_`` names) are left out."""
        return {n: e for n, e in self.streams.items() if not n.startswith(SYSTEM_PREFIX)}

    def streams_tracking(self, table: str) -> list[StreamEntry]:
        """The change streams that track ``table`` at all."""
        return [e for e in self.streams.values() if e.definition.target_for(table) is not None]

    def apply(self, conn: sqlite3.Connection, statement: Statement, commit_ts: int) -> None:
        """Validate one DDL statement against the catalog and apply it in the open transaction."""
        if isinstance(statement, CreateTable):
            self._create_table(conn, replace(statement.table, created_at=commit_ts))
        elif isinstance(statement, DropTable):
            self._drop_table(conn, statement.name)
        elif isinstance(statement, RenameTable):
            self._rename_table(conn, statement.name, statement.new_name)
        elif isinstance(statement, AddColumn | DropColumn | AlterColumn):
            self._alter_table(conn, statement, commit_ts)
        elif isinstance(statement, CreateIndex):
            self._create_index(conn, statement)
        elif isinstance(statement, DropIndex):
            self._drop_index(conn, statement)
        elif isinstance(statement, SetRowDeletionPolicy):
            self._set_row_deletion_policy(conn, statement)
        elif isinstance(statement, CreateChangeStream):
            self._create_stream(conn, statement, commit_ts)
        elif isinstance(statement, AlterChangeStream):
            self._alter_stream(conn, statement)
        else:
            self._drop_stream(conn, statement)

    def _create_table(self, conn: sqlite3.Connection, table: Table) -> None:
        if table.name in self.tables:
            raise AlreadyExists(f"table {table.name!r} already exists")
        if table.row_deletion_policy is not None:
            alter.check_row_deletion_policy(table, table.row_deletion_policy)
        conn.execute(create_table_sql(table))
        key_index = key_index_sql(table)
        if key_index is not None:
            conn.execute(key_index)
        conn.execute(
            "INSERT INTO _cs_tables (name, definition) VALUES (?, ?)",
            (table.name, orjson.dumps(table.to_catalog())),
        )
        self.tables[table.name] = table

    def _save_table(self, conn: sqlite3.Connection, table: Table) -> None:
        conn.execute(
            "UPDATE _cs_tables SET definition = ? WHERE name = ?",
            (orjson.dumps(table.to_catalog()), table.name),
        )
        self.tables[table.name] = table

    def _alter_table(
        self,
        conn: sqlite3.Connection,
        statement: AddColumn | DropColumn | AlterColumn,
        commit_ts: int,
    ) -> None:
        table = self.table(statement.table)
        altered: Table | None
        if isinstance(statement, AddColumn):
            altered = alter.add_column(conn, table, statement, commit_ts)
        elif isinstance(statement, DropColumn):
            streams = {name: entry.definition for name, entry in self.streams.items()}
            altered = alter.drop_column(conn, table, statement, streams)
        else:
            altered = alter.alter_column(conn, table, statement)
        if altered is not None:
            self._save_table(conn, altered)

    def _set_row_deletion_policy(
        self, conn: sqlite3.Connection, statement: SetRowDeletionPolicy
    ) -> None:
        table = self.table(statement.table)
        current = table.row_deletion_policy
        if statement.action == "ADD" and current is not None:
            raise AlreadyExists(f"table {table.name!r} already has a row deletion policy")
        if statement.action != "ADD" and current is None:
            raise NotFound(f"table {table.name!r} has no row deletion policy")
        if statement.policy is not None:
            alter.check_row_deletion_policy(table, statement.policy)
        self._save_table(conn, replace(table, row_deletion_policy=statement.policy))

    def index_table(self, name: str) -> Table | None:
        """The table holding index ``name`` (names are matched ignoring case), or None."""
        return next(
            (t for t in self.tables.values() for i in t.indexes if i.name.lower() == name.lower()),
            None,
        )

    def _create_index(self, conn: sqlite3.Connection, statement: CreateIndex) -> None:
        index = statement.index
        table = self.table(index.table)
        if self.index_table(index.name) is not None:
            if statement.if_not_exists:
                return
            raise AlreadyExists(f"index {index.name!r} already exists")
        if any(t.lower() == index.name.lower() for t in self.tables):
            raise AlreadyExists(f"index {index.name!r} would have a table's name")
        self._save_table(conn, alter.create_index(conn, table, index))

    def _drop_index(self, conn: sqlite3.Connection, statement: DropIndex) -> None:
        table = self.index_table(statement.name)
        if table is None:
            if statement.if_exists:
                return
            known = ", ".join(sorted(i.name for t in self.tables.values() for i in t.indexes))
            raise NotFound(f"index {statement.name!r} does not exist (indexes: {known or 'none'})")
        name = next(i.name for i in table.indexes if i.name.lower() == statement.name.lower())
        self._save_table(conn, alter.drop_index(conn, table, name))

    def _check_untracked(self, name: str, action: str) -> None:
        """Tables a stream names explicitly cannot go away under it (FOR ALL streams can)."""
        watchers = [
            e.definition.name
            for e in self.streams.values()
            if any(t.table == name for t in e.definition.targets)
        ]
        if watchers:
            raise FailedPrecondition(
                f"cannot {action} table {name!r}: it is tracked by change stream(s) "
                f"{', '.join(watchers)}; remove it with ALTER CHANGE STREAM ... SET FOR first"
            )

    def _drop_table(self, conn: sqlite3.Connection, name: str) -> None:
        self.table(name)
        self._check_untracked(name, "drop")
        conn.execute(f"DROP TABLE {quote(name)}")
        conn.execute("DELETE FROM _cs_tables WHERE name = ?", (name,))
        del self.tables[name]

    def _rename_table(self, conn: sqlite3.Connection, name: str, new_name: str) -> None:
        table = self.table(name)
        # SQLite table names are case-insensitive, so "t" would collide with "T".
        taken = [t for t in self.tables if t.lower() == new_name.lower() and t != name]
        if new_name == name:
            taken = [name]
        if taken:
            raise AlreadyExists(
                f"cannot rename table {name!r} to {new_name!r}: {taken[0]!r} exists"
            )
        self._check_untracked(name, "rename")
        try:
            conn.execute(f"ALTER TABLE {quote(name)} RENAME TO {quote(new_name)}")
        except sqlite3.OperationalError as exc:
            raise InvalidArgument(f"cannot rename table {name!r} to {new_name!r}: {exc}") from exc
        key_index = key_index_sql(replace(table, name=new_name))
        if key_index is not None:  # its name follows the table's, so a new table may take it
            conn.execute(f"DROP INDEX IF EXISTS {quote(SYSTEM_PREFIX + 'key_' + name)}")
            conn.execute(key_index)
        renamed = replace(
            table,
            name=new_name,
            indexes=tuple(replace(i, table=new_name) for i in table.indexes),
        )
        conn.execute(
            "UPDATE _cs_tables SET name = ?, definition = ? WHERE name = ?",
            (new_name, orjson.dumps(renamed.to_catalog()), name),
        )
        del self.tables[name]
        self.tables[new_name] = renamed

    def _check_targets(self, stream: str, targets: tuple[StreamTarget, ...]) -> None:
        for target in targets:
            table = self.tables.get(target.table)
            if table is None:
                raise NotFound(
                    f"change stream {stream!r} names table {target.table!r}, which does not exist"
                )
            for column in target.columns or ():
                if table.column(column) is None:
                    raise NotFound(
                        f"change stream {stream!r} names column {column!r}, which table "
                        f"{table.name!r} does not have"
                    )
                if column in table.primary_key:
                    raise FailedPrecondition(
                        f"change stream {stream!r}: key column {column!r} of {table.name!r} is "
                        "always tracked and must not be listed"
                    )

    def _save_stream(self, conn: sqlite3.Connection, entry: StreamEntry) -> None:
        conn.execute(
            "UPDATE _cs_streams SET definition = ? WHERE stream_id = ?",
            (orjson.dumps(entry.definition.to_catalog()), entry.stream_id),
        )
        self.streams[entry.definition.name] = entry

    def _create_stream(
        self, conn: sqlite3.Connection, statement: CreateChangeStream, commit_ts: int
    ) -> None:
        if statement.name in self.streams:
            raise AlreadyExists(f"change stream {statement.name!r} already exists")
        self._check_targets(statement.name, statement.targets)
        stream = _with_options(
            ChangeStream(statement.name, statement.for_all, statement.targets), statement.options
        )
        cursor = conn.execute(
            "INSERT INTO _cs_streams (name, definition, created_ts) VALUES (?, ?, ?)",
            (stream.name, orjson.dumps(stream.to_catalog()), commit_ts),
        )
        assert cursor.lastrowid is not None
        self.streams[stream.name] = StreamEntry(cursor.lastrowid, stream, commit_ts)

    def _alter_stream(self, conn: sqlite3.Connection, statement: AlterChangeStream) -> None:
        entry = self.stream(statement.name)
        stream = entry.definition
        if statement.set_for is not None:
            for_all, targets = statement.set_for
            self._check_targets(stream.name, targets)
            stream = replace(stream, for_all=for_all, targets=targets)
        if statement.options is not None:
            stream = _with_options(stream, statement.options)
        if statement.drop_for_all:
            stream = replace(stream, for_all=False, targets=())
        self._save_stream(conn, replace(entry, definition=stream))

    def _drop_stream(self, conn: sqlite3.Connection, statement: DropChangeStream) -> None:
        entry = self.stream(statement.name)
        conn.execute("DELETE FROM _cs_log WHERE stream_id = ?", (entry.stream_id,))
        conn.execute("DELETE FROM _cs_leases WHERE StreamId = ?", (entry.stream_id,))
        conn.execute("DELETE FROM _cs_streams WHERE stream_id = ?", (entry.stream_id,))
        del self.streams[statement.name]


def _with_options(stream: ChangeStream, options: StreamOptions) -> ChangeStream:
    if options.retention_seconds is not None:
        stream = replace(stream, retention_seconds=options.retention_seconds)
    if options.value_capture_type is not None:
        stream = replace(stream, value_capture_type=options.value_capture_type)
    flags = dict(options.flags)
    return replace(
        stream,
        exclude_insert=flags.get("exclude_insert", stream.exclude_insert),
        exclude_update=flags.get("exclude_update", stream.exclude_update),
        exclude_delete=flags.get("exclude_delete", stream.exclude_delete),
        allow_txn_exclusion=flags.get("allow_txn_exclusion", stream.allow_txn_exclusion),
        exclude_ttl_deletes=flags.get("exclude_ttl_deletes", stream.exclude_ttl_deletes),
    )
