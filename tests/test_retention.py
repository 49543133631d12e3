"""Retention: expired records and partitions go away, and storage stays bounded."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

import changestream
from changestream import DataChangeRecord, OutOfRange
from changestream.clock import format_ts, parse_ts
from changestream.embedded.database import store_of
from tests.conftest import FixedClock

ITEMS = "CREATE TABLE Items (Id INT64 NOT NULL, Payload STRING(MAX)) PRIMARY KEY (Id)"


def test_expired_partitions_disappear_and_old_tokens_fail_clearly(tmp_path: Path) -> None:
    clock = FixedClock("2024-01-01T00:00:00Z")
    with changestream.open(str(tmp_path / "r.db"), clock=clock) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl(
            [ITEMS, "CREATE CHANGE STREAM S FOR Items OPTIONS (retention_period = '1h')"]
        )
        with db.transaction() as tx:
            tx.insert("Items", ["Id"], [[1], [100]])
        (old,) = db.partitions("S")
        clock.set("2024-01-01T00:10:00Z")
        db.split_at("Items", (50,))
        clock.set("2024-01-01T02:00:00Z")
        with db.transaction() as tx:
            tx.update("Items", ["Id", "Payload"], [[1, "late"]])
        assert len(db.partition_history("S")) == 2
        with pytest.raises(OutOfRange, match="ended before the retention window"):
            db.read_change_stream("S", "2024-01-01T01:30:00Z", partition_token=old.token)
        with pytest.raises(OutOfRange, match="outside the retention period"):
            db.read_change_stream("S", "2024-01-01T00:30:00Z")
        left = db.partitions("S")[0]
        records = list(
            db.read_change_stream(
                "S", "2024-01-01T01:30:00Z", "2024-01-01T02:00:00Z", left.token, 1000
            )
        )
        assert [r.mods[0].new_values for r in records if isinstance(r, DataChangeRecord)] == [
            {"Payload": "late"}
        ]


def storage_bytes(path: Path) -> int:
    return sum(
        os.path.getsize(f"{path}{suffix}")
        for suffix in ("", "-wal")
        if os.path.exists(f"{path}{suffix}")
    )


def test_storage_stays_bounded_under_a_steady_load(tmp_path: Path) -> None:
    path = tmp_path / "steady.db"
    clock = FixedClock("2024-01-01T00:00:00Z")
    sizes = []
    with changestream.open(str(path), clock=clock) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl(
            [ITEMS, "CREATE CHANGE STREAM S FOR Items OPTIONS (retention_period = '1h')"]
        )
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Payload"], [[i, ""] for i in range(200)])
        start = parse_ts("2024-01-01T00:00:00Z")
        for minute in range(1, 241):
            clock.set(format_ts(start + minute * 60_000_000))
            with db.transaction() as tx:
                tx.update(
                    "Items", ["Id", "Payload"], [[i, "x" * 200 + str(minute)] for i in range(200)]
                )
            if minute % 60 == 0:
                store_of(db).connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
                sizes.append(storage_bytes(path))
        kept = store_of(db).connection().execute("SELECT min(commit_ts) FROM _cs_log").fetchone()[0]
        assert kept >= start + 179 * 60_000_000
    # After the first retention period the file stops growing: freed pages are reused.
    assert sizes[3] <= sizes[1] * 1.1, sizes
    assert sizes[1] > 0


def test_a_file_with_the_retired_log_index_loses_it_and_retention_reaches_every_split(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "old.db")
    clock = FixedClock("2024-01-01T00:00:00Z")
    with changestream.open(path, clock=clock) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl(
            [ITEMS, "CREATE CHANGE STREAM S FOR Items OPTIONS (retention_period = '1h')"]
        )
        db.split_at("Items", (50,))
        clock.set("2024-01-01T00:10:00Z")
        with db.transaction() as tx:
            tx.insert("Items", ["Id"], [[1], [100]])
    # Versions before this one kept an index on (stream, commit time) for retention.
    raw = sqlite3.connect(path)
    raw.execute("CREATE INDEX _cs_log_age ON _cs_log (stream_id, commit_ts)")
    raw.commit()
    raw.close()
    clock.set("2024-01-01T02:00:00Z")
    with changestream.open(path, clock=clock) as db:
        conn = store_of(db).connection()
        indexes = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
        assert ("_cs_log_age",) not in indexes and ("_cs_splits_live",) in indexes
        with db.transaction() as tx:
            tx.insert("Items", ["Id"], [[2], [200]])
        splits = conn.execute("SELECT split_id, commit_ts FROM _cs_log").fetchall()
        assert len({split for split, _ in splits}) == 2
        assert all(commit_ts >= parse_ts("2024-01-01T02:00:00Z") for _, commit_ts in splits)
