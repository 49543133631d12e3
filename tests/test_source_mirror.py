"""The mirror, on a real database file: its idempotent replay (a resumed copy's overlap:
inserts and whole-row updates become upserts, and a partial update, a PostgreSQL unchanged
TOASTed value left out, of a row the copy did not find is skipped, unless this transaction
wrote it); columns renamed, swapped and given a type, also after a crash half-way; and what
a MySQL statement of the binlog does to a table's columns and rows."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import astuple
from pathlib import Path

import pytest

import changestream
from changestream.sources.definition import (
    UNCHANGED,
    MirroredTable,
    SourceDefinition,
    SourcePosition,
)
from changestream.sources.mirror import RENAME_PAGE_ROWS, Mirror, RowChange, SourceTransaction
from changestream.sources.mysql_ddl import column_changes, emptied_tables, renamed_tables
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


def test_a_renamed_column_keeps_every_value_page_by_page_and_is_renamed_once(
    mirror: tuple[changestream.EmbeddedDatabase, Mirror],
) -> None:
    db, m = mirror
    rows = [[i, f"v{i}" if i % 3 else None, "b"] for i in range(RENAME_PAGE_ROWS + 7)]
    m.copy_rows("public.t", COLUMNS, rows, SourcePosition("copying", 1))
    m.rename_column("public.t", "v", "w", "tag")
    assert m.table("public.t").columns == ("id", "big", "w")
    assert [list(r) for r in db.read("public_t", None, ["id", "w"])] == [r[:2] for r in rows]
    m.rename_column("public.t", "v", "w", "tag")  # followed already: nothing happens
    assert [c.name for c in db.tables()[0].columns] == ["id", "big", "w"]
    # Stopped half-way (the new column there, some values in it): done again from the start.
    db.execute_ddl("ALTER TABLE public_t ADD COLUMN v STRING(MAX)")
    with db.transaction(exclude_txn_from_change_streams=True) as tx:
        tx.update("public_t", ["id", "v", "w"], [[1, "one", None], [2, "two", None]])
    m.add_table(TABLE)
    m.rename_column("public.t", "v", "w", "tag")
    assert [list(r) for r in db.read("public_t", [[1], [2], [3]], ["w"])] == [
        ["one"],
        ["two"],
        [None],
    ]
    with pytest.raises(changestream.FailedPrecondition, match="renamed key column id"):
        m.rename_column("public.t", "id", "key", "tag")


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("ALTER TABLE t DROP COLUMN a, ADD COLUMN a int", [("d.t", "drop", "a", "")]),
        ("/* moved */ alter table `o`.`t` rename column a to b", [("o.t", "rename", "a", "b")]),
        (
            "ALTER TABLE t CHANGE a b varchar(9), CHANGE c c int",
            [("d.t", "rename", "a", "b"), ("d.t", "retype", "b", ""), ("d.t", "retype", "c", "")],
        ),
        (
            "ALTER TABLE t MODIFY a varchar(9), DROP INDEX i, ADD COLUMN z int",
            [("d.t", "retype", "a", "")],
        ),
        ("ALTER TABLE t ALTER COLUMN a SET DEFAULT 3, ADD INDEX i (a)", []),
        ("ALTER TABLE t RENAME TO u", []),
        ("ALTER ONLINE TABLE t DROP COLUMN a", [("d.t", "drop", "a", "")]),
        ("alter ignore table o.t nowait rename column a to b", [("o.t", "rename", "a", "b")]),
        ("ALTER TABLE IF EXISTS t WAIT 5 MODIFY a int", [("d.t", "retype", "a", "")]),
        ("BEGIN", []),
        ("CREATE TABLE t (a int)", []),
    ],
)
def test_the_columns_a_mysql_statement_drops_renames_or_gives_a_type(
    statement: str, expected: list[tuple[str, str, str, str]]
) -> None:
    assert [astuple(c) for c in column_changes(statement, "d")] == expected


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("TRUNCATE TABLE t", ["d.t"]),
        ("/* c */ truncate `o`.t", ["o.t"]),
        ("DROP TABLE IF EXISTS t, o.u /* generated by server */", ["d.t", "o.u"]),
        ("DROP TEMPORARY TABLE t", []),
        ("DROP INDEX i ON t", []),
        ("ALTER TABLE t DROP COLUMN a", []),
    ],
)
def test_the_tables_a_mysql_statement_empties(statement: str, expected: list[str]) -> None:
    assert emptied_tables(statement, "d") == expected


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("RENAME TABLE a TO a_old, a_new TO a", [("d.a", "d.a_old"), ("d.a_new", "d.a")]),
        ("/* gh-ost */ rename tables `x`.`a b` to y.c;", [("x.a b", "y.c")]),
        ("RENAME TABLE `we``ird` TO w", [("d.we`ird", "d.w")]),
        ("ALTER TABLE a RENAME TO b", [("d.a", "d.b")]),
        ("ALTER TABLE x.a RENAME x.b", [("x.a", "x.b")]),
        ("ALTER TABLE a RENAME AS b, ADD COLUMN c INT", [("d.a", "d.b")]),
        ("/* m */ ALTER ONLINE TABLE `a` NOWAIT RENAME AS `b`", [("d.a", "d.b")]),
        ("RENAME TABLE IF EXISTS a WAIT 3 TO b, c TO d", [("d.a", "d.b"), ("d.c", "d.d")]),
        ("RENAME TABLE a NOWAIT TO b", [("d.a", "d.b")]),
        ("ALTER TABLE a ADD COLUMN c INT", []),
        ("RENAME USER a TO b", []),
        ("INSERT INTO renames VALUES (1)", []),
    ],
)
def test_the_tables_a_mysql_statement_renames(
    statement: str, expected: list[tuple[str, str]]
) -> None:
    assert renamed_tables(statement, "d") == expected


def test_a_mysql_statement_sqlglot_cannot_read_is_named_in_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="changestream.sources"):
        assert column_changes("ALTER TABLE t ADD PERIOD FOR p(a, b)", "d") == []
    assert "ALTER TABLE t ADD PERIOD FOR p(a, b)" in caplog.text
    assert "is not followed" in caplog.text


def test_a_statement_swapping_column_names_swaps_the_values(
    mirror: tuple[changestream.EmbeddedDatabase, Mirror],
) -> None:
    """Columns renamed by one statement take their new names at once, as the source does:
    ``v`` and ``big`` trade names (each keeps its values), also when the statement is read
    again after a crash left one of them at its staging name."""
    db, m = mirror
    m.copy_rows("public.t", COLUMNS, [[1, "v1", "b1"], [2, None, "b2"]], SourcePosition("c", 1))
    m.follow_statement("public.t", [], {"v": "big", "big": "v"}, "tag")
    assert sorted(m.table("public.t").columns) == ["big", "id", "v"]
    assert [list(r) for r in db.read("public_t", None, ["id", "v", "big"])] == [
        [1, "b1", "v1"],
        [2, "b2", None],
    ]
    m.rename_column("public.t", "v", "v_cs_renaming", "tag")  # stopped half-way
    m.follow_statement("public.t", [], {"big": "v", "v": "big"}, "tag")
    assert [list(r) for r in db.read("public_t", None, ["id", "v", "big"])] == [
        [1, "v1", "b1"],
        [2, None, "b2"],
    ]
    m.follow_statement("public.t", ["big"], {"v": "big"}, "tag")  # drops first, then renames
    assert m.table("public.t").columns == ("id", "big")
    assert [list(r) for r in db.read("public_t")] == [[1, "v1"], [2, None]]


def test_a_column_given_another_type_takes_the_values_read_and_a_key_only_its_own_type(
    mirror: tuple[changestream.EmbeddedDatabase, Mirror],
) -> None:
    db, m = mirror
    m.copy_rows("public.t", COLUMNS, [[1, "7", "b"], [2, "x", "b"]], SourcePosition("c", 1))
    now = [[[1, 7], [2, None], [3, 9]]]  # row 3 is not in the mirror yet: left to its insert
    m.retype_column("public.t", "v", ColumnType("INT64"), lambda: iter(now), "tag")
    assert m.table("public.t").types[-1] == ColumnType("INT64")
    assert [list(r) for r in db.read("public_t", None, ["id", "v"])] == [[1, 7], [2, None]]
    m.retype_column("public.t", "id", ColumnType("INT64"), lambda: iter(()), "tag")  # BIGINT
    with pytest.raises(changestream.FailedPrecondition, match="changed the type of key column"):
        m.retype_column("public.t", "id", ColumnType("STRING"), lambda: iter(()), "tag")
