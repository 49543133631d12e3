"""What a PostgreSQL server must offer a source, checked with clear errors, and the shape of
the tables it mirrors."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from changestream.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from changestream.retry import retrying
from changestream.sources.definition import MirroredTable
from changestream.sources.pg_types import PgColumn, column_type
from changestream.sources.pgoutput import parse_lsn
from changestream.types import ColumnType

log = logging.getLogger(__name__)

#: Every session a source opens reads and writes times in UTC.
SESSION_OPTIONS = "-c TimeZone=UTC -c bytea_output=hex -c DateStyle=ISO"
CONNECT_ATTEMPTS = 5


def _psycopg2() -> Any:
    try:
        import psycopg2  # type: ignore[import-untyped]
        import psycopg2.extras  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - the sources extra is missing
        raise FailedPrecondition(
            "PostgreSQL sources need psycopg2: pip install 'changestream[sources]'"
        ) from exc
    return psycopg2


def reason(error: BaseException) -> str:
    """The first line of what the server or client said, for an error message."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def server_error() -> type[Exception]:
    """The base class of what the PostgreSQL client raises (lost connection, failed query)."""
    return cast(type[Exception], _psycopg2().Error)


def connect(dsn: str, replication: bool = False) -> Any:
    """A connection to ``dsn`` (a replication one when asked), retried with backoff while the
    server cannot be reached; Unavailable naming the server when it never answers."""
    psycopg2 = _psycopg2()
    factory = psycopg2.extras.LogicalReplicationConnection if replication else None

    def attempt() -> Any:
        return psycopg2.connect(
            dsn, connection_factory=factory, options=SESSION_OPTIONS, connect_timeout=5
        )

    def unreachable(exc: BaseException) -> bool:
        return isinstance(exc, psycopg2.OperationalError)

    try:
        return retrying(unreachable, first=0.2, most=2.0, attempts=CONNECT_ATTEMPTS)(attempt)
    except psycopg2.OperationalError as exc:
        said = reason(exc)
        raise Unavailable(f"cannot reach the PostgreSQL server of the source: {said}") from exc


@contextmanager
def session(dsn: str) -> Iterator[Any]:
    """A plain connection, closed afterwards."""
    conn = connect(dsn)
    try:
        yield conn
    finally:
        conn.close()


def check_server(conn: Any) -> None:
    """The settings logical replication needs: FailedPrecondition naming what to change."""
    with conn.cursor() as cur:
        cur.execute("SHOW wal_level")
        (level,) = cur.fetchone()
        if level != "logical":
            raise FailedPrecondition(
                f"the source's server has wal_level = {level}; a source needs wal_level = logical "
                "(set it in postgresql.conf and restart the server)"
            )
        cur.execute("SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user")
        (allowed,) = cur.fetchone()
        if not allowed:
            raise FailedPrecondition(
                "the source's user lacks the REPLICATION privilege "
                "(ALTER ROLE <user> WITH REPLICATION)"
            )


def all_tables(conn: Any) -> tuple[str, ...]:
    """Every ordinary table of the ``public`` schema (a partitioned one's partitions, not the
    table itself), as ``public.table``."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
            "AND relkind = 'r' ORDER BY relname"
        )
        return tuple(f"public.{name}" for (name,) in cur.fetchall())


def table_oid(conn: Any, table: str) -> int | None:
    """The oid of source table ``schema.table`` now (None when there is none)."""
    schema, _, name = table.partition(".")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
            (schema, name),
        )
        found = cur.fetchone()
    return None if found is None else int(found[0])


def describe(conn: Any, table: str, mirror: str) -> MirroredTable:
    """The columns, mirrored types and primary key of source table ``schema.table``."""
    oid = table_oid(conn, table)
    if oid is None:
        raise NotFound(f"the source has no table {table}")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT array(SELECT inhrelid::regclass::text FROM pg_inherits "
            "WHERE inhparent = %s ORDER BY 1) FROM pg_class WHERE oid = %s AND relkind = 'p'",
            (oid, oid),
        )
        partitioned = cur.fetchone()
        if partitioned is not None:
            raise FailedPrecondition(
                f"source table {table} is partitioned: logical decoding sends its changes "
                "under its partitions' names; capture its partitions instead "
                f"({', '.join(partitioned[0]) or 'it has none yet'})"
            )
        cur.execute(
            "SELECT a.attname, "
            "CASE WHEN t.typcategory = 'A' THEN e.typname ELSE t.typname END, "
            "t.typcategory = 'A', "
            "CASE WHEN t.typcategory = 'A' THEN e.typtype ELSE t.typtype END = 'e', "
            "format_type(a.atttypid, a.atttypmod), "
            "COALESCE(a.attnum = ANY(i.indkey), false) "
            "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "LEFT JOIN pg_type e ON e.oid = t.typelem "
            "LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary "
            "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' "
            "ORDER BY a.attnum",
            (oid,),
        )
        rows = cur.fetchall()
        cur.execute(
            "SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(attnum, n) "
            "JOIN pg_attribute a ON a.attnum = k.attnum "
            "WHERE i.indrelid = %s AND i.indisprimary AND a.attrelid = %s ORDER BY k.n",
            (oid, oid),
        )
        key = tuple(attname for (attname,) in cur.fetchall())
    if not key:
        raise FailedPrecondition(
            f"source table {table} has no primary key; a mirror needs one to apply updates and "
            f"deletes (ALTER TABLE {table} ADD PRIMARY KEY (...)), or leave it out of --tables"
        )
    columns = [PgColumn(r[0], r[1], r[2], r[3], r[4]) for r in rows]
    return MirroredTable(
        source=table,
        mirror=mirror,
        columns=tuple(c.name for c in columns),
        types=tuple(column_type(c, table) for c in columns),
        primary_key=key,
    )


def type_of(conn: Any, type_oid: int, column: str, table: str) -> ColumnType:
    """The mirrored type of a column added to ``table`` since it was described."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT CASE WHEN t.typcategory = 'A' THEN e.typname ELSE t.typname END, "
            "t.typcategory = 'A', "
            "CASE WHEN t.typcategory = 'A' THEN e.typtype ELSE t.typtype END = 'e', "
            "format_type(t.oid, NULL) FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem "
            "WHERE t.oid = %s",
            (type_oid,),
        )
        row = cur.fetchone()
    if row is None:
        raise InvalidArgument(f"column {column!r} of {table} has an unknown type (oid {type_oid})")
    return column_type(PgColumn(column, row[0], row[1], row[2], row[3]), table)


