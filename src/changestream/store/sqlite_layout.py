"""How the database is laid out in SQLite: system tables, user tables, and value converters."""

from __future__ import annotations

import contextvars
import math
import re
import sqlite3

from changestream.codecs import from_sqlite, to_sqlite
from changestream.ddl.defaults import generated_stored
from changestream.ddl.schema import Column, Table
from changestream.store.keys import quote
from changestream.types import SCALAR_CODES, ColumnType

SYSTEM_PREFIX = "_cs_"

SYSTEM_TABLES = """
CREATE TABLE IF NOT EXISTS _cs_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    last_commit_ts INTEGER NOT NULL,
    safe_ts INTEGER NOT NULL,
    txn_seq INTEGER NOT NULL,
    catalog_version INTEGER NOT NULL,
    split_version INTEGER NOT NULL,
    secret TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS _cs_tables (name TEXT PRIMARY KEY, definition TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS _cs_streams (
    stream_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    definition TEXT NOT NULL,
    created_ts INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS _cs_splits (
    split_id INTEGER PRIMARY KEY,
    start_key BLOB NOT NULL,
    end_key BLOB,
    start_ts INTEGER NOT NULL,
    end_ts INTEGER,
    parents TEXT NOT NULL,
    children TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS _cs_splits_live ON _cs_splits (end_ts, start_key);
CREATE TABLE IF NOT EXISTS _cs_log (
    stream_id INTEGER NOT NULL,
    split_id INTEGER NOT NULL,
    commit_ts INTEGER NOT NULL,
    record_sequence INTEGER NOT NULL,
    payload BLOB NOT NULL,
    mods INTEGER,
    PRIMARY KEY (stream_id, split_id, commit_ts, record_sequence)
) WITHOUT ROWID;
DROP INDEX IF EXISTS _cs_log_age;
CREATE TABLE IF NOT EXISTS _cs_split_load (
    split_id INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    mods INTEGER NOT NULL,
    PRIMARY KEY (split_id, bucket)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _cs_split_samples (
    split_id INTEGER NOT NULL,
    commit_ts INTEGER NOT NULL,
    key BLOB NOT NULL,
    weight INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS _cs_split_samples_by_split ON _cs_split_samples (split_id, commit_ts);
CREATE TABLE IF NOT EXISTS _cs_policy (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    definition TEXT NOT NULL,
    leader TEXT,
    lease_expires INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS _cs_leases (
    StreamId INTEGER NOT NULL,
    Consumer TEXT NOT NULL,
    StatusType TEXT NOT NULL,
    StatusValue TEXT NOT NULL,
    Checkpoint TEXT NOT NULL,
    LeaseCounter INTEGER NOT NULL,
    LeaseOwner TEXT,
    LeaseStealer TEXT,
    ParentShardIds TEXT NOT NULL,
    StartTimestamp INTEGER NOT NULL,
    PRIMARY KEY (StreamId, Consumer, StatusType, StatusValue)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _cs_documents (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (kind, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _cs_document_log (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time INTEGER NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (kind, name, seq)
) WITHOUT ROWID;
"""

#: Columns of the change log that files made by earlier versions lack: opening one adds them
#: (NULL in the rows already there). ``mods`` is how many mods a record holds.
ADDED_LOG_COLUMNS = (("mods", "INTEGER"),)
#: Every system table, so opening a file made by an older version can add the missing ones.
SYSTEM_TABLE_NAMES = tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SYSTEM_TABLES))
#: Indexes older versions made and this one drops: ``_cs_log_age`` cost every commit a page
#: of the write-ahead log; retention deletes through the log's primary key instead.
RETIRED_INDEXES = frozenset(re.findall(r"DROP INDEX IF EXISTS (\w+)", SYSTEM_TABLES))

# SQLite picks a column's affinity from substrings of its declared type, and Python's sqlite3
# picks a converter from the declared type's first word; these names get both right.
_DECLARED = {
    "BOOL": "BOOL",
    "INT64": "INTEGER",
    "FLOAT64": "FLOAT64",
    "NUMERIC": "NUMERIC_TEXT",
    "STRING": "TEXT",
    "BYTES": "BLOB",
    "DATE": "DATE_TEXT",
    "TIMESTAMP": "TIMESTAMP_TEXT",
    "JSON": "JSON_TEXT",
}


def declared_type(ctype: ColumnType) -> str:
    """The SQLite declared type for a column type."""
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        return f"ARRAY_{ctype.element.code}_TEXT"
    return _DECLARED[ctype.code]


