"""Stream definitions: a source (database and change stream, with the objects to include), a
destination, and how events are written; validated on their own and against the source."""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from changestream.clock import format_ts
from changestream.ddl.schema import ChangeStream, Table
from changestream.errors import FailedPrecondition, InvalidArgument, NotFound
from changestream.streams.roles import PipelineDatabase

NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")
FORMATS = ("json", "avro")
BACKFILL_MODES = ("automatic", "none")
#: How JSON event files are compressed (Datastream's JSON destination option).
COMPRESSIONS = ("none", "gzip")
#: How a replica is written (Datastream's BigQuery write modes): one row per key equal to the
#: source, or every event appended (the history).
REPLICA_MODES = ("merge", "append-only")
#: A schema file beside JSON event files: none, or an Avro schema per ``schema_key``.
SCHEMA_FILES = ("none", "avro")
#: What the Delta replica does with a column dropped from its source table.
DROPPED_COLUMN_MODES = ("keep", "drop")
#: Value capture types whose data change records carry the whole new row, as events must.
ACCEPTED_CAPTURE_TYPES = ("NEW_ROW_AND_OLD_VALUES", "NEW_ROW")


def schema_name(database: str) -> str:
    """The schema of a source's objects: the database's name, that is the file name without
    its extension for a path, the last path segment of a URL, ``"memory"`` for ``":memory:"``."""
    if database == ":memory:":
        return "memory"
    if database.startswith(("http://", "https://")):
        name = urllib.parse.unquote(urllib.parse.urlsplit(database).path.rstrip("/"))
        name = name.rpartition("/")[2]
        if not name:
            raise InvalidArgument(
                f"the database URL {database!r} names no database; add its name "
                "(http://host:port/NAME) so object names do not depend on the server"
            )
        return name
    name = os.path.splitext(os.path.basename(database.rstrip("/\\")))[0]
    if not name:
        raise InvalidArgument(f"the database path {database!r} names no file")
    return name


def object_name(schema: str, table: str) -> str:
    """The name of a table's object in events and destination paths: ``<schema>_<table>``."""
    return f"{schema}_{table}"


#: One entry of an include list: a table, with the columns to keep in parentheses or not.
_ENTRY = re.compile(r"\s*([^,()\s]+)\s*(?:\(([^()]*)\))?\s*(?:,|$)")


def parse_names(value: Iterable[str] | str, what: str) -> tuple[str, ...]:
    """Table names (``exclude``), or table names with optional column lists (``include``:
    ``"Orders(OrderId,Amount),Customers"``), each in the form ``T`` or ``T(c1,c2)``."""
    if isinstance(value, str):
        entries: list[str] = []
        position = 0
        text = value.strip()
        while position < len(text):
            if text[position] in ", ":  # empty entries (a trailing comma, say) are skipped
                position += 1
                continue
            found = _ENTRY.match(text, position)
            if found is None or found.end() == position:
                raise InvalidArgument(
                    f"{what} must look like T1,T2(c1,c2) (table names, columns in "
                    f"parentheses), got {value!r}"
                )
            entries.append(_entry(found.group(1), found.group(2), what))
            position = found.end()
        value = entries
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"{what} must be table names, got {name!r}")
        _, columns = table_and_columns(name)
        if columns is not None and what != "include":
            raise InvalidArgument(f"{what} takes whole tables, got {name!r}")
    return names


def _entry(table: str, columns: str | None, what: str) -> str:
    if columns is None:
        return table
    names = [c.strip() for c in columns.split(",") if c.strip()]
    if not names:
        raise InvalidArgument(f"{what}: {table}() names no column")
    return f"{table}({','.join(names)})"


