"""A source's definition and its position, as kept in the database's system documents."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from changestream.errors import InvalidArgument
from changestream.types import ColumnType

#: The system document kinds: one definition and one position per source, and (PostgreSQL)
#: its tables' column numbers and types as of where it has read (see ``sources.pg_columns``).
DEFINITION_KIND = "source"
POSITION_KIND = "source-position"
COLUMNS_KIND = "source-columns"

#: A value a source left out of an update because it did not change (PostgreSQL's unchanged
#: TOASTed values): the mirror keeps what it has.
UNCHANGED: Any = object()

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,62}\Z")


@dataclass(frozen=True, slots=True)
class SourceDefinition:
    """What ``sources add`` recorded: where to read, which tables, and how they are mirrored.

    ``kind`` is ``postgres`` or ``mysql``. ``tables`` are ``schema.table`` names (MySQL:
    ``database.table``); each is mirrored as ``<schema>_<table>``, and the change stream
    ``name`` covers the mirrors. ``slot`` and ``publication`` are PostgreSQL's, ``server_id``
    the replica id a MySQL connector reads the binlog as."""

    name: str
    kind: str
    dsn: str
    tables: tuple[str, ...]
    slot: str = ""
    publication: str = ""
    server_id: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "tables": list(self.tables)}

    @staticmethod
    def from_json(body: dict[str, Any]) -> SourceDefinition:
        return SourceDefinition(**{**body, "tables": tuple(body["tables"])})

    def mirror(self, table: str) -> str:
        """The mirror table of source table ``schema.table``: ``<schema>_<table>``."""
        schema, _, name = table.partition(".")
        return f"{schema}_{name}"


@dataclass(frozen=True, slots=True)
class MirroredTable:
    """A source table, the mirror it gets, and its columns' mirrored types."""

    source: str
    mirror: str
    columns: tuple[str, ...]
    types: tuple[ColumnType, ...]
    primary_key: tuple[str, ...]

    def ddl(self) -> str:
        columns = ", ".join(
            f"{name} {ctype}{' NOT NULL' if name in self.primary_key else ''}"
            for name, ctype in zip(self.columns, self.types, strict=True)
        )
        return f"CREATE TABLE {self.mirror} ({columns}) PRIMARY KEY ({', '.join(self.primary_key)})"


@dataclass(frozen=True, slots=True)
class SourcePosition:
    """How far a source has got: ``copying`` until its initial copy is whole, then
    ``streaming`` from ``lsn`` (every source transaction that ended at or before it is in
    the change log). For MySQL, ``lsn`` is the offset in binlog file ``log_file``.

    While copying, ``progress`` holds each table's last copied key (``True`` once whole), so
    a copy cut short resumes there. A resumed copy reads the rest from a later snapshot, so
    the changes up to that snapshot (``overlap``: ``(log_file, lsn)``) may already be in the
    mirror and are applied idempotently."""

    state: str
    lsn: int
    log_file: str | None = None
    progress: dict[str, Any] = field(default_factory=dict)
    overlap: tuple[str | None, int] | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"state": self.state, "lsn": self.lsn}
        if self.log_file is not None:
            body["log_file"] = self.log_file
        if self.progress:
            body["progress"] = self.progress
        if self.overlap is not None:
            body["overlap"] = list(self.overlap)
        return body

    @staticmethod
    def from_json(body: dict[str, Any]) -> SourcePosition:
        log_file = body.get("log_file")
        overlap = body.get("overlap")
        return SourcePosition(
            str(body["state"]),
            int(body["lsn"]),
            None if log_file is None else str(log_file),
            dict(body.get("progress") or {}),
            None if overlap is None else (overlap[0], int(overlap[1])),
        )

    def progressed(self, table: str, reached: Any) -> SourcePosition:
        """This copying position with ``table`` copied up to key ``reached`` (``True``: all)."""
        return replace(self, progress={**self.progress, table: reached})

    def after(self, lsn: int, log_file: str | None = None) -> SourcePosition:
        """The streaming position after a transaction that ended at ``lsn`` (in
        ``log_file``), keeping the overlap while it is not passed."""
        overlap = self.overlap if self.in_overlap(lsn, log_file) else None
        return SourcePosition("streaming", lsn, log_file, overlap=overlap)

    def in_overlap(self, lsn: int, log_file: str | None = None) -> bool:
        """Whether a transaction that ended at ``lsn`` (in ``log_file``) may already be in the
        mirror (through a resumed copy)."""
        return self.overlap is not None and (log_file or "", lsn) <= (
            self.overlap[0] or "",
            self.overlap[1],
        )


def check_name(name: str, what: str) -> str:
    """A source, slot or publication name: a letter, then letters, digits or ``_`` (at most 63,
    which PostgreSQL's identifiers allow unquoted)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgument(
            f"{what} must be a letter followed by letters, digits or underscores (at most 63), "
            f"got {name!r}"
        )
    return name


def table_names(
    tables: Sequence[str] | str | None, default_schema: str = "public"
) -> tuple[str, ...] | None:
    """``schema.table`` names (a bare ``table`` is in ``default_schema``), or None for every
    table."""
    if tables is None:
        return None
    items = tables.split(",") if isinstance(tables, str) else list(tables)
    names: list[str] = []
    for item in (i.strip() for i in items):
        schema, dot, table = item.rpartition(".")
        schema = schema if dot else default_schema
        check_name(schema, "a schema name")
        check_name(table, "a table name")
        names.append(f"{schema}.{table}")
    if not names:
        raise InvalidArgument("--tables names no table")
    return tuple(dict.fromkeys(names))
