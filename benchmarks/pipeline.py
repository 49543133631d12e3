"""Pipeline benchmark: changes/s from commit to event files and Delta replica on Spark, and lag.

A source database with one table (split into ``--partitions`` partitions, split policy off) and
a ``FOR ALL`` change stream (``NEW_ROW_AND_OLD_VALUES``); a stream with an event destination
(``--format``) and a Delta replica, backfill ``none``, started. Workload: upserts of distinct
random keys below ``--keys`` (so inserts at first, then more and more updates), ``--rows-per-txn``
rows per transaction. Inserts and updates of one transaction land in separate data change
records of each partition (a record has one ``mod_type``), so ``--records-per-trigger`` admits
fewer changes per micro-batch than records times ``--rows-per-txn``.

1. Catch-up (steady-state throughput): ``--changes`` changes are committed first, then the
   pipeline runs on ``--master`` (``until_caught_up``, 1-second trigger, at most
   ``--records-per-trigger`` records per micro-batch) until every one has landed. Throughput is
   events landed (files written and MERGEd into Delta) per second from the start of the first
   micro-batch to the end of the last, so the query's start-up is left out (reported apart).
   Each micro-batch is timed by parts: Spark (collecting the batch to the driver, the rest of
   ``_process``), building events, writing files, the Delta MERGE.
2. Live (lag): a writer process commits ``--rate`` changes/s for ``--seconds`` while the
   pipeline runs; the lag of each event is the time its micro-batch finished delivering minus
   its commit timestamp (p50/p99), and the stream's progress lag (now minus
   ``last_commit_timestamp``) is sampled every 0.5 s.

Baseline, measured in the same run on the same events: the sinks without Spark. The catch-up
changes are read with the read function, turned into events with ``cdc_events`` and delivered
with ``EventFileWriter.write_batch`` and ``DeltaReplica.apply`` in batches of the sizes the
pipeline's micro-batches had, one after another in this process; for both JSON and Avro. The
ratios show what Spark and the pipeline add on top of the sinks. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import changestream
from changestream import DataChangeRecord
from changestream.clock import now_us

log = logging.getLogger("pipeline_bench")

DDL = (
    "CREATE TABLE Orders (OrderId INT64 NOT NULL, Customer STRING(MAX), Amount INT64, "
    "Note STRING(MAX)) PRIMARY KEY (OrderId)"
)
CHANGE_STREAM = (
    "CREATE CHANGE STREAM Everything FOR ALL "
    "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')"
)
COLUMNS = ["OrderId", "Customer", "Amount", "Note"]
STREAM = "bench"

WRITER = """
import random, sys, time
import changestream
path, rate, seconds, rows_per_txn, keys, seed = sys.argv[1:7]
rate, seconds, rows_per_txn, keys = float(rate), float(seconds), int(rows_per_txn), int(keys)
rng = random.Random(int(seed))
columns = ["OrderId", "Customer", "Amount", "Note"]
with changestream.open(path) as db:
    began, done = time.monotonic(), 0
    while time.monotonic() - began < seconds:
        picked = rng.sample(range(keys), rows_per_txn)
        rows = [[key, f"c{done % 97}", done, "live"] for key in picked]
        with db.transaction() as tx:
            tx.insert_or_update("Orders", columns, rows)
        done += rows_per_txn
        if rate > 0:
            pause = began + done / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
    print(done, db.last_commit_ts(), time.monotonic() - began, flush=True)
"""


def upserts(db: changestream.EmbeddedDatabase, changes: int, per_txn: int, keys: int) -> None:
    rng = random.Random(changes)
    for n in range(0, changes, per_txn):
        picked = rng.sample(range(keys), min(per_txn, changes - n))
        rows = [
            [key, f"customer-{i % 97}", n + i, "standard delivery"] for i, key in enumerate(picked)
        ]
        with db.transaction() as tx:
            tx.insert_or_update("Orders", COLUMNS, rows)


class Batches:
    """What the instrumented pipeline saw, micro-batch by micro-batch."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[dict[str, Any]] = []
        self.lags_ms: list[float] = []
        self.current: dict[str, Any] = {}

    def add(self, part: str, seconds: float) -> None:
        self.current[part] = self.current.get(part, 0.0) + seconds


