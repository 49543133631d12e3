"""Adding, listing, describing, removing and running sources."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from changestream.errors import AlreadyExists, FailedPrecondition, NotFound
from changestream.sources import pg_catalog
from changestream.sources.definition import (
    DEFINITION_KIND,
    POSITION_KIND,
    SourceDefinition,
    SourcePosition,
    check_name,
    table_names,
)
from changestream.sources.pgoutput import lsn_text
from changestream.sources.postgres import PostgresConnector, Progress, RunSummary
from changestream.streams.origins import ORIGIN_KIND, TableOrigin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from changestream.embedded import EmbeddedDatabase


def add_source(
    db: EmbeddedDatabase,
    name: str,
    *,
    postgres: str,
    tables: Sequence[str] | str | None = None,
    slot: str | None = None,
    publication: str | None = None,
) -> SourceDefinition:
    """Record a PostgreSQL source: check the server and its tables, create a mirror table for
    each (``<schema>_<table>``), the change stream ``name`` over them (NEW_ROW_AND_OLD_VALUES)
    and the publication. Nothing is created when a check fails. Run it with :func:`run_source`."""
    check_name(name, "a source name")
    slot = check_name(slot or f"changestream_{name.lower()}", "--slot")
    publication = check_name(publication or f"changestream_{name.lower()}", "--publication")
    if name in db.system_documents(DEFINITION_KIND):
        raise AlreadyExists(f"source {name} already exists")
    chosen = table_names(tables)
    with pg_catalog.session(postgres) as conn:
        pg_catalog.check_server(conn)
        listed = chosen if chosen is not None else pg_catalog.all_tables(conn)
        if not listed:
            raise FailedPrecondition("the source has no table in schema public; name --tables")
        definition = SourceDefinition(name, "postgres", postgres, listed, slot, publication)
        mirrored = [pg_catalog.describe(conn, t, definition.mirror(t)) for t in listed]
        existing = {t.name for t in db.tables()}
        clash = [m.mirror for m in mirrored if m.mirror in existing]
        if clash:
            raise AlreadyExists(f"the database already has table(s) {', '.join(clash)}")
        mirrors = ", ".join(m.mirror for m in mirrored)
        db.execute_ddl(
            [
                *(m.ddl() for m in mirrored),
                f"CREATE CHANGE STREAM {name} FOR {mirrors} OPTIONS "
                "(value_capture_type = 'NEW_ROW_AND_OLD_VALUES', allow_txn_exclusion = true)",
            ]
        )
        pg_catalog.ensure_publication(conn, publication, listed)
    for table in listed:
        schema, _, source_table = table.partition(".")
        origin = TableOrigin("postgresql", name, schema, source_table)
        mirror = definition.mirror(table)
        current = db.system_documents(ORIGIN_KIND).get(mirror)
        version = None if current is None else current.version
        db.put_system_document(ORIGIN_KIND, mirror, origin.to_json(), version)
    db.put_system_document(DEFINITION_KIND, name, definition.to_json(), None)
    return definition


def list_sources(db: EmbeddedDatabase) -> list[SourceDefinition]:
    """Every source of the database, by name."""
    documents = db.system_documents(DEFINITION_KIND)
    return [SourceDefinition.from_json(documents[n].body) for n in sorted(documents)]


def describe_source(db: EmbeddedDatabase, name: str) -> dict[str, Any]:
    """A source's definition and how far it has got (``state``: new, copying or streaming)."""
    definition = _definition(db, name)
    position = _position(db, name)
    return {
        **definition.to_json(),
        "mirrors": [definition.mirror(t) for t in definition.tables],
        "state": "new" if position is None else position.state,
        "lsn": None if position is None else lsn_text(position.lsn),
    }


def remove_source(db: EmbeddedDatabase, name: str) -> None:
    """Forget a source and drop its replication slot and publication on the server. Its
    mirror tables and change stream stay (drop them with DDL when no longer wanted)."""
    definition = _definition(db, name)
    with pg_catalog.session(definition.dsn) as conn:
        conn.autocommit = True
        pg_catalog.lock_source(conn, definition.slot)
        pg_catalog.drop_slot(conn, definition.slot)
        with conn.cursor() as cur:
            cur.execute(f"DROP PUBLICATION IF EXISTS {definition.publication}")
    for kind in (POSITION_KIND, DEFINITION_KIND):
        document = db.system_documents(kind).get(name)
        if document is not None:
            db.delete_system_document(kind, name, document.version)


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
    connector = PostgresConnector(db, definition, _position(db, name), progress)
    return connector.run(stop or threading.Event(), until_caught_up)


def _definition(db: EmbeddedDatabase, name: str) -> SourceDefinition:
    document = db.system_documents(DEFINITION_KIND).get(name)
    if document is None:
        raise NotFound(f"no source named {name!r}")
    return SourceDefinition.from_json(document.body)


def _position(db: EmbeddedDatabase, name: str) -> SourcePosition | None:
    document = db.system_documents(POSITION_KIND).get(name)
    return None if document is None else SourcePosition.from_json(document.body)
