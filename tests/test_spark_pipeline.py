"""The Datastream-style pipeline on a real local[2] SparkSession, with real files, Delta
tables and (for the crash test) a pipeline process killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("pyspark")

from deltalake import DeltaTable

import changestream
from changestream.clock import now_us
from changestream.datastream import StreamCatalog, StreamDefinition
from changestream.datastream.catalog import LAST_BATCH
from changestream.datastream.files import event_files, read_events
from changestream.embedded.database import store_of
from changestream.spark.history import HistoryReplica
from changestream.spark.offset_log import commit_metadata, last_batch
from changestream.spark.pipeline import PipelineFailed, PipelineOptions, SparkPipeline
from changestream.spark.replica import DeltaReplica
from tests.datastream_support import ENVELOPE_FIELDS
from tests.lineage import read_lineage
from tests.spark_support import ITEMS, Writer, write_items

pytestmark = pytest.mark.spark

SAMPLE = (
    "CREATE TABLE SAMPLE (THIS_IS_MY_PK INT64 NOT NULL, FIELD1 STRING(MAX), "
    "FIELD2 STRING(MAX) NOT NULL) PRIMARY KEY (THIS_IS_MY_PK)"
)
ALL = (
    "CREATE CHANGE STREAM Everything FOR ALL "
    "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')"
)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from changestream.spark import local_session

    session = local_session()
    yield session
    session.stop()


def _stream(path: str, tmp: Path, name: str = "s1", **extra: Any) -> StreamDefinition:
    definition = StreamDefinition(
        name=name,
        database=path,
        change_stream="Everything",
        destination=str(tmp / "events"),
        replica=str(tmp / "replica"),
        **extra,
    )
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        catalog.create(definition)
        catalog.transition(name, "start")
    return definition


def _run(spark: Any, path: str, name: str = "s1", **options: Any) -> Any:
    opts = PipelineOptions(until_caught_up=True, trigger_seconds=0.5, **options)
    return SparkPipeline(name, path, opts, spark=spark).run()


def _events(root: Path) -> list[dict[str, Any]]:
    return [e for f in event_files(root) for e in read_events(f)]


def _replica_rows(replica: Path, path: str, table: str) -> list[tuple[Any, ...]]:
    with changestream.open(path) as db:
        schema = next(t for t in db.tables() if t.name == table)
        return DeltaReplica(replica, "source", schema).read_rows()


def test_the_seeds_insert_update_delete_flow_as_three_events(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "source.db")
    with changestream.open(path) as db:
        db.execute_ddl([SAMPLE, ALL])
    _stream(path, tmp_path, backfill="none")
    with changestream.open(path) as db:
        with db.transaction() as tx:
            tx.insert("SAMPLE", ["THIS_IS_MY_PK", "FIELD1", "FIELD2"], [[1231535353, "foo", "TLV"]])
        with db.transaction() as tx:
            tx.update("SAMPLE", ["THIS_IS_MY_PK", "FIELD1"], [[1231535353, None]])
        with db.transaction() as tx:
            tx.delete("SAMPLE", [[1231535353]])
    status = _run(spark, path)
    assert status.state == "Running"
    events = sorted(_events(tmp_path / "events"), key=lambda e: e["sort_keys"])
    assert [e["source_metadata"]["change_type"] for e in events] == ["INSERT", "UPDATE", "DELETE"]
    assert [e["source_metadata"]["is_deleted"] for e in events] == [False, False, True]
    assert [e["payload"] for e in events] == [
        {"THIS_IS_MY_PK": 1231535353, "FIELD1": "foo", "FIELD2": "TLV"},
        {"THIS_IS_MY_PK": 1231535353, "FIELD1": None, "FIELD2": "TLV"},
        {"THIS_IS_MY_PK": 1231535353, "FIELD1": None, "FIELD2": "TLV"},
    ]
    first = events[0]
    assert list(first)[:8] == ENVELOPE_FIELDS
    assert first["read_method"] == "changestream-cdc"
    assert first["object"] == "source_SAMPLE"
    assert first["source_metadata"]["primary_keys"] == ["THIS_IS_MY_PK"]
    assert len({e["uuid"] for e in events}) == 3
    assert _replica_rows(tmp_path / "replica", path, "SAMPLE") == []
    with changestream.open(path) as db:
        described = StreamCatalog(db).describe("s1")
    assert described["state"] == "Running"
    assert described["rows_processed"] == 3
    # The batch's commit says how long its CDC tasks and its replica MERGE took, within
    # the batch's work.
    (checkpoint,) = (tmp_path / "events" / "_changestream").glob("s1-*/checkpoint")
    batch = last_batch(checkpoint, "commits")
    assert batch is not None
    durations = commit_metadata(checkpoint, batch)["durationMs"]
    assert durations["cdcTasks"] > 0 and durations["replicaMerge"] > 0
    assert durations["cdcTasks"] + durations["replicaMerge"] <= durations["addBatch"] + 1
    assert durations["triggerExecution"] == sum(
        durations[phase] for phase in ("latestOffset", "walCommit", "addBatch")
    )


def _source_rows(path: str) -> list[tuple[Any, ...]]:
    with changestream.open(path) as db:
        return db.read("Items")


def _create_items(path: str, rows: int) -> None:
    with changestream.open(path) as db:
        db.execute_ddl([ITEMS, ALL])
        db.set_split_policy(enabled=False)
        if rows:
            with db.transaction() as tx:
                tx.insert("Items", ["Id", "Name", "Qty"], [[i, f"r{i}", i] for i in range(rows)])


def test_backfill_with_concurrent_writes_then_cdc_leaves_replica_equal_to_source(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=500)
    _stream(path, tmp_path, format="avro")
    writer = Writer(path, seed=11, transactions=150, pause=0.02)
    _run(spark, path, chunk_rows=60)
    writer.finish()
    _run(spark, path)  # catch up with what the writer committed after the first run started
    assert _replica_rows(tmp_path / "replica", path, "Items") == _source_rows(path)
    events = _events(tmp_path / "events")
    backfill = [e for e in events if e["read_method"] == "changestream-backfill"]
    assert len({tuple(e["payload"].values()) for e in backfill}) == len(backfill)
    # Every row present when its chunk was read, once (the writer deletes some before).
    assert 450 < len({e["payload"]["Id"] for e in backfill}) == len(backfill) <= 500
    assert not [u for u, n in Counter(e["uuid"] for e in events).items() if n > 1]
    with changestream.open(path) as db:
        progress = StreamCatalog(db).progress("s1")
    (entry,) = progress.objects.values()
    assert entry.status == "done" and entry.rows == len(backfill)
    assert len(entry.detail["boundaries"]) >= 8


def test_pipeline_refuses_a_stream_that_is_not_started(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=1)
    with changestream.open(path) as db:
        StreamCatalog(db).create(
            StreamDefinition(
                name="idle",
                database=path,
                change_stream="Everything",
                destination=str(tmp_path / "e"),
            )
        )
    with pytest.raises(changestream.FailedPrecondition, match="Not started; start it first"):
        _run(spark, path, name="idle")


def test_an_unwritable_destination_is_retried_recorded_and_fails_the_stream(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=3)
    blocker = tmp_path / "events"
    blocker.mkdir()
    (blocker / "source_Items").write_text("a file where the object's directory should be")
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        catalog.create(
            StreamDefinition(
                name="bad", database=path, change_stream="Everything", destination=str(blocker)
            )
        )
        catalog.transition("bad", "start")
    with pytest.raises(PipelineFailed):
        _run(spark, path, name="bad", attempts=2, backoff_seconds=0.05, restarts=0)
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        assert catalog.get("bad").state.value == "Failed"
        errors = catalog.errors("bad")
    assert len(errors) >= 2
    assert any("attempt 2" in e.message for e in errors)
    assert all(e.object in ("source_Items", "*") for e in errors)


def test_a_retriable_failure_while_running_restarts_the_query_after_a_backoff(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=0)
    obstacle = tmp_path / "events" / "source_Items"
    obstacle.parent.mkdir()
    obstacle.write_text("a file where the object's directory should be")
    _stream(path, tmp_path, backfill="none")
    with changestream.open(path) as db, db.transaction() as tx:
        tx.insert("Items", ["Id", "Name", "Qty"], [[n, "x", n] for n in range(3)])

    def clear_after_the_first_failure() -> None:
        with changestream.open(path) as db:
            deadline = time.monotonic() + 120
            while not StreamCatalog(db).errors("s1") and time.monotonic() < deadline:
                time.sleep(0.05)
        obstacle.unlink()

    clearer = threading.Thread(target=clear_after_the_first_failure, daemon=True)
    clearer.start()
    with caplog.at_level("WARNING", logger="changestream.spark.pipeline"):
        status = _run(spark, path, attempts=1, backoff_seconds=0.5, restarts=3)
    clearer.join(timeout=10)
    assert status.state == "Running"
    assert "restart 1 of 3" in caplog.text
    with changestream.open(path) as db:
        assert StreamCatalog(db).errors("s1")  # the failure stays on record
    assert sorted(e["payload"]["Id"] for e in _events(tmp_path / "events")) == [0, 1, 2]
    assert _replica_rows(tmp_path / "replica", path, "Items") == _source_rows(path)


def _expected_cdc_uuids(path: str, stream: str, end: int) -> set[str]:
    """The uuid of every change committed after ``streams start`` (through ``end``), read with
    the read function and derived with the documented recipe: a UUID 5 of the change."""
    namespace = uuid.UUID("6b19f7f1-b143-460a-aabc-117f902a791b")
    with changestream.open(path) as db:
        start = StreamCatalog(db).progress(stream).cdc_start_timestamp
        assert start is not None
        reads = read_lineage(db, "Everything", start, end)
    return {
        str(
            uuid.uuid5(
                namespace,
                orjson.dumps(
                    [
                        "cdc",
                        stream,
                        f"source_{record.table_name}",
                        record.commit_timestamp,
                        record.server_transaction_id,
                        record.record_sequence,
                        index,
                    ]
                ).decode(),
            )
        )
        for partition in reads
        for record in partition.records
        for index in range(len(record.mods))
    }


def _pipeline_command(path: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "changestream", "pipeline", "run", "s1", "--db", path, *extra]


def test_pipeline_killed_with_sigkill_mid_batch_restarts_with_every_event_once(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=300)
    _stream(path, tmp_path)
    with changestream.open(path) as db:
        write_items(db, seed=21, transactions=30)
    command = _pipeline_command(path, "--trigger-seconds", "0.5", "--max-records-per-trigger", "20")
    writer = Writer(path, seed=22, transactions=10_000, pause=0.01)
    # The runs' temporary files, to see what the killed one leaves and who removes it.
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    process = subprocess.Popen(
        command,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        rows = 0
        while time.monotonic() < deadline and rows <= 400:
            with changestream.open(path) as db:
                rows = StreamCatalog(db).progress("s1").rows_processed
            assert process.poll() is None, "the pipeline died on its own"
            time.sleep(0.2)
        # The kill lands while the pipeline is running and the writer still commits.
        assert rows > 400 and process.poll() is None and writer.is_alive()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL
    # Spark's directories of the killed run, all in its scratch directory.
    (left,) = temp.iterdir()
    assert left.name.startswith("changestream-spark-") and any(left.glob("local/blockmgr-*"))
    writer.finish(stop=True)
    end = now_us()
    finished = subprocess.run(
        [*command[:-4], "--until-caught-up"], capture_output=True, text=True, timeout=300, env=env
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    # The restart removed what the killed run left, and its own at its exit.
    assert list(temp.iterdir()) == []
    # Spark's own log lines go to the stream's spark.log, not into the progress line.
    assert " WARN " not in finished.stdout + finished.stderr, finished.stderr[-2000:]
    (spark_log,) = (tmp_path / "events" / "_changestream").glob("s1-*/spark.log")
    assert "spark.log" in finished.stdout and spark_log.stat().st_size > 0
    replica, source = _replica_rows(tmp_path / "replica", path, "Items"), _source_rows(path)
    assert replica == source, (finished.stdout[-600:], len(replica), len(source))
    events = _events(tmp_path / "events")
    cdc = [e for e in events if e["read_method"] == "changestream-cdc"]
    # Every change after `streams start` is an event: none missing, none invented...
    assert {e["uuid"] for e in cdc} == _expected_cdc_uuids(path, "s1", end)
    # ...and a uuid seen twice is a replay of the same event, never another change.
    by_uuid: dict[str, dict[str, Any]] = {}
    for event in events:
        seen = by_uuid.setdefault(event["uuid"], event)
        assert {**seen, "read_timestamp": 0} == {**event, "read_timestamp": 0}
    backfill = [e for e in events if e["read_method"] == "changestream-backfill"]
    # Backfill emits each row of its snapshot once (rows deleted before it are not there).
    backfilled = len({e["payload"]["Id"] for e in backfill})
    assert backfilled == len({e["uuid"] for e in backfill}) and 250 < backfilled <= 300


def test_a_trickle_makes_a_few_files_per_rotation_interval_not_one_per_batch(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=0)
    _stream(path, tmp_path, backfill="none", file_rotation_interval=2.0)
    options = PipelineOptions(trigger_seconds=0.2, poll_seconds=0.2, compact_every=3)
    runner = threading.Thread(
        target=SparkPipeline("s1", path, options, spark=spark).run, daemon=True
    )
    runner.start()
    with changestream.open(path) as db:
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name", "Qty"], [[0, "t", 0]])
        deadline = time.monotonic() + 120  # Spark's first micro-batch starts its workers
        while StreamCatalog(db).progress("s1").rows_processed < 1:
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.1)
        began = time.monotonic()
        for n in range(1, 80):  # about 10 changes/s for 8 s
            with db.transaction() as tx:
                tx.insert("Items", ["Id", "Name", "Qty"], [[n, "t", n]])
            time.sleep(0.1)
        seconds = time.monotonic() - began
        time.sleep(1.0)
        StreamCatalog(db).transition("s1", "pause")
    runner.join(timeout=120)
    assert not runner.is_alive(), "the pipeline did not stop on pause"
    with changestream.open(path) as db:
        progress = StreamCatalog(db).progress("s1")
    batches = progress.detail["last_batch_id"] + 1
    files = event_files(tmp_path / "events")
    events = _events(tmp_path / "events")
    assert sorted(e["payload"]["Id"] for e in events) == list(range(80))
    # About one file per 2 s of trickle (plus the one closed when the pipeline stopped), not
    # one per micro-batch.
    assert 2 <= len(files) <= seconds / 2 + 2, (len(files), batches)
    assert len(files) < batches
    # The replica is compacted every third MERGE, and still equals the source.
    history = DeltaTable(str(tmp_path / "replica" / "source_Items")).history()
    assert any(entry["operation"] == "OPTIMIZE" for entry in history)
    assert _replica_rows(tmp_path / "replica", path, "Items") == _source_rows(path)


def _java_processes(group: int) -> list[int]:
    """The JVMs in process group ``group``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == group and b"java" in cmdline.split(b"\0")[0]:
            found.append(int(entry.name))
    return found


