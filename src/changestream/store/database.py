"""The embedded store: tables, transactions, splits and the change log in one SQLite file."""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from changestream.clock import Clock, next_commit_ts, now_us
from changestream.ddl import parse_ddl
from changestream.ddl.schema import (
    ChangeStream,
    CreateChangeStream,
    Statement,
    StreamOptions,
    Table,
)
from changestream.errors import AlreadyExists, ChangeStreamError, InvalidArgument, reported
from changestream.sql.limits import DEFAULT_LIMITS, SqlLimits
from changestream.store import documents
from changestream.store import splits as split_ops
from changestream.store.catalog import Catalog
from changestream.store.changes import CaptureFn, CommitContext, SchemaChange
from changestream.store.commit_signal import CommitSignal
from changestream.store.connections import ConnectionPool, translate_busy
from changestream.store.keys import KeyRange, encode_key, quote, table_prefix
from changestream.store.load import LoadBuffer, SplitLoad, forget_before, write_rates
from changestream.store.models import SnapshotRead as SnapshotRead
from changestream.store.policy import Action, SplitPolicy, load_policy, save_policy
from changestream.store.rebalancer import Rebalancer
from changestream.store.rows import check_columns, key_condition, restore_nans, storage_key
from changestream.store.schema_changes import schema_change
from changestream.store.splits import Split, SplitMap
from changestream.store.sqlite_layout import (
    ADDED_LOG_COLUMNS,
    RETIRED_INDEXES,
    SYSTEM_TABLE_NAMES,
    SYSTEM_TABLES,
)
from changestream.store.written_rows import RowCodec
from changestream.types import ColumnType
from changestream.values import shown

_GC_INTERVAL_US = 60_000_000
#: Rows a snapshot read returns at most per call (page with ``limit`` and a KeyRange).
MAX_SNAPSHOT_ROWS = 1_000_000


@dataclass(slots=True)
class Meta:
    """The engine's counters, read and written under the write lock."""

    last_commit_ts: int
    safe_ts: int
    txn_seq: int
    catalog_version: int
    split_version: int
    secret: str


class WriteContext:
    """An open SQLite write transaction with the engine state it may change."""

    def __init__(
        self, conn: sqlite3.Connection, meta: Meta, catalog: Catalog, live: SplitMap, clock: Clock
    ) -> None:
        self.conn = conn
        self.clock = clock
        self.meta = meta
        self.catalog = catalog
        self.splits = live
        self.commit_ts = 0
        self.catalog_changed = False
        self.splits_changed = False

    def allocate_commit_ts(self) -> int:
        """Take the next commit timestamp; strictly increasing because we hold the write lock."""
        if not self.commit_ts:
            self.commit_ts = next_commit_ts(
                self.clock(), self.meta.last_commit_ts, self.meta.safe_ts
            )
            self.meta.last_commit_ts = self.commit_ts
        return self.commit_ts