def table_and_columns(entry: str) -> tuple[str, tuple[str, ...] | None]:
    """An include entry's table, and the columns it keeps (None: all of them)."""
    table, paren, rest = entry.partition("(")
    if not paren:
        return entry, None
    return table, tuple(c.strip() for c in rest.rstrip(")").split(",") if c.strip())


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamDefinition:
    """What a stream reads and where it writes.

    ``database`` is the source as given (a path or URL; the pipeline opens it). ``include``
    names the tables to stream (empty: every table the change stream watches, tables added
    later included); ``exclude`` leaves tables out. ``destination`` is the directory event
    files go to, in ``format`` (``json`` or ``avro``); ``replica`` an optional directory of
    Delta Lake tables. A file is closed once it holds ``file_rotation_mb`` megabytes or its
    first event is ``file_rotation_interval`` seconds old (Datastream's rotation settings; a
    slow trickle makes about one file per object per interval). ``backfill="automatic"``
    emits every existing row before the changes, ``"none"`` only the changes.
    ``compression="gzip"`` writes JSON files as ``.jsonl.gz``; ``schema_file="avro"`` writes,
    beside them, the Avro schema of each ``schema_key`` the events carry
    (``<destination>/<object>/_schemas/<schema_key>.avsc``). ``replica_mode``: ``"merge"``
    (one row per key, equal to the source) or ``"append-only"`` (every event a row).
    ``replica_dropped_columns`` says what the replica does with a column dropped from the
    source: ``"keep"`` it (nullable, with the values it had) or ``"drop"`` it (the Delta table
    is rewritten without it at its next change). ``data_freshness`` (seconds, Datastream's
    staleness limit) bounds how long a change may wait before the replica reflects it: the
    pipeline runs a micro-batch every third of it, so changes are grouped into fewer, larger
    batches the looser it is (None: every ``pipeline run --trigger-seconds``). ``created_at``
    (µs) is set by the catalog.
    """

    name: str
    database: str
    change_stream: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    destination: str
    format: str = "json"
    replica: str | None = None
    backfill: str = "automatic"
    file_rotation_mb: float = 50.0
    file_rotation_interval: float = 60.0
    replica_dropped_columns: str = "keep"
    compression: str = "none"
    replica_mode: str = "merge"
    schema_file: str = "none"
    data_freshness: float | None = None
    created_at: int = 0

    def __post_init__(self) -> None:
        # Lists and "T1,T2" text are accepted for convenience; the stored form is tuples.
        object.__setattr__(self, "include", parse_names(self.include, "include"))
        object.__setattr__(self, "exclude", parse_names(self.exclude, "exclude"))
        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):
            raise InvalidArgument(
                "a stream name is 1 to 63 letters, digits, '_' or '-', starting with a letter; "
                f"got {self.name!r}"
            )
        for label in ("database", "change_stream", "destination"):
            value = getattr(self, label)
            if not isinstance(value, str) or not value.strip():
                raise InvalidArgument(f"stream {self.name!r} needs a {label}, got {value!r}")
        for label, allowed in (
            ("format", FORMATS),
            ("backfill", BACKFILL_MODES),
            ("replica_mode", REPLICA_MODES),
            ("compression", COMPRESSIONS),
            ("schema_file", SCHEMA_FILES),
            ("replica_dropped_columns", DROPPED_COLUMN_MODES),
        ):
            value = getattr(self, label)
            if value not in allowed:
                raise InvalidArgument(f"{label} must be one of {', '.join(allowed)}, got {value!r}")
        if self.compression != "none" and self.format != "json":
            raise InvalidArgument(
                f"compression {self.compression!r} is for JSON files; Avro files compress "
                "their own blocks"
            )
        if self.schema_file != "none" and self.format != "json":
            raise InvalidArgument(
                f"schema_file {self.schema_file!r} is for JSON files; Avro files carry their "
                "own schema"
            )
        for label, low, high in (
            ("file_rotation_mb", 0.001, 1024.0),
            ("file_rotation_interval", 0.1, 86400.0),
        ):
            value = getattr(self, label)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidArgument(f"{label} must be a number, got {value!r}")
            if not low <= value <= high:
                raise InvalidArgument(
                    f"{label} must be between {low:g} and {high:g}, got {value!r}"
                )
        if self.data_freshness is not None and (
            isinstance(self.data_freshness, bool)
            or not isinstance(self.data_freshness, int | float)
            or not 1.0 <= self.data_freshness <= 86400.0
        ):
            raise InvalidArgument(
                "data_freshness must be a number of seconds between 1 and 86400 (or None), "
                f"got {self.data_freshness!r}"
            )
        if self.replica is not None and (not isinstance(self.replica, str) or not self.replica):
            raise InvalidArgument(f"replica must be a directory or None, got {self.replica!r}")
        if self.replica is not None and _same_dir(self.replica, self.destination):
            raise InvalidArgument(
                "replica and destination must be different directories (event files and "
                f"Delta tables would mix), both are {self.destination!r}"
            )
        both = sorted({table_and_columns(e)[0] for e in self.include} & set(self.exclude))
        if both:
            raise InvalidArgument(
                f"table(s) {', '.join(both)} are both included and excluded; name each in one"
            )
        schema_name(self.database)

    @property
    def schema(self) -> str:
        """The schema of this stream's objects (see :func:`schema_name`)."""
        return schema_name(self.database)

    @property
    def max_file_bytes(self) -> int:
        """``file_rotation_mb`` in bytes."""
        return max(1, int(self.file_rotation_mb * 1024 * 1024))

    def object_name(self, table: str) -> str:
        """The object name of ``table``: ``<schema>_<table>``."""
        return object_name(self.schema, table)

    @property
    def file_format(self) -> str:
        """How event files are written: ``json``, ``json.gz`` (gzip) or ``avro``."""
        return "json.gz" if self.compression == "gzip" else self.format

    def to_dict(self) -> dict[str, Any]:
        """The definition as JSON (tuples as lists)."""
        data = asdict(self)
        data["include"] = list(self.include)
        data["exclude"] = list(self.exclude)
        return data

    def to_display_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` as commands print it: ``created_at`` in RFC 3339."""
        return {**self.to_dict(), "created_at": format_ts(self.created_at)}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> StreamDefinition:
        """The definition :meth:`to_dict` gave."""
        return StreamDefinition(**data)

    def validate(self, db: PipelineDatabase) -> list[Table]:
        """Check the definition against the source ``db``; returns the tables it streams now.

        The change stream must exist and give whole new rows; every included and excluded
        table must exist, and included ones must be watched, with all their columns."""
        return self._resolve(db, strict=True)

    def tables(self, db: PipelineDatabase) -> list[Table]:
        """The tables the stream streams now, by name: those the change stream watches (all of
        them, with a FOR ALL stream), with ``include`` / ``exclude`` applied. Included tables
        that are gone are skipped; the change stream must still exist."""
        return self._resolve(db, strict=False)

    def _change_stream(self, db: PipelineDatabase) -> ChangeStream:
        streams = {s.name: s for s in db.change_streams()}
        found = streams.get(self.change_stream)
        if found is None:
            known = ", ".join(sorted(streams)) or "none"
            raise NotFound(
                f"stream {self.name!r}: change stream {self.change_stream!r} does not exist "
                f"(change streams: {known})"
            )
        return found

    def _resolve(self, db: PipelineDatabase, strict: bool) -> list[Table]:
        change_stream = self._change_stream(db)
        capture = change_stream.value_capture_type
        if strict and capture not in ACCEPTED_CAPTURE_TYPES:
            raise FailedPrecondition(
                f"stream {self.name!r}: change stream {change_stream.name!r} captures "
                f"{capture}, which gives only the changed columns, but events carry the whole "
                f"row; use NEW_ROW_AND_OLD_VALUES (deletes carry the last row) or NEW_ROW "
                f"(deletes carry only the keys): ALTER CHANGE STREAM {change_stream.name} "
                "SET OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')"
            )
        tables = {t.name: t for t in db.tables()}
        kept = dict(table_and_columns(e) for e in self.include)
        if strict:
            for name in (*kept, *self.exclude):
                if name not in tables:
                    known = ", ".join(sorted(tables)) or "none"
                    raise NotFound(
                        f"stream {self.name!r}: table {name!r} does not exist (tables: {known})"
                    )
        watched = [n for n in sorted(tables) if change_stream.target_for(n) is not None]
        if strict:
            for name in kept:
                if name not in watched:
                    raise FailedPrecondition(
                        f"stream {self.name!r}: change stream {change_stream.name!r} does not "
                        f"watch table {name!r} (it watches: {', '.join(watched) or 'none'})"
                    )
        chosen = [n for n in watched if (not kept or n in kept) and n not in self.exclude]
        projected = {n: _projection(self.name, tables[n], kept.get(n), strict) for n in chosen}
        if strict:
            for name in chosen:
                target = change_stream.target_for(name)
                assert target is not None
                if target.columns is None:
                    continue
                tracked = set(target.columns) | set(tables[name].primary_key)
                missing = [c.name for c in projected[name].columns if c.name not in tracked]
                if missing:
                    raise FailedPrecondition(
                        f"stream {self.name!r}: change stream {change_stream.name!r} does not "
                        f"watch column(s) {', '.join(missing)} of {name!r}; watch the table "
                        f"whole (FOR {name}), or keep only the columns it watches: "
                        f'--include "{name}({",".join(sorted(tracked))})"'
                    )
            if not chosen and not change_stream.for_all:
                raise FailedPrecondition(
                    f"stream {self.name!r} would stream no table: change stream "
                    f"{change_stream.name!r} watches {', '.join(watched) or 'none'}"
                )
        return [projected[n] for n in chosen]


def _projection(stream: str, table: Table, columns: tuple[str, ...] | None, strict: bool) -> Table:
    """``table`` with only ``columns`` and its key (all of it when None). A column that does
    not exist is an error when ``strict``, else left out (it was dropped since)."""
    if columns is None:
        return table
    unknown = [c for c in columns if table.column(c) is None]
    if unknown and strict:
        raise NotFound(
            f"stream {stream!r}: table {table.name!r} has no column(s) {', '.join(unknown)} "
            f"(columns: {', '.join(c.name for c in table.columns)})"
        )
    keep = set(columns) | set(table.primary_key)
    return replace(table, columns=tuple(c for c in table.columns if c.name in keep), indexes=())


def _same_dir(a: str, b: str) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))
