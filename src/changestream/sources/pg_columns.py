"""Which PostgreSQL column and table is which: the number (``attnum``) and type of a table's
columns, a table's oid, and event triggers that write them into the WAL after every ``ALTER
TABLE`` or ``CREATE TABLE`` and every dropped table.

Logical decoding sends no DDL, and a relation message names a table's columns and their types
only. So a column renamed looks like one dropped and another added, and a column dropped and
added again under the same name looks like nothing happened, while PostgreSQL changed every
row without a row change (a renamed column keeps its values, a re-added one reads its new
default, one given another type holds converted values). A column's number tells them apart:
a rename keeps it, a column added gets a new one. The trigger's message comes in the DDL's own
transaction, so in the WAL's order.

A table dropped and created again under its name is another table (another oid): a publication
``FOR TABLE`` lost it with the drop, so its rows would no longer come, and nothing in the
stream says the old rows are gone. The drop's message and the new table's oid tell the
connector both.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

log = logging.getLogger("changestream.sources")

#: The prefix of the columns trigger's messages; their content is ``{"table":
#: "schema.table", "oid": oid, "columns": [[attnum, name, type oid, type modifier], ...]}``,
#: the table's columns after the statement.
COLUMNS_PREFIX = "changestream.columns"
#: The prefix of the drop trigger's messages: ``{"tables": [["schema.table", oid], ...]}``.
DROPPED_PREFIX = "changestream.dropped"
#: The event triggers (each with its function of the same name), one per server database
#: (shared by its sources).
TRIGGER = "changestream_columns"
DROP_TRIGGER = "changestream_dropped"
#: The statements after which the columns trigger tells a table's columns.
_COLUMNS_TAGS = ("ALTER TABLE", "CREATE TABLE", "CREATE TABLE AS", "SELECT INTO")

_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {TRIGGER}() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE
    relid oid;
BEGIN
    -- Without logical decoding there is nothing to tell. (No EXCEPTION block: with one, a
    -- transaction that dropped and added a column, then inserted a row, left the mirror
    -- without that column.)
    IF current_setting('wal_level') <> 'logical' THEN
        RETURN;
    END IF;
    FOR relid IN
        SELECT DISTINCT objid FROM pg_event_trigger_ddl_commands()
        WHERE classid = 'pg_class'::regclass AND object_type IN ('table', 'table column')
    LOOP
        PERFORM pg_logical_emit_message(true, '{COLUMNS_PREFIX}', json_build_object(
            'table', (
                SELECT n.nspname || '.' || c.relname FROM pg_class c
                JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = relid
            ),
            'oid', relid,
            'columns', (
                SELECT json_agg(
                    json_build_array(a.attnum, a.attname, a.atttypid, a.atttypmod)
                    ORDER BY a.attnum
                )
                FROM pg_attribute a
                WHERE a.attrelid = relid AND a.attnum > 0 AND NOT a.attisdropped
            )
        )::text);
    END LOOP;
END $$
"""

_DROP_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {DROP_TRIGGER}() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE
    dropped json;
BEGIN
    IF current_setting('wal_level') <> 'logical' THEN
        RETURN;
    END IF;
    SELECT json_agg(json_build_array(schema_name || '.' || object_name, objid)) INTO dropped
    FROM pg_event_trigger_dropped_objects()
    WHERE object_type = 'table' AND NOT is_temporary;
    IF dropped IS NOT NULL THEN
        PERFORM pg_logical_emit_message(
            true, '{DROPPED_PREFIX}', json_build_object('tables', dropped)::text
        );
    END IF;
END $$
"""

#: Each trigger: its event, the statements it fires after (None: all) and its function.
_TRIGGERS: Mapping[str, tuple[str, tuple[str, ...] | None, str]] = {
    TRIGGER: ("ddl_command_end", _COLUMNS_TAGS, _FUNCTION),
    DROP_TRIGGER: ("sql_drop", None, _DROP_FUNCTION),
}


def ensure_trigger(conn: Any) -> bool:
    """Install the event triggers unless the server database has them as this version makes
    them; False, with a warning, when this role may not (event triggers take a superuser).
    ``conn`` is in autocommit."""
    with conn.cursor() as cur:
        for name, (event, tags, function) in _TRIGGERS.items():
            cur.execute(
                "SELECT evtevent, evttags FROM pg_event_trigger WHERE evtname = %s", (name,)
            )
            found = cur.fetchone()
            if found is not None and (found[0], found[1] and tuple(found[1])) == (event, tags):
                continue
            try:
                _install(cur, name, event, tags, function)
            except Exception as exc:
                if getattr(exc, "pgcode", None) == "42710":  # another source made it meanwhile
                    continue
                if getattr(exc, "pgcode", None) != "42501":  # insufficient_privilege
                    raise
                log.warning(
                    "the source's role may not create the event trigger %s (it takes a "
                    "superuser): a column renamed, dropped and added again under the same "
                    "name, or given another type is not followed, nor a table dropped and "
                    "created again while the connector runs (the next run copies it again) "
                    "(%s)",
                    name,
                    str(exc).strip(),
                )
                return False
    return True


def _install(cur: Any, name: str, event: str, tags: tuple[str, ...] | None, function: str) -> None:
    """(Re)create event trigger ``name`` and its function (an older version's is replaced)."""
    cur.execute(function)
    cur.execute(f"DROP EVENT TRIGGER IF EXISTS {name}")
    when = "" if tags is None else f" WHEN TAG IN ({', '.join(repr(t) for t in tags)})"
    cur.execute(f"CREATE EVENT TRIGGER {name} ON {event}{when} EXECUTE FUNCTION {name}()")


#: A column's number, type oid and type modifier.
Identity = tuple[int, int, int]


def identities(conn: Any, table: str) -> dict[str, Identity]:
    """The :data:`Identity` of each column of source table ``schema.table`` now."""
    schema, _, name = table.partition(".")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT a.attname, a.attnum, a.atttypid, a.atttypmod FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped",
            (schema, name),
        )
        return {str(row[0]): (int(row[1]), int(row[2]), int(row[3])) for row in cur.fetchall()}


