"""``pgoutput`` row messages as the mirror's row changes: each relation's column names, a
parser per column from PostgreSQL's text form, and where its key columns are."""

from __future__ import annotations

from changestream.sources import pgoutput
from changestream.sources.definition import MirroredTable
from changestream.sources.mirror import RowChange
from changestream.sources.pg_types import Parse, parser
from changestream.sources.row_parsers import row_parser

PgChange = pgoutput.Insert | pgoutput.Update | pgoutput.Delete | pgoutput.Truncate


class RowShapes:
    """Turns pgoutput changes into :class:`RowChange` s, by the relations the stream sent."""

    def __init__(self) -> None:
        self._relations: dict[int, pgoutput.Relation] = {}
        self._shapes: dict[int, _Shape] = {}

    def relation(self, relation: pgoutput.Relation, table: MirroredTable) -> None:
        """The shape the source now sends for ``table`` (the mirror as it now stands)."""
        self._relations[relation.relation_id] = relation
        self._shapes[relation.relation_id] = _Shape(table, relation)

    def changes(self, change: PgChange) -> list[RowChange]:
        if isinstance(change, pgoutput.Truncate):
            return [
                RowChange(self._shapes[r].table.source, "truncate") for r in change.relation_ids
            ]
        shape = self._shapes[change.relation_id]
        source = shape.table.source
        if isinstance(change, pgoutput.Insert):
            return [RowChange(source, "insert", shape.names, shape.row(change.new))]
        if isinstance(change, pgoutput.Delete):
            return [RowChange(source, "delete", old_key=shape.key(change.old))]
        old_key = None if change.old is None else shape.key(change.old)
        return [RowChange(source, "update", shape.names, shape.row(change.new), old_key)]


class _Shape:
    def __init__(self, table: MirroredTable, relation: pgoutput.Relation) -> None:
        self.table = table
        self.names = tuple(c.name for c in relation.columns)
        types = dict(zip(table.columns, table.types, strict=True))
        # Text already is a STRING column's value.
        parsers = [_or_none(parser(types[name])) for name in self.names]
        self.row = row_parser(parsers)
        key = [self.names.index(k) for k in table.primary_key]
        self.key = row_parser([parsers[i] for i in key], key)


def _or_none(parse: Parse) -> Parse | None:
    return None if parse is str else parse
