"""Adding, listing, describing, removing and running sources."""

from __future__ import annotations

import threading
import zlib
from typing import TYPE_CHECKING, Any

from changestream.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from changestream.sources import mysql_catalog, pg_catalog
from changestream.sources.definition import (
    COLUMNS_KIND,
    DEFINITION_KIND,
    POSITION_KIND,
    MirroredTable,
    SourceDefinition,
    SourcePosition,
    check_name,
    table_names,
)
from changestream.sources.mysql import MySqlConnector
from changestream.sources.pgoutput import lsn_text
from changestream.sources.postgres import PostgresConnector
from changestream.sources.summary import Progress, RunSummary
from changestream.streams.origins import ORIGIN_KIND, TableOrigin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from changestream.embedded import EmbeddedDatabase


def add_source(
    db: EmbeddedDatabase,
    name: str,
    *,
    postgres: str | None = None,
    mysql: str | None = None,
    tables: Sequence[str] | str | None = None,
    slot: str | None = None,
    publication: str | None = None,
    server_id: int | None = None,
) -> SourceDefinition:
    """Record a PostgreSQL (``postgres`` DSN) or MySQL / MariaDB (``mysql`` DSN) source: check
    the server and its tables, create a mirror table for each (``<schema>_<table>``), and the
    change stream ``name`` over them (NEW_ROW_AND_OLD_VALUES); for PostgreSQL also the
    publication. Nothing is created when a check fails. Run it with :func:`run_source`."""
    check_name(name, "a source name")
    if (postgres is None) == (mysql is None):
        raise InvalidArgument("name the source's server: --postgres DSN or --mysql DSN")
    if name in db.system_documents(DEFINITION_KIND):
        raise AlreadyExists(f"source {name} already exists")
    if postgres is not None:
        definition = _add_postgres(db, name, postgres, tables, slot, publication)
    else:
        assert mysql is not None
        if slot is not None or publication is not None:
            raise InvalidArgument(
                "--slot and --publication are PostgreSQL's; a MySQL source has none"
            )
        definition = _add_mysql(db, name, mysql, tables, server_id)
    db.put_system_document(DEFINITION_KIND, name, definition.to_json(), None)
    return definition


def _add_postgres(
    db: EmbeddedDatabase,
    name: str,
    dsn: str,
    tables: Sequence[str] | str | None,
    slot: str | None,
    publication: str | None,
) -> SourceDefinition:
    slot = check_name(slot or f"changestream_{name.lower()}", "--slot")
    publication = check_name(publication or f"changestream_{name.lower()}", "--publication")
    chosen = table_names(tables)
    with pg_catalog.session(dsn) as conn:
        pg_catalog.check_server(conn)
        if pg_catalog.slot_exists(conn, slot):
            # Another consumer's, perhaps: the connector drops and recreates its own slot.
            raise AlreadyExists(
                f"replication slot {slot} already exists on the source's server; name another "
                "with --slot (or drop it there if nothing uses it)"
            )
        listed = chosen if chosen is not None else pg_catalog.all_tables(conn)
        if not listed:
            raise FailedPrecondition("the source has no table in schema public; name --tables")
        definition = SourceDefinition(name, "postgres", dsn, listed, slot, publication)
        _create_mirrors(
            db, definition, [pg_catalog.describe(conn, t, definition.mirror(t)) for t in listed]
        )
        pg_catalog.ensure_publication(conn, publication, listed)
    return definition


def _add_mysql(
    db: EmbeddedDatabase,
    name: str,
    dsn: str,
    tables: Sequence[str] | str | None,
    server_id: int | None,
) -> SourceDefinition:
    database = mysql_catalog.default_database(dsn)
    if server_id is None:
        server_id = 1_000_000 + zlib.crc32(name.encode()) % 1_000_000
    elif not 1 <= server_id < 2**32:
        raise InvalidArgument(f"--server-id must be between 1 and 4294967295, got {server_id}")
    for other in list_sources(db):
        if (
            other.kind == "mysql"
            and other.server_id == server_id
            and mysql_catalog.same_server(other.dsn, dsn)
        ):
            raise InvalidArgument(
                f"source {other.name} reads the same server with server id {server_id}; the "
                "server lets one replica at a time use an id: give this one its own with "
                "--server-id"
            )
    if tables is None and database is None:
        raise InvalidArgument("name --tables, or the database in the DSN (mysql://.../database)")
    chosen = table_names(tables, database or "")
    with mysql_catalog.session(dsn) as conn:
        mysql_catalog.check_server(conn)
        listed = chosen if chosen is not None else mysql_catalog.all_tables(conn, database or "")
        if not listed:
            raise FailedPrecondition(
                f"the source has no table in database {database}; name --tables"
            )
        definition = SourceDefinition(name, "mysql", dsn, listed, server_id=server_id)
        _create_mirrors(
            db, definition, [mysql_catalog.describe(conn, t, definition.mirror(t)) for t in listed]
        )
    return definition


