"""Change sources: a PostgreSQL database's tables mirrored into a changestream database, every
source transaction a changestream transaction of the source's change stream.

``add_source`` checks the server and creates the mirrors, the change stream and the
publication; ``run_source`` copies the tables (consistent with a new replication slot) and then
follows the slot's ``pgoutput`` stream. Positions live with the changes, so a connector killed
at any point resumes without losing or repeating a transaction.
"""

from changestream.sources.api import (
    add_source,
    describe_source,
    list_sources,
    remove_source,
    run_source,
)
from changestream.sources.definition import SourceDefinition, SourcePosition
from changestream.sources.postgres import RunSummary

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