def existing_rows_value(conn: Any, table: str, column: str) -> str | None:
    """The text form of what the rows source table ``schema.table`` had when ``column`` was
    added read in it: PostgreSQL (11+) keeps an ``ADD COLUMN ... DEFAULT`` of a non-volatile
    default as the column's missing value instead of rewriting the table, and logical
    decoding sends no change for those rows. None when there is none: no default, or a
    volatile one each row got in a rewrite (which decoding does not send either)."""
    schema, _, name = table.partition(".")
    with conn.cursor() as cur:
        # The missing value is a one-element array of the column's type; read as text[], its
        # element is the value's text form (in this session's UTC and hex settings).
        cur.execute(
            "SELECT a.atthasmissing, a.atthasdef, (a.attmissingval::text::text[])[1] "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND a.attname = %s AND NOT a.attisdropped",
            (schema, name, column),
        )
        found = cur.fetchone()
    if found is None:
        return None
    has_missing, has_default, text = found
    if has_default and not has_missing:
        log.warning(
            "source table %s: column %s has a default but no value kept for the rows the "
            "table had when it was added. If it came with a volatile default (random()), "
            "PostgreSQL gave those rows values by rewriting the table, which logical decoding "
            "does not send: in the mirror they read NULL in it until they change",
            table,
            column,
        )
    return cast(str | None, text) if has_missing else None


def ensure_publication(conn: Any, publication: str, tables: tuple[str, ...]) -> None:
    """Create the publication for ``tables`` unless it exists (then it must cover them)."""
    covered = published_tables(conn, publication)
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
        exists = cur.fetchone() is not None
        if exists:
            missing = [t for t in tables if t not in covered]
            if missing:
                raise FailedPrecondition(
                    f"publication {publication} exists but does not publish {', '.join(missing)}"
                )
            return
        listed = ", ".join(_quoted(t) for t in tables)
        cur.execute(f"CREATE PUBLICATION {publication} FOR TABLE {listed}")
    conn.commit()


def published_tables(conn: Any, publication: str) -> set[str]:
    """The tables (``schema.table``) ``publication`` publishes now."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s",
            (publication,),
        )
        return {name for (name,) in cur.fetchall()}


def publish(conn: Any, publication: str, table: str) -> None:
    """Add ``table`` to ``publication`` unless it publishes it (a table dropped and created
    again left it). ``conn`` is in autocommit.

    No transaction writes the table while the publication changes: logical decoding sends
    the changes of one that wrote it across the change only from where the change committed
    (the first rows of an UPDATE went missing that way)."""
    if table in published_tables(conn, publication):
        return
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        try:
            cur.execute(f"LOCK TABLE {_quoted(table)} IN SHARE MODE")
            cur.execute(f"ALTER PUBLICATION {publication} ADD TABLE {_quoted(table)}")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")


def current_lsn(conn: Any) -> int:
    """The server's WAL position now."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        (lsn,) = cur.fetchone()
    return parse_lsn(lsn)


def _quoted(table: str) -> str:
    schema, _, name = table.partition(".")
    return f'"{schema}"."{name}"'


def lock_source(conn: Any, slot: str) -> None:
    """Hold the session lock that makes this connector the only one of its slot (released
    when the session ends, a killed connector's included)."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (f"changestream:{slot}",))
        (locked,) = cur.fetchone()
    if not locked:
        raise FailedPrecondition(
            f"replication slot {slot} is in use by another connector of this source"
        )


def check_alive(conn: Any) -> None:
    """A round trip on ``conn``: raises when its session is gone."""
    with conn.cursor() as cur:
        cur.execute("SELECT 1")


def slot_exists(conn: Any, slot: str) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        return cur.fetchone() is not None


def drop_slot(conn: Any, slot: str) -> None:
    """Drop ``slot`` if it exists."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (slot,),
        )


#: The prefix of the connector's own logical decoding messages.
MARKER_PREFIX = "changestream.caught_up"


def emit_marker(conn: Any) -> bytes:
    """Commit a logical decoding message that comes after every commit made so far; the
    connector has caught up when it reads it. Returns the message's (unique) content."""
    content = uuid.uuid4().hex.encode()
    with conn.cursor() as cur:
        cur.execute("SELECT pg_logical_emit_message(true, %s, %s::bytea)", (MARKER_PREFIX, content))
    conn.commit()
    return content