def instrumented_pipeline(batches: Batches) -> type:
    """A Pipeline subclass timing each micro-batch by parts (no change to its behaviour)."""
    from changestream.spark.pipeline import Pipeline

    class Timed:
        def __init__(self, inner: Any, part: str, method: str) -> None:
            self._inner, self._part, self._method = inner, part, method

        def __getattr__(self, name: str) -> Any:
            attribute = getattr(self._inner, name)
            if name != self._method:
                return attribute

            def timed(*args: Any, **kwargs: Any) -> Any:
                began = time.perf_counter()
                try:
                    return attribute(*args, **kwargs)
                finally:
                    batches.add(self._part, time.perf_counter() - began)

            return timed

    class TimedPipeline(Pipeline):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._files = Timed(self._files, "files_s", "write_batch")

        def _process(self, batch: Any, batch_id: int) -> None:
            batches.current = {"batch_id": batch_id, "start": time.perf_counter()}
            super()._process(batch, batch_id)
            row = batches.current
            row["end"] = time.perf_counter()
            with batches.lock:
                batches.rows.append(row)

        def _cdc_events(self, rows: Any, stamps: Any, tables: Any) -> Any:
            batches.current["rows"] = rows.num_rows
            began = time.perf_counter()
            events = super()._cdc_events(rows, stamps, tables)
            batches.add("events_s", time.perf_counter() - began)
            return events

        def _deliver(self, events: Iterable[Any], batch_key: str) -> None:
            events = list(events)
            super()._deliver(events, batch_key)
            landed = now_us()
            batches.current["events"] = batches.current.get("events", 0) + len(events)
            with batches.lock:
                batches.lags_ms.extend((landed - e.source_timestamp) / 1000 for e in events)

        def _replica(self, event: Any) -> Any:
            return Timed(super()._replica(event), "delta_s", "apply")

    return TimedPipeline