@dataclass(frozen=True, slots=True)
class ColumnsMessage:
    """What the columns trigger told of one table after a statement (``oid`` None: a message
    of an earlier version's trigger, which did not tell it)."""

    table: str
    oid: int | None
    columns: dict[str, Identity]


def read_message(content: bytes) -> ColumnsMessage:
    """A message of the columns trigger."""
    body = orjson.loads(content)
    oid = body.get("oid")
    return ColumnsMessage(
        str(body["table"]),
        None if oid is None else int(oid),
        {
            str(name): (int(number), int(oid), int(modifier))
            for number, name, oid, modifier in body["columns"] or ()
        },
    )


def read_dropped(content: bytes) -> dict[str, int]:
    """The tables (and their oids) a message of the drop trigger names."""
    return {str(table): int(oid) for table, oid in orjson.loads(content)["tables"]}


@dataclass
class Followed:
    """What the connector keeps of its tables as of where it has read: each one's column
    identities, the oid of the table its mirror follows (None: dropped, or a copy of a table
    created again not whole yet), for a table copied again, the LSN before that copy (its
    trigger messages up to there are in the copy), and, for a table whose identities a
    transaction not applied yet changed, that transaction's commit LSN and the identities
    it started from (:meth:`rewind`)."""

    columns: dict[str, dict[str, Identity]] = field(default_factory=dict)
    oids: dict[str, int | None] = field(default_factory=dict)
    copied: dict[str, int] = field(default_factory=dict)
    started: dict[str, tuple[int, dict[str, Identity]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._relations = frozenset(o for o in self.oids.values() if o is not None)

    def follow(self, table: str, oid: int | None) -> None:
        """The mirror of ``table`` now follows the table of oid ``oid`` (None: none)."""
        self.oids[table] = oid
        self.__post_init__()

    def follows(self, relation_id: int) -> bool:
        """Whether a change of relation ``relation_id`` is of a table a mirror follows."""
        return relation_id in self._relations

    def copied_by(self, table: str, commit_lsn: int) -> bool:
        """Whether what a transaction committed at ``commit_lsn`` did to ``table`` is in
        the table's last copy made again."""
        return commit_lsn <= self.copied.get(table, -1)

    def change(self, table: str, commit_lsn: int, columns: dict[str, Identity]) -> None:
        """A statement of the transaction committing at ``commit_lsn`` gave ``table`` these
        column identities (the ones it started from are kept until :meth:`applied`)."""
        if self.started.get(table, (None,))[0] != commit_lsn:
            self.started[table] = (commit_lsn, self.columns.get(table, {}))
        self.columns[table] = columns

    def rewind(self, commit_lsn: int) -> list[str]:
        """The transaction committing at ``commit_lsn`` is read again (the connector stopped
        after following its statements, before applying it): each table it changed gets
        the identities it started from, so its statements are followed again (the mirror
        does nothing twice) and its row changes before them reshaped again. Returns those
        tables."""
        tables = [t for t, (lsn, _) in self.started.items() if lsn == commit_lsn]
        for table in tables:
            self.columns[table] = self.started[table][1]
        return tables

    def applied(self, commit_lsn: int) -> bool:
        """The transaction committing at ``commit_lsn`` was applied: what transactions up
        to it started from is no longer needed. Whether anything was let go."""
        done = [t for t, (lsn, _) in self.started.items() if lsn <= commit_lsn]
        for table in done:
            del self.started[table]
        return bool(done)

    def to_json(self) -> dict[str, Any]:
        return {
            "tables": self.columns,
            "oids": self.oids,
            "copied": self.copied,
            "started": {t: [lsn, columns] for t, (lsn, columns) in self.started.items()},
        }

    @staticmethod
    def from_json(body: Mapping[str, Any]) -> Followed:
        """The state kept as a document (see :meth:`Mirror.save_column_identities`); one of
        an earlier version holds the identities alone."""
        tables = body.get("tables", body)
        return Followed(
            {str(table): _identities(cols) for table, cols in tables.items()},
            {
                str(t): None if oid is None else int(oid)
                for t, oid in (body.get("oids") or {}).items()
            },
            {str(t): int(lsn) for t, lsn in (body.get("copied") or {}).items()},
            {
                str(t): (int(lsn), _identities(cols))
                for t, (lsn, cols) in (body.get("started") or {}).items()
            },
        )


def _identities(columns: Mapping[str, Any]) -> dict[str, Identity]:
    return {str(c): (int(i[0]), int(i[1]), int(i[2])) for c, i in columns.items()}
