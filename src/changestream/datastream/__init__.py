"""Datastream-style streams over a change-stream database.

A *stream* reads a source (a database and one of its change streams, with the tables to
include) and writes events to a destination. Its definition, lifecycle state, progress and
errors live in the source database itself, so every process that opens it, locally or through
a server, sees the same streams::

    from changestream.datastream import StreamCatalog, StreamDefinition

    catalog = StreamCatalog(db)
    catalog.create(StreamDefinition(name="orders", database="shop.db",
                                    change_stream="Orders", destination="out/"))
    catalog.transition("orders", "start")      # Not started -> Starting
    catalog.describe("orders")

:func:`discover` lists the source's objects (tables, columns, types, primary keys).
"""

from changestream.datastream._discover import ColumnInfo, ObjectInfo, discover
from changestream.datastream.catalog import (
    ObjectBackfill,
    StreamCatalog,
    StreamError,
    StreamInfo,
    StreamProgress,
)
from changestream.datastream.definition import StreamDefinition, object_name, schema_name
from changestream.datastream.states import StreamState, allowed_verbs

__all__ = [
    "ColumnInfo",
    "ObjectBackfill",
    "ObjectInfo",
    "StreamCatalog",
    "StreamDefinition",
    "StreamError",
    "StreamInfo",
    "StreamProgress",
    "StreamState",
    "allowed_verbs",
    "discover",
    "object_name",
    "schema_name",
]
