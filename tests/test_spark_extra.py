"""More of the Spark source and pipeline on one real local[2] SparkSession: event files read by
standard readers, tables added to a FOR ALL stream, reads through a server, pause and drain."""

from __future__ import annotations

import ast
import base64
import datetime as dt
import decimal
import functools
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import fastavro
import pyarrow as pa
import pyarrow.json as pa_json

import changestream
from changestream.clock import format_ts, now_us, parse_ts
from changestream.datastream import StreamCatalog, StreamDefinition
from changestream.datastream.files import event_files, read_events
from changestream.spark.pipeline import PipelineOptions, PipelineStatus, SparkPipeline
from changestream.spark.replica import DeltaReplica
from tests.spark_support import batch_read, create_items_db, run_script, write_items

pytestmark = pytest.mark.spark

ALL = (
    "CREATE CHANGE STREAM Everything FOR ALL "
    "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')"
)
KINDS = (
    "CREATE TABLE Kinds (Id INT64 NOT NULL, Flag BOOL, Score FLOAT64, Price NUMERIC, "
    "Name STRING(MAX), Blob BYTES(MAX), Day DATE, Moment TIMESTAMP, Doc JSON, "
    "Tags ARRAY<INT64>) PRIMARY KEY (Id)"
)
KIND_COLUMNS = ["Id", "Flag", "Score", "Price", "Name", "Blob", "Day", "Moment", "Doc", "Tags"]
ITEMS = "CREATE TABLE Items (Id INT64 NOT NULL, Name STRING(MAX), Qty INT64) PRIMARY KEY (Id)"
ORDERS = "CREATE TABLE Orders (OrderId STRING(MAX) NOT NULL, Total NUMERIC) PRIMARY KEY (OrderId)"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from changestream.spark import local_session

    session = local_session()
    yield session
    session.stop()


def _kind(i: int) -> list[Any]:
    return [
        i,
        i % 2 == 0,
        i + 0.25,
        decimal.Decimal(f"{i}.50"),
        f"name {i}",
        bytes([i, 0, 255]),
        dt.date(2024, 5, i),
        dt.datetime(2024, 5, 1, 9, 0, i, 123456, tzinfo=dt.UTC),
        {"n": i, "list": [i, "x"]},
        [i, None, i * 10],
    ]


def _define(path: str, root: Path, name: str, **extra: Any) -> StreamDefinition:
    definition = StreamDefinition(
        name=name,
        database=path,
        change_stream="Everything",
        destination=str(root / name / "events"),
        **extra,
    )
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        catalog.create(definition)
        catalog.transition(name, "start")
    return definition


def _run(spark: Any, path: str, name: str, **options: Any) -> PipelineStatus:
    opts = PipelineOptions(until_caught_up=True, trigger_seconds=0.5, **options)
    return SparkPipeline(name, path, opts, spark=spark).run()


def _table(path: str, name: str) -> Any:
    with changestream.open(path) as db:
        return next(t for t in db.tables() if t.name == name)


def _replica(root: Path, path: str, table: str) -> list[tuple[Any, ...]]:
    return DeltaReplica(root, Path(path).stem, _table(path, table)).read_rows()


def _source(path: str, table: str) -> list[tuple[Any, ...]]:
    with changestream.open(path) as db:
        return db.read(table)


# -- (a) the event files, read by Spark, pyarrow and fastavro ---------------------------------


def _payload_json(row: list[Any]) -> dict[str, Any]:
    """The event JSON payload of a Kinds row (the seed's JSON column types)."""
    i, flag, score, price, name, blob, day, moment, doc, tags = row
    return {
        "Id": i,
        "Flag": flag,
        "Score": score,
        "Price": format(price, "f"),
        "Name": name,
        "Blob": base64.b64encode(blob).decode(),
        "Day": day.isoformat(),
        "Moment": format_ts(parse_ts(moment)),
        "Doc": json.dumps(doc, sort_keys=True, separators=(",", ":")),
        "Tags": tags,
    }


