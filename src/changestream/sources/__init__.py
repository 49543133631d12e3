"""Change sources: the tables of a PostgreSQL or MySQL / MariaDB database mirrored into a
changestream database, every source transaction a changestream transaction of the source's
change stream.

``add_source`` checks the server and creates the mirrors and the change stream (for
PostgreSQL also the publication); ``run_source`` copies the tables (consistent with where
streaming starts: a new replication slot's snapshot, or a consistent snapshot at a known
binlog position) and then follows the slot's ``pgoutput`` stream or the row-based binlog.
Positions live with the changes, so a connector killed at any point resumes without losing or
repeating a transaction.
"""

from changestream.sources.api import (
    add_source,
    describe_source,
    list_sources,
    remove_source,
    run_source,
)
from changestream.sources.definition import SourceDefinition, SourcePosition
from changestream.sources.summary import RunSummary

__all__ = [
    "RunSummary",
    "SourceDefinition",
    "SourcePosition",
    "add_source",
    "describe_source",
    "list_sources",
    "remove_source",
    "run_source",
]