def create_table_sql(table: Table) -> str:
    """The SQLite ``CREATE TABLE`` for a user table."""
    key_columns = table.key_columns
    # A lone INTEGER PRIMARY KEY column is SQLite's rowid, which turns NULL into a new number:
    # a nullable INT64 key is declared INT (the same affinity) to keep NULL a value.
    rowid_alias = len(key_columns) == 1 and key_columns[0].type.code == "INT64"
    nullable_rowid = rowid_alias and not key_columns[0].not_null

    def declared(column: Column) -> str:
        if nullable_rowid and column is key_columns[0]:
            return "INT"
        return declared_type(column.type)

    columns = [
        f"{quote(c.name)} {declared(c)}{' NOT NULL' if c.not_null else ''}{default_sql(c)}"
        for c in table.columns
    ]
    key = ", ".join(quote(name) for name in table.primary_key)
    return f"CREATE TABLE {quote(table.name)} ({', '.join(columns)}, PRIMARY KEY ({key}))"


#: The SQLite function a generated DEFAULT calls (registered on every connection).
DEFAULT_FUNCTION = "_cs_default"


def default_sql(column: Column) -> str:
    """`` DEFAULT ...`` for the column's DEFAULT, or empty text when it has none."""
    if column.default_function is not None:
        return f" DEFAULT ({DEFAULT_FUNCTION}({_literal(column.default_function)}))"
    if column.default is None:
        return ""
    return f" DEFAULT {_literal(to_sqlite(column.type, column.default))}"


def _literal(value: object) -> str:
    """A SQLite literal of a stored value."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return f"x'{value.hex()}'"
    if isinstance(value, float) and not math.isfinite(value):
        return "1e999" if value > 0 else "-1e999"
    assert isinstance(value, int | float), value
    return repr(value)


# What a NULL key part stands for in the key index: a blob in a column of text, text elsewhere.
_NULL_TEXT = "x'00'"
_NULL_OTHER = "'null'"


def key_index_sql(table: Table) -> str | None:
    """For a key with nullable columns, a UNIQUE index in which NULL equals NULL (SQLite's
    primary key lets rows share a NULL key, Spanner's does not); else None. A NULL stands
    for a value of another storage class than the column's, so it collides with no value."""
    if all(c.not_null for c in table.key_columns):
        return None
    parts = []
    for column in table.key_columns:
        name = quote(column.name)
        if column.not_null:
            parts.append(name)
        else:
            text_form = declared_type(column.type) not in ("INTEGER", "FLOAT64", "BOOL", "BLOB")
            parts.append(f"ifnull({name}, {_NULL_TEXT if text_form else _NULL_OTHER})")
    index = quote(f"{SYSTEM_PREFIX}key_{table.name}")
    return f"CREATE UNIQUE INDEX {index} ON {quote(table.name)} ({', '.join(parts)})"


#: Set while reading back what a DML statement wrote: text in a TIMESTAMP, DATE or NUMERIC
#: column must then be in the exact form writes store, or it would compare and sort wrongly.
exact_forms: contextvars.ContextVar[bool] = contextvars.ContextVar("exact_forms", default=False)
_TEXT_FORMS = frozenset({"TIMESTAMP", "DATE", "NUMERIC"})


def _converter(ctype: ColumnType) -> object:
    def convert(raw: bytes) -> object:
        text: object = raw if ctype.code == "BYTES" else raw.decode("utf-8")
        if ctype.code == "BOOL":
            text = int(raw)
        value = from_sqlite(ctype, text)
        if ctype.code in _TEXT_FORMS and exact_forms.get():
            stored = to_sqlite(ctype, value)
            if stored != text:
                raise ValueError(f"{ctype} text {text!r} is not in its stored form {stored!r}")
        return value

    return convert


def register_functions(conn: sqlite3.Connection) -> None:
    """The functions user tables' definitions call (a generated DEFAULT's)."""
    conn.create_function(DEFAULT_FUNCTION, 1, generated_stored)


def register_converters() -> None:
    """Teach sqlite3 to decode every declared type back into the Python value the user wrote."""
    for code, declared in _DECLARED.items():
        if declared.endswith("_TEXT") or declared == "BOOL":
            sqlite3.register_converter(declared, _converter(ColumnType(code)))  # type: ignore[arg-type]
    for code in SCALAR_CODES:
        array = ColumnType("ARRAY", element=ColumnType(code))
        sqlite3.register_converter(declared_type(array), _converter(array))  # type: ignore[arg-type]