def test_event_files_are_read_by_spark_pyarrow_and_fastavro(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "kinds.db")
    with changestream.open(path) as db:
        db.execute_ddl([KINDS, ALL])
        with db.transaction() as tx:
            tx.insert("Kinds", KIND_COLUMNS, [_kind(i) for i in (1, 2, 3)])
    _define(path, tmp_path, "asjson", format="json")
    # Avro without backfill (the encodings are the same; it saves a pipeline run).
    _define(path, tmp_path, "asavro", format="avro", backfill="none")
    _run(spark, path, "asjson")  # backfill: rows 1, 2, 3
    updated = _kind(1)
    updated[4], updated[8] = "renamed", {"n": 0}
    with changestream.open(path) as db, db.transaction() as tx:
        tx.update("Kinds", KIND_COLUMNS, [updated])
        tx.delete("Kinds", [[2]])
        tx.insert("Kinds", KIND_COLUMNS, [_kind(4)])
    for name in ("asjson", "asavro"):
        _run(spark, path, name)  # CDC: an UPDATE, a DELETE, an INSERT
    expected = {  # (read method, change type, Id) -> payload
        ("changestream-backfill", "INSERT", 1): _payload_json(_kind(1)),
        ("changestream-backfill", "INSERT", 2): _payload_json(_kind(2)),
        ("changestream-backfill", "INSERT", 3): _payload_json(_kind(3)),
        ("changestream-cdc", "UPDATE", 1): _payload_json(updated),
        ("changestream-cdc", "DELETE", 2): _payload_json(_kind(2)),  # the last row
        ("changestream-cdc", "INSERT", 4): _payload_json(_kind(4)),
    }

    # JSON lines, through the project's reader: the reference for the others.
    json_root = tmp_path / "asjson" / "events"
    json_files = event_files(json_root)
    assert json_files and all(f.suffix == ".jsonl" for f in json_files)
    events = {e["uuid"]: e for f in json_files for e in read_events(f)}

    def key(event: dict[str, Any]) -> tuple[str, str, int]:
        meta = event["source_metadata"]
        return event["read_method"], meta["change_type"], event["payload"]["Id"]

    assert {key(e): e["payload"] for e in events.values()} == expected

    # Spark's JSON reader, on the bucket layout <object>/<yyyy>/<mm>/<dd>/<HH>/<MM>/<uuid>.jsonl.
    frame = spark.read.json(
        str(json_root / "kinds_Kinds" / "*" / "*" / "*" / "*" / "*" / "*.jsonl")
    )
    assert "_corrupt_record" not in frame.columns
    rows = frame.collect()
    assert len(rows) == len(events)
    for row in rows:
        assert row.asDict(recursive=True) == events[row.uuid]
    types = dict(frame.dtypes)
    assert types["sort_keys"] == "array<bigint>"
    assert types["source_metadata"].startswith("struct<")
    assert frame.schema["payload"].dataType.fieldNames() == sorted(KIND_COLUMNS)

    # pyarrow's JSON reader: the same values (it parses RFC 3339 text into timestamps).
    for file in json_files:
        table = pa_json.read_json(file)
        for got, want in zip(table.to_pylist(), read_events(file), strict=True):
            for name in ("read_timestamp", "source_timestamp"):
                if isinstance(got[name], dt.datetime):
                    got[name] = got[name].strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            got_payload, want_payload = got.pop("payload"), want.pop("payload")
            got_meta, want_meta = got.pop("source_metadata"), want.pop("source_metadata")
            assert got == want
            assert got_meta["change_type"] == want_meta["change_type"]
            assert got_payload["Id"] == want_payload["Id"]
            assert got_payload["Tags"] == want_payload["Tags"]
            assert got_payload["Price"] == want_payload["Price"]
            assert got_payload["Doc"] == want_payload["Doc"]

    # Avro, read with fastavro alone: one schema per object in the header, logical types.
    avro_files = event_files(tmp_path / "asavro" / "events")
    assert avro_files and all(f.suffix == ".avro" for f in avro_files)
    seen: dict[tuple[str, str, int], dict[str, Any]] = {}
    for file in avro_files:
        with open(file, "rb") as fo:
            reader = fastavro.reader(fo)
            schema: Any = reader.writer_schema
            payload_type = next(f for f in schema["fields"] if f["name"] == "payload")["type"]
            fields = [f["name"] for f in payload_type["fields"]]
            assert fields == KIND_COLUMNS  # column values by index, in ordinal order
            for record in reader:
                assert isinstance(record, dict)
                assert isinstance(record["read_timestamp"], dt.datetime)  # timestamp-millis
                assert isinstance(record["source_timestamp"], dt.datetime)
                assert len(record["sort_keys"]) == 4
                meta = record["source_metadata"]
                seen[(record["read_method"], meta["change_type"], record["payload"]["Id"])] = (
                    record["payload"]
                )
    cdc = {k: v for k, v in expected.items() if k[0] == "changestream-cdc"}
    assert set(seen) == set(cdc)
    for (_, _, i), payload in seen.items():
        row = updated if (i == 1 and payload["Name"] == "renamed") else _kind(i)
        want = dict(zip(KIND_COLUMNS, row, strict=True))
        assert payload["Id"] == want["Id"] and payload["Flag"] == want["Flag"]
        assert payload["Score"] == want["Score"]
        assert decimal.Decimal(payload["Price"]) == want["Price"]
        assert payload["Blob"] == want["Blob"]
        assert payload["Day"] == want["Day"]
        assert payload["Moment"] == want["Moment"]
        assert json.loads(payload["Doc"]) == want["Doc"]
        assert payload["Tags"] == want["Tags"]
    assert seen[("changestream-cdc", "UPDATE", 1)]["Name"] == "renamed"
    # The project's reader gives the avro stream the same payloads as the JSON stream.
    avro_events = [e for f in avro_files for e in read_events(f)]
    assert {key(e): e["payload"] for e in avro_events} == cdc


