"""The read function's arguments, errors, and query workflow semantics."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream import (
    ChangeRecord,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    InvalidArgument,
    InvalidToken,
    NotFound,
    OutOfRange,
)
from changestream.clock import format_ts, now_us
from tests.conftest import ACCOUNT_BALANCE, OpenDb

COLUMNS = ["AccountId", "LastUpdate", "Balance"]


@pytest.fixture
def bank(open_db: OpenDb, tmp_path: Path):  # type: ignore[no-untyped-def]
    with open_db(str(tmp_path / "bank.db")) as db:
        db.execute_ddl([ACCOUNT_BALANCE, "CREATE CHANGE STREAM Bank FOR AccountBalance"])
        yield db


def created(db: Any, stream: str = "Bank") -> int:
    """When the stream was created: where its first partition starts (embedded or remote)."""
    return min(p.start_timestamp for p in db.partition_history(stream))


def deposit(db: changestream.Database, account: str, amount: int) -> int:
    with db.transaction() as tx:
        tx.insert_or_update(
            "AccountBalance", COLUMNS, [[account, changestream.COMMIT_TIMESTAMP, amount]]
        )
    assert tx.commit_timestamp is not None
    return changestream.clock.parse_ts(tx.commit_timestamp)


def token_of(db: changestream.Database) -> str:
    (partition,) = db.partitions("Bank")
    return partition.token


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"heartbeat_milliseconds": 999}, InvalidArgument, "between 1000 and 300000, got 999"),
        ({"heartbeat_milliseconds": 300_001}, InvalidArgument, "between 1000 and 300000"),
        ({"heartbeat_milliseconds": "10"}, InvalidArgument, "must be an integer"),
        ({"read_options": ["x"]}, InvalidArgument, "read_options must be NULL"),
        ({"partition_token": "not-a-token"}, InvalidToken, "malformed"),
        ({"partition_token": 12}, InvalidToken, "must be a string"),
    ],
)
def test_bad_arguments(
    bank: changestream.Database, kwargs: dict[str, object], error: type, message: str
) -> None:
    args: dict[str, object] = {"start_timestamp": created(bank), "heartbeat_milliseconds": 1000}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        bank.read_change_stream("Bank", **args)  # type: ignore[arg-type]


def test_start_in_the_future_end_before_start_and_before_creation(
    bank: changestream.Database,
) -> None:
    future = now_us() + 60_000_000
    with pytest.raises(InvalidArgument, match="is in the future"):
        bank.read_change_stream("Bank", future)
    start = created(bank)
    with pytest.raises(InvalidArgument, match=r"end_timestamp .* is before start_timestamp"):
        bank.read_change_stream("Bank", start + 10, start)
    with pytest.raises(OutOfRange, match="before change stream 'Bank' was created"):
        bank.read_change_stream("Bank", start - 1)
    with pytest.raises(InvalidArgument, match="RFC 3339"):
        bank.read_change_stream("Bank", "yesterday")
    with pytest.raises(InvalidArgument, match="start_timestamp is required"):
        bank.read_change_stream("Bank", None)


def test_unknown_stream_and_foreign_or_forged_tokens(
    bank: changestream.Database, open_db: OpenDb, tmp_path: Path
) -> None:
    with pytest.raises(NotFound, match=r"change stream 'Nope' does not exist .*Bank"):
        bank.read_change_stream("Nope", created(bank))
    bank.execute_ddl("CREATE CHANGE STREAM Other FOR ALL")
    token = token_of(bank)
    other_start = created(bank, "Other")
    with pytest.raises(InvalidToken, match="belongs to another change stream"):
        bank.read_change_stream("Other", other_start, partition_token=token)
    forged = token[:-2] + ("AA" if token[-2:] != "AA" else "BB")
    with pytest.raises(InvalidToken, match="not issued by this database"):
        bank.read_change_stream("Bank", created(bank), partition_token=forged)
    with open_db(str(tmp_path / "elsewhere.db")) as elsewhere:
        elsewhere.execute_ddl([ACCOUNT_BALANCE, "CREATE CHANGE STREAM Bank FOR AccountBalance"])
        with pytest.raises(InvalidToken, match="not issued by this database"):
            elsewhere.read_change_stream("Bank", created(elsewhere), partition_token=token)


def test_start_before_retention_window(open_db: OpenDb, tmp_path: Path) -> None:
    from tests.conftest import FixedClock

    clock = FixedClock("2024-01-01T00:00:00Z")
    with open_db(str(tmp_path / "r.db"), clock=clock) as db:
        db.execute_ddl(
            [ACCOUNT_BALANCE, "CREATE CHANGE STREAM Bank FOR ALL OPTIONS (retention_period = '2h')"]
        )
        clock.set("2024-01-01T03:00:00Z")
        with pytest.raises(OutOfRange, match=r"outside the retention period .* oldest readable"):
            db.read_change_stream("Bank", "2024-01-01T00:30:00Z")
        db.read_change_stream("Bank", "2024-01-01T01:30:00Z")


def test_partition_token_start_before_partition_start(bank: changestream.Database) -> None:
    deposit(bank, "Id1", 1)
    bank.split_at("AccountBalance", ("Id5",))
    child = bank.partitions("Bank")[0]
    with pytest.raises(OutOfRange, match="before partition"):
        bank.read_change_stream("Bank", child.start_timestamp - 1, partition_token=child.token)


def test_records_in_commit_order_exactly_once_until_end(
    bank: changestream.Database,
) -> None:
    stamps = [deposit(bank, f"Id{i % 3}", i) for i in range(20)]
    token = token_of(bank)
    records = list(bank.read_change_stream("Bank", created(bank), stamps[-1], token, 1000))
    assert all(isinstance(r, DataChangeRecord) for r in records)
    assert [r.commit_timestamp for r in records] == stamps
    middle = list(bank.read_change_stream("Bank", stamps[5], stamps[9], token, 1000))
    assert [r.commit_timestamp for r in middle] == stamps[5:10]


def test_split_ends_parent_with_child_partitions_and_keys_move(
    bank: changestream.Database,
) -> None:
    before = deposit(bank, "Id1", 10)
    parent = token_of(bank)
    split_time = bank.split_at("AccountBalance", ("Id5",))
    left, right = bank.partitions("Bank")
    after_1 = deposit(bank, "Id1", 11)
    after_9 = deposit(bank, "Id9", 12)
    records = list(bank.read_change_stream("Bank", created(bank), None, parent, 1000))
    assert [type(r) for r in records] == [DataChangeRecord, ChildPartitionsRecord]
    assert records[0].commit_timestamp == before
    end = records[-1]
    assert isinstance(end, ChildPartitionsRecord)
    assert end.start_timestamp == split_time
    assert [c.token for c in end.child_partitions] == [left.token, right.token]
    assert all(c.parent_partition_tokens == (parent,) for c in end.child_partitions)
    left_records = list(bank.read_change_stream("Bank", split_time, after_9, left.token, 1000))
    right_records = list(bank.read_change_stream("Bank", split_time, after_9, right.token, 1000))
    assert [r.commit_timestamp for r in left_records] == [after_1]
    assert [r.commit_timestamp for r in right_records] == [after_9]
    assert left_records[0].mods[0].keys == {"AccountId": "Id1"}
    # Reading an ended partition from its end returns its child partitions at once.
    assert list(bank.read_change_stream("Bank", split_time, None, parent, 1000)) == [end]


def test_end_timestamp_before_partition_end_finishes_without_children(
    bank: changestream.Database,
) -> None:
    first = deposit(bank, "Id1", 1)
    parent = token_of(bank)
    bank.split_at("AccountBalance", ("Id5",))
    records = list(bank.read_change_stream("Bank", created(bank), first, parent, 1000))
    assert [r.commit_timestamp for r in records if isinstance(r, DataChangeRecord)] == [first]
    assert not any(isinstance(r, ChildPartitionsRecord) for r in records)


def test_end_timestamp_on_idle_database_finishes(bank: changestream.Database) -> None:
    deposit(bank, "Id1", 1)
    end = now_us()
    records: list[ChangeRecord] = []
    query = bank.read_change_stream("Bank", created(bank), end, token_of(bank), 1000)
    reader = threading.Thread(target=lambda: records.extend(query), daemon=True)
    reader.start()
    reader.join(30)  # bounded: a query that never ends fails here instead of hanging
    assert not reader.is_alive(), "the query did not finish at its end timestamp"
    assert len(records) == 1


def test_live_tail_receives_commits_and_heartbeats(bank: changestream.Database) -> None:
    token = token_of(bank)
    start = now_us()
    reader = bank.read_change_stream("Bank", start, None, token, 1000)
    stop = threading.Event()
    committed: list[int] = []

    def writer() -> None:
        for i in range(3):
            committed.append(deposit(bank, f"Id{i}", i))
            time.sleep(0.3)
        stop.wait(5)

    thread = threading.Thread(target=writer)
    thread.start()
    seen: list[changestream.ChangeRecord] = []
    for record in reader:
        seen.append(record)
        if (
            isinstance(record, HeartbeatRecord)
            and len(committed) == 3
            and record.timestamp >= committed[-1]
        ):
            break
    stop.set()
    thread.join()
    data = [r.commit_timestamp for r in seen if isinstance(r, DataChangeRecord)]
    assert data == committed
    heartbeats = [r for r in seen if isinstance(r, HeartbeatRecord)]
    assert heartbeats
    for heartbeat in heartbeats:
        later = [r for r in seen[seen.index(heartbeat) :] if isinstance(r, DataChangeRecord)]
        assert all(r.commit_timestamp > heartbeat.timestamp for r in later)


def test_merge_child_read_after_both_parents(bank: changestream.Database) -> None:
    deposit(bank, "Id1", 1)
    bank.split_at("AccountBalance", ("Id5",))
    left, right = bank.partitions("Bank")
    deposit(bank, "Id9", 2)
    merge_time = bank.merge_at("AccountBalance", ("Id5",))
    (child,) = bank.partitions("Bank")
    assert child.parent_tokens == (left.token, right.token)
    late = deposit(bank, "Id9", 3)
    ends = []
    for parent in (left, right):
        records = list(
            bank.read_change_stream("Bank", parent.start_timestamp, None, parent.token, 1000)
        )
        ends.append(records[-1])
    assert ends[0] == ends[1] or ends[0].to_dict() == ends[1].to_dict()
    assert isinstance(ends[0], ChildPartitionsRecord)
    assert ends[0].start_timestamp == merge_time
    records = list(bank.read_change_stream("Bank", merge_time, late, child.token, 1000))
    assert [r.commit_timestamp for r in records] == [late]


def test_sql_dialects_reach_the_read_function(bank: changestream.Database) -> None:
    stamp = deposit(bank, "Id1", 5)
    start = format_ts(created(bank))
    google = list(
        bank.execute_sql(
            f"SELECT ChangeRecord FROM READ_Bank(start_timestamp => '{start}', "
            f"end_timestamp => '{format_ts(stamp)}', partition_token => NULL, "
            "heartbeat_milliseconds => 10000)"
        )
    )
    (row,) = google
    (struct,) = row[0]
    assert struct["data_change_record"] == [] and struct["heartbeat_record"] == []
    (children,) = struct["child_partitions_record"]
    assert children["child_partitions"][0]["token"] == token_of(bank)
    postgres = list(
        bank.execute_sql(
            'SELECT * FROM "spanner"."read_json_Bank" ($1, $2, $3, $4, null)',
            [start, format_ts(stamp), token_of(bank), 10000],
        )
    )
    assert [list(r[0]) for r in postgres] == [["data_change_record"]]
    with pytest.raises(InvalidArgument, match="read_options must be NULL"):
        bank.execute_sql(
            f"SELECT ChangeRecord FROM READ_Bank(start_timestamp => '{start}', "
            "heartbeat_milliseconds => 10000, read_options => ['x'])"
        )
    with pytest.raises(InvalidArgument, match="between 1000 and 300000, got 50"):
        bank.execute_sql(
            f"SELECT ChangeRecord FROM READ_Bank(start_timestamp => '{start}', "
            "heartbeat_milliseconds => 50)"
        )


def test_dropped_stream_ends_a_live_reader(bank: changestream.Database) -> None:
    reader = bank.read_change_stream("Bank", now_us(), None, token_of(bank), 1000)
    bank.execute_ddl("DROP CHANGE STREAM Bank")
    with pytest.raises(NotFound, match="was dropped"):
        next(reader)
