"""The ``changestream`` Spark data source on a real local[2] SparkSession."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from changestream.clock import format_ts, now_us
from tests.lineage import read_lineage
from tests.spark_support import (
    Writer,
    batch_read,
    create_items_db,
    difference,
    expected_mods,
    mod_ids,
    sink_mods,
    start_query,
    write_items,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from changestream.spark import local_session

    session = local_session()
    yield session
    session.stop()


def test_batch_read_equals_the_read_function_across_the_lineage(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "items.db")
    db = create_items_db(path)
    start = now_us()
    write_items(db, seed=1, transactions=80)
    end = now_us()
    write_items(db, seed=2, transactions=10)  # after the end: must not be read
    reads = read_lineage(db, "ItemStream", start, end)
    records = [r for p in reads for r in p.records]
    assert len(reads) > 3, "the workload must split and merge"

    frame = batch_read(spark, path, start, end, maxPartitions="3")
    rows = frame.collect()
    assert frame.rdd.getNumPartitions() == 3
    assert len(rows) == len(records)
    by_id = {(r.server_transaction_id, r.record_sequence, r.partition_token): r for r in records}
    assert len(by_id) == len(records)
    # Every record exactly once: one duplicated and another missing would keep the count.
    assert sorted(
        (row.server_transaction_id, row.record_sequence, row.partition_token) for row in rows
    ) == sorted(by_id)
    for row in rows:
        record = by_id[(row.server_transaction_id, row.record_sequence, row.partition_token)]
        assert row.table_name == record.table_name == "Items"
        assert row.mod_type == record.mod_type
        assert row.value_capture_type == "NEW_ROW"
        assert [json.loads(m.keys) for m in row.mods] == [m.keys for m in record.mods]
        assert [json.loads(m.new_values) for m in row.mods] == [m.new_values for m in record.mods]
        assert json.loads(row.column_types) == [c.to_dict() for c in record.column_types]
        assert row.number_of_records_in_transaction == record.number_of_records_in_transaction
        micros = int(row.commit_timestamp.timestamp()) * 1_000_000
        assert micros + row.commit_timestamp.microsecond == record.commit_timestamp

    per_mod = batch_read(spark, path, start, end, rowPerMod="true").collect()
    got = sorted(
        (
            int(r.commit_timestamp.timestamp()) * 1_000_000 + r.commit_timestamp.microsecond,
            r.server_transaction_id,
            r.record_sequence,
            r.partition_token,
            r.mod_index,
        )
        for r in per_mod
    )
    assert got == sorted(mod_ids(records))
    db.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stream": "ItemStream", "startTimestamp": "2026-01-01T00:00:00Z"}, "'database'"),
        ({"database": "DB", "startTimestamp": "2026-01-01T00:00:00Z"}, "'stream'"),
        ({"database": "DB", "stream": "ItemStream", "startTimestamp": "yesterday"}, "RFC 3339"),
        ({"database": "DB", "stream": "ItemStream", "colour": "red"}, "unknown option 'colour'"),
        ({"database": "DB", "stream": "NoSuchStream"}, "NoSuchStream"),
        ({"database": "/no/such.db", "stream": "ItemStream"}, "no database file"),
        ({"database": "DB", "stream": "ItemStream", "rowPerMod": "yes"}, "true or false"),
        ({"database": "DB", "stream": "ItemStream", "maxRecordsPerTrigger": "0"}, "positive"),
        ({"database": "DB", "stream": "ItemStream", "maxRecordsPerTrigger": "\u00b9"}, "positive"),
    ],
)
def test_bad_options_fail_at_load_naming_the_option(
    spark: Any, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    path = str(tmp_path / "items.db")
    create_items_db(path).close()
    reader = spark.read.format("changestream")
    for name, value in options.items():
        reader = reader.option(name, path if value == "DB" else value)
    with pytest.raises(Exception, match=message):
        reader.load()


def test_batch_positions_earliest_latest_aliases_and_fail_on_data_loss(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "items.db")
    db = create_items_db(path)
    created = min(p.start_timestamp for p in db.partition_history("ItemStream"))
    write_items(db, seed=6, transactions=20)
    end = now_us()
    everything = [r for p in read_lineage(db, "ItemStream", created, end) for r in p.records]
    db.close()
    base = spark.read.format("changestream").option("database", path)
    base = base.option("stream", "ItemStream").option("endingTimestamp", format_ts(end))
    assert len(everything) > 20
    # No start, 'earliest', and the older option name all read from the oldest retained change.
    assert base.load().count() == len(everything)
    assert base.option("startingTimestamp", "earliest").load().count() == len(everything)
    alias = spark.read.format("changestream").option("database", path)
    alias = alias.option("stream", "ItemStream").option("startTimestamp", format_ts(created))
    assert alias.option("endTimestamp", format_ts(end)).load().count() == len(everything)
    latest = base.option("startingTimestamp", "latest").option("endingTimestamp", "latest")
    assert latest.load().count() == 0
    # A start before anything retained fails at load(), unless failOnDataLoss is false.
    before = base.option("startingTimestamp", format_ts(created - 60_000_000))
    with pytest.raises(Exception, match=r"older than the oldest retained change.*failOnDataLoss"):
        before.load()
    assert before.option("failOnDataLoss", "false").load().count() == len(everything)
    with pytest.raises(Exception, match="'maxRecordsPerTrigger' does not apply to a batch read"):
        base.option("maxRecordsPerTrigger", "5").load().collect()
    with pytest.raises(Exception, match="'endingTimestamp' must be a timestamp or 'latest'"):
        base.option("endingTimestamp", "earliest").load()


def _counting_query(
    spark: Any, path: str, trigger: dict[str, Any], batches: list[int], **limits: str
) -> Any:
    def count(batch: Any, batch_id: int) -> None:
        batches.append(batch.count())

    reader = (
        spark.readStream.format("changestream")
        .option("database", path)
        .option("stream", "ItemStream")
        .option("startingTimestamp", "earliest")
        .option("rowPerMod", "true")
    )
    for name, value in (limits or {"maxRecordsPerTrigger": "50"}).items():
        reader = reader.option(name, value)
    frame = reader.load()
    return frame.writeStream.foreachBatch(count).trigger(**trigger).start()


def test_available_now_honours_max_records_and_an_idle_stream_makes_no_batches(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "items.db")
    db = create_items_db(path)
    write_items(db, seed=7, transactions=30)
    end = now_us()
    created = min(p.start_timestamp for p in db.partition_history("ItemStream"))
    mods = sum(len(r.mods) for p in read_lineage(db, "ItemStream", created, end) for r in p.records)
    db.close()
    batches: list[int] = []
    query = _counting_query(spark, path, {"availableNow": True}, batches)
    assert query.awaitTermination(120), "an availableNow query ends by itself"
    assert query.exception() is None
    assert sum(batches) == mods > 100
    assert len(batches) >= mods // 50 and max(batches) <= 50 + 10  # whole commits at most
    # A byte cap cuts too: a record of 5 mods is a few hundred bytes of JSON.
    sized: list[int] = []
    query = _counting_query(spark, path, {"availableNow": True}, sized, maxBytesPerTrigger="2000")
    assert query.awaitTermination(120) and query.exception() is None
    assert sum(sized) == mods and len(sized) > len(batches) and max(sized) <= 40
    # Idle: a query started after the backlog is read makes no micro-batch per trigger.
    idle: list[int] = []
    query = _counting_query(spark, path, {"processingTime": "100 milliseconds"}, idle)
    deadline = time.monotonic() + 60
    while sum(idle) < mods and time.monotonic() < deadline:
        time.sleep(0.2)
    settled = len(idle)
    time.sleep(3)  # thirty triggers of an idle stream
    query.stop()
    assert sum(idle) == mods
    assert len(idle) == settled, "an idle stream must not make empty micro-batches"


def test_ranges_planned_from_the_logged_offsets_are_the_ones_the_source_reads(
    spark: Any, tmp_path: Path
) -> None:
    # The pipeline plans its tasks on the driver from the offsets Spark logged for a batch
    # (changestream.spark.offset_log) instead of reading the rowPerRange rows: the two
    # plans must be the same in every micro-batch, the first one included.
    from changestream.spark._options import parse_options
    from changestream.spark._source import ChangeStreamStreamReader
    from changestream.spark.micro_batches import MicroBatchQuery
    from changestream.spark.offset_log import batch_offsets, last_batch

    path = str(tmp_path / "items.db")
    db = create_items_db(path)
    write_items(db, seed=11, transactions=60)
    db.close()
    options = {
        "database": path,
        "stream": "ItemStream",
        "startingTimestamp": "earliest",
        "rowPerRange": "true",
        "maxRecordsPerTrigger": "40",
    }
    checkpoint = tmp_path / "checkpoint"
    planner = ChangeStreamStreamReader(parse_options(options))
    read: list[set[tuple[str, int, int]]] = []
    planned: list[set[tuple[str, int, int]]] = []

    def compare(batch: Any, batch_id: int) -> None:
        read.append({(r[0], r[1], r[2]) for r in batch.collect()})
        groups = planner.partitions(*batch_offsets(checkpoint, batch_id, planner.initialOffset))
        planned.append({(r.token, r.start, r.end) for g in groups for r in g.value})

    query = (
        spark.readStream.format("changestream")
        .options(**options)
        .load()
        .writeStream.foreachBatch(compare)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "an availableNow query ends by itself"
        assert query.exception() is None
    finally:
        planner.stop()
    assert len(read) > 3
    assert planned == read
    # The pipeline's own micro-batches (MicroBatchQuery) plan as Spark's query did: the same
    # batches, but for where the last one ends (each run reads up to when it started).
    ours = tmp_path / "ours"
    mine: list[set[tuple[str, int, int]]] = []
    own_planner = ChangeStreamStreamReader(parse_options(options))

    def plan(batch_id: int) -> None:
        groups = own_planner.partitions(*batch_offsets(ours, batch_id, own_planner.initialOffset))
        mine.append({(r.token, r.start, r.end) for g in groups for r in g.value})

    own = MicroBatchQuery(ours, own_planner, plan, 0.0, True, "test-batches").start()
    assert own.wait(120) and own.error is None
    assert len(mine) == len(read) and mine[:-1] == read[:-1]
    assert {r[:2] for r in mine[-1]} == {r[:2] for r in read[-1]}
    # And they resume Spark's checkpoint after its last committed batch.
    resumed: list[int] = []
    after = MicroBatchQuery(checkpoint, own_planner, resumed.append, 0.0, True, "test-resume")
    assert after.start().wait(120) and after.error is None
    assert last_batch(checkpoint, "commits") == len(read) - 1 + len(resumed)
    assert resumed == list(range(len(read), len(read) + len(resumed)))
    own_planner.stop()


def test_warming_the_workers_runs_in_the_background_and_ends(spark: Any) -> None:
    from changestream.spark._session import _import_task_code, warm_workers

    thread = warm_workers(spark.sparkContext)
    thread.join(120)
    assert not thread.is_alive()
    # Its tasks import the task code (a failure there would only be logged).
    ready = spark.sparkContext.parallelize(range(4), 2).mapPartitions(_import_task_code).collect()
    assert sorted(ready) == [2, 2]


def test_a_warmed_worker_has_nothing_left_to_import_at_its_first_conversion() -> None:
    # pyarrow imports pandas at its first conversion of Python values: a task's first
    # micro-batch paid for it before the warm-up did it.
    script = (
        "import sys\n"
        "from changestream.spark._session import _import_task_code\n"
        "assert list(_import_task_code(range(3))) == [3]\n"
        "before = set(sys.modules)\n"
        "import pyarrow as pa\n"
        "pa.array([{'OrderId': 1, 'Note': 'a'}])\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert run.stdout.strip() == "[]"


def test_an_offset_log_entry_that_is_missing_or_not_understood_fails_clearly(
    tmp_path: Path,
) -> None:
    from changestream.errors import FailedPrecondition
    from changestream.spark.offset_log import logged_offset

    with pytest.raises(FailedPrecondition, match="logged no offsets for micro-batch 4"):
        logged_offset(tmp_path, 4)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text('v2\n{}\n{"version": 2}')
    with pytest.raises(FailedPrecondition, match="not a v1 offset log entry of one source"):
        logged_offset(tmp_path, 0)
    (tmp_path / "offsets" / "1").write_text("v1\n{}\n[1, 2]")
    with pytest.raises(FailedPrecondition, match="not a changestream offset"):
        logged_offset(tmp_path, 1)
    (tmp_path / "offsets" / "2").write_text('v1\n{"batchWatermarkMs":0}\n{"version": 2}')
    assert logged_offset(tmp_path, 2) == {"version": 2}


def test_the_offset_log_writes_whole_entries_and_keeps_the_last_batches(tmp_path: Path) -> None:
    from changestream.spark.offset_log import (
        RETAINED,
        commit_metadata,
        last_batch,
        log_commit,
        log_offset,
        logged_offset,
    )

    assert last_batch(tmp_path, "offsets") is None
    for batch_id in range(RETAINED + 5):
        log_offset(tmp_path, batch_id, {"timestamp": batch_id}, now_ms=7)
        log_commit(tmp_path, batch_id, {"watermark": batch_id})
    newest = RETAINED + 4
    assert last_batch(tmp_path, "offsets") == last_batch(tmp_path, "commits") == newest
    assert logged_offset(tmp_path, newest) == {"timestamp": newest}
    assert commit_metadata(tmp_path, newest)["watermark"] == newest
    for log in ("offsets", "commits"):
        kept = sorted(int(p.name) for p in (tmp_path / log).iterdir())
        assert kept == list(range(5, newest + 1))
    # What a write cut short leaves (a temporary file) is not an entry.
    (tmp_path / "offsets" / f".{newest + 1}.tmp").write_text("v1\n{}")
    assert last_batch(tmp_path, "offsets") == newest


def _wait_for(sink: Path, expected: list[Any], timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    got: list[Any] = []
    while time.monotonic() < deadline:
        got = sink_mods(sink)
        if len(got) >= len(expected):
            break
        time.sleep(0.5)
    return got


def test_streaming_query_holds_every_mod_once_across_splits_merges_and_a_restart(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "items.db")
    create_items_db(path).close()
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    start = now_us()
    query = start_query(spark, path, format_ts(start), sink, checkpoint)
    writer = Writer(path, seed=3, transactions=10_000)
    deadline = time.monotonic() + 60
    while len(list(sink.glob("batch=*/_SUCCESS"))) < 2 and time.monotonic() < deadline:
        assert query.exception() is None
        time.sleep(0.2)
    assert writer.is_alive(), "stop the query mid-stream, while the writer still commits"
    query.stop()
    time.sleep(1)
    writer.finish(stop=True)
    assert sink_mods(sink), "the first run must have landed some batches"
    second = Writer(path, seed=4, transactions=100)
    query = start_query(spark, path, format_ts(start), sink, checkpoint)
    second.finish()
    end = now_us()
    expected = expected_mods(path, start, end)
    got = _wait_for(sink, expected, timeout=90)
    query.stop()
    assert len(expected) > 600
    assert got == expected, difference(expected, got)
    batches = list(sink.glob("batch=*"))
    assert len(batches) > 3, "admission control must have cut the backlog into batches"


def _driver(path: str, start: int, *paths: Path) -> subprocess.Popen[bytes]:
    """The streaming query in its own process group (the Python driver and its JVM)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark_support", path, format_ts(start), *map(str, paths)],
        cwd=Path(__file__).resolve().parent.parent,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_driver_killed_with_sigkill_restarts_from_its_checkpoint(tmp_path: Path) -> None:
    path = str(tmp_path / "items.db")
    create_items_db(path).close()
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    start = now_us()
    writer = Writer(path, seed=5, transactions=10_000)
    driver = _driver(path, start, sink, checkpoint)
    try:
        deadline = time.monotonic() + 90
        while len(list(sink.glob("batch=*/_SUCCESS"))) < 3 and time.monotonic() < deadline:
            assert driver.poll() is None, "the driver died on its own"
            time.sleep(0.2)
        assert len(list(sink.glob("batch=*/_SUCCESS"))) >= 3
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    writer.finish(stop=True)
    landed = len(sink_mods(sink))
    driver = _driver(path, start, sink, checkpoint)
    try:
        end = now_us()
        expected = expected_mods(path, start, end)
        got = _wait_for(sink, expected, timeout=120)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert 0 < landed < len(expected)
    assert got == expected, difference(expected, got)