def _shop(tmp_path: Path, items: int) -> str:
    """The path of a new database with the Items and All tables and ``items`` Items rows."""
    path = str(tmp_path / "shop.db")
    with changestream.open(path) as db:
        db.execute_ddl([ITEMS, ALL])
        if items:
            with db.transaction() as tx:
                rows = [[i, f"i{i}", i] for i in range(items)]
                tx.insert("Items", ["Id", "Name", "Qty"], rows)
    return path


# -- (b) a table created after the stream's first run -------------------------------------------


def test_a_table_created_after_the_first_run_is_backfilled_and_replicated(
    spark: Any, tmp_path: Path
) -> None:
    path = _shop(tmp_path, items=50)
    definition = _define(path, tmp_path, "shop", replica=str(tmp_path / "replica"))
    assert definition.include == ()
    _run(spark, path, "shop", chunk_rows=20)
    replica = tmp_path / "replica"
    assert _replica(replica, path, "Items") == _source(path, "Items")
    assert not (replica / "shop_Orders").exists()

    with changestream.open(path) as db:
        db.execute_ddl([ORDERS])
        with db.transaction() as tx:
            tx.insert(
                "Orders",
                ["OrderId", "Total"],
                [[f"o{i:03d}", decimal.Decimal(f"{i}.5")] for i in range(70)],
            )
        with db.transaction() as tx:
            tx.update("Orders", ["OrderId", "Total"], [["o001", decimal.Decimal("99.99")]])
            tx.delete("Orders", [["o002"]])
            tx.update("Items", ["Id", "Qty"], [[1, 1000]])
    _run(spark, path, "shop", chunk_rows=20)
    assert _replica(replica, path, "Orders") == _source(path, "Orders")
    assert _replica(replica, path, "Items") == _source(path, "Items")
    with changestream.open(path) as db:
        progress = StreamCatalog(db).progress("shop")
    orders = progress.objects["shop_Orders"]
    assert orders.status == "done" and orders.rows == 69  # backfilled on its own, in chunks
    assert len(orders.detail["boundaries"]) >= 3
    assert progress.objects["shop_Items"].rows == 50  # not backfilled again

    # Then more CDC for the new table, as for any other. Every change after `streams start` is
    # an event, those the backfill also read included (Datastream delivers both).
    with changestream.open(path) as db, db.transaction() as tx:
        tx.insert("Orders", ["OrderId", "Total"], [["o999", decimal.Decimal("1")]])
        tx.delete("Orders", [["o003"]])
    _run(spark, path, "shop")
    assert _replica(replica, path, "Orders") == _source(path, "Orders")
    events = [e for f in event_files(tmp_path / "shop" / "events") for e in read_events(f)]
    orders_events = [e for e in events if e["object"] == "shop_Orders"]
    assert len({e["uuid"] for e in events}) == len(events)
    assert sum(e["read_method"] == "changestream-backfill" for e in orders_events) == 69
    assert sorted(
        (e["source_metadata"]["change_type"], e["payload"]["OrderId"])
        for e in orders_events
        if e["read_method"] == "changestream-cdc"
    ) == sorted(
        [("INSERT", f"o{i:03d}") for i in range(70)]
        + [("UPDATE", "o001"), ("DELETE", "o002"), ("INSERT", "o999"), ("DELETE", "o003")]
    )


