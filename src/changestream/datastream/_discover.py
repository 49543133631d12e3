"""Discover: the objects of a source database (schema, table, columns with types, primary
keys), as the seed's discover API describes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from changestream.datastream.definition import object_name
from changestream.ddl.schema import ChangeStream, Table
from changestream.store.sqlite_layout import SYSTEM_PREFIX
from changestream.streams.roles import PipelineDatabase


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """One column: its DDL type (``STRING(MAX)``, ``ARRAY<INT64>``), whether it may be NULL,
    its 1-based position in the table, and whether it is part of the primary key."""

    name: str
    type: str
    nullable: bool
    ordinal_position: int
    is_primary_key: bool


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object of the source: a table of schema ``schema`` (the database's name), its
    object name (``<schema>_<table>``), its columns in schema order, and its primary key
    columns in key order."""

    schema: str
    table: str
    object_name: str
    columns: tuple[ColumnInfo, ...]
    primary_keys: tuple[str, ...]
    #: The change streams that track the table: each one's name and options.
    change_streams: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["columns"] = [asdict(c) for c in self.columns]
        data["primary_keys"] = list(self.primary_keys)
        data["change_streams"] = list(self.change_streams)
        return data

    @staticmethod
    def of(schema: str, table: Table, streams: Sequence[ChangeStream] = ()) -> ObjectInfo:
        """The object for ``table`` of ``schema``, tracked by those of ``streams`` that do."""
        keys = set(table.primary_key)
        return ObjectInfo(
            schema=schema,
            table=table.name,
            object_name=object_name(schema, table.name),
            columns=tuple(
                ColumnInfo(c.name, str(c.type), not c.not_null, c.ordinal, c.name in keys)
                for c in table.columns
            ),
            primary_keys=table.primary_key,
            change_streams=tuple(
                {"name": s.name, **s.options()}
                for s in streams
                if s.target_for(table.name) is not None
            ),
        )


def discover(db: PipelineDatabase) -> list[ObjectInfo]:
    """Every user table of ``db`` (embedded or remote) as an object, by table name; the
    engine's own tables and change streams are never listed."""
    streams = [s for s in db.change_streams() if not s.name.startswith(SYSTEM_PREFIX)]
    return [
        ObjectInfo.of(db.name, table, streams)
        for table in db.tables()
        if not table.name.startswith(SYSTEM_PREFIX)
    ]
