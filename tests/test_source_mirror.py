"""The mirror's idempotent replay (a resumed copy's overlap), on a real database file: inserts
and whole-row updates become upserts, and a partial update (a PostgreSQL unchanged TOASTed
value left out) of a row the copy did not find is skipped, unless this transaction wrote it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import changestream
from changestream.sources.definition import (
    UNCHANGED,
    MirroredTable,
    SourceDefinition,
    SourcePosition,
)
from changestream.sources.mirror import Mirror, RowChange, SourceTransaction
from changestream.types import ColumnType

TABLE = MirroredTable(
    "public.t",
    "public_t",
    ("id", "v", "big"),
    (ColumnType("INT64"),) + (ColumnType("STRING"),) * 2,
    ("id",),
)
COLUMNS = ("id", "v", "big")


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[tuple[changestream.EmbeddedDatabase, Mirror]]:
    with changestream.open(str(tmp_path / "m.db")) as db:
        db.execute_ddl(TABLE.ddl())
        mirror = Mirror(db, SourceDefinition("S", "postgres", "dsn", ("public.t",)))
        mirror.add_table(TABLE)
        yield db, mirror


def _apply(mirror: Mirror, *changes: RowChange, idempotent: bool = True) -> None:
    end = SourcePosition("streaming", 100)
    mirror.apply(SourceTransaction("1", "0/64", end, changes), idempotent)


def _partial(key: int, value: str) -> RowChange:
    return RowChange("public.t", "update", COLUMNS, (key, value, UNCHANGED))


def test_a_replayed_insert_and_update_overwrite_what_the_copy_read(
    mirror: tuple[changestream.EmbeddedDatabase, Mirror],
) -> None:
    db, m = mirror
    m.copy_rows("public.t", COLUMNS, [[1, "copied", "x"]], SourcePosition("copying", 1))
    _apply(m, RowChange("public.t", "insert", COLUMNS, (1, "inserted", "y")))
    _apply(m, RowChange("public.t", "update", COLUMNS, (2, "upserted", "z")))
    assert [list(r) for r in db.read("public_t")] == [[1, "inserted", "y"], [2, "upserted", "z"]]
    with pytest.raises(changestream.AlreadyExists):  # outside the overlap: a conflict is a bug
        _apply(m, RowChange("public.t", "insert", COLUMNS, (1, "again", "y")), idempotent=False)


def test_a_partial_update_of_a_row_the_copy_did_not_find_is_skipped(
    mirror: tuple[changestream.EmbeddedDatabase, Mirror],
) -> None:
    db, m = mirror
    _apply(m, _partial(5, "gone later"))  # the row was deleted before the resumed snapshot
    assert db.read("public_t") == []
    _apply(m, RowChange("public.t", "insert", COLUMNS, (6, "new", "big")), _partial(6, "then"))
    assert [list(r) for r in db.read("public_t")] == [[6, "then", "big"]]
    m.copy_rows("public.t", COLUMNS, [[7, "copied", "kept"]], SourcePosition("copying", 1))
    _apply(m, _partial(7, "updated"))
    assert [list(r) for r in db.read("public_t", [[7]])] == [[7, "updated", "kept"]]