# -- (c) the source through a server ------------------------------------------------------------


def _sorted_rows(frame: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in frame.collect())


def test_batch_read_through_a_server_url_equals_the_embedded_read(
    spark: Any, tmp_path: Path, served: tuple[Any, str]
) -> None:
    databases, url = served
    path = str(tmp_path / "items.db")
    db = create_items_db(path)
    start = now_us()
    write_items(db, seed=31, transactions=40)  # with splits and merges
    end = now_us()
    databases.add("sparkextra", db)
    try:

        def read(database: str, **options: str) -> Any:
            return batch_read(spark, database, start, end, **options)

        remote = f"{url}/sparkextra"
        embedded_rows = _sorted_rows(read(path))
        assert len(embedded_rows) > 40
        assert _sorted_rows(read(remote)) == embedded_rows
        assert _sorted_rows(read(remote, rowPerMod="true")) == _sorted_rows(
            read(path, rowPerMod="true")
        )
    finally:
        databases.remove("sparkextra")
        db.close()


# -- (d) pause and drain while the pipeline runs -----------------------------------------------


class Background:
    """``SparkPipeline.run()`` in a thread; ``result()`` waits for what it returned (or raised)."""

    def __init__(self, run: Callable[[], PipelineStatus]) -> None:
        self._run = run
        self._outcome: list[Any] = []
        self._thread = threading.Thread(target=self._target, daemon=True)
        self._thread.start()

    def _target(self) -> None:
        try:
            self._outcome.append(self._run())
        except BaseException as exc:
            self._outcome.append(exc)

    def result(self, timeout: float) -> PipelineStatus:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"run() did not return within {timeout}s"
        (outcome,) = self._outcome
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, PipelineStatus)
        return outcome


