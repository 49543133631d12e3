"""Schema objects and the GoogleSQL DDL parser that produces them."""

from changestream.ddl.parser import parse_ddl
from changestream.ddl.schema import (
    AlterChangeStream,
    ChangeStream,
    Column,
    CreateChangeStream,
    CreateTable,
    DropChangeStream,
    DropTable,
    RenameTable,
    Statement,
    StreamOptions,
    StreamTarget,
    Table,
)

__all__ = [
    "AlterChangeStream",
    "ChangeStream",
    "Column",
    "CreateChangeStream",
    "CreateTable",
    "DropChangeStream",
    "DropTable",
    "RenameTable",
    "Statement",
    "StreamOptions",
    "StreamTarget",
    "Table",
    "parse_ddl",
]