def test_a_spark_driver_that_dies_ends_the_run_with_a_recorded_error(tmp_path: Path) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=50)
    _stream(path, tmp_path)
    process = subprocess.Popen(
        _pipeline_command(path, "--trigger-seconds", "0.5"),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with changestream.open(path) as db:
                if StreamCatalog(db).get("s1").state.value == "Running":
                    break
            time.sleep(0.2)
        jvms = _java_processes(process.pid)
        assert jvms, "the pipeline's Spark JVM must be running"
        for pid in jvms:
            os.kill(pid, signal.SIGKILL)
        # The run ends by itself, within a bounded time, with status 2 and the error recorded.
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 2, stderr[-2000:]
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        assert catalog.get("s1").state.value == "Failed"
        assert any("Spark" in e.message for e in catalog.errors("s1"))
        assert catalog.describe("s1")["pipeline_attached"] is False


def test_a_micro_batch_that_hangs_is_cancelled_and_ends_the_run_with_a_recorded_error(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=0)
    _stream(path, tmp_path, backfill="none")
    with changestream.open(path) as db:
        created = StreamCatalog(db).get("s1").definition.created_at
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name", "Qty"], [[n, "x", n] for n in range(3)])
    # The first micro-batch's task stages its replica rows at a path named by the batch and
    # the task. A FIFO there, which nobody reads, blocks the task when it opens it: a real
    # hang, in a real Spark task.
    staged = tmp_path / "events" / "_changestream" / f"s1-{created}" / "staging" / "cdc-0"
    (staged / "source_Items").mkdir(parents=True)
    os.mkfifo(staged / "source_Items" / "00000.arrow")
    began = time.monotonic()
    with pytest.raises(PipelineFailed, match="a micro-batch made no progress for 3s"):
        _run(spark, path, batch_timeout_seconds=3, attempts=1, restarts=0, poll_seconds=0.2)
    assert time.monotonic() - began < 60
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        assert catalog.get("s1").state.value == "Failed"
        assert any("made no progress" in e.message for e in catalog.errors("s1"))
    # The hung batch's job was cancelled: nothing of it keeps running in the session.
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 30
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not tracker.getActiveJobsIds()


def test_a_dropped_change_stream_fails_the_stream_permanently(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=3)
    _stream(path, tmp_path)
    with changestream.open(path) as db:
        db.execute_ddl("DROP CHANGE STREAM Everything")
    with pytest.raises(PipelineFailed, match="Everything"):
        _run(spark, path)
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        assert catalog.get("s1").state.value == "Failed permanently"
        (error,) = catalog.errors("s1")
    assert "Everything" in error.message and not error.retriable
    with pytest.raises(changestream.FailedPrecondition, match="Failed permanently"):
        _run(spark, path)


def test_columns_added_and_dropped_between_runs_reach_events_and_replica(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=0)
    _stream(path, tmp_path, backfill="none", replica_dropped_columns="drop")
    with changestream.open(path) as db:
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name", "Qty"], [[1, "a", 1], [2, "b", 2]])
        db.execute_ddl("ALTER TABLE Items ADD COLUMN Note STRING(MAX)")
        with db.transaction() as tx:
            tx.update("Items", ["Id", "Note"], [[2, "noted"]])
            tx.insert("Items", ["Id", "Name", "Qty", "Note"], [[3, "c", 3, "new"]])
    # One run holds records from before and after the change: they fit the table as it is.
    assert _run(spark, path).state == "Running"
    assert _replica_rows(tmp_path / "replica", path, "Items") == _source_rows(path)
    with changestream.open(path) as db:
        db.execute_ddl("ALTER TABLE Items DROP COLUMN Qty")
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name", "Note"], [[4, "d", "after drop"]])
            tx.delete("Items", [[1]])
    assert _run(spark, path).state == "Running"
    assert _replica_rows(tmp_path / "replica", path, "Items") == _source_rows(path)
    (delta,) = [p for p in (tmp_path / "replica").iterdir() if p.name.endswith("_Items")]
    assert "Qty" not in [f.name for f in DeltaTable(str(delta)).schema().fields]  # the setting
    payloads = {e["uuid"]: e["payload"] for e in _events(tmp_path / "events")}
    assert len(payloads) == 6  # every change once
    by_key = sorted(
        (p["Id"], sorted(p)) for p in payloads.values() if p["Id"] in (1, 4) and "Qty" not in p
    )
    assert by_key == [(1, ["Id", "Name", "Note"]), (4, ["Id", "Name", "Note"])]


def _two_items_replicated(spark: Any, tmp_path: Path) -> str:
    """A source with rows 1 and 2 of Items, run once into events and a replica; its path."""
    path = str(tmp_path / "source.db")
    _create_items(path, rows=0)
    _stream(path, tmp_path, backfill="none")
    with changestream.open(path) as db, db.transaction() as tx:
        tx.insert("Items", ["Id", "Name", "Qty"], [[1, "a", 1], [2, "b", 2]])
    assert _run(spark, path).state == "Running"
    return path


def test_a_column_added_with_a_default_reads_its_default_in_the_replica_rows_before_it(
    spark: Any, tmp_path: Path
) -> None:
    """The source fills its existing rows with the default without a change per row; the
    replica's rows from before the column must read it too, and a NULL written after stays."""
    path = _two_items_replicated(spark, tmp_path)
    with changestream.open(path) as db:
        with db.transaction() as tx:  # read in the same run as the column's addition
            tx.insert("Items", ["Id", "Name", "Qty"], [[5, "e", 5]])
        db.execute_ddl("ALTER TABLE Items ADD COLUMN Note STRING(MAX) DEFAULT ('none yet')")
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name", "Qty", "Note"], [[3, "c", 3, None]])
            tx.insert("Items", ["Id", "Name", "Qty"], [[4, "d", 4]])
            tx.update("Items", ["Id", "Qty"], [[2, 20]])
    assert _run(spark, path).state == "Running"
    source = _source_rows(path)
    assert [row[-1] for row in source] == ["none yet", "none yet", None, "none yet", "none yet"]
    assert _replica_rows(tmp_path / "replica", path, "Items") == source
    # An event of a row from before the column holds what the row reads in it now.
    notes = {
        (e["payload"]["Id"], e["source_metadata"]["change_type"]): e["payload"].get("Note", "-")
        for e in _events(tmp_path / "events")
    }
    assert notes == {
        (1, "INSERT"): "-",  # written before the column was added
        (2, "INSERT"): "-",
        (5, "INSERT"): "none yet",
        (3, "INSERT"): None,
        (4, "INSERT"): "none yet",
        (2, "UPDATE"): "none yet",
    }


def test_a_column_dropped_and_added_again_and_a_length_change_reach_the_replica(
    spark: Any, tmp_path: Path
) -> None:
    """A column added again under a dropped one's name is another column: the replica's
    rows, and events of records from before it, lose the former values; a STRING's new
    length keeps them (it used to fail every batch with a schema mismatch)."""
    path = _two_items_replicated(spark, tmp_path)
    with changestream.open(path) as db:
        with db.transaction() as tx:  # read in the same run as the DDL
            tx.update("Items", ["Id", "Qty"], [[2, 5]])
        db.execute_ddl("ALTER TABLE Items DROP COLUMN Qty")
        db.execute_ddl("ALTER TABLE Items ADD COLUMN Qty STRING(MAX) DEFAULT ('n/a')")
        db.execute_ddl("ALTER TABLE Items ALTER COLUMN Name STRING(10)")
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name"], [[3, "c"]])
            tx.insert("Items", ["Id", "Name", "Qty"], [[4, "d", "four"]])
    assert _run(spark, path).state == "Running"
    source = _source_rows(path)
    assert source == [(1, "a", "n/a"), (2, "b", "n/a"), (3, "c", "n/a"), (4, "d", "four")]
    assert _replica_rows(tmp_path / "replica", path, "Items") == source
    qty = {
        (e["payload"]["Id"], e["source_metadata"]["change_type"]): e["payload"]["Qty"]
        for e in _events(tmp_path / "events")
    }
    assert qty == {
        (1, "INSERT"): 1,  # read before the column was dropped
        (2, "INSERT"): 2,
        (2, "UPDATE"): "n/a",  # committed before, read after: the former column's 5 is gone
        (3, "INSERT"): "n/a",
        (4, "INSERT"): "four",
    }


def test_a_ddl_with_no_change_after_it_reaches_the_replica_on_the_next_run(
    spark: Any, tmp_path: Path
) -> None:
    """No row changes after the DDL, so no event carries it: the run brings the replica to
    the table's new shape anyway (the source's rows read the new column's DEFAULT)."""
    path = _two_items_replicated(spark, tmp_path)
    with changestream.open(path) as db:
        db.execute_ddl("ALTER TABLE Items DROP COLUMN Qty")
        db.execute_ddl("ALTER TABLE Items ADD COLUMN Qty INT64 DEFAULT (0)")
    assert _run(spark, path).state == "Running"
    assert _source_rows(path) == [(1, "a", 0), (2, "b", 0)]
    assert _replica_rows(tmp_path / "replica", path, "Items") == _source_rows(path)


def test_a_running_pipeline_follows_columns_added_and_dropped_while_it_runs(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=0)
    _stream(path, tmp_path, backfill="none", format="avro")
    options = PipelineOptions(trigger_seconds=0.2, poll_seconds=0.2)
    runner = threading.Thread(
        target=SparkPipeline("s1", path, options, spark=spark).run, daemon=True
    )
    runner.start()
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        deadline = time.monotonic() + 120  # Spark's first micro-batch starts its workers

        def landed() -> None:
            last = store_of(db).last_commit_ts()
            while (catalog.progress("s1").last_commit_timestamp or 0) < last:
                assert time.monotonic() < deadline and runner.is_alive(), catalog.get("s1").state
                time.sleep(0.1)

        for n in range(20):
            if n == 10:
                landed()  # the first ten are events of the table before the change
                db.execute_ddl("ALTER TABLE Items ADD COLUMN Note STRING(MAX)")
            if n == 15:
                db.execute_ddl("ALTER TABLE Items DROP COLUMN Qty")
            row = {"Id": n, "Name": "t", "Qty": n, "Note": f"n{n}"}
            if n < 10:
                del row["Note"]
            if n >= 15:
                del row["Qty"]
            with db.transaction() as tx:
                tx.insert("Items", list(row), [list(row.values())])
            time.sleep(0.05)
        landed()
        assert catalog.get("s1").state.value == "Running"
        catalog.transition("s1", "pause")
    runner.join(timeout=120)
    assert not runner.is_alive(), "the pipeline did not stop on pause"
    assert _replica_rows(tmp_path / "replica", path, "Items") == _source_rows(path)
    events = _events(tmp_path / "events")
    assert sorted(e["payload"]["Id"] for e in events) == list(range(20))
    # Avro files of the two shapes: the events after the change have the column.
    assert {e["payload"].get("Note") for e in events if e["payload"]["Id"] >= 10} == {
        f"n{n}" for n in range(10, 20)
    }
    assert len({e["schema_key"] for e in events}) >= 2
    assert all("Qty" not in e["payload"] for e in events if e["payload"]["Id"] >= 15)


def test_an_idle_running_pipeline_brings_the_replica_to_a_ddl_with_no_row_change(
    spark: Any, tmp_path: Path
) -> None:
    """No row changes after the DDL, so no micro-batch comes: the running pipeline brings the
    replica to the table's new shape while it is idle."""
    path = _two_items_replicated(spark, tmp_path)
    pipeline = SparkPipeline(
        "s1", path, PipelineOptions(trigger_seconds=0.2, poll_seconds=0.2), spark=spark
    ).start()
    replica = tmp_path / "replica"
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        deadline = time.monotonic() + 120  # Spark's first micro-batch starts its workers
        while not (pipeline.status().state == "Running" and pipeline.status().idle):
            assert time.monotonic() < deadline and pipeline.running, pipeline.status()
            time.sleep(0.1)
        batches = catalog.progress("s1").detail.get(LAST_BATCH)
        db.execute_ddl("ALTER TABLE Items ADD COLUMN Note STRING(MAX) DEFAULT ('none')")
        db.execute_ddl("ALTER TABLE Items DROP COLUMN Qty")
        deadline = time.monotonic() + 60
        while _replica_rows(replica, path, "Items") != [(1, "a", "none"), (2, "b", "none")]:
            assert time.monotonic() < deadline and pipeline.running, pipeline.status()
            time.sleep(0.2)
        assert catalog.progress("s1").detail.get(LAST_BATCH) == batches, "no micro-batch ran"
    assert pipeline.stop(timeout=120).state == "Running"
    assert _replica_rows(replica, path, "Items") == _source_rows(path)


def test_gzip_json_files_read_back_with_spark(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=50)
    _stream(path, tmp_path, compression="gzip", file_rotation_mb=0.002)
    with changestream.open(path) as db:
        write_items(db, seed=5, transactions=20)
    assert _run(spark, path).state == "Running"
    files = event_files(tmp_path / "events")
    assert files and all(f.name.endswith(".jsonl.gz") for f in files)
    events = _events(tmp_path / "events")
    assert len({e["uuid"] for e in events}) == len(events) > 50
    # Files joined from several segments are multi-member gzip, which Spark reads whole.
    frame = spark.read.json([str(f) for f in files])
    assert frame.count() == len(events)
    assert {row["uuid"] for row in frame.select("uuid").collect()} == {e["uuid"] for e in events}
    assert _replica_rows(tmp_path / "replica", path, "Items") == _source_rows(path)


def test_an_append_only_replica_holds_one_row_per_event_in_order(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=5)
    _stream(path, tmp_path, replica_mode="append-only")
    with changestream.open(path) as db:
        with db.transaction() as tx:
            tx.update("Items", ["Id", "Qty"], [[1, 100]])
        with db.transaction() as tx:
            tx.delete("Items", [[2]])
    assert _run(spark, path).state == "Running"
    events = sorted(_events(tmp_path / "events"), key=lambda e: e["sort_keys"])
    with changestream.open(path) as db:
        table = next(t for t in db.tables() if t.name == "Items")
    history = HistoryReplica(tmp_path / "replica", "source", table).read_rows()
    # The backfill reads the 4 rows left after the changes; CDC adds the update (the row
    # before and after it: the stream captures old values) and the delete.
    assert len(history) == len(events) + 1 == 7
    assert sorted(row[-2] for row in history) == [
        "DELETE",
        *["INSERT"] * 4,
        "UPDATE-DELETE",
        "UPDATE-INSERT",
    ]
    ids = [row[0] for row in history if row[-2] != "UPDATE-DELETE"]
    assert ids == [e["payload"]["Id"] for e in events]  # in order
    qty = [c.name for c in table.columns].index("Qty")
    at = [row[-2] for row in history].index("UPDATE-DELETE")
    before, after = history[at], history[at + 1]
    assert (before[0], after[0], after[-2]) == (1, 1, "UPDATE-INSERT")
    assert before[qty] != 100 and after[qty] == 100


def test_an_object_added_by_streams_update_is_backfilled_and_followed(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=5)
    with changestream.open(path) as db:
        db.execute_ddl("CREATE TABLE Extra (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)")
        with db.transaction() as tx:
            tx.insert("Extra", ["K", "V"], [[1, "one"], [2, "two"]])
    _stream(path, tmp_path, include=("Items",))
    assert _run(spark, path).state == "Running"
    assert {e["object"] for e in _events(tmp_path / "events")} == {"source_Items"}
    with changestream.open(path) as db:
        StreamCatalog(db).update("s1", include=("Items", "Extra"), file_rotation_interval=5.0)
        with db.transaction() as tx:
            tx.insert("Extra", ["K", "V"], [[3, "three"]])
    assert _run(spark, path).state == "Running"
    extra = [e for e in _events(tmp_path / "events") if e["object"] == "source_Extra"]
    backfilled = {e["payload"]["K"] for e in extra if e["read_method"].endswith("backfill")}
    followed = {e["payload"]["K"] for e in extra if e["read_method"].endswith("cdc")}
    # Row 3 was committed after the stream started and before the object's backfill, so it
    # comes both ways (as in Datastream; sort_keys tell which is newer).
    assert (backfilled, followed) == ({1, 2, 3}, {3})
    with changestream.open(path) as db:
        table = next(t for t in db.tables() if t.name == "Extra")
        assert DeltaReplica(tmp_path / "replica", "source", table).read_rows() == db.read("Extra")


def test_a_replay_from_a_timestamp_lands_the_same_events_again(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=0)
    _stream(path, tmp_path, backfill="none")
    with changestream.open(path) as db:
        write_items(db, seed=9, transactions=10)
    assert _run(spark, path).state == "Running"
    first = {e["uuid"] for e in _events(tmp_path / "events")}
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        start = catalog.progress("s1").cdc_start_timestamp
        catalog.transition("s1", "pause")
        state, restart = catalog.recover("s1", "timestamp", start)
        assert (state.value, restart) == ("Starting", start)
    assert _run(spark, path).state == "Running"
    events = _events(tmp_path / "events")
    # Every change once more, under the same uuids; the replica is still the source.
    assert {e["uuid"] for e in events} == first and len(events) == 2 * len(first) > 0
    assert _replica_rows(tmp_path / "replica", path, "Items") == _source_rows(path)
    assert list((tmp_path / "events" / "_changestream").glob("s1-*-cdc1/checkpoint"))


def test_start_status_and_stop_drive_a_pipeline_without_a_thread_of_ones_own(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=0)
    _stream(path, tmp_path, backfill="none")
    pipeline = SparkPipeline(
        "s1", path, PipelineOptions(trigger_seconds=0.2, poll_seconds=0.2), spark=spark
    )
    assert pipeline.status().state == "Starting" and not pipeline.running
    assert pipeline.start() is pipeline and pipeline.running
    with pytest.raises(changestream.FailedPrecondition, match="already started"):
        pipeline.start()
    with changestream.open(path) as db:
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name", "Qty"], [[n, "s", n] for n in range(5)])
        last = store_of(db).last_commit_ts()
    deadline = time.monotonic() + 120  # Spark's first micro-batch starts its workers
    while (pipeline.status().frontier or 0) < last:
        assert time.monotonic() < deadline and pipeline.running, pipeline.status()
        time.sleep(0.1)
    assert pipeline.status().state == "Running"
    final = pipeline.stop(timeout=120)
    assert not pipeline.running and final.frontier is not None and final.frontier >= last
    assert sorted(e["payload"]["Id"] for e in _events(tmp_path / "events")) == list(range(5))
    with changestream.open(path) as db:  # stop() leaves the stream's state alone
        assert StreamCatalog(db).get("s1").state.value == "Running"
    assert pipeline.wait(1) == final


def test_json_files_come_with_an_avro_schema_file_per_schema_key(
    spark: Any, tmp_path: Path
) -> None:
    import fastavro

    path = str(tmp_path / "source.db")
    _create_items(path, rows=20)
    _stream(path, tmp_path, schema_file="avro")
    _run(spark, path)
    with changestream.open(path) as db:
        db.execute_ddl("ALTER TABLE Items ADD COLUMN Note STRING(MAX)")
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name", "Qty", "Note"], [[100, "n", 1, "new shape"]])
    _run(spark, path)
    events = _events(tmp_path / "events")
    keys = {(e["object"], e["schema_key"]) for e in events}
    assert len(keys) == 2  # the table before and after the column was added
    shapes = []
    for obj, key in keys:
        schema_file = tmp_path / "events" / obj / "_schemas" / f"{key}.avsc"
        schema = fastavro.parse_schema(orjson.loads(schema_file.read_bytes()))
        payload = next(f for f in schema["fields"] if f["name"] == "payload")
        names = {f["name"] for f in payload["type"]["fields"]}
        assert all(set(e["payload"]) <= names for e in events if e["schema_key"] == key)
        shapes.append("Note" in names)
    assert sorted(shapes) == [False, True]  # one schema before the column, one after
    with pytest.raises(changestream.InvalidArgument, match="schema_file 'avro' is for JSON"):
        StreamDefinition(
            name="s2",
            database=path,
            change_stream="Everything",
            destination="x",
            format="avro",
            schema_file="avro",
        )


def test_an_include_list_with_columns_keeps_only_those_in_events_and_replica(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "source.db")
    _create_items(path, rows=10)  # backfilled
    _stream(path, tmp_path, include="Items(Name)")
    with changestream.open(path) as db, db.transaction() as tx:  # CDC: insert, update, delete
        tx.insert("Items", ["Id", "Name", "Qty"], [[50, "new", 5]])
        tx.update("Items", ["Id", "Qty"], [[1, 100]])
        tx.delete("Items", [[2]])
    _run(spark, path)
    events = _events(tmp_path / "events")
    assert {e["read_method"] for e in events} == {"changestream-backfill", "changestream-cdc"}
    assert all(set(e["payload"]) == {"Id", "Name"} for e in events)  # the key is always kept
    assert len([e for e in events if e["read_method"] == "changestream-cdc"]) == 3
    with changestream.open(path) as db:
        (kept,) = StreamCatalog(db).get("s1").definition.tables(db)
        expected = sorted((row[0], row[1]) for row in db.read("Items"))
    assert [c.name for c in kept.columns] == ["Id", "Name"]
    replica = DeltaReplica(tmp_path / "replica", "source", kept)
    assert sorted(replica.read_rows()) == expected
    columns = {
        f.name for f in DeltaTable(str(tmp_path / "replica" / "source_Items")).schema().fields
    }
    assert "Qty" not in columns and {"Id", "Name"} <= columns


def test_a_background_publication_fails_the_next_publish_and_is_bounded(
    spark: Any, tmp_path: Path
) -> None:
    from changestream.spark._query_control import Background
    from changestream.spark._run_status import BatchError

    path = str(tmp_path / "source.db")
    _create_items(path, rows=0)
    _stream(path, tmp_path, backfill="none")
    pipeline = SparkPipeline("s1", path, PipelineOptions(batch_timeout_seconds=1), spark=spark)

    def fails() -> None:
        raise BatchError("source_Items", "disk full", True)

    pipeline._publication = Background(fails, "test-publish")
    with pytest.raises(BatchError, match="disk full"):
        pipeline._publish(spark, force=False)
    pipeline._publish(spark, force=False)  # the failure was handed over once
    pipeline._publication = Background(lambda: time.sleep(3), "test-publish")
    with pytest.raises(BatchError, match="publishing event files took over 1s"):
        pipeline._publish(spark, force=True)
    pipeline._publication = Background(fails, "test-publish")
    pipeline._drop_publication()  # a finished run's failure is only logged
    assert pipeline._publication is None
    pipeline.db.close()