def _wait_for_state(path: str, name: str, state: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with changestream.open(path) as db:
            if StreamCatalog(db).get(name).state.value == state:
                return
        time.sleep(0.2)
    raise AssertionError(f"stream {name} did not reach {state} within {timeout}s")


def test_pause_and_drain_stop_a_running_pipeline_in_state_paused(
    spark: Any, tmp_path: Path
) -> None:
    path = _shop(tmp_path, items=30)
    _define(path, tmp_path, "live", replica=str(tmp_path / "replica"))
    options = PipelineOptions(trigger_seconds=0.5, poll_seconds=0.2)  # runs until told

    # Pause: run() returns with the stream Paused.
    running = Background(lambda: SparkPipeline("live", path, options, spark=spark).run())
    _wait_for_state(path, "live", "Running")
    with changestream.open(path) as db:
        StreamCatalog(db).transition("live", "pause")
    status = running.result(timeout=60)
    assert status.state == "Paused"
    with changestream.open(path) as db:
        assert StreamCatalog(db).get("live").state.value == "Paused"
        StreamCatalog(db).transition("live", "resume")

    # Drain: Draining, then Paused once everything committed before the drain has landed.
    running = Background(lambda: SparkPipeline("live", path, options, spark=spark).run())
    _wait_for_state(path, "live", "Running")
    with changestream.open(path) as db:
        for n in range(5):
            with db.transaction() as tx:
                tx.insert_or_update(
                    "Items", ["Id", "Name", "Qty"], [[100 + n, "late", n], [n, "changed", -n]]
                )
        with db.transaction() as tx:
            tx.delete("Items", [[7]])
        StreamCatalog(db).transition("live", "drain")
        assert StreamCatalog(db).get("live").state.value == "Draining"
    status = running.result(timeout=90)
    assert status.state == "Paused"
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        assert catalog.get("live").state.value == "Paused"
        assert catalog.errors("live") == []
    assert _replica(tmp_path / "replica", path, "Items") == _source(path, "Items")


def test_pyarrow_reads_a_whole_destination_of_jsonl_files_as_one_table(tmp_path: Path) -> None:
    """The files of one object share a shape, so a reader can concatenate them (no Spark)."""
    from changestream.datastream.events import backfill_events
    from changestream.datastream.files import EventFileWriter

    path = str(tmp_path / "kinds.db")
    with changestream.open(path) as db:
        db.execute_ddl([KINDS])
        table = next(t for t in db.tables() if t.name == "Kinds")
    writer = EventFileWriter(tmp_path / "events", "json", max_file_bytes=600)
    rows = [tuple(_kind(i)) for i in range(1, 9)]
    written = writer.write(backfill_events("s", "kinds", table, rows, now_us(), now_us()))
    assert len(written) > 2  # rotated by size
    tables = [pa_json.read_json(f) for f in event_files(tmp_path / "events")]
    combined = pa.concat_tables(tables, promote_options="default")
    assert combined.num_rows == 8
    assert sorted(combined.column("payload").combine_chunks().field("Id").to_pylist()) == list(
        range(1, 9)
    )


def test_a_recreated_stream_starts_from_its_own_start_not_the_deleted_streams_checkpoint(
    spark: Any, tmp_path: Path
) -> None:
    path = _shop(tmp_path, items=0)
    definition = _define(path, tmp_path, "again", backfill="none")
    with changestream.open(path) as db, db.transaction() as tx:
        tx.insert("Items", ["Id", "Name", "Qty"], [[1, "first stream", 1]])
    _run(spark, path, "again")
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        catalog.transition("again", "pause")
        catalog.delete("again")
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name", "Qty"], [[2, "while there is no stream", 2]])
        catalog.create(definition)
        catalog.transition("again", "start")
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name", "Qty"], [[3, "second stream", 3]])
    _run(spark, path, "again")
    events = [e for f in event_files(definition.destination) for e in read_events(f)]
    # backfill "none": each stream emits the changes from its own start only.
    assert sorted(e["payload"]["Name"] for e in events) == ["first stream", "second stream"]


def test_the_old_pipeline_name_still_works_with_a_warning() -> None:
    import changestream.spark.pipeline as module

    with pytest.warns(DeprecationWarning, match="Pipeline is now SparkPipeline"):
        old = module.Pipeline
    assert old is SparkPipeline


def _worker_pyspark(items: Any) -> Iterator[str]:
    import pyspark

    yield pyspark.__file__ or ""


def test_the_sessions_python_workers_import_the_installed_pyspark_not_spark_s_zip(
    spark: Any,
) -> None:
    """Spark puts its pyspark.zip first on the workers' path, and nothing imported from a zip
    has bytecode: changestream's daemon puts the installed package first."""
    import pyspark

    files = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_worker_pyspark).collect()
    assert files == [pyspark.__file__] * 2


