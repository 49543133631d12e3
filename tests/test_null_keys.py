"""NULL values in nullable key columns behave as in Spanner: NULL is a value of the key (one
row per key, NULL first), and rows with a NULL key can be read, updated and deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

import changestream
from changestream.embedded.database import store_of

NULLABLE_INT_KEY = "CREATE TABLE N (K INT64, V STRING(MAX)) PRIMARY KEY (K)"
NULLABLE_STRING_KEY = "CREATE TABLE S (K STRING(MAX), V STRING(MAX)) PRIMARY KEY (K)"


def test_a_null_int64_key_is_stored_as_null(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "n.db")) as db:
        db.execute_ddl([NULLABLE_INT_KEY])
        with db.transaction() as tx:
            tx.insert("N", ["K", "V"], [[None, "null key"]])
        assert db.read("N") == [(None, "null key")]


def test_a_row_with_a_null_key_can_be_updated_and_deleted(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "s.db")) as db:
        db.execute_ddl([NULLABLE_STRING_KEY])
        with db.transaction() as tx:
            tx.insert("S", ["K", "V"], [[None, "a"], ["x", "b"]])
        with db.transaction() as tx:
            tx.insert_or_update("S", ["K", "V"], [[None, "c"]])
        assert db.read("S") == [(None, "c"), ("x", "b")]
        with db.transaction() as tx:
            tx.delete("S", [[None]])
        assert db.read("S") == [("x", "b")]


COMPOSITE = "CREATE TABLE C (A STRING(MAX), B INT64 NOT NULL, V INT64) PRIMARY KEY (A, B)"


def test_one_row_per_null_key_and_null_sorts_first(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "c.db")) as db:
        db.execute_ddl(
            [
                NULLABLE_INT_KEY,
                COMPOSITE,
                "CREATE CHANGE STREAM S FOR ALL OPTIONS (value_capture_type = 'NEW_ROW')",
            ]
        )
        start = store_of(db).last_commit_ts() + 1
        with db.transaction() as tx:
            tx.insert("N", ["K", "V"], [[5, "five"], [None, "null"]])
            tx.insert("C", ["A", "B", "V"], [["a", 1, 1], [None, 1, 2], [None, 0, 3]])
        with pytest.raises(changestream.AlreadyExists), db.transaction() as tx:
            tx.insert("N", ["K", "V"], [[None, "again"]])
        with pytest.raises(changestream.AlreadyExists), db.transaction() as tx:
            tx.insert("C", ["A", "B"], [[None, 1]])
        assert db.read("N") == [(None, "null"), (5, "five")]
        assert db.read("C") == [(None, 0, 3), (None, 1, 2), ("a", 1, 1)]
        assert db.read("C", [[None, 1]], ["V"]) == [(2,)]
        with db.transaction() as tx:
            assert tx.execute_update("UPDATE C SET V = 20 WHERE A IS NULL AND B = 1") == 1
            tx.update("N", ["K", "V"], [[None, "updated"]])
        with pytest.raises(changestream.NotFound), db.transaction() as tx:
            tx.update("C", ["A", "B", "V"], [[None, 9, 0]])
        with db.transaction() as tx:
            tx.delete("C", [[None, 0]])
        assert db.read("C") == [(None, 1, 20), ("a", 1, 1)]
        assert db.read("N", [[None]]) == [(None, "updated")]
        (partition,) = db.partitions("S")
        keys = [
            (record.table_name, record.mod_type, mod.keys)
            for record in db.read_change_stream(
                "S", start, store_of(db).last_commit_ts(), partition.token
            )
            if isinstance(record, changestream.DataChangeRecord)
            for mod in record.mods
        ]
        assert (
            "N",
            "UPDATE",
            {"K": None},
        ) in keys and ("C", "DELETE", {"A": None, "B": 0}) in keys
        assert sum(1 for t, kind, _ in keys if kind == "INSERT") == 5


def test_a_renamed_table_with_a_nullable_key_frees_its_name(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "r.db")) as db:
        db.execute_ddl([NULLABLE_STRING_KEY, "ALTER TABLE S RENAME TO S2", NULLABLE_STRING_KEY])
        for table in ("S", "S2"):
            with db.transaction() as tx:
                tx.insert(table, ["K", "V"], [[None, table]])
            with pytest.raises(changestream.AlreadyExists), db.transaction() as tx:
                tx.insert(table, ["K", "V"], [[None, "again"]])
        assert db.read("S2") == [(None, "S2")]
