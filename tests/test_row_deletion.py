"""Row deletion policies (Spanner's TTL): the DDL forms and their checks, expired rows deleted
as system transactions, exclude_ttl_deletes, and the background deleter."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import changestream
from changestream import (
    AlreadyExists,
    DataChangeRecord,
    DDLError,
    FailedPrecondition,
    NotFound,
)
from changestream.embedded.database import store_of

DAY = dt.timedelta(days=1)
EVENTS = (
    "CREATE TABLE Events (Id INT64 NOT NULL, Seen TIMESTAMP, Name STRING(MAX)) PRIMARY KEY (Id), "
    "ROW DELETION POLICY (OLDER_THAN(Seen, INTERVAL 7 DAY))"
)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    with changestream.open(str(tmp_path / "ttl.db")) as database:
        database.set_split_policy(enabled=False)
        database.execute_ddl(
            [
                EVENTS,
                "CREATE CHANGE STREAM All_ FOR ALL",
                "CREATE CHANGE STREAM NoTtl FOR ALL OPTIONS (exclude_ttl_deletes = true)",
            ]
        )
        yield database


def stamp(days_ago: float) -> dt.datetime:
    return dt.datetime.now(dt.UTC) - days_ago * DAY


def recorded(db: changestream.EmbeddedDatabase, stream: str, start: int) -> list[tuple[str, bool]]:
    """(mod type, is_system_transaction) of each mod ``stream`` recorded from ``start`` on."""
    (partition,) = db.partitions(stream)
    return [
        (record.mod_type, record.is_system_transaction)
        for record in db.read_change_stream(
            stream, start, store_of(db).last_commit_ts(), partition.token
        )
        if isinstance(record, DataChangeRecord)
        for _ in record.mods
    ]


def test_expired_rows_are_deleted_as_system_transactions(
    db: changestream.EmbeddedDatabase,
) -> None:
    with db.transaction() as tx:
        tx.insert(
            "Events",
            ["Id", "Seen", "Name"],
            [
                [1, stamp(8), "old"],
                [2, stamp(6), "recent"],
                [3, None, "never"],
                [4, stamp(30), "x"],
            ],
        )
    start = store_of(db).last_commit_ts() + 1
    assert db.delete_expired_rows() == 2
    assert [row[0] for row in db.read("Events")] == [2, 3]
    assert db.delete_expired_rows() == 0
    assert recorded(db, "All_", start) == [("DELETE", True), ("DELETE", True)]
    assert recorded(db, "NoTtl", start) == []
    # An ordinary delete is recorded by both.
    with db.transaction() as tx:
        tx.delete("Events", [[2]])
    later = store_of(db).last_commit_ts()
    assert recorded(db, "NoTtl", later) == [("DELETE", False)]


def test_policy_ddl_and_its_checks(db: changestream.EmbeddedDatabase) -> None:
    policy = store_of(db).catalog().table("Events").row_deletion_policy
    assert policy is not None and (policy.column, policy.days) == ("Seen", 7)
    with pytest.raises(AlreadyExists, match="already has a row deletion policy"):
        db.execute_ddl(
            "ALTER TABLE Events ADD ROW DELETION POLICY (OLDER_THAN(Seen, INTERVAL 1 DAY))"
        )
    db.execute_ddl(
        "ALTER TABLE Events REPLACE ROW DELETION POLICY (OLDER_THAN(Seen, INTERVAL 1 DAY))"
    )
    with db.transaction() as tx:
        tx.insert("Events", ["Id", "Seen"], [[1, stamp(2)]])
    assert db.delete_expired_rows() == 1
    with pytest.raises(FailedPrecondition, match="its row deletion policy uses it"):
        db.execute_ddl("ALTER TABLE Events DROP COLUMN Seen")
    db.execute_ddl("ALTER TABLE Events DROP ROW DELETION POLICY")
    assert store_of(db).catalog().table("Events").row_deletion_policy is None
    with pytest.raises(NotFound, match="has no row deletion policy"):
        db.execute_ddl("ALTER TABLE Events DROP ROW DELETION POLICY")
    with pytest.raises(FailedPrecondition, match="needs a TIMESTAMP column; 'Name' is STRING"):
        db.execute_ddl(
            "ALTER TABLE Events ADD ROW DELETION POLICY (OLDER_THAN(Name, INTERVAL 1 DAY))"
        )
    with pytest.raises(NotFound, match="has no column 'Nope'"):
        db.execute_ddl(
            "CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K), "
            "ROW DELETION POLICY (OLDER_THAN(Nope, INTERVAL 1 DAY))"
        )
    with pytest.raises(DDLError, match="DAY \\(intervals are in days\\)"):
        db.execute_ddl(
            "ALTER TABLE Events ADD ROW DELETION POLICY (OLDER_THAN(Seen, INTERVAL 1 HOUR))"
        )


def test_the_background_loop_deletes_expired_rows(db: changestream.EmbeddedDatabase) -> None:
    db.set_split_policy(check_interval_seconds=0.1)
    with db.transaction() as tx:  # a commit starts the background loop in this process
        tx.insert("Events", ["Id", "Seen"], [[1, stamp(9)], [2, stamp(1)]])
    deadline = time.monotonic() + 30
    while [row[0] for row in db.read("Events")] != [2]:
        assert time.monotonic() < deadline, "the expired row was not deleted within 30 s"
        time.sleep(0.05)
