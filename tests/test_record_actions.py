"""Each record type answers for itself: whether it is a change, whether it ends the partition,
which children follow, and which of a reader's actions it calls."""

from __future__ import annotations

from changestream import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    RecordActions,
    data_changes,
)
from tests.test_positions import data

CHILDREN = ChildPartitionsRecord(300, "00000000", (ChildPartition("c", ("p",)),))


class Labels:
    """Actions that say which one was called, with the record's timestamp."""

    def on_data_change(self, record: DataChangeRecord) -> str:
        return f"data {record.commit_timestamp}"

    def on_heartbeat(self, record: HeartbeatRecord) -> str:
        return f"heartbeat {record.timestamp}"

    def on_child_partitions(self, record: ChildPartitionsRecord) -> str:
        return f"children {record.start_timestamp}"


def test_handle_calls_the_action_of_the_record_type() -> None:
    actions: RecordActions[str] = Labels()
    records: list[ChangeRecord] = [data(100, 0), HeartbeatRecord(200), CHILDREN]
    assert [r.handle(actions) for r in records] == ["data 100", "heartbeat 200", "children 300"]


def test_only_a_child_partitions_record_ends_the_partition_and_names_children() -> None:
    assert [r.ends_partition for r in (data(1, 0), HeartbeatRecord(2), CHILDREN)] == [
        False,
        False,
        True,
    ]
    assert data(1, 0).children == () and HeartbeatRecord(2).children == ()
    assert CHILDREN.children == (ChildPartition("c", ("p",)),)
    assert [r.is_data_change for r in (data(1, 0), HeartbeatRecord(2), CHILDREN)] == [
        True,
        False,
        False,
    ]


def test_data_changes_keeps_the_data_change_records_and_reads_to_the_end() -> None:
    read: list[ChangeRecord] = [data(100, 0), HeartbeatRecord(150), data(200, 1), CHILDREN]
    consumed = iter(read)
    assert [r.commit_timestamp for r in data_changes(consumed)] == [100, 200]
    assert next(consumed, None) is None
