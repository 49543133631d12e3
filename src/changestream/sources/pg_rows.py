"""``pgoutput`` row messages as the mirror's row changes: each relation's column names, a
parser per column from PostgreSQL's text form, and where its key columns are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from changestream.sources import pgoutput
from changestream.sources.definition import UNCHANGED, MirroredTable
from changestream.sources.mirror import RowChange
from changestream.sources.pg_types import Parse, parser

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
        parsers = [parser(types[name]) for name in self.names]
        self.row = _row_parser(parsers)
        key = [self.names.index(k) for k in table.primary_key]
        self.key = _row_parser([parsers[i] for i in key], key)


RowParser = Callable[[tuple[object, ...]], tuple[Any, ...]]


def _row_parser(parsers: list[Parse], positions: list[int] | None = None) -> RowParser:
    """A function from a pgoutput tuple to the mirror's values (of the columns at
    ``positions``, default all), compiled for these parsers: a busy source's hottest loop.
    Text already is a STRING column's value; None and ``UNCHANGED`` stay as they are. The
    generated source holds only positions and generated names."""
    at = positions if positions is not None else list(range(len(parsers)))
    namespace: dict[str, Any] = {"UNCHANGED": UNCHANGED}
    items = []
    for number, (position, parse) in enumerate(zip(at, parsers, strict=True)):
        if parse is str:
            items.append(f"t[{position}]")
        else:
            namespace[f"p{number}"] = parse
            items.append(f"(v if (v := t[{position}]) is None or v is UNCHANGED else p{number}(v))")
    source = f"def row(t):\n    return ({', '.join(items)},)\n"
    exec(compile(source, "<changestream pgoutput row parser>", "exec"), namespace)
    built: RowParser = namespace["row"]
    return built
