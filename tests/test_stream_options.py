"""Spanner's newer change stream options: exclude_insert / exclude_update / exclude_delete, and
allow_txn_exclusion with transactions opened with exclude_txn_from_change_streams (a
replication loop between two databases stops after one round); each shown by discover and by
partitions' stream header."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

import changestream
from changestream import DataChangeRecord, DDLError
from changestream.cli.main import main
from changestream.embedded.database import store_of
from tests.server_support import serving

TABLE = "CREATE TABLE T (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    with changestream.open(str(tmp_path / "o.db")) as database:
        database.execute_ddl(TABLE)
        yield database


def mod_types(db: changestream.EmbeddedDatabase, stream: str, start: int) -> list[str]:
    """The mod type of every mod ``stream`` recorded from ``start`` on."""
    end = store_of(db).last_commit_ts()
    if start > end:
        return []
    (partition,) = db.partitions(stream)
    return [
        record.mod_type
        for record in db.read_change_stream(stream, start, end, partition.token)
        if isinstance(record, DataChangeRecord)
        for _ in record.mods
    ]


def write_all_kinds(db: changestream.EmbeddedDatabase) -> None:
    with db.transaction() as tx:
        tx.insert("T", ["K", "V"], [[1, "a"]])  # the batch path
        tx.insert_or_update("T", ["K", "V"], [[2, "b"]])  # the row path
    with db.transaction() as tx:
        tx.update("T", ["K", "V"], [[1, "a2"]])
        tx.execute_update("UPDATE T SET V = 'b2' WHERE K = 2")
    with db.transaction() as tx:
        tx.delete("T", [[1]])
        tx.execute_update("DELETE FROM T WHERE K = 2")


def test_excluded_mod_types_are_not_recorded(db: changestream.EmbeddedDatabase) -> None:
    db.execute_ddl(
        [
            "CREATE CHANGE STREAM All_ FOR T",
            "CREATE CHANGE STREAM NoInsert FOR T OPTIONS (exclude_insert = true)",
            "CREATE CHANGE STREAM NoUpdate FOR T OPTIONS (exclude_update = true)",
            "CREATE CHANGE STREAM OnlyInserts FOR T OPTIONS "
            "(exclude_update = true, exclude_delete = true)",
        ]
    )
    start = store_of(db).last_commit_ts() + 1
    write_all_kinds(db)
    assert mod_types(db, "All_", start) == ["INSERT"] * 2 + ["UPDATE"] * 2 + ["DELETE"] * 2
    assert mod_types(db, "NoInsert", start) == ["UPDATE"] * 2 + ["DELETE"] * 2
    assert mod_types(db, "NoUpdate", start) == ["INSERT"] * 2 + ["DELETE"] * 2
    assert mod_types(db, "OnlyInserts", start) == ["INSERT"] * 2
    # SET OPTIONS changes a flag; NULL puts it back to false.
    db.execute_ddl("ALTER CHANGE STREAM NoInsert SET OPTIONS (exclude_insert = null)")
    db.execute_ddl("ALTER CHANGE STREAM All_ SET OPTIONS (exclude_delete = true)")
    again = store_of(db).last_commit_ts() + 1
    write_all_kinds(db)
    assert mod_types(db, "NoInsert", again) == ["INSERT"] * 2 + ["UPDATE"] * 2 + ["DELETE"] * 2
    assert mod_types(db, "All_", again) == ["INSERT"] * 2 + ["UPDATE"] * 2
    streams = {s.name: s for s in db.change_streams()}
    assert streams["All_"].exclude_delete and not streams["NoInsert"].exclude_insert


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("exclude_insert = 'yes'", "exclude_insert must be true, false or null"),
        ("exclude_everything = true", "allowed: retention_period, value_capture_type, exclude"),
        ("allow_txn_exclusion = 1", "allow_txn_exclusion must be true, false or null"),
    ],
)
def test_bad_option_values_are_refused(
    db: changestream.EmbeddedDatabase, options: str, message: str
) -> None:
    with pytest.raises(DDLError, match=message):
        db.execute_ddl(f"CREATE CHANGE STREAM S FOR T OPTIONS ({options})")
    assert db.change_streams() == []


def test_excluded_transactions_skip_streams_that_allow_it(
    db: changestream.EmbeddedDatabase,
) -> None:
    db.execute_ddl(
        [
            "CREATE CHANGE STREAM Allows FOR T OPTIONS (allow_txn_exclusion = true)",
            "CREATE CHANGE STREAM Records FOR T",
        ]
    )
    start = store_of(db).last_commit_ts() + 1
    with db.transaction(exclude_txn_from_change_streams=True) as tx:
        tx.insert("T", ["K", "V"], [[1, "a"]])
        tx.execute_update("UPDATE T SET V = 'x' WHERE K = 1")
    with db.transaction() as tx:
        tx.insert("T", ["K", "V"], [[2, "b"]])
    assert mod_types(db, "Allows", start) == ["INSERT"]
    assert mod_types(db, "Records", start) == ["INSERT", "INSERT"]
    with pytest.raises(changestream.InvalidArgument, match="must be True or False"):
        db.transaction(exclude_txn_from_change_streams="yes")  # type: ignore[arg-type]
    # The same through the server, for mutations and for DML.
    with serving({"o": db}) as running:
        remote = changestream.connect(f"http://127.0.0.1:{running.server.port}/o")
        try:
            mark = store_of(db).last_commit_ts() + 1
            with remote.transaction(exclude_txn_from_change_streams=True) as tx:
                tx.insert("T", ["K", "V"], [[3, "c"]])
            with remote.transaction(exclude_txn_from_change_streams=True) as tx:
                tx.execute_update("UPDATE T SET V = 'y' WHERE K = 3")
        finally:
            remote.close()
    assert mod_types(db, "Allows", mark) == []
    assert mod_types(db, "Records", mark) == ["INSERT", "UPDATE"]


def replicate(
    source: changestream.EmbeddedDatabase,
    target: changestream.EmbeddedDatabase,
    since: int,
) -> tuple[int, int]:
    """Apply ``source``'s recorded changes after ``since`` to ``target``, excluded from its
    streams; returns (changes applied, the source position reached)."""
    end = store_of(source).last_commit_ts()
    if since > end:
        return 0, since
    (partition,) = source.partitions("Replicate")
    applied = 0
    for record in source.read_change_stream("Replicate", since, end, partition.token):
        if not isinstance(record, DataChangeRecord):
            continue
        with target.transaction(exclude_txn_from_change_streams=True) as tx:
            for mod in record.mods:
                if record.mod_type == "DELETE":
                    tx.delete("T", [[mod.keys["K"]]])
                else:
                    tx.insert_or_update("T", ["K", "V"], [[mod.keys["K"], mod.new_values["V"]]])
                applied += 1
    return applied, end + 1


def test_a_replication_loop_stops_after_one_round(tmp_path: Path) -> None:
    stream = (
        "CREATE CHANGE STREAM Replicate FOR ALL OPTIONS "
        "(allow_txn_exclusion = true, value_capture_type = 'NEW_ROW')"
    )
    with (
        changestream.open(str(tmp_path / "east.db")) as east,
        changestream.open(str(tmp_path / "west.db")) as west,
    ):
        positions = {}
        for side in (east, west):
            side.execute_ddl([TABLE, stream])
            positions[side.name] = store_of(side).last_commit_ts() + 1
        with east.transaction() as tx:
            tx.insert("T", ["K", "V"], [[1, "from east"]])
        with west.transaction() as tx:
            tx.insert("T", ["K", "V"], [[2, "from west"]])
        rounds = []
        for _ in range(5):
            to_west, positions["east"] = replicate(east, west, positions["east"])
            to_east, positions["west"] = replicate(west, east, positions["west"])
            rounds.append((to_west, to_east))
            if not to_west and not to_east:
                break
        assert rounds == [(1, 1), (0, 0)]
        assert east.read("T") == west.read("T") == [(1, "from east"), (2, "from west")]


def test_options_show_in_discover_and_partitions(tmp_path: Path) -> None:
    path = str(tmp_path / "shown.db")
    with changestream.open(path) as db:
        db.execute_ddl(
            [
                TABLE,
                "CREATE CHANGE STREAM S FOR T OPTIONS (exclude_delete = true, "
                "allow_txn_exclusion = true, retention_period = '36h')",
            ]
        )
    runner = CliRunner()
    found = runner.invoke(main, ["discover", path, "--json"])
    assert found.exit_code == 0, found.output
    (obj,) = [orjson.loads(line) for line in found.output.splitlines()]
    assert obj["change_streams"] == [
        {
            "name": "S",
            "retention_seconds": 36 * 3600,
            "value_capture_type": "OLD_AND_NEW_VALUES",
            "exclude_delete": True,
            "allow_txn_exclusion": True,
        }
    ]
    table = runner.invoke(main, ["discover", path])
    text = "S (OLD_AND_NEW_VALUES, retention 36h, exclude_delete, allow_txn_exclusion)"
    assert text in " ".join(table.output.split())
    tree = runner.invoke(main, ["partitions", path, "S"])
    assert tree.exit_code == 0, tree.output
    assert "change stream S (OLD_AND_NEW_VALUES, retention 36h, exclude_delete," in tree.output
