"""Read-write transactions with Spanner mutation semantics, capturing every row change."""

from __future__ import annotations

import datetime as dt
import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from changestream.clock import to_datetime
from changestream.codecs import to_sqlite
from changestream.ddl.schema import Table
from changestream.errors import (
    AlreadyExists,
    ChangeStreamError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    reported,
)
from changestream.sql.limits import SqlLimits
from changestream.store import documents
from changestream.store.budget import StatementBudget
from changestream.store.changes import CommitContext, InsertBatch, RowChange
from changestream.store.database import WriteContext
from changestream.store.keys import KeyRange, encode_key, quote
from changestream.store.load import SplitLoad
from changestream.store.rows import key_condition, normalized_key, restore_nans
from changestream.store.splits import Split
from changestream.store.sqlite_layout import exact_forms
from changestream.store.transaction_api import MutationMethods as MutationMethods
from changestream.store.written_rows import RowCodec
from changestream.types import COMMIT_TIMESTAMP, normalize
from changestream.values import shown

if TYPE_CHECKING:
    from changestream.sql.statements import DmlStatement
    from changestream.store.database import Store

ChangeKey = tuple[str, tuple[Any, ...]]
#: Keys per statement when fetching rows by key (SQLite allows 32,766 parameters).
_CHUNK = 500


@dataclass(frozen=True, slots=True)
class Mutation:
    """One buffered mutation: ``op`` is insert, update, insert_or_update, replace or delete."""

    op: str
    codec: RowCodec
    rows: list[tuple[Any, ...]]
    key_range: KeyRange | None = None

    @property
    def table(self) -> Table:
        return self.codec.table


