"""What a MySQL or MariaDB server must offer a source, checked with clear errors, the shape of
the tables it mirrors, and the binlog positions a connector starts from.

A source's DSN is ``mysql://user:password@host:port/database`` (``?unix_socket=PATH`` for a
local socket); ``database`` holds the tables named without one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

from changestream.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from changestream.retry import retrying
from changestream.sources.definition import MirroredTable
from changestream.sources.mysql_types import MySqlColumn, column_type

log = logging.getLogger(__name__)

CONNECT_ATTEMPTS = 5

#: What the binlog must be like for a source, and what to set otherwise.
_REQUIRED = {
    "log_bin": "ON",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
}


def _pymysql() -> Any:
    try:
        import pymysql  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - the sources extra is missing
        raise FailedPrecondition(
            "MySQL sources need mysql-replication: pip install 'changestream[sources]'"
        ) from exc
    return pymysql


def server_error() -> type[Exception]:
    """The base class of what the MySQL client raises (lost connection, failed query)."""
    return cast(type[Exception], _pymysql().Error)


def reason(error: BaseException) -> str:
    """What the server or client said, for an error message."""
    args: tuple[Any, ...] = getattr(error, "args", ())
    if len(args) == 2 and isinstance(args[1], str):
        return f"{args[1]} (error {args[0]})"
    return str(error) or type(error).__name__


def connect_args(dsn: str) -> dict[str, Any]:
    """The client's connection arguments for ``mysql://user:password@host:port/database``."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("mysql", "mariadb"):
        raise InvalidArgument(
            f"a MySQL source's DSN is mysql://user:password@host:port/database, got {dsn!r}"
        )
    args: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "charset": "utf8mb4",
    }
    socket = parse_qs(parts.query).get("unix_socket")
    if socket:
        args["unix_socket"] = socket[0]
    return args


def same_server(dsn: str, other: str) -> bool:
    """Whether two DSNs reach the same server (its host and port, or its socket)."""
    a, b = connect_args(dsn), connect_args(other)
    return all(a.get(k) == b.get(k) for k in ("host", "port", "unix_socket"))


def default_database(dsn: str) -> str | None:
    """The database a DSN names, if any."""
    name = unquote(urlsplit(dsn).path.lstrip("/"))
    return name or None


def connect(dsn: str) -> Any:
    """A connection to ``dsn`` (times in UTC), retried with backoff while the server cannot be
    reached; Unavailable naming the server when it never answers."""
    pymysql = _pymysql()
    args = connect_args(dsn)

    def attempt() -> Any:
        return pymysql.connect(**args, connect_timeout=5, init_command="SET time_zone = '+00:00'")

    def unreachable(exc: BaseException) -> bool:
        return isinstance(exc, pymysql.OperationalError) and exc.args[0] in (2002, 2003, 2013)

    try:
        return retrying(unreachable, first=0.2, most=2.0, attempts=CONNECT_ATTEMPTS)(attempt)
    except pymysql.OperationalError as exc:
        raise Unavailable(f"cannot reach the MySQL server of the source: {reason(exc)}") from exc


@contextmanager
def session(dsn: str) -> Iterator[Any]:
    """A connection (autocommit), closed afterwards."""
    conn = connect(dsn)
    conn.autocommit(True)
    try:
        yield conn
    finally:
        conn.close()


@contextmanager
def definitions_held(conn: Any, tables: tuple[str, ...]) -> Iterator[None]:
    """While the block runs, no ``ALTER TABLE`` of ``tables`` can finish, so what the catalog
    says of them holds still (an ALTER that copies a table takes it out of the catalog, and
    its primary key, for a moment). Each table is read in one transaction, which holds its
    shared metadata lock until the block ends; an ALTER finishing meanwhile is waited for.
    ``conn`` is in autocommit."""
    with conn.cursor() as cur:
        cur.execute("START TRANSACTION")
        try:
            for table in tables:
                database, _, name = table.partition(".")
                try:
                    cur.execute(f"SELECT 1 FROM {_quoted(database)}.{_quoted(name)} LIMIT 0")
                except server_error() as exc:
                    if exc.args and exc.args[0] == _NO_SUCH_TABLE:
                        raise NotFound(f"the source has no table {table}") from exc
                    raise
            yield
        finally:
            conn.rollback()


