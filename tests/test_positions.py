"""Positions in a partition: what a record moves a reader to, and which records a reader that
resumes there has already returned (the Stream Client and the remote client both rely on it)."""

from __future__ import annotations

from changestream import ChildPartition, ChildPartitionsRecord, DataChangeRecord, HeartbeatRecord
from changestream.streams.positions import AFTER_ALL, Position


def data(ts: int, sequence: int) -> DataChangeRecord:
    return DataChangeRecord(
        commit_timestamp=ts,
        record_sequence=f"{sequence:08d}",
        server_transaction_id="1",
        is_last_record_in_transaction_in_partition=True,
        table_name="T",
        column_types=(),
        mods=(),
        mod_type="INSERT",
        value_capture_type="OLD_AND_NEW_VALUES",
        number_of_records_in_transaction=1,
        number_of_partitions_in_transaction=1,
        transaction_tag="",
        is_system_transaction=False,
    )


def test_a_data_change_moves_a_reader_just_past_it() -> None:
    position = Position.after(data(100, 2))
    assert position == Position(100, 2)
    assert position.covers(data(100, 2)) and position.covers(data(99, 7))
    assert not position.covers(data(100, 3)) and not position.covers(data(101, 0))


def test_a_heartbeat_moves_a_reader_past_everything_at_its_timestamp() -> None:
    position = Position.after(HeartbeatRecord(100))
    assert position == Position(100, AFTER_ALL)
    assert position.covers(data(100, 5)) and position.covers(HeartbeatRecord(100))
    assert not position.covers(data(101, 0)) and not position.covers(HeartbeatRecord(101))


def test_the_end_of_a_partition_is_never_behind_a_reader() -> None:
    end = ChildPartitionsRecord(50, "00000000", (ChildPartition("t", ()),))
    assert not Position(10**15, AFTER_ALL).covers(end)
    assert end.timestamp == 50 and data(7, 0).timestamp == 7 and HeartbeatRecord(9).timestamp == 9