def test_the_daemon_imports_the_task_code_its_workers_would_each_import() -> None:
    """The daemon imports the pipeline's task code, what pyarrow's first conversion loads and
    what staging's first group_by loads before it forks a worker, so no worker imports them
    itself."""
    wanted = ("changestream.spark._tasks", "pyarrow", "pandas", "pyarrow.acero", "pyspark.worker")
    preloaded = (
        "import sys; from changestream.spark._daemon import preload; preload(); "
        f"print(sorted(m for m in {wanted!r} if m in sys.modules))"
    )
    before = "import sys; import changestream.spark._daemon; print('pandas' in sys.modules)"
    run = functools.partial(subprocess.run, capture_output=True, text=True, check=True)
    assert run([sys.executable, "-c", before]).stdout.split() == ["False"]
    assert run([sys.executable, "-c", preloaded]).stdout.strip() == repr(sorted(wanted))


def _worker_frozen(_: Iterable[int]) -> Iterator[int]:
    import gc

    yield gc.get_freeze_count()


def test_the_daemons_workers_find_what_it_imported_frozen_out_of_the_collectors_way(
    spark: Any,
) -> None:
    """pyspark's daemon runs a full collection in a worker after each task: the daemon froze
    what it imported (tens of thousands of objects), so that collection walks only what the
    worker made since."""
    context = spark.sparkContext
    frozen = context.parallelize(range(2), 2).mapPartitions(_worker_frozen).collect()
    assert len(frozen) == 2
    assert min(frozen) > 20_000, frozen


def _worker_socket_mode(_: Iterable[int]) -> Iterator[str]:
    yield os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "unset")


def test_a_local_sessions_workers_talk_to_the_jvm_over_unix_sockets_in_a_private_directory(
    spark: Any,
) -> None:
    """Local workers use Unix domain sockets (over TCP each task waited out a delayed ACK),
    whose files go to this process's scratch directory, not loose in the temp directory."""
    modes = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_worker_socket_mode)
    assert [mode.lower() for mode in modes.collect()] == ["true", "true"]
    conf = spark.sparkContext.getConf()
    directory = Path(conf.get("spark.python.unix.domain.socket.dir"))
    assert directory.parent.name.startswith("changestream-spark-")
    assert directory.is_dir()
    assert any(path.is_socket() for path in directory.iterdir())


def _worker_huge_pages_disabled(_: Iterable[int]) -> Iterator[tuple[bool, bool]]:
    from changestream.spark.huge_pages import transparent_huge_pages_disabled

    yield transparent_huge_pages_disabled(), transparent_huge_pages_disabled()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_THP_DISABLE is Linux's")
def test_a_local_sessions_driver_and_workers_run_without_transparent_huge_pages(
    spark: Any,
) -> None:
    """Zeroing whole 2 MB pages for pyarrow's allocator cost a third of a catch-up's CPU: the
    driver turns them off, and Spark's Python workers inherit it."""
    from changestream.spark.huge_pages import transparent_huge_pages_disabled

    assert transparent_huge_pages_disabled()
    context = spark.sparkContext
    found = context.parallelize(range(2), 2).mapPartitions(_worker_huge_pages_disabled)
    assert found.collect() == [(True, True), (True, True)]