def _missing_log_columns(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """The columns of ``ADDED_LOG_COLUMNS`` the file's change log lacks (all of them when it
    has no change log yet)."""
    present = {row[1] for row in conn.execute("PRAGMA table_info(_cs_log)")}
    return [(name, kind) for name, kind in ADDED_LOG_COLUMNS if name not in present]


class Store:
    """The table store with change capture; :class:`changestream.Database` builds on it."""

    def __init__(
        self,
        path: str,
        durability: str = "normal",
        busy_timeout: float = 5.0,
        capture: CaptureFn | None = None,
        clock: Clock | None = None,
        sql_limits: SqlLimits = DEFAULT_LIMITS,
    ) -> None:
        if not isinstance(sql_limits, SqlLimits):
            raise InvalidArgument(f"sql_limits must be a SqlLimits, got {shown(sql_limits)}")
        #: The bounds on each SQL statement's size, nesting, parse and run time.
        self.sql_limits = sql_limits
        self._tempdir: str | None = None
        if path == ":memory:":
            self._tempdir = tempfile.mkdtemp(prefix="changestream-")
            path = os.path.join(self._tempdir, "memory.db")
        self.path = path
        self._pool = ConnectionPool(path, durability, busy_timeout)
        self._capture = capture
        #: This handle's session: the engine's own streams record it with each commit, and
        #: watch() shows it as ``lsid`` (MongoDB's logical session id).
        self.session_id = str(uuid.uuid4())
        #: The wall clock in microseconds; injectable so tests can pin commit timestamps.
        self.now: Clock = clock or now_us
        self._cache_lock = threading.Lock()
        self._catalog = Catalog()
        self._split_map = SplitMap([])
        self._versions = (-1, -1)
        self._last_gc_us = 0
        self._codecs: dict[tuple[str, tuple[str, ...]], RowCodec] = {}
        self._load = LoadBuffer()
        #: Wakes the readers tailing the change log when its watermark moves.
        self.commit_signal = CommitSignal(
            self.connection, self.watermark, lambda: self._pool.closed, f"{path}-wal"
        )
        self._rebalancer = Rebalancer(self)
        try:
            self._initialize()
        except sqlite3.DatabaseError as exc:
            self.close()
            if isinstance(exc, sqlite3.OperationalError):  # busy, locked, read-only: as is
                raise
            raise InvalidArgument(f"{path} is not a database file: {exc}") from exc

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection; the object cannot be used afterwards."""
        self._rebalancer.stop()
        if not self._pool.closed:
            with suppress(ChangeStreamError, sqlite3.Error):  # load only advises
                self.flush_load()
        self._pool.close()
        self.commit_signal.stop()  # waiting readers look again, and find it closed
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    @property
    def closed(self) -> bool:
        return self._pool.closed

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connection(self) -> sqlite3.Connection:
        """This thread's SQLite connection (for the engine's own layers)."""
        return self._pool.get()

    def _initialize(self) -> None:
        """Create the system tables on first use; an initialized file needs no write lock,
        so a database can be opened while another process is writing."""
        conn = self.connection()
        existing = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        # A file made by an older version gets its missing system tables here, and loses its
        # retired indexes, once, under the lock.
        complete = (
            existing.issuperset(SYSTEM_TABLE_NAMES)
            and not existing & RETIRED_INDEXES
            and not _missing_log_columns(conn)
        )
        if complete and conn.execute("SELECT 1 FROM _cs_meta").fetchone():
            return
        with self._begin() as conn:
            for statement in SYSTEM_TABLES.split(";"):
                if statement.strip():
                    conn.execute(statement)
            for name, kind in _missing_log_columns(conn):
                conn.execute(f"ALTER TABLE _cs_log ADD COLUMN {name} {kind}")
            if conn.execute("SELECT count(*) FROM _cs_meta").fetchone()[0] == 0:
                ts = next_commit_ts(self.now(), 0)
                conn.execute(
                    "INSERT INTO _cs_meta VALUES (1, ?, 0, 0, 0, 0, ?)", (ts, secrets.token_hex(16))
                )
                split_ops.create_initial_split(conn, ts)
            if conn.execute("SELECT 1 FROM _cs_policy").fetchone() is None:
                save_policy(conn, SplitPolicy())

    # -- state -----------------------------------------------------------------------------

    @staticmethod
    def read_meta(conn: sqlite3.Connection) -> Meta:
        row = conn.execute(
            "SELECT last_commit_ts, safe_ts, txn_seq, catalog_version, split_version, secret"
            " FROM _cs_meta"
        ).fetchone()
        return Meta(*row)

    def _refresh(self, conn: sqlite3.Connection, meta: Meta) -> None:
        versions = (meta.catalog_version, meta.split_version)
        if versions == self._versions:
            return
        with self._cache_lock:
            if versions[0] != self._versions[0]:
                self._catalog = Catalog.load(conn)
            if versions[1] != self._versions[1]:
                self._split_map = SplitMap(split_ops.splits_live_at(conn, meta.last_commit_ts))
            self._versions = versions

    def catalog(self) -> Catalog:
        """The current catalog, reloaded when another connection changed it."""
        conn = self.connection()
        self._refresh(conn, self.read_meta(conn))
        return self._catalog

    def live_splits(self) -> list[Split]:
        """The splits covering the key space now, in key order."""
        conn = self.connection()
        self._refresh(conn, self.read_meta(conn))
        return list(self._split_map.splits)

    def column_type(self, table: str, column: str) -> ColumnType | None:
        """The type of ``table``'s ``column``, or None when either does not exist."""
        schema = self.catalog().tables.get(table)
        found = schema.column(column) if schema is not None else None
        return found.type if found is not None else None

    def codec(self, table: str, columns: Sequence[str]) -> RowCodec:
        """The row codec for writing ``columns`` of ``table`` (validated, cached per schema)."""
        schema = self.catalog().table(table)
        key = (table, tuple(columns) if not isinstance(columns, str) else (columns,))
        codec = self._codecs.get(key)
        if codec is None or codec.table is not schema:
            names = check_columns(schema, columns, need_key=True)
            codec = self._codecs[key] = RowCodec(schema, names)
        return codec

    @property
    def secret(self) -> str:
        return self.read_meta(self.connection()).secret

    def last_commit_ts(self) -> int:
        return self.read_meta(self.connection()).last_commit_ts

    def watermark(self, conn: sqlite3.Connection) -> int:
        """How far the change log is complete: no commit at or below it can still appear."""
        meta = self.read_meta(conn)
        return max(meta.last_commit_ts, meta.safe_ts)

    # -- write transactions -----------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[sqlite3.Connection]:
        """A plain write transaction on this thread's connection (for engine bookkeeping)."""
        with self._begin() as conn:
            yield conn

    @contextmanager
    def bookkeeping(self) -> Iterator[sqlite3.Connection]:
        """The store's one connection shared by every thread (one at a time), for
        bookkeeping that many threads do often, such as the Stream Client's lease writes:
        see :meth:`ConnectionPool.shared`."""
        with self._pool.shared() as conn:
            yield conn

    @contextmanager
    def locked_bookkeeping(self) -> Iterator[sqlite3.Connection]:
        """A plain write transaction on the :meth:`bookkeeping` connection."""
        with self.bookkeeping() as conn, self._begin(conn) as began:
            yield began

    @contextmanager
    def _begin(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        if conn is None:
            conn = self.connection()
        with translate_busy(self._pool.busy_timeout):
            conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            with translate_busy(self._pool.busy_timeout):
                conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @contextmanager
    def write(self, conn: sqlite3.Connection | None = None) -> Iterator[WriteContext]:
        """A write transaction; pass ``conn`` when the caller already began it."""
        if conn is None:
            with self._begin() as began, self.write(began) as ctx:
                yield ctx
            self.commit_signal.notify(ctx.meta.last_commit_ts)
            return
        meta = self.read_meta(conn)
        self._refresh(conn, meta)
        ctx = WriteContext(conn, meta, self._catalog, self._split_map, self.now)
        try:
            yield ctx
        except BaseException:
            self._versions = (-1, -1)
            raise
        self._save_meta(ctx)

    def _save_meta(self, ctx: WriteContext) -> None:
        meta = ctx.meta
        if ctx.catalog_changed:
            meta.catalog_version += 1
        if ctx.splits_changed:
            meta.split_version += 1
        ctx.conn.execute(
            "UPDATE _cs_meta SET last_commit_ts = ?, txn_seq = ?, catalog_version = ?,"
            " split_version = ?",
            (meta.last_commit_ts, meta.txn_seq, meta.catalog_version, meta.split_version),
        )
        if ctx.catalog_changed or ctx.splits_changed:
            self._versions = (-1, -1)

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection inside one consistent read (or its open transaction)."""
        conn = self.connection()
        if conn.in_transaction:
            yield conn
            return
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def begin_write(self) -> sqlite3.Connection:
        """Begin a write transaction on this thread's connection (for DML inside a transaction)."""
        conn = self.connection()
        with translate_busy(self._pool.busy_timeout):
            conn.execute("BEGIN IMMEDIATE")
        return conn

    def commit_write(self, conn: sqlite3.Connection, commit_ts: int) -> None:
        """Commit the write transaction begun with :meth:`begin_write` at ``commit_ts``."""
        with translate_busy(self._pool.busy_timeout):
            conn.execute("COMMIT")
        self.commit_signal.notify(commit_ts)
        self._rebalancer.ensure_started()

    def add_load(self, ctx: WriteContext, commit_ts: int, load: dict[int, SplitLoad]) -> None:
        """Note a committing transaction's write load (see :class:`.LoadBuffer`); write what
        has waited long enough, in this transaction."""
        self._load.add(commit_ts, load)
        if self._load.due:
            self._load.flush(ctx.conn)

    def flush_load(self) -> None:
        """Write this process's buffered write load to the tables now (if it has any)."""
        if self._load.empty:
            return
        with self.locked() as conn:
            self._load.flush(conn)

    def write_rates(self, window_s: float) -> dict[int, float]:
        """Mods per second per split over the last ``window_s`` seconds: the tables' (every
        process's) and this process's not written yet."""
        now = self.now()
        rates = write_rates(self.connection(), now, window_s)
        for split_id, rate in self._load.rates(now, window_s).items():
            rates[split_id] = rates.get(split_id, 0.0) + rate
        return rates

    def capture(self, ctx: WriteContext, context: CommitContext) -> None:
        """Run change capture and append its rows to the change log, in the open transaction."""
        if self._capture is None or not (context.changes or context.schema_changes):
            return
        rows = self._capture(context)
        if rows:
            ctx.conn.executemany(
                "INSERT INTO _cs_log"
                " (stream_id, split_id, commit_ts, record_sequence, payload, mods)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
        self._collect_garbage(ctx)

    def _collect_garbage(self, ctx: WriteContext) -> None:
        """About once a minute: drop change records older than each stream's retention, the
        partitions that ended before every stream's retention window, and old load samples."""
        now = self.now()
        if now - self._last_gc_us < _GC_INTERVAL_US:
            return
        self._last_gc_us = now
        horizons = []
        for entry in ctx.catalog.streams.values():
            horizon = now - entry.definition.retention_seconds * 1_000_000
            horizons.append(horizon)
            # A range of the primary key per split: no index on the commit time alone.
            ctx.conn.execute(
                "DELETE FROM _cs_log WHERE stream_id = ?"
                " AND split_id IN (SELECT split_id FROM _cs_splits) AND commit_ts < ?",
                (entry.stream_id, horizon),
            )
        if horizons:
            ctx.conn.execute(
                "DELETE FROM _cs_splits WHERE end_ts IS NOT NULL AND end_ts < ?", (min(horizons),)
            )
        window = load_policy(ctx.conn).window_seconds
        forget_before(ctx.conn, now - int(window * 2_000_000))

    def advance_safe_ts(self) -> int | None:
        """Promise that no future commit will have a timestamp at or below now, when no writer
        is active; returns the promised timestamp, or None when a writer held the lock."""
        conn = self.connection()
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return None
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self._pool.busy_timeout * 1000)}")
        try:
            meta = self.read_meta(conn)
            safe = max(self.now(), meta.last_commit_ts, meta.safe_ts)
            conn.execute("UPDATE _cs_meta SET safe_ts = ?", (safe,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.commit_signal.notify(safe)
        return safe

    # -- DDL ---------------------------------------------------------------------------------

    @reported
    def execute_ddl(self, statements: str | Sequence[str]) -> int:
        """Apply one or more DDL statements atomically; returns their commit timestamp."""
        texts = [statements] if isinstance(statements, str) else list(statements)
        parsed: list[Statement] = []
        for text in texts:
            parsed.extend(parse_ddl(text))
        if not parsed:
            raise InvalidArgument("execute_ddl was given no statement")
        return self._apply_ddl(parsed)

    def ensure_system_stream(self, name: str, value_capture_type: str) -> None:
        """Create the engine's own change stream ``name`` (FOR ALL) unless it exists; user DDL
        cannot, as its names start with ``_cs_`` and its capture type is not a public one."""
        if name in self.catalog().streams:
            return
        options = StreamOptions(value_capture_type=value_capture_type)
        with suppress(AlreadyExists):  # another connection created it since the check above
            self._apply_ddl([CreateChangeStream(name, True, (), options)])

    def _apply_ddl(self, parsed: list[Statement]) -> int:
        conn = self.connection()
        with self._begin():
            meta = self.read_meta(conn)
            # The live split map places the records of dropped and renamed tables.
            self._refresh(conn, meta)
            catalog = Catalog.load(conn)
            ctx = WriteContext(conn, meta, catalog, self._split_map, self.now)
            ts = ctx.allocate_commit_ts()

            def split_of(table: str) -> int:
                return ctx.splits.find(table_prefix(table)).split_id

            changes: list[SchemaChange] = []
            for statement in parsed:
                change = schema_change(catalog, statement, split_of)
                catalog.apply(conn, statement, ts)
                if change is not None:
                    changes.append(change)
            ctx.catalog_changed = True
            self._capture_schema_changes(ctx, tuple(changes))
            self._save_meta(ctx)
        return ts

    def _capture_schema_changes(self, ctx: WriteContext, changes: tuple[SchemaChange, ...]) -> None:
        """Hand what DDL did to tables to capture, in the DDL's own SQLite transaction, so the
        engine's streams (watch()) record it exactly once and in commit order."""
        if not changes:
            return
        ctx.meta.txn_seq += 1
        context = CommitContext(
            commit_ts=ctx.commit_ts,
            server_transaction_id=f"{ctx.meta.txn_seq}",
            transaction_tag="",
            is_system_transaction=True,
            changes=[],
            catalog=ctx.catalog,
            schema_changes=changes,
            session_id=self.session_id,
        )
        self.capture(ctx, context)

    # -- reads -------------------------------------------------------------------------------

    @reported
    def read(
        self,
        table: str,
        keys: Sequence[Sequence[Any]] | KeyRange | None = None,
        columns: Sequence[str] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Rows of ``table`` in key order: all rows (keys None), the given keys, or a KeyRange."""
        return self._read(table, keys, columns, None)

    @reported
    def read_snapshot(
        self,
        table: str,
        keys: KeyRange | None = None,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> SnapshotRead:
        """Rows of ``table`` in key order (all, or a KeyRange; the first ``limit`` of them)
        with the timestamp of the snapshot they were read in (see :class:`SnapshotRead`)."""
        if keys is not None and not isinstance(keys, KeyRange):
            raise InvalidArgument(f"keys must be a KeyRange or None, got {shown(keys)}")
        if limit is not None and (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 0 < limit <= MAX_SNAPSHOT_ROWS
        ):
            raise InvalidArgument(
                f"limit must be between 1 and {MAX_SNAPSHOT_ROWS}, got {shown(limit)}"
            )
        # One SQLite read transaction: the rows and the last commit timestamp come from the
        # same snapshot, so a commit is either in both or in neither.
        with self.snapshot() as conn:
            stamp = self.read_meta(conn).last_commit_ts
            rows = self._read(table, keys, columns, limit)
        return SnapshotRead(rows, stamp)

    def _read(
        self,
        table: str,
        keys: Sequence[Sequence[Any]] | KeyRange | None,
        columns: Sequence[str] | None,
        limit: int | None,
    ) -> list[tuple[Any, ...]]:
        schema = self.catalog().table(table)
        names = list(columns) if columns is not None else [c.name for c in schema.columns]
        for name in names:
            if schema.column(name) is None:
                raise InvalidArgument(f"table {table!r} has no column {name!r}")
        select = f"SELECT {', '.join(quote(n) for n in names)} FROM {quote(table)}"
        order = " ORDER BY " + ", ".join(quote(k) for k in schema.primary_key)
        if limit is not None:
            order += f" LIMIT {int(limit)}"
        conn = self.connection()
        if keys is None:
            return restore_nans(schema, names, conn.execute(select + order).fetchall())
        if isinstance(keys, KeyRange):
            where, params = keys.where(schema)
            in_range = conn.execute(f"{select} WHERE {where}{order}", params).fetchall()
            return restore_nans(schema, names, in_range)
        condition = key_condition(schema)
        rows: list[tuple[Any, ...]] = []
        with self.snapshot() as conn:
            for key in keys:
                found = conn.execute(f"{select} WHERE {condition}", storage_key(schema, key))
                rows.extend(found.fetchall())
        return restore_nans(schema, names, rows)

    def tables(self) -> list[Table]:
        """The user tables, by name: columns in schema order, primary key in key order."""
        return [t for _, t in sorted(self.catalog().tables.items())]

    def change_streams(self) -> list[ChangeStream]:
        """The change streams users created (not the engine's own), by name."""
        return [e.definition for _, e in sorted(self.catalog().user_streams().items())]

    # -- system documents --------------------------------------------------------------------

    def system_documents(self, kind: str) -> dict[str, documents.SystemDocument]:
        """Every system document of ``kind``, by name (see :mod:`changestream.store.documents`)."""
        return documents.system_documents(self.connection(), kind)

    def put_system_document(
        self, kind: str, name: str, body: Mapping[str, Any], expected_version: int | None
    ) -> int:
        """Write a system document if it is at ``expected_version`` (None: only if it does not
        exist); returns the new version. AlreadyExists / FailedPrecondition otherwise."""
        return documents.put_system_document(self, kind, name, body, expected_version)

    def delete_system_document(
        self, kind: str, name: str, expected_version: int | None = None
    ) -> bool:
        """Remove a system document and its log; True when it existed. With
        ``expected_version``, FailedPrecondition when it is at another version."""
        return documents.delete_system_document(self, kind, name, expected_version)

    def append_system_log(self, kind: str, name: str, entry: Mapping[str, Any]) -> None:
        """Append a JSON object to the log of kind/name; it is stamped with ``time`` (µs)."""
        documents.append_system_log(self, kind, name, entry)

    def system_log(self, kind: str, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """The last ``limit`` entries of the log of kind/name, oldest first."""
        return documents.system_log(self.connection(), kind, name, limit)

    # -- splits ------------------------------------------------------------------------------

    def change_split_boundary(self, boundary: bytes, merge: bool) -> int:
        """Split at an encoded ``boundary``, or merge the splits meeting there; returns when."""
        with self.write() as ctx:
            ts = ctx.allocate_commit_ts()
            if merge:
                split_ops.merge_at(ctx.conn, ctx.splits, boundary, ts)
            else:
                split_ops.split_at(ctx.conn, ctx.splits, boundary, ts)
            ctx.splits_changed = True
        return ts

    def split_at(self, table: str, key: Sequence[Any]) -> int:
        """Split the split holding ``key`` of ``table`` at that key; returns the split time."""
        return self.change_split_boundary(encode_key(self.catalog().table(table), key), False)

    def merge_at(self, table: str, key: Sequence[Any]) -> int:
        """Merge the two splits meeting at ``key`` of ``table``; returns the merge time."""
        return self.change_split_boundary(encode_key(self.catalog().table(table), key), True)

    def split_policy(self) -> SplitPolicy:
        """The database's split policy (shared by every process)."""
        return load_policy(self.connection())

    def set_split_policy(self, policy: SplitPolicy | None = None, **changes: Any) -> SplitPolicy:
        """Replace the split policy, or change some of its settings; returns the new one."""
        with self.locked() as conn:
            updated = (policy or load_policy(conn)).replace(**changes)
            save_policy(conn, updated)
        return updated

    def rebalance(self) -> list[Action]:
        """Apply the split policy now; returns the splits and merges made."""
        return self._rebalancer.run_once()

    def delete_expired_rows(self) -> int:
        """Apply every table's row deletion policy now; returns the rows deleted. The
        background loop that runs the split policy also does this, once per check interval."""
        from changestream.store.row_deletion import delete_expired_rows  # it builds on Store

        return delete_expired_rows(self)