class ChangeTracker:
    """Applies writes to SQLite and records each touched row's net change for capture."""

    def __init__(self, conn: sqlite3.Connection, tracked: set[str]) -> None:
        self.conn = conn
        self.tracked = tracked
        self.changes: dict[ChangeKey, RowChange] = {}
        # Changes in first-touch order; an InsertBatch stands for its rows until another
        # write to its table needs per-row state, when it is expanded into RowChanges.
        self._order: list[RowChange | InsertBatch] = []
        self._batches: dict[str, list[InsertBatch]] = {}
        self._per_row: set[str] = set()

    def ordered_changes(self) -> list[RowChange | InsertBatch]:
        """Every change, in the order the transaction first touched each row."""
        return self._order

    def _expand(self, table: Table) -> None:
        """Give every row a table's insert batches added its own RowChange, in place."""
        self._per_row.add(table.name)
        batches = self._batches.pop(table.name, [])
        for batch in batches:
            index = self._order.index(batch)
            expanded: list[RowChange] = []
            written = set(batch.codec.columns)
            for row in batch.rows:
                key = batch.codec.key(row)
                change = RowChange(table, key, None, batch.codec.full_row(row), set(written))
                self.changes[(table.name, key)] = change
                expanded.append(change)
            self._order[index : index + 1] = expanded

    def _note(
        self,
        table: Table,
        key: tuple[Any, ...],
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        written: set[str],
    ) -> None:
        change = self.changes.get((table.name, key))
        if change is None:
            change = self.changes[(table.name, key)] = RowChange(table, key, before, after, written)
            self._order.append(change)
        else:
            _overwrite(change, after, written)

    def insert(self, codec: RowCodec, rows: list[tuple[Any, ...]]) -> None:
        codec, rows = codec.with_generated(rows)
        table, columns = codec.table, codec.columns
        sql = (
            f"INSERT INTO {quote(table.name)} ({', '.join(quote(c) for c in columns)}) "
            f"VALUES ({', '.join('?' * len(columns))})"
        )
        stored = codec.stored(rows)
        self.conn.execute("SAVEPOINT cs_insert")
        try:
            self.conn.executemany(sql, stored)
        except sqlite3.IntegrityError as exc:
            self.conn.execute("ROLLBACK TO cs_insert")
            raise self._explain(codec, rows, sql, stored, exc) from exc
        finally:
            self.conn.execute("RELEASE cs_insert")
        if table.name not in self.tracked:
            return
        if table.name not in self._per_row:
            # The rows are new (the insert succeeded) and no earlier write touched them.
            batch = InsertBatch(codec, rows)
            self._batches.setdefault(table.name, []).append(batch)
            self._order.append(batch)
            return
        written = set(columns)
        for row in rows:
            self._note(table, codec.key(row), None, codec.full_row(row), written)

    def _explain(
        self,
        codec: RowCodec,
        rows: list[tuple[Any, ...]],
        sql: str,
        stored: list[tuple[Any, ...]],
        exc: sqlite3.IntegrityError,
    ) -> Exception:
        """Find the row that broke a constraint, to name it in the error."""
        name = codec.table.name
        for row, values in zip(rows, stored, strict=True):
            try:
                self.conn.execute(sql, values)
            except sqlite3.IntegrityError as error:
                key = codec.key(row)
                if "UNIQUE" in str(error) or "PRIMARY KEY" in str(error):
                    return AlreadyExists(f"row {key!r} already exists in table {name!r}")
                return InvalidArgument(f"row {key!r} of table {name!r}: {error}")
        return InvalidArgument(f"table {name!r}: {exc}")

    def _current_rows(
        self, table: Table, keys: list[tuple[Any, ...]]
    ) -> dict[tuple[Any, ...], dict[str, Any]]:
        """The present rows of ``keys`` (normalized key tuples), fetched a chunk at a time."""
        names = [c.name for c in table.columns]
        key_at = [names.index(k) for k in table.primary_key]
        columns = ", ".join(quote(k) for k in table.primary_key)
        width = len(key_at)
        found: dict[tuple[Any, ...], dict[str, Any]] = {}
        # A row value IN (...) never matches NULL: keys with a NULL part are looked up alone.
        with_null = [key for key in keys if None in key]
        if with_null:
            keys = [key for key in keys if None not in key]
            sql = f"SELECT * FROM {quote(table.name)} WHERE {key_condition(table)}"
            for key in with_null:
                stored = [to_sqlite(c.type, v) for c, v in zip(table.key_columns, key, strict=True)]
                for row in restore_nans(table, names, self.conn.execute(sql, stored).fetchall()):
                    found[key] = dict(zip(names, row, strict=True))
        for begin in range(0, len(keys), _CHUNK):
            chunk = keys[begin : begin + _CHUNK]
            tuples = ", ".join(["(" + ", ".join("?" * width) + ")"] * len(chunk))
            params = [
                to_sqlite(c.type, v)
                for key in chunk
                for c, v in zip(table.key_columns, key, strict=True)
            ]
            sql = f"SELECT * FROM {quote(table.name)} WHERE ({columns}) IN (VALUES {tuples})"
            for row in restore_nans(table, names, self.conn.execute(sql, params).fetchall()):
                found[tuple(row[i] for i in key_at)] = dict(zip(names, row, strict=True))
        return found

    def update(self, codec: RowCodec, rows: list[tuple[Any, ...]], upsert: bool) -> None:
        table, columns = codec.table, codec.columns
        self._expand(table)
        keys = [codec.key(row) for row in rows]
        if len(set(keys)) != len(keys):
            # The same key twice in one mutation: each write must see the one before it.
            for row in rows:
                self.update(codec, [row], upsert)
            return
        set_columns = [c for c in columns if c not in table.primary_key]
        current = self._current_rows(table, keys)
        missing = [row for row, key in zip(rows, keys, strict=True) if key not in current]
        if missing and not upsert:
            key = codec.key(missing[0])
            raise NotFound(f"row {key!r} does not exist in table {table.name!r}")
        present = [row for row, key in zip(rows, keys, strict=True) if key in current]
        if set_columns and present:
            assignments = ", ".join(f"{quote(c)} = ?" for c in set_columns)
            sql = f"UPDATE {quote(table.name)} SET {assignments} WHERE {key_condition(table)}"
            order = [columns.index(c) for c in set_columns] + list(codec.key_positions)
            stored = codec.stored(present)
            try:
                self.conn.executemany(sql, [[row[i] for i in order] for row in stored])
            except sqlite3.IntegrityError as exc:
                raise InvalidArgument(f"update of table {table.name!r}: {exc}") from exc
        if table.name in self.tracked:
            written = set(set_columns)
            for row, key in zip(rows, keys, strict=True):
                before = current.get(key)
                if before is not None:
                    after = dict(before)
                    after.update(zip(columns, row, strict=True))
                    self._note(table, key, before, after, written)
        if missing:
            self.insert(codec, missing)

    def replace(self, codec: RowCodec, rows: list[tuple[Any, ...]]) -> None:
        table = codec.table
        self._expand(table)
        keys = [codec.key(row) for row in rows]
        if len(set(keys)) != len(keys):
            for row in rows:
                self.replace(codec, [row])
            return
        tracked = table.name in self.tracked
        current = self._current_rows(table, keys) if tracked else {}
        # A row this transaction already changed keeps the state it had when the transaction
        # began (None for a row it inserted: replacing it is still an INSERT).
        noted = {key for key in keys if (table.name, key) in self.changes}
        self.delete_keys(table, keys, track=False)
        self.insert(codec, rows)
        if tracked:
            every_column = {c.name for c in table.columns}
            for key in keys:
                change = self.changes[(table.name, key)]
                before = current.get(key)
                if key not in noted and before is not None:
                    change.before = before
                change.written |= every_column
                change.replaced = change.before is not None

    def delete_keys(self, table: Table, keys: list[tuple[Any, ...]], track: bool = True) -> None:
        sql = f"DELETE FROM {quote(table.name)} WHERE {key_condition(table)}"
        self._expand(table)
        unique = list(dict.fromkeys(keys))
        current = self._current_rows(table, unique) if track and table.name in self.tracked else {}
        self.conn.executemany(
            sql,
            [
                [to_sqlite(c.type, v) for c, v in zip(table.key_columns, key, strict=True)]
                for key in unique
            ],
        )
        for key in unique:
            before = current.get(key)
            if before is not None:
                self._note(table, key, before, None, set())

    def delete_range(self, table: Table, key_range: KeyRange) -> None:
        where, params = key_range.where(table)
        self._expand(table)
        if table.name in self.tracked:
            names = [c.name for c in table.columns]
            rows = restore_nans(
                table,
                names,
                self.conn.execute(
                    f"SELECT * FROM {quote(table.name)} WHERE {where}", params
                ).fetchall(),
            )
            for row in rows:
                before = dict(zip(names, row, strict=True))
                key = tuple(before[k] for k in table.primary_key)
                self._note(table, key, before, None, set())
        self.conn.execute(f"DELETE FROM {quote(table.name)} WHERE {where}", params)

    def apply(self, mutation: Mutation) -> None:
        if mutation.op == "insert":
            self.insert(mutation.codec, mutation.rows)
        elif mutation.op in ("update", "insert_or_update"):
            self.update(mutation.codec, mutation.rows, mutation.op == "insert_or_update")
        elif mutation.op == "replace":
            self.replace(mutation.codec, mutation.rows)
        elif mutation.key_range is not None:
            self.delete_range(mutation.table, mutation.key_range)
        else:
            self.delete_keys(mutation.table, [tuple(r) for r in mutation.rows])

    def record_dml(
        self,
        statement: DmlStatement,
        table: Table,
        old_rows: list[tuple[Any, ...]],
        returned: list[tuple[Any, ...]],
    ) -> None:
        """Note the changes a DML statement made, from the rows it matched beforehand and the
        rows its ``RETURNING *`` gave (the new rows; for DELETE, the deleted ones)."""
        self._expand(table)
        names = [c.name for c in table.columns]
        key_at = [names.index(k) for k in table.primary_key]

        def key_of(row: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(row[i] for i in key_at)

        if statement.kind == "DELETE":
            for row in returned:
                self._note(table, key_of(row), dict(zip(names, row, strict=True)), None, set())
            return
        before_by_key = {key_of(r): dict(zip(names, r, strict=True)) for r in old_rows}
        written = set(statement.columns)
        for row in returned:
            key = key_of(row)
            self._note(
                table, key, before_by_key.get(key), dict(zip(names, row, strict=True)), written
            )


def _rebased(mutation: Mutation, current: Table | None) -> Mutation:
    """``mutation``, buffered before its table changed (a column added, an index made), for
    the table as it is now; FailedPrecondition when the table is gone or a column the
    mutation writes (or the key) is gone or has another type."""
    old = mutation.table
    columns = mutation.codec.columns
    fits = (
        current is not None
        and current.primary_key == old.primary_key
        and all(_same_type(old, current, name) for name in columns)
    )
    if current is None or not fits:
        raise FailedPrecondition(
            f"table {old.name!r} was changed or dropped during the transaction"
        )
    return replace(mutation, codec=RowCodec(current, columns))


def _same_type(old: Table, current: Table, name: str) -> bool:
    before, now = old.column(name), current.column(name)
    return before is not None and now is not None and before.type == now.type


def _run_dml(
    conn: sqlite3.Connection,
    statement: DmlStatement,
    table: Table,
    tracked: bool,
    limits: SqlLimits,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Run a DML statement within the time limit: the rows it will change (UPDATE of a
    tracked table) and the rows it wrote, or a changestream error."""
    names = [c.name for c in table.columns]
    try:
        with StatementBudget(limits, statement.kind).running(conn):
            old_rows: list[tuple[Any, ...]] = []
            if statement.kind == "UPDATE" and tracked:
                assert statement.select_old_sql is not None
                old_rows = conn.execute(
                    statement.select_old_sql, statement.select_old_params
                ).fetchall()
            new_rows = _written_rows(
                table, conn.execute(statement.sql, statement.params), statement.kind
            )
    except sqlite3.IntegrityError as exc:
        if "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc):
            raise AlreadyExists(f"{statement.kind} into {table.name!r}: {exc}") from exc
        raise InvalidArgument(f"{statement.kind} on {table.name!r}: {exc}") from exc
    except sqlite3.Error as exc:
        raise InvalidArgument(f"{statement.kind} on {table.name!r} failed: {exc}") from exc
    return restore_nans(table, names, old_rows), new_rows


def _written_rows(table: Table, cursor: sqlite3.Cursor, kind: str) -> list[tuple[Any, ...]]:
    """The rows a DML statement's ``RETURNING *`` gives, each value checked against its
    column's type: SQL expressions can compute anything, and nothing unreadable may stay."""
    exact = exact_forms.set(True)
    try:
        rows = cursor.fetchall()
    except (ChangeStreamError, ValueError, TypeError, ArithmeticError) as exc:
        # A column's converter could not read what the statement wrote (say, text into ARRAY).
        raise InvalidArgument(
            f"{kind} on {table.name!r} wrote a value its column's type cannot hold: {exc}"
        ) from exc
    finally:
        exact_forms.reset(exact)
        # An unfinished statement would keep the savepoint from being rolled back.
        cursor.close()
    names = [c.name for c in table.columns]
    rows = restore_nans(table, names, rows)
    if kind == "DELETE":
        return rows
    # Normalized, not just checked: a whole FLOAT64 comes back from SQLite as an int.
    columns = table.columns
    return [
        tuple([normalize(c.type, v, c.name) for c, v in zip(columns, row, strict=True)])
        for row in rows
    ]


def _assign_splits(
    ctx: WriteContext, changes: list[RowChange | InsertBatch]
) -> dict[int, SplitLoad]:
    """Set the split of every change; return each split's mod count and one written key."""
    whole_table: dict[str, Split | None] = {}
    load: dict[int, SplitLoad] = {}

    def count(split_id: int, mods: int, table: Table, key: tuple[Any, ...]) -> None:
        entry = load.get(split_id)
        if entry is None:
            load[split_id] = SplitLoad(mods, encode_key(table, key, normalized=True))
        else:
            entry.mods += mods

    for change in changes:
        table = change.codec.table if isinstance(change, InsertBatch) else change.table
        if table.name not in whole_table:
            whole_table[table.name] = ctx.splits.single_split_for_table(table.name)
        split = whole_table[table.name]
        if isinstance(change, InsertBatch):
            rows = change.rows
            if split is not None:
                change.split_id = split.split_id
                count(split.split_id, len(rows), table, change.codec.key(rows[len(rows) // 2]))
                continue
            change.split_ids = []
            for key in map(change.codec.key, rows):
                split_id = ctx.splits.find(encode_key(table, key, normalized=True)).split_id
                change.split_ids.append(split_id)
                count(split_id, 1, table, key)
            continue
        if split is None:
            split = ctx.splits.find(encode_key(table, change.key, normalized=True))
        change.split_id = split.split_id
        count(split.split_id, 1, table, change.key)
    return load


def _overwrite(change: RowChange, after: dict[str, Any] | None, written: set[str]) -> None:
    """Fold a later write to the same row into its change; a row re-created after a delete
    has had every column written."""
    if change.after is None and after is not None:
        written = set(after)
    change.after = after
    change.written |= written


class Transaction(MutationMethods):
    """A read-write transaction. Use it as a context manager: it commits when the block ends
    and rolls back when the block raises. Mutations are buffered and applied at commit; DML
    (``execute_update``) runs at once, and later reads in the transaction see it."""

    def __init__(
        self,
        store: Store,
        tag: str | None = None,
        session_id: str | None = None,
        exclude_txn_from_change_streams: bool = False,
        *,
        row_deletion: bool = False,
    ) -> None:
        if tag is not None and not isinstance(tag, str):
            raise InvalidArgument(f"tag must be a string, got {shown(tag)}")
        if not isinstance(exclude_txn_from_change_streams, bool):
            raise InvalidArgument(
                "exclude_txn_from_change_streams must be True or False, got "
                f"{shown(exclude_txn_from_change_streams)}"
            )
        #: Change streams with ``allow_txn_exclusion`` do not record this transaction.
        self.exclude_txn_from_change_streams = exclude_txn_from_change_streams
        # The row deletion policy's deletes: a system transaction, left out by streams with
        # ``exclude_ttl_deletes``.
        self._row_deletion = row_deletion
        if session_id is not None:
            _check_session(session_id)
        self._store = store
        self.tag = tag or ""
        #: The session the commit is recorded under (watch()'s ``lsid``): the handle's own
        #: unless a client that holds its own session (a remote handle) names it.
        self.session_id = session_id or store.session_id
        self._mutations: list[Mutation] = []
        self._documents: dict[tuple[str, str], bytes] = {}
        self._conn: sqlite3.Connection | None = None
        self._tracker: ChangeTracker | None = None
        self._done = False
        #: The commit timestamp, set by a successful commit.
        self.commit_timestamp: dt.datetime | None = None

    @reported
    def _buffer(self, op: str, table: str, columns: Sequence[str], values: Sequence[Any]) -> None:
        self._check_open()
        codec = self._store.codec(table, columns)
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise InvalidArgument(f"values must be a list of rows, got {shown(values)}")
        rows = codec.rows(values)
        if rows:
            self._mutations.append(Mutation(op, codec, rows))

    @reported
    def delete(self, table: str, keys: Sequence[Sequence[Any]] | KeyRange) -> None:
        """Delete rows by key tuples or a KeyRange; missing rows are not an error."""
        self._check_open()
        schema = self._store.catalog().table(table)
        codec = self._store.codec(table, schema.primary_key)
        if isinstance(keys, KeyRange):
            keys.where(schema)
            self._mutations.append(Mutation("delete", codec, [], keys))
            return
        if isinstance(keys, str | bytes) or not isinstance(keys, Sequence):
            raise InvalidArgument(
                f"keys must be a list of key tuples or a KeyRange, got {shown(keys)}"
            )
        rows = [normalized_key(schema, key) for key in keys]
        self._mutations.append(Mutation("delete", codec, rows))

    @reported
    def put_system_document(self, kind: str, name: str, body: object) -> None:
        """Write system document ``kind``/``name`` as part of this transaction: it is stored
        with the transaction's changes or, if the commit fails, not at all (whatever version
        it was at: for state that only this writer changes, such as a source's position)."""
        self._check_open()
        key = (documents.check_key(kind, "kind"), documents.check_key(name, "name"))
        self._documents[key] = documents.dump_body(body, "body")

    @reported
    def execute_update(
        self, dml: str, params: Mapping[str, Any] | Sequence[Any] | None = None
    ) -> int:
        """Run an INSERT, UPDATE or DELETE statement now; returns the number of rows it changed."""
        # Imported here: DML is parsed with sqlglot, which a database that only reads and
        # writes rows never loads (see changestream.ddl.defaults).
        from changestream.sql.statements import DmlStatement, parse_statement

        self._check_open()
        store = self._store
        statement = parse_statement(
            dml, params, column_types=store.column_type, limits=store.sql_limits
        )
        if not isinstance(statement, DmlStatement):
            raise InvalidArgument("execute_update takes INSERT, UPDATE or DELETE; use execute_sql")
        tracker = self._begin()
        table = store.catalog().table(statement.table)
        keys_set = set(statement.columns) & set(table.primary_key)
        if statement.kind == "UPDATE" and keys_set:
            raise InvalidArgument(f"UPDATE cannot change key column(s) {', '.join(keys_set)}")
        conn = tracker.conn
        tracked = table.name in tracker.tracked
        conn.execute("SAVEPOINT cs_dml")
        try:
            old_rows, new_rows = _run_dml(conn, statement, table, tracked, store.sql_limits)
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK TO cs_dml")
                conn.execute("RELEASE cs_dml")
                raise
            # SQLite rolls back the whole transaction when it interrupts a write.
            self._done = True
            if isinstance(exc, ResourceExhausted):
                raise ResourceExhausted(f"{exc}; the transaction was rolled back") from exc
            raise
        conn.execute("RELEASE cs_dml")
        if tracked:
            tracker.record_dml(statement, table, old_rows, new_rows)
        return len(new_rows)

    def _begin(self) -> ChangeTracker:
        if self._tracker is None:
            self._conn = self._store.begin_write()
            catalog = self._store.catalog()
            tracked = {name for name in catalog.tables if catalog.streams_tracking(name)}
            self._tracker = ChangeTracker(self._conn, tracked)
        return self._tracker

    @reported
    def commit(self) -> dt.datetime:
        """Apply the buffered mutations, capture the changes, and commit; returns the timestamp."""
        self._check_open()
        tracker = self._begin()
        conn = tracker.conn
        try:
            with self._store.write(conn) as ctx:
                self._apply(ctx, tracker)
            self._store.commit_write(conn, ctx.commit_ts)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._done = True
            raise
        self._done = True
        self.commit_timestamp = to_datetime(ctx.commit_ts)
        return self.commit_timestamp

    def _apply(self, ctx: WriteContext, tracker: ChangeTracker) -> None:
        ts = ctx.allocate_commit_ts()
        stamp = to_datetime(ts)
        for mutation in self._mutations:
            current = ctx.catalog.tables.get(mutation.table.name)
            if current != mutation.table:
                mutation = _rebased(mutation, current)
            if mutation.codec.may_hold_commit_timestamp:
                rows = [
                    tuple([stamp if v is COMMIT_TIMESTAMP else v for v in row])
                    for row in mutation.rows
                ]
                mutation = Mutation(mutation.op, mutation.codec, rows)
            tracker.apply(mutation)
        ctx.meta.txn_seq += 1
        changes = tracker.ordered_changes()
        load = _assign_splits(ctx, changes)
        context = CommitContext(
            commit_ts=ts,
            server_transaction_id=f"{ctx.meta.txn_seq}",
            transaction_tag=self.tag,
            is_system_transaction=self._row_deletion,
            changes=changes,
            catalog=ctx.catalog,
            session_id=self.session_id,
            excluded_from_streams=self.exclude_txn_from_change_streams,
            row_deletion=self._row_deletion,
        )
        self._store.capture(ctx, context)
        if load:
            self._store.add_load(ctx, ts, load)
        for (kind, name), text in self._documents.items():
            documents.write_in_transaction(ctx.conn, kind, name, text)

    def rollback(self) -> None:
        """Discard everything; the transaction cannot be used afterwards."""
        if self._done:
            return
        self._done = True
        if self._conn is not None and self._conn.in_transaction:
            self._conn.execute("ROLLBACK")


def _check_session(session_id: object) -> None:
    try:
        uuid.UUID(session_id if isinstance(session_id, str) else "")
    except ValueError:
        raise InvalidArgument(
            f"session_id must be a UUID string, got {shown(session_id)}"
        ) from None
