"""The engine side of watch(): ALTER TABLE ... RENAME TO, and the hidden internal stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream import (
    AlreadyExists,
    DataChangeRecord,
    DDLError,
    FailedPrecondition,
    NotFound,
)
from changestream.ddl import RenameTable, parse_ddl
from changestream.embedded.database import store_of
from tests.watch_support import COLUMNS, ITEMS

pytestmark = pytest.mark.timeout(120)


def test_parse_rename() -> None:
    assert parse_ddl("ALTER TABLE Items RENAME TO `Stock`") == [RenameTable("Items", "Stock")]
    with pytest.raises(DDLError, match="new table name '_cs_x' is reserved"):
        parse_ddl("alter table Items rename to _cs_x")


def test_rename_moves_rows_and_name(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "r.db")) as db:
        db.execute_ddl([ITEMS, "CREATE TABLE Other (K INT64 NOT NULL) PRIMARY KEY (K)"])
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, [[1, "a", 1]])
        db.execute_ddl("ALTER TABLE Items RENAME TO Stock")
        assert db.read("Stock") == [(1, "a", 1)]
        with pytest.raises(NotFound, match="table 'Items' does not exist"):
            db.read("Items")
        with db.transaction() as tx:
            tx.update("Stock", COLUMNS, [[1, "b", 2]])
        assert db.read("Stock") == [(1, "b", 2)]
        with pytest.raises(AlreadyExists, match="cannot rename table 'Stock' to 'OTHER'"):
            db.execute_ddl("ALTER TABLE Stock RENAME TO OTHER")
        with pytest.raises(NotFound, match="table 'Nope' does not exist"):
            db.execute_ddl("ALTER TABLE Nope RENAME TO Yes")


def test_rename_and_drop_refused_while_a_stream_names_the_table(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "r.db")) as db:
        db.execute_ddl([ITEMS, "CREATE CHANGE STREAM Named FOR Items"])
        for statement, action in (
            ("ALTER TABLE Items RENAME TO Stock", "rename"),
            ("DROP TABLE Items", "drop"),
        ):
            with pytest.raises(FailedPrecondition, match=f"cannot {action} table 'Items'"):
                db.execute_ddl(statement)
        db.execute_ddl(["DROP CHANGE STREAM Named", "CREATE CHANGE STREAM Everything FOR ALL"])
        with db.transaction() as tx:
            tx.insert("Items", ["Id"], [[1]])
        db.execute_ddl("ALTER TABLE Items RENAME TO Stock")
        assert db.read("Stock") == [(1, None, None)]
        with pytest.raises(NotFound):
            db.read("Items")


def test_internal_stream_is_out_of_users_reach(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "r.db")) as db:
        db.execute_ddl([ITEMS, "CREATE CHANGE STREAM Mine FOR Items"])
        name = db.ensure_watch_stream().stream
        assert name.startswith("_cs_")
        assert db.ensure_watch_stream().stream == name, "created once"
        with pytest.raises(NotFound) as missing:
            db.read_change_stream("Nope", db.ensure_watch_stream().now)
        assert "(change streams: Mine)" in str(missing.value)
        assert list(store_of(db).catalog().user_streams()) == ["Mine"]
        for statement in (
            f"DROP CHANGE STREAM {name}",
            f"ALTER CHANGE STREAM {name} SET OPTIONS (retention_period = '1h')",
            f"CREATE CHANGE STREAM {name} FOR ALL",
        ):
            with pytest.raises(DDLError, match="is reserved"):
                db.execute_ddl(statement)
        with pytest.raises(DDLError, match="value_capture_type must be one of"):
            db.execute_ddl(
                "CREATE CHANGE STREAM Wide FOR ALL OPTIONS (value_capture_type = 'OLD_AND_NEW_ROW')"
            )
        # FOR ALL does not pin tables: a table can still be dropped under the internal stream.
        db.execute_ddl(["ALTER CHANGE STREAM Mine SET FOR ALL", "DROP TABLE Items"])


def user_records(tmp_path: Path, name: str, with_watch: bool) -> list[dict[str, Any]]:
    """A user stream's records for a fixed workload, with or without the internal stream."""
    with changestream.open(str(tmp_path / name)) as db:
        db.execute_ddl([ITEMS, "CREATE TABLE Gone (K INT64 NOT NULL) PRIMARY KEY (K)"])
        created = db.execute_ddl("CREATE CHANGE STREAM Mine FOR ALL")
        if with_watch:
            db.ensure_watch_stream()
        with db.transaction(tag="t") as tx:
            tx.insert("Items", COLUMNS, [[1, "a", 1], [2, "b", 2]])
        with db.transaction() as tx:
            tx.replace("Items", COLUMNS[:2], [[1, "r"]])
            tx.update("Items", COLUMNS, [[2, "u", 3]])
        db.execute_ddl(["DROP TABLE Gone", "ALTER TABLE Items RENAME TO Stock"])
        with db.transaction() as tx:
            tx.delete("Stock", [[2]])
        (partition,) = db.partitions("Mine")
        end = store_of(db).last_commit_ts()
        records = db.read_change_stream("Mine", created, end, partition.token, 1000)
        return [
            r.to_dict() | {"commit_timestamp": "", "server_transaction_id": ""}
            for r in records
            if isinstance(r, DataChangeRecord)
        ]


def test_user_stream_records_keep_their_shape(tmp_path: Path) -> None:
    plain = user_records(tmp_path, "plain.db", with_watch=False)
    watched = user_records(tmp_path, "watched.db", with_watch=True)
    assert watched == plain
    assert [(r["mod_type"], len(r["mods"])) for r in plain] == [
        ("INSERT", 2),
        ("UPDATE", 2),
        ("DELETE", 1),
    ]
    assert not any(r["is_system_transaction"] for r in plain)