def _create_mirrors(
    db: EmbeddedDatabase, definition: SourceDefinition, mirrored: list[MirroredTable]
) -> None:
    """The mirror tables, the change stream over them, and each mirror's origin."""
    existing = {t.name for t in db.tables()}
    clash = [m.mirror for m in mirrored if m.mirror in existing]
    if clash:
        raise AlreadyExists(f"the database already has table(s) {', '.join(clash)}")
    mirrors = ", ".join(m.mirror for m in mirrored)
    db.execute_ddl(
        [
            *(m.ddl() for m in mirrored),
            f"CREATE CHANGE STREAM {definition.name} FOR {mirrors} OPTIONS "
            "(value_capture_type = 'NEW_ROW_AND_OLD_VALUES', allow_txn_exclusion = true)",
        ]
    )
    kind = "postgresql" if definition.kind == "postgres" else "mysql"
    for table in definition.tables:
        schema, _, source_table = table.partition(".")
        origin = TableOrigin(kind, definition.name, schema, source_table)
        mirror = definition.mirror(table)
        current = db.system_documents(ORIGIN_KIND).get(mirror)
        version = None if current is None else current.version
        db.put_system_document(ORIGIN_KIND, mirror, origin.to_json(), version)


def list_sources(db: EmbeddedDatabase) -> list[SourceDefinition]:
    """Every source of the database, by name."""
    documents = db.system_documents(DEFINITION_KIND)
    return [SourceDefinition.from_json(documents[n].body) for n in sorted(documents)]


def describe_source(db: EmbeddedDatabase, name: str) -> dict[str, Any]:
    """A source's definition and how far it has got (``state``: new, copying or streaming;
    while copying, ``copy_progress``)."""
    definition = _definition(db, name)
    position = _position(db, name)
    described = {
        **definition.to_json(),
        "mirrors": [definition.mirror(t) for t in definition.tables],
        "state": "new" if position is None else position.state,
    }
    if position is not None and position.state == "copying":
        # Per table: true once copied, else the last key copied (absent: not begun).
        described["copy_progress"] = position.progress
    if definition.kind == "mysql":
        described["log_file"] = None if position is None else position.log_file
        described["log_position"] = None if position is None else position.lsn
    else:
        described["lsn"] = None if position is None else lsn_text(position.lsn)
    return described


def remove_source(db: EmbeddedDatabase, name: str) -> None:
    """Forget a source and, for PostgreSQL, drop its replication slot and publication on the
    server. Its mirror tables and change stream stay (drop them with DDL when no longer
    wanted)."""
    definition = _definition(db, name)
    if definition.kind == "postgres":
        _remove_slot(definition)
    for kind in (POSITION_KIND, COLUMNS_KIND, DEFINITION_KIND):
        document = db.system_documents(kind).get(name)
        if document is not None:
            db.delete_system_document(kind, name, document.version)


def _remove_slot(definition: SourceDefinition) -> None:
    with pg_catalog.session(definition.dsn) as conn:
        conn.autocommit = True
        pg_catalog.lock_source(conn, definition.slot)
        pg_catalog.drop_slot(conn, definition.slot)
        with conn.cursor() as cur:
            cur.execute(f"DROP PUBLICATION IF EXISTS {definition.publication}")


def run_source(
    db: EmbeddedDatabase,
    name: str,
    *,
    stop: threading.Event | None = None,
    until_caught_up: bool = False,
    progress: Progress | None = None,
) -> RunSummary:
    """Run the source's connector until ``stop`` is set or, with ``until_caught_up``, until
    every source commit made before the call is in the mirror tables and the change stream."""
    definition = _definition(db, name)
    position = _position(db, name)
    connector: PostgresConnector | MySqlConnector
    if definition.kind == "mysql":
        connector = MySqlConnector(db, definition, position, progress)
    else:
        connector = PostgresConnector(db, definition, position, progress)
    return connector.run(stop or threading.Event(), until_caught_up)


def _definition(db: EmbeddedDatabase, name: str) -> SourceDefinition:
    document = db.system_documents(DEFINITION_KIND).get(name)
    if document is None:
        raise NotFound(f"no source named {name!r}")
    return SourceDefinition.from_json(document.body)


def _position(db: EmbeddedDatabase, name: str) -> SourcePosition | None:
    document = db.system_documents(POSITION_KIND).get(name)
    return None if document is None else SourcePosition.from_json(document.body)