#: The server's error number for a table that does not exist.
_NO_SUCH_TABLE = 1146


def is_mariadb(conn: Any) -> bool:
    return "mariadb" in str(conn.get_server_info()).lower()


def check_server(conn: Any) -> None:
    """The binlog settings and privileges a source needs: FailedPrecondition naming what to
    change."""
    with conn.cursor() as cur:
        cur.execute(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
            "('log_bin', 'binlog_format', 'binlog_row_image', 'binlog_row_metadata')"
        )
        settings = {str(k).lower(): str(v).upper() for k, v in cur.fetchall()}
        for name, needed in _REQUIRED.items():
            value = settings.get(name, "(absent: the server is too old)")
            if value != needed:
                raise FailedPrecondition(
                    f"the source's server has {name} = {value}; a source needs {name} = {needed} "
                    "(set it in the server's configuration and restart it)"
                )
        cur.execute("SHOW GRANTS")
        grants = " ".join(str(row[0]).upper() for row in cur.fetchall())
    replicates = "REPLICATION SLAVE" in grants or "REPLICATION REPLICA" in grants
    if not replicates and "ALL PRIVILEGES ON *.*" not in grants:
        raise FailedPrecondition(
            "the source's user lacks the REPLICATION SLAVE privilege "
            "(GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO <user>; on MariaDB also "
            "BINLOG MONITOR)"
        )


def all_tables(conn: Any, database: str) -> tuple[str, ...]:
    """Every base table of ``database``, as ``database.table``."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "AND table_type = 'BASE TABLE' ORDER BY table_name",
            (database,),
        )
        return tuple(f"{database}.{name}" for (name,) in cur.fetchall())


def columns(conn: Any, table: str) -> list[MySqlColumn]:
    """The columns of source table ``database.table``, in order; NotFound when it is not
    there."""
    database, _, name = table.partition(".")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT column_name, data_type, column_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (database, name),
        )
        rows = cur.fetchall()
        if not rows:
            raise NotFound(f"the source has no table {table}")
        json_columns: set[str] = set()
        if is_mariadb(conn):
            cur.execute(
                "SELECT check_clause FROM information_schema.check_constraints "
                "WHERE constraint_schema = %s AND table_name = %s",
                (database, name),
            )
            for (clause,) in cur.fetchall():
                text = str(clause).strip()
                if text.lower().startswith("json_valid(`") and text.endswith("`)"):
                    json_columns.add(text[len("json_valid(`") : -2])
    return [MySqlColumn(str(n), str(d), str(t), str(n) in json_columns) for n, d, t in rows]


def existing_rows_value(conn: Any, table: str, column: str) -> Any:
    """What the rows source table ``database.table`` had when ``column`` was added read in it
    (as a SELECT gives it): the column's constant DEFAULT, which the server applies to them
    without a binlog row event. None for no default, a NULL one, or an expression (each row
    may have its own value, which the binlog does not carry either: a warning says so)."""
    database, _, name = table.partition(".")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT column_default, extra FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s AND column_name = %s",
            (database, name, column),
        )
        found = cur.fetchone()
        if found is None or found[0] is None:
            return None
        default, extra = str(found[0]), str(found[1] or "")
        if is_mariadb(conn):
            # MariaDB shows a constant as its literal (quoted when a string) and an expression
            # as its text; NULL as NULL.
            if default == "NULL":
                return None
            constant = default.startswith("'") or _is_number(default)
        else:
            constant = "DEFAULT_GENERATED" not in extra.upper()
        if not constant:
            log.warning(
                "source table %s: column %s came with the default %s, which the server gave "
                "the existing rows without binlog row events: in the mirror those rows read "
                "NULL in it until they change",
                table,
                column,
                default,
            )
            return None
        where = f"{_quoted(database)}.{_quoted(name)}"
        cur.execute(f"SELECT DEFAULT({_quoted(column)}) FROM {where} LIMIT 1")
        row = cur.fetchone()
    return None if row is None else row[0]


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def describe(conn: Any, table: str, mirror: str) -> MirroredTable:
    """The columns, mirrored types and primary key of source table ``database.table``."""
    described = columns(conn, table)
    database, _, name = table.partition(".")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT column_name FROM information_schema.key_column_usage "
            "WHERE table_schema = %s AND table_name = %s AND constraint_name = 'PRIMARY' "
            "ORDER BY ordinal_position",
            (database, name),
        )
        key = tuple(str(column) for (column,) in cur.fetchall())
    if not key:
        raise FailedPrecondition(
            f"source table {table} has no primary key; a mirror needs one to apply updates and "
            f"deletes (ALTER TABLE {table} ADD PRIMARY KEY (...)), or leave it out of --tables"
        )
    return MirroredTable(
        source=table,
        mirror=mirror,
        columns=tuple(c.name for c in described),
        types=tuple(column_type(c, table) for c in described),
        primary_key=key,
    )


def binlog_position(conn: Any) -> tuple[str, int]:
    """Where the server's binlog ends now: (file, offset)."""
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    if row is None:
        raise FailedPrecondition("the source's server writes no binlog (log_bin = OFF)")
    return str(row[0]), int(row[1])