_ZYGOTE_DAEMON = """
import os, sys
from pathlib import Path
from changestream.spark._query_control import stop_context
from changestream.spark._session import local_context

def command(_):
    yield Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\\0", b" ").decode()

def environment(_):
    yield os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "unset")

def threads(_):
    import numpy as np
    matrix = np.ones((300, 300))
    (matrix @ matrix).sum()  # numpy's BLAS starts its thread pool
    status = Path("/proc/self/status").read_text().splitlines()
    yield os.environ.get("OMP_NUM_THREADS"), next(l for l in status if l.startswith("Threads:"))

context = local_context("local[2]", log=sys.argv[1])
print(context.parallelize(range(2), 2).mapPartitions(command).collect())
print(context.parallelize(range(2), 2).mapPartitions(environment).collect())
print(context.parallelize(range(2), 2).mapPartitions(threads).collect())
stop_context(context)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_new_jvms_workers_are_forked_by_the_daemon_its_zygote_preloaded(
    tmp_path: Path,
) -> None:
    """The daemon's imports were done while the JVM started: the workers' parent is the
    zygote's child (it keeps the zygote's command line), and it got the JVM's environment
    (the Unix sockets the JVM asked for). Their numpy has one thread, as Spark's
    ``OMP_NUM_THREADS`` of 1 makes it without a zygote (the zygote imported numpy with the
    driver's environment, where it took one thread a core, before it was told). In a process
    of its own: the zygote serves the first JVM of a process, and this one's tests started
    theirs before."""
    from changestream.spark.zygote import ZYGOTE_FLAG

    output = run_script(_ZYGOTE_DAEMON, str(tmp_path / "spark.log"))
    commands, environments, threads = (ast.literal_eval(line) for line in output.splitlines())
    assert len(commands) == 2
    assert all(f"changestream.spark._daemon {ZYGOTE_FLAG}" in c for c in commands), commands
    assert [e.lower() for e in environments] == ["true", "true"]
    assert [(omp, count.split()) for omp, count in threads] == [("1", ["Threads:", "1"])] * 2


def test_no_zygote_when_the_user_chooses_the_workers_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from changestream.spark._session import _workers_threads_set

    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", "/nonexistent")
    assert not _workers_threads_set()
    for chosen in ("spark.task.cpus=2", "spark.executorEnv.OMP_NUM_THREADS=4"):
        monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", f"--conf {chosen} pyspark-shell")
        assert _workers_threads_set()


_HUGE_PAGES = """
import subprocess, sys
from changestream.spark.huge_pages import (
    PR_SET_THP_DISABLE, _prctl, disable_transparent_huge_pages, transparent_huge_pages_disabled,
)
_prctl(PR_SET_THP_DISABLE, 0)  # on, though this test's process may have them off
before = transparent_huge_pages_disabled()
turned_off = disable_transparent_huge_pages()
child = subprocess.run(
    [sys.executable, "-c",
     "from changestream.spark.huge_pages import transparent_huge_pages_disabled as d; print(d())"],
    capture_output=True, text=True, check=True,
).stdout.strip()
print(before, turned_off, transparent_huge_pages_disabled(), child)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_THP_DISABLE is Linux's")
def test_huge_pages_go_off_for_the_process_and_its_children_unless_the_user_chose() -> None:
    """The setting reaches the processes the driver starts (its JVM, Spark's daemon); a
    ``MIMALLOC_ALLOW_THP`` of the user's leaves the process as it was."""
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_ALLOW_THP"}
    run = functools.partial(
        subprocess.run, [sys.executable, "-c", _HUGE_PAGES], capture_output=True, text=True
    )
    done = run(env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "True", "True"]
    chosen = run(env={**env, "MIMALLOC_ALLOW_THP": "1"}, timeout=120)
    assert chosen.returncode == 0, chosen.stderr[-2000:]
    assert chosen.stdout.split() == ["False", "False", "False", "False"]


_SOCKET_MODES = """
from changestream.spark import _session
enabled = "spark.python.unix.domain.socket.enabled"
print(_session.context_conf("local[2]", "app").get(enabled))
print(_session.context_conf("spark://127.0.0.1:7077", "app").get(enabled))
_session._socket_dir = lambda: "/" + "d" * 80
print(_session.context_conf("local[2]", "app").get(enabled))
"""


def test_only_local_masters_use_unix_sockets_and_only_in_a_short_enough_directory() -> None:
    """A cluster's executors could not reach the driver's socket directory, and a socket's
    path must fit in 107 bytes: over either, workers keep TCP. (In a process of its own: a
    JVM started before lends its settings to every new configuration.)"""
    done = subprocess.run(
        [sys.executable, "-c", _SOCKET_MODES], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["true", "None", "None"]


def test_the_daemon_moves_only_the_zips_whose_installed_package_has_their_version(
    tmp_path: Path,
) -> None:
    import pyspark

    from changestream.spark._daemon import installed_first

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    (spark_zip,) = lib.glob("pyspark.zip")
    (py4j_zip,) = lib.glob("py4j-*-src.zip")
    other = tmp_path / "other" / "pyspark.zip"
    other.parent.mkdir()
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("pyspark/version.py", '__version__: str = "0.0.1"\n')
    old_py4j = str(tmp_path / "py4j-0.0.1-src.zip")
    path = [str(spark_zip), str(py4j_zip), str(other), old_py4j, "/site-packages"]
    assert installed_first(path) == [
        str(other),
        old_py4j,
        "/site-packages",
        str(spark_zip),
        str(py4j_zip),
    ]


def test_changes_of_dropped_tables_are_events_and_a_table_created_again_replaces_its_replica(
    spark: Any, tmp_path: Path
) -> None:
    """Every change after ``streams start`` becomes an event, also of a table dropped before
    the pipeline read it (with the columns it had then), and a table dropped and created
    again under its name has a replica of its own rows only, whether the replica held the
    former table's rows or not."""
    path = str(tmp_path / "drops.db")
    gone = "CREATE TABLE Gone (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)"
    with changestream.open(path) as db:
        db.execute_ddl([gone, gone.replace("Gone", "Dropped"), ALL])
    _define(path, tmp_path, "drops", replica=str(tmp_path / "replica"), backfill="none")
    with changestream.open(path) as db:
        with db.transaction() as tx:
            tx.insert("Gone", ["K", "V"], [[1, "one"], [2, "two"]])
        _run(spark, path, "drops")  # the replica holds the former table's rows
        with db.transaction() as tx:
            tx.insert("Gone", ["K", "V"], [[3, "three"]])
            tx.insert("Dropped", ["K", "V"], [[7, "seven"]])
        db.execute_ddl(["DROP TABLE Gone", "DROP TABLE Dropped"])
        db.execute_ddl("CREATE TABLE Gone (K INT64 NOT NULL, W INT64) PRIMARY KEY (K)")
        with db.transaction() as tx:
            tx.insert("Gone", ["K", "W"], [[2, 20], [5, 50]])
    _run(spark, path, "drops")
    events = [e for f in event_files(tmp_path / "drops" / "events") for e in read_events(f)]
    payloads = {
        (e["object"], e["source_metadata"]["table"], json.dumps(e["payload"], sort_keys=True))
        for e in events
    }
    assert payloads == {
        ("drops_Gone", "Gone", '{"K": 1, "V": "one"}'),
        ("drops_Gone", "Gone", '{"K": 2, "V": "two"}'),
        ("drops_Gone", "Gone", '{"K": 3, "V": "three"}'),
        ("drops_Dropped", "Dropped", '{"K": 7, "V": "seven"}'),
        ("drops_Gone", "Gone", '{"K": 2, "W": 20}'),
        ("drops_Gone", "Gone", '{"K": 5, "W": 50}'),
    }
    assert len(events) == len(payloads)
    # The former table's events carry its own shape, so their own schema key.
    keys = {e["payload"].get("V") is None: e["schema_key"] for e in events if "Gone" in e["object"]}
    assert keys[True] != keys[False]
    assert sorted(_replica(tmp_path / "replica", path, "Gone")) == [(2, 20), (5, 50)]
    assert sorted(_source(path, "Gone")) == [(2, 20), (5, 50)]