def setup(path: str, tmp: Path, args: argparse.Namespace, fmt: str) -> None:
    from changestream.datastream import StreamCatalog, StreamDefinition

    with changestream.open(path) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl([DDL, CHANGE_STREAM])
        for index in range(1, args.partitions):
            db.split_at("Orders", (index * args.keys // args.partitions,))
        catalog = StreamCatalog(db)
        catalog.create(
            StreamDefinition(
                name=STREAM,
                database=path,
                change_stream="Everything",
                destination=str(tmp / "events"),
                format=fmt,
                replica=str(tmp / "replica"),
                backfill="none",
            )
        )
        catalog.transition(STREAM, "start")


def percentiles(values: Sequence[float], prefix: str = "") -> dict[str, Any]:
    if not values:
        return {f"{prefix}samples": 0}
    ordered = sorted(values)
    return {
        f"{prefix}samples": len(ordered),
        f"{prefix}p50_ms": round(statistics.median(ordered), 1),
        f"{prefix}p99_ms": round(ordered[max(int(len(ordered) * 0.99) - 1, 0)], 1),
        f"{prefix}max_ms": round(ordered[-1], 1),
    }


def catch_up(args: argparse.Namespace, spark: Any, path: str, fmt: str) -> dict[str, Any]:
    from changestream.spark.pipeline import PipelineOptions

    batches = Batches()
    options = PipelineOptions(
        master=args.master,
        until_caught_up=True,
        trigger_seconds=1.0,
        max_records_per_trigger=args.records_per_trigger,
    )
    pipeline = instrumented_pipeline(batches)(STREAM, path, options, spark=spark)
    began = time.perf_counter()
    pipeline.run()
    wall = time.perf_counter() - began
    rows = [b for b in batches.rows if b.get("events")]
    log.debug("micro-batches (rows, events): %s", [(b["rows"], b["events"]) for b in rows])
    if not rows:
        raise SystemExit("the pipeline delivered nothing")
    events = sum(b["events"] for b in rows)
    if events != args.changes:
        raise SystemExit(f"the pipeline delivered {events} events, expected {args.changes}")
    steady = rows[-1]["end"] - rows[0]["start"]
    parts = ["files_s", "delta_s", "events_s"]
    totals = {part: sum(b.get(part, 0.0) for b in rows) for part in parts}
    in_batches = sum(b["end"] - b["start"] for b in rows)
    return {
        "events": events,
        "micro_batches": len(rows),
        "events_per_batch_p50": statistics.median(b["events"] for b in rows),
        "wall_s_with_query_start": round(wall, 2),
        "first_batch_after_s": round(rows[0]["start"] - began, 2),
        "steady_s": round(steady, 3),
        "changes_per_s": round(events / steady),
        # Share of the steady time spent in each part (the rest: Spark between batches).
        "share_spark_collect_and_driver": round((in_batches - sum(totals.values())) / steady, 3),
        "share_events": round(totals["events_s"] / steady, 3),
        "share_files": round(totals["files_s"] / steady, 3),
        "share_delta_merge": round(totals["delta_s"] / steady, 3),
        "share_between_batches": round((steady - in_batches) / steady, 3),
        "_sizes": [b["events"] for b in rows],
    }


def live(args: argparse.Namespace, spark: Any, path: str, tmp: Path, seed: int) -> dict[str, Any]:
    from changestream.datastream import StreamCatalog
    from changestream.spark.pipeline import PipelineOptions

    batches = Batches()
    options = PipelineOptions(master=args.master, trigger_seconds=1.0)
    pipeline = instrumented_pipeline(batches)(STREAM, path, options, spark=spark)
    with changestream.open(path) as db:
        if StreamCatalog(db).get(STREAM).state.value == "Paused":
            StreamCatalog(db).transition(STREAM, "resume")
    failure: list[BaseException] = []

    def run() -> None:
        try:
            pipeline.run()
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not batches.rows and time.monotonic() < deadline and not failure:
        time.sleep(0.1)  # the query runs (empty micro-batches come with heartbeats)
    if failure or not batches.rows:
        raise SystemExit(f"the pipeline did not start: {failure}")
    first = len(batches.lags_ms)
    command = [
        sys.executable,
        "-c",
        WRITER,
        path,
        str(args.rate),
        str(args.seconds),
        str(args.live_rows_per_txn),
        str(args.keys),
        str(seed),
    ]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    samples: list[float] = []
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        while writer.poll() is None:
            time.sleep(0.5)
            last = catalog.progress(STREAM).last_commit_timestamp
            if last is not None:
                samples.append((now_us() - last) / 1000)
        out, _ = writer.communicate()
        written, last_commit, writer_s = out.split()
        deadline = time.monotonic() + 300
        while (catalog.progress(STREAM).last_commit_timestamp or 0) < int(last_commit):
            if failure or time.monotonic() > deadline:
                raise SystemExit(f"the pipeline did not catch up: {failure}")
            time.sleep(0.2)
        catalog.transition(STREAM, "pause")
    thread.join(60)
    lags = batches.lags_ms[first:]
    if len(lags) != int(written):
        log.warning("live: %d events landed for %s changes written", len(lags), written)
    return {
        "target_changes_per_s": args.rate,
        "rows_per_txn": args.live_rows_per_txn,
        "changes": int(written),
        "writer_changes_per_s": round(int(written) / float(writer_s)),
        **percentiles(lags, "event_lag_"),
        **percentiles(samples, "progress_lag_"),
    }


def read_mods(path: str) -> tuple[Any, list[Any]]:
    """The Orders table and every CdcMod of the stream's change stream, in commit order."""
    from changestream.datastream import StreamCatalog
    from changestream.datastream.events import CdcMod

    mods: list[CdcMod] = []
    with changestream.open(path) as db:
        table = next(t for t in db.tables() if t.name == "Orders")
        start = StreamCatalog(db).progress(STREAM).cdc_start_timestamp
        assert start is not None
        end = db.last_commit_ts()
        for partition in db.partitions("Everything"):
            for record in db.read_change_stream("Everything", start, end, partition.token):
                if not isinstance(record, DataChangeRecord) or record.table_name != "Orders":
                    continue
                for index, mod in enumerate(record.mods):
                    mods.append(
                        CdcMod(
                            record.commit_timestamp,
                            record.server_transaction_id,
                            record.record_sequence,
                            index,
                            record.mod_type,
                            mod.keys,
                            mod.new_values,
                            mod.old_values,
                        )
                    )
    mods.sort(key=lambda m: (m.commit_timestamp, m.record_sequence, m.mod_index))
    return table, mods


def baseline(
    path: str, tmp: Path, sizes: Sequence[int], fmt: str, replica: bool
) -> dict[str, float]:
    """Seconds to build events and to deliver them to the sinks, without Spark."""
    from changestream.datastream.definition import schema_name
    from changestream.datastream.events import cdc_events
    from changestream.datastream.files import EventFileWriter
    from changestream.spark.replica import DeltaReplica

    began = time.perf_counter()
    table, mods = read_mods(path)
    read_s = time.perf_counter() - began
    schema = schema_name(path)
    files = EventFileWriter(tmp / f"baseline-{fmt}", fmt)
    delta = DeltaReplica(tmp / f"baseline-{fmt}-replica", schema, table)
    timings = {"read_s": read_s, "events_s": 0.0, "files_s": 0.0, "delta_s": 0.0}

    at = 0
    for index, size in enumerate(sizes):
        chunk = mods[at : at + size]
        at += size
        t0 = time.perf_counter()
        events = cdc_events(STREAM, schema, table, chunk, chunk[-1].commit_timestamp)
        t1 = time.perf_counter()
        files.write_batch(events, f"cdc-{index}")
        t2 = time.perf_counter()
        if replica:
            delta.apply(events)
        t3 = time.perf_counter()
        timings["events_s"] += t1 - t0
        timings["files_s"] += t2 - t1
        timings["delta_s"] += t3 - t2
    if at != len(mods):
        raise SystemExit(f"baseline: {len(mods)} mods read, the pipeline delivered {at}")
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changes", type=int, default=300_000, help="catch-up changes")
    parser.add_argument("--keys", type=int, default=200_000, help="key space of the upserts")
    parser.add_argument("--rows-per-txn", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--records-per-trigger",
        type=int,
        default=500,
        help="maxRecordsPerTrigger of the catch-up (records of --rows-per-txn changes)",
    )
    parser.add_argument("--format", choices=["json", "avro"], default="json")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rate", type=float, default=5_000, help="live changes/s (0: max)")
    parser.add_argument("--live-rows-per-txn", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20.0, help="live phase length")
    parser.add_argument("--skip-live", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # No console progress bars on stderr (the JVM reads this when it starts).
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell"
    )
    from changestream.spark import local_session

    result: dict[str, Any] = {"benchmark": "pipeline", "master": args.master}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        path = str(tmp / "source.db")
        setup(path, tmp, args, args.format)
        began = time.perf_counter()
        with changestream.open(path) as db:
            upserts(db, args.changes, args.rows_per_txn, args.keys)
        load_s = time.perf_counter() - began
        log.info("committed %d changes in %.1fs", args.changes, load_s)
        spark = local_session(args.master, "changestream-bench")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            log.info("catch-up: the pipeline drains %d changes", args.changes)
            ours = catch_up(args, spark, path, args.format)
            sizes = ours.pop("_sizes")
            log.info("baseline: the sinks without Spark")
            sinks = {
                fmt: baseline(path, tmp, sizes, fmt, replica=fmt == args.format)
                for fmt in ("json", "avro")
            }
            if not args.skip_live:
                log.info("live: %.0f changes/s for %.0fs", args.rate, args.seconds)
                result["live"] = live(args, spark, path, tmp, seed=1)
        finally:
            spark.stop()
    base = sinks[args.format]
    sink_s = base["files_s"] + base["delta_s"]
    all_s = sink_s + base["events_s"] + base["read_s"]
    events = ours["events"]
    result.update(
        {
            "format": args.format,
            "partitions": args.partitions,
            "rows_per_txn": args.rows_per_txn,
            "keys": args.keys,
            "load_changes_per_s": round(args.changes / load_s),
            "catch_up": ours,
            "baseline_no_spark": {
                "read_function_s": round(base["read_s"], 3),
                "events_s": round(base["events_s"], 3),
                "files_s": round(base["files_s"], 3),
                "delta_merge_s": round(base["delta_s"], 3),
                "sinks_changes_per_s": round(events / sink_s),
                "delta_only_changes_per_s": round(events / base["delta_s"]),
                "read_build_and_sinks_changes_per_s": round(events / all_s),
                "json_files_changes_per_s": round(events / sinks["json"]["files_s"]),
                "avro_files_changes_per_s": round(events / sinks["avro"]["files_s"]),
                "json_events_changes_per_s": round(events / sinks["json"]["events_s"]),
            },
            "pipeline_over_sinks": round(ours["changes_per_s"] * sink_s / events, 3),
            "pipeline_over_no_spark": round(ours["changes_per_s"] * all_s / events, 3),
            "goal_changes_per_s_into_delta": 100_000,
        }
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