def start_snapshot(conn: Any) -> tuple[str, int]:
    """Begin a consistent-snapshot transaction on ``conn`` and return the binlog position it
    matches: every transaction before it is in the snapshot, none after it."""
    with conn.cursor() as cur:
        if is_mariadb(conn):
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            found = {str(k).lower(): str(v) for k, v in cur.fetchall()}
            return found["binlog_snapshot_file"], int(found["binlog_snapshot_position"])
        # MySQL has no snapshot position: hold writes still while the snapshot starts.
        cur.execute("FLUSH TABLES WITH READ LOCK")
        try:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            position = binlog_position(conn)
        finally:
            cur.execute("UNLOCK TABLES")
        return position


def replica_host(name: str) -> str:
    """The host a connector reports to the server as a replica (``SHOW SLAVE HOSTS``), so a
    connector of another source sees the server id it uses."""
    return f"changestream:{name}"[:60]


def check_server_id(conn: Any, server_id: int, name: str) -> None:
    """Refuse ``server_id`` when another replica of the server uses it: the server cuts a
    replica off whenever another connects with its id, so the two would take turns, each
    reconnecting, and a real replica of the server would be disturbed as well.

    The server lists the replicas that report themselves (MySQL's and MariaDB's replicas
    do, and so do connectors). Listing them needs a privilege a connector may lack
    (``REPLICATION SLAVE``, or ``REPLICATION MASTER ADMIN`` on MariaDB 10.5 and later): then
    a warning says the check was skipped."""
    statements = ["SHOW SLAVE HOSTS"] if is_mariadb(conn) else ["SHOW REPLICAS", "SHOW SLAVE HOSTS"]
    refused: Exception | None = None
    for statement in statements:
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                replicas = cur.fetchall()
        except server_error() as exc:
            refused = exc
            continue
        for row in replicas:
            if int(row[0]) == server_id and row[1] != replica_host(name):
                where = f"{row[1]}:{row[2]}" if row[1] else "a replica that reports no host"
                raise FailedPrecondition(
                    f"source {name}: server id {server_id} is in use by another replica of "
                    f"the server ({where}), which the server would cut off each time this "
                    f"connector connects; give the source its own: changestream sources "
                    f"remove {name}, then sources add {name} ... --server-id N"
                )
        return
    assert refused is not None, "a statement ran or was refused"
    log.warning(
        "source %s: the server's replicas could not be listed (%s), so whether another uses "
        "server id %d was not checked",
        name,
        reason(refused),
        server_id,
    )


def lock_source(conn: Any, name: str) -> None:
    """Hold the session lock that makes this connector the only one of its source (released
    when the session ends, a killed connector's included)."""
    with conn.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, 0)", (f"changestream:{name}",))
        (locked,) = cur.fetchone()
    if locked != 1:
        raise FailedPrecondition(f"source {name} is in use by another connector")
