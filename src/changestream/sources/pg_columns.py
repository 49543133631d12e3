"""Which PostgreSQL column is which: the number (``attnum``) and type of a table's columns,
and an event trigger that writes them into the WAL after every ``ALTER TABLE``.

Logical decoding sends no DDL, and a relation message names a table's columns and their types
only. So a column renamed looks like one dropped and another added, and a column dropped and
added again under the same name looks like nothing happened, while PostgreSQL changed every
row without a row change (a renamed column keeps its values, a re-added one reads its new
default, one given another type holds converted values). A column's number tells them apart:
a rename keeps it, a column added gets a new one. The trigger's message comes in the DDL's own
transaction, so in the WAL's order.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

log = logging.getLogger("changestream.sources")

#: The prefix of the trigger's messages; their content is ``{"table": "schema.table",
#: "columns": [[attnum, name, type oid, type modifier], ...]}``, the table's columns after the
#: statement.
COLUMNS_PREFIX = "changestream.columns"
#: The event trigger and its function, one per server database (shared by its sources).
TRIGGER = "changestream_columns"

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


def ensure_trigger(conn: Any) -> bool:
    """Install the event trigger unless the server database has it; False, with a warning,
    when this role may not (event triggers take a superuser). ``conn`` is in autocommit."""
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_event_trigger WHERE evtname = %s", (TRIGGER,))
        if cur.fetchone() is not None:
            return True
        try:
            cur.execute(_FUNCTION)
            cur.execute(
                f"CREATE EVENT TRIGGER {TRIGGER} ON ddl_command_end "
                f"WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION {TRIGGER}()"
            )
        except Exception as exc:
            if getattr(exc, "pgcode", None) == "42710":  # another source created it meanwhile
                return True
            if getattr(exc, "pgcode", None) != "42501":  # insufficient_privilege
                raise
            log.warning(
                "the source's role may not create the event trigger %s (it takes a "
                "superuser): a column renamed, dropped and added again under the same name, "
                "or given another type is not followed (%s)",
                TRIGGER,
                str(exc).strip(),
            )
            return False
    return True


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


def read_message(content: bytes) -> tuple[str, dict[str, Identity]]:
    """(table, each column's identity) from a message of the trigger."""
    body = orjson.loads(content)
    return str(body["table"]), {
        str(name): (int(number), int(oid), int(modifier))
        for number, name, oid, modifier in body["columns"] or ()
    }


def from_json(body: dict[str, Any]) -> dict[str, dict[str, Identity]]:
    """The identities kept as a document (see :meth:`Mirror.save_column_identities`)."""
    return {
        str(table): {str(c): (int(i[0]), int(i[1]), int(i[2])) for c, i in columns.items()}
        for table, columns in body.items()
    }
