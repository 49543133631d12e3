"""A source's definition and its position, as kept in the database's system documents."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from changestream.errors import InvalidArgument

#: The system document kinds: one definition and one position per source.
DEFINITION_KIND = "source"
POSITION_KIND = "source-position"

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,62}\Z")


@dataclass(frozen=True, slots=True)
class SourceDefinition:
    """What ``sources add`` recorded: where to read, which tables, and how they are mirrored.

    ``tables`` are ``schema.table`` names; each is mirrored as ``<schema>_<table>``, and the
    change stream ``name`` covers the mirrors."""

    name: str
    kind: str
    dsn: str
    tables: tuple[str, ...]
    slot: str
    publication: str

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
class SourcePosition:
    """How far a source has got: ``copying`` until its initial copy is whole, then
    ``streaming`` from ``lsn`` (every source transaction that ended at or before it is in
    the change log)."""

    state: str
    lsn: int

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "lsn": self.lsn}

    @staticmethod
    def from_json(body: dict[str, Any]) -> SourcePosition:
        return SourcePosition(str(body["state"]), int(body["lsn"]))


def check_name(name: str, what: str) -> str:
    """A source, slot or publication name: a letter, then letters, digits or ``_`` (at most 63,
    which PostgreSQL's identifiers allow unquoted)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgument(
            f"{what} must be a letter followed by letters, digits or underscores (at most 63), "
            f"got {name!r}"
        )
    return name


def table_names(tables: Sequence[str] | str | None) -> tuple[str, ...] | None:
    """``schema.table`` names (a bare ``table`` is in ``public``), or None for every table."""
    if tables is None:
        return None
    items = tables.split(",") if isinstance(tables, str) else list(tables)
    names: list[str] = []
    for item in (i.strip() for i in items):
        schema, dot, table = item.rpartition(".")
        schema = schema if dot else "public"
        check_name(schema, "a schema name")
        check_name(table, "a table name")
        names.append(f"{schema}.{table}")
    if not names:
        raise InvalidArgument("--tables names no table")
    return tuple(dict.fromkeys(names))
