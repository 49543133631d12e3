"""Automatic splitting and merging: thresholds, split points, lineage, and leadership."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import changestream
from changestream import ChildPartitionsRecord, DataChangeRecord, InvalidArgument
from changestream.embedded.database import store_of
from changestream.store.policy import SplitPolicy, take_leadership

ITEMS = "CREATE TABLE Items (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)"


def open_items(tmp_path: Path, **policy: object) -> changestream.EmbeddedDatabase:
    db = changestream.open(str(tmp_path / "items.db"))
    db.execute_ddl([ITEMS, "CREATE CHANGE STREAM S FOR Items"])
    db.set_split_policy(enabled=False, min_lifetime_seconds=0, **policy)
    return db


def insert(db: changestream.EmbeddedDatabase, ids: range) -> None:
    with db.transaction() as tx:
        tx.insert("Items", ["Id", "Note"], [[i, f"n{i}"] for i in ids])


def workflow(db: changestream.EmbeddedDatabase) -> list[DataChangeRecord]:
    """Every data record from the stream's creation, following the lineage to the end."""
    start = store_of(db).catalog().stream("S").created_ts
    end = store_of(db).last_commit_ts()
    (first,) = db.read_change_stream("S", start, end)
    assert isinstance(first, ChildPartitionsRecord)
    queue = [(c.token, first.start_timestamp) for c in first.child_partitions]
    seen: set[str] = set()
    out: list[DataChangeRecord] = []
    while queue:
        token, begin = queue.pop(0)
        if token in seen:
            continue
        seen.add(token)
        for record in db.read_change_stream("S", begin, end, token, 1000):
            if isinstance(record, DataChangeRecord):
                out.append(record)
            elif isinstance(record, ChildPartitionsRecord):
                queue.extend((c.token, record.start_timestamp) for c in record.child_partitions)
    return out


def test_policy_settings_are_validated_and_persisted(tmp_path: Path) -> None:
    db = open_items(tmp_path)
    assert db.split_policy().enabled is False
    with pytest.raises(InvalidArgument, match=r"unknown split policy setting.*max_rows"):
        db.set_split_policy(max_row=5)
    with pytest.raises(InvalidArgument, match="must be a non-negative number"):
        db.set_split_policy(max_rows=-1)
    with pytest.raises(InvalidArgument, match="at most half of max_rows"):
        db.set_split_policy(max_rows=100, merge_max_rows=60)
    db.set_split_policy(max_rows=1000, merge_max_rows=100)
    db.close()
    with changestream.open(str(tmp_path / "items.db")) as again:
        assert again.split_policy().max_rows == 1000
        assert again.split_policy() == SplitPolicy(
            enabled=False, min_lifetime_seconds=0, max_rows=1000, merge_max_rows=100
        )


def test_split_by_rows_at_the_median_key_then_merge_when_small(tmp_path: Path) -> None:
    db = open_items(tmp_path, max_rows=100, merge_max_rows=50)
    insert(db, range(0, 300))
    (parent,) = db.partitions("S")
    (action,) = db.rebalance()
    assert not action.merge and "300 rows" in action.reason
    left, right = db.partitions("S")
    assert left.end_key == "Items(150)" and right.start_key == "Items(150)"
    assert left.parent_tokens == right.parent_tokens == (parent.token,)
    assert left.start_timestamp == right.start_timestamp
    # The halves split again, each at its own median.
    assert len(db.rebalance()) == 2
    assert [p.end_key for p in db.partitions("S")][:3] == ["Items(75)", "Items(150)", "Items(225)"]
    with db.transaction() as tx:
        tx.delete("Items", changestream.KeyRange(start_closed=(0,), end_open=(290,)))
    merges = db.rebalance()
    assert merges and all(a.merge for a in merges)
    merged = [p for p in db.partitions("S") if len(p.parent_tokens) == 2]
    assert merged
    records = workflow(db)
    inserted = [m.keys["Id"] for r in records if r.mod_type == "INSERT" for m in r.mods]
    deleted = [m.keys["Id"] for r in records if r.mod_type == "DELETE" for m in r.mods]
    assert sorted(inserted) == list(range(300))
    assert sorted(deleted) == list(range(290))
    db.close()


def test_split_by_write_rate_at_the_load_weighted_key(tmp_path: Path) -> None:
    db = open_items(tmp_path, max_write_rate=5, merge_max_write_rate=1, window_seconds=60)
    insert(db, range(0, 1000))
    for round_ in range(5):
        with db.transaction() as tx:
            tx.update("Items", ["Id", "Note"], [[i, f"hot{round_}"] for i in range(900, 1000)])
    (action,) = db.rebalance()
    assert not action.merge and "mods/s" in action.reason
    left, _ = db.partitions("S")
    boundary = int(left.end_key.removeprefix("Items(").removesuffix(")"))
    # Most of the load went to 900..999, so the split lands inside that hot range.
    assert 900 <= boundary < 1000
    db.close()


def test_minimum_lifetime_prevents_flapping(tmp_path: Path) -> None:
    db = open_items(tmp_path, max_rows=100, merge_max_rows=50)
    db.set_split_policy(min_lifetime_seconds=3600)
    insert(db, range(0, 300))
    assert db.rebalance() == []
    assert len(db.partitions("S")) == 1
    db.close()


def test_background_policy_splits_by_itself(tmp_path: Path) -> None:
    db = open_items(tmp_path, max_rows=100, merge_max_rows=50, check_interval_seconds=0.1)
    db.set_split_policy(enabled=True)
    insert(db, range(0, 400))
    deadline = time.monotonic() + 30
    while len(db.partitions("S")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(db.partitions("S")) >= 2
    leader = store_of(db).connection().execute("SELECT leader FROM _cs_policy").fetchone()[0]
    assert leader and leader.split(":")[1].isdigit()
    db.close()


def test_only_one_process_leads_at_a_time(tmp_path: Path) -> None:
    db = open_items(tmp_path)
    with store_of(db).locked() as conn:
        assert take_leadership(conn, "a", 1_000, 500)
        assert not take_leadership(conn, "b", 1_200, 500)
        assert take_leadership(conn, "a", 1_300, 500)
        assert take_leadership(conn, "b", 1_801, 500)
    db.close()
