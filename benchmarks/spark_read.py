"""Spark read benchmark: batch records/s of the ``changestream`` source, and streaming latency.

Loads ``--mods`` row inserts (``ROWS_PER_TXN`` per transaction) into a table split into
``--partitions`` partitions before the load (split policy disabled). Transaction ``t`` writes
``ROWS_PER_TXN`` new keys of partition ``t % partitions``, so each transaction is one data change
record and every partition grows over the whole time range.

Batch, on ``--master`` (default ``local[2]``), best of ``--repeats``:

- ``count``: ``df.count()`` of the default one-row-per-record frame. The Python data source has
  no column pruning, so the workers still read every record and build every Arrow column; only
  the JVM side skips looking at the values.
- ``noop``: ``df.write.format("noop")``, which makes the JVM materialise every column of every
  row (the honest "read it all" number).
- ``row_per_mod_noop``: the same with ``rowPerMod=true`` (one row per mod, the pipeline's shape).

Baseline, measured in the same run: the same records read with ``db.read_change_stream`` in this
one process, following the lineage from the initial query (one partition after another).

Every timed run checks what it read, inside the same Spark job (``DataFrame.observe``, so the
noop sink cannot hide a short read): the number of rows and the count, sum and sum of squares of
the keys of every mod must equal those of the keys written. The streaming runs check that the
unique records received (by partition, commit timestamp and sequence) carry exactly the keys the
writer committed; the foreachBatch sink collects their identity and keys with the commit
timestamps, so its latency includes carrying them.

Streaming: a query (one row per record, 1-second trigger) whose ``foreachBatch`` records, for
each row, the time after the batch was collected minus its commit timestamp, while a writer
thread commits ``--rate`` small transactions per second for ``--seconds``. Baseline, measured in
the same run with the same writer: a plain Python loop that wakes every second and reads every
partition from where it left off to now with the read function (the same cadence, no Spark).
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import changestream
from changestream import DataChangeRecord
from changestream.clock import format_ts, now_us
from changestream.embedded.database import store_of
from checks import CheckFailed, expect, goals, key_checksum

log = logging.getLogger("spark_read")

ROWS_PER_TXN = 100
STREAM = "OrdersStream"
DDL = (
    "CREATE TABLE Orders (OrderId INT64 NOT NULL, Customer STRING(MAX), Amount INT64, "
    "Note STRING(MAX)) PRIMARY KEY (OrderId)"
)
COLUMNS = ["OrderId", "Customer", "Amount", "Note"]


def load(
    db: changestream.EmbeddedDatabase, transactions: int, partitions: int
) -> tuple[int, int, float, tuple[int, int, int]]:
    """Create the table, split it, create the stream and commit the transactions; returns
    (start, end, seconds of the load, checksum of the keys written)."""
    db.set_split_policy(enabled=False)
    db.execute_ddl([DDL, f"CREATE CHANGE STREAM {STREAM} FOR Orders"])
    span = -(-transactions // partitions) * ROWS_PER_TXN
    for index in range(1, partitions):
        db.split_at("Orders", (index * span,))
    if len(db.partitions(STREAM)) != partitions:
        raise SystemExit(f"expected {partitions} partitions, got {len(db.partitions(STREAM))}")
    start = store_of(db).last_commit_ts() + 1
    began = time.perf_counter()
    for t in range(transactions):
        first = (t % partitions) * span + (t // partitions) * ROWS_PER_TXN
        rows = [
            [first + i, f"customer-{i % 97}", i * 7, "standard delivery"]
            for i in range(ROWS_PER_TXN)
        ]
        with db.transaction() as tx:
            tx.insert("Orders", COLUMNS, rows)
        if t and t % 2000 == 0:
            log.info("loaded %d of %d transactions", t, transactions)
    load_s = time.perf_counter() - began
    keys = key_checksum(
        (t % partitions) * span + (t // partitions) * ROWS_PER_TXN + i
        for t in range(transactions)
        for i in range(ROWS_PER_TXN)
    )
    return start, store_of(db).last_commit_ts(), load_s, keys


def read_lineage(db: changestream.EmbeddedDatabase, start: int, end: int) -> tuple[int, int]:
    """(records, mods) committed in ``[start, end]``, one partition after another, children
    once all their parents have ended (the seed's query workflow, by the public walker)."""
    records = mods = 0
    for partition in changestream.walk_partitions(db, STREAM, start, end, 10_000):
        for record in partition.records():
            if isinstance(record, DataChangeRecord):
                records += 1
                mods += len(record.mods)
    return records, mods


def best(run: Callable[[], object], expected: object, repeats: int, what: str) -> float:
    """The fastest of ``repeats`` runs of ``run``, which must return ``expected``."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        got = run()
        times.append(time.perf_counter() - began)
        expect(what, got, expected)
        log.info("%s: %.2fs", what, times[-1])
    return min(times)


def observed(frame: Any, row_per_mod: bool) -> tuple[Any, Any]:
    """``frame`` with an observation of (rows, key count, key sum, key sum of squares)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    def key(keys: Any) -> Any:
        return F.get_json_object(keys, "$.OrderId").cast("long")

    if row_per_mod:
        k = key(F.col("keys"))
        sums = (F.count(k), F.sum(k), F.sum(k * k))
    else:

        def total(fn: Callable[[Any], Any]) -> Any:
            zero = F.lit(0).cast("long")
            return F.sum(F.aggregate("mods", zero, lambda acc, m: acc + fn(key(m["keys"]))))

        sums = (total(lambda _: F.lit(1)), total(lambda k: k), total(lambda k: k * k))
    observation = Observation("check")
    metrics = [F.count(F.lit(1)).alias("rows")]
    metrics += [s.alias(name) for s, name in zip(sums, ("n", "sum", "squares"), strict=True)]
    return frame.observe(observation, *metrics), observation


def outcome(observation: Any) -> tuple[int, tuple[int, int, int]]:
    got = observation.get
    return got["rows"], (got["n"], got["sum"], got["squares"])


def batch(args: argparse.Namespace, spark: Any, path: str) -> dict[str, Any]:
    transactions = max(args.mods // ROWS_PER_TXN, 1)
    mods = transactions * ROWS_PER_TXN
    with changestream.open(path) as db:
        start, end, load_s, keys = load(db, transactions, args.partitions)
        log.info("loaded %d mods in %.1fs", mods, load_s)
        baseline_s = best(
            lambda: read_lineage(db, start, end)[0], transactions, args.repeats, "baseline"
        )
        if read_lineage(db, start, end) != (transactions, mods):
            raise SystemExit("the baseline read the wrong number of mods")

    def frame(row_per_mod: bool) -> Any:
        return (
            spark.read.format("changestream")
            .option("database", path)
            .option("stream", STREAM)
            .option("startTimestamp", format_ts(start))
            .option("endTimestamp", format_ts(end))
            .option("rowPerMod", str(row_per_mod).lower())
            .load()
        )

    def count() -> tuple[int, tuple[int, int, int]]:
        checked, observation = observed(frame(False), False)
        rows = checked.count()
        expect("spark count: count() against observed rows", rows, outcome(observation)[0])
        return outcome(observation)

    def noop(row_per_mod: bool) -> tuple[int, tuple[int, int, int]]:
        checked, observation = observed(frame(row_per_mod), row_per_mod)
        checked.write.format("noop").mode("overwrite").save()
        return outcome(observation)

    # Warm-up: JVM code paths and the Python workers (reused across tasks).
    frame(False).limit(1).collect()
    input_partitions = frame(False).rdd.getNumPartitions()
    count_s = best(count, (transactions, keys), args.repeats, "spark count")
    noop_s = best(lambda: noop(False), (transactions, keys), args.repeats, "spark noop")
    per_mod_s = best(lambda: noop(True), (mods, keys), args.repeats, "spark rowPerMod noop")
    return {
        "mods": mods,
        "records": transactions,
        "partitions": args.partitions,
        "spark_input_partitions": input_partitions,
        "load_s": round(load_s, 2),
        "baseline_read_function_s": round(baseline_s, 3),
        "baseline_records_per_s": round(transactions / baseline_s),
        "baseline_mods_per_s": round(mods / baseline_s),
        "spark_count_s": round(count_s, 3),
        "spark_count_records_per_s": round(transactions / count_s),
        "spark_count_mods_per_s": round(mods / count_s),
        "spark_noop_s": round(noop_s, 3),
        "spark_noop_records_per_s": round(transactions / noop_s),
        "spark_noop_mods_per_s": round(mods / noop_s),
        "spark_row_per_mod_noop_s": round(per_mod_s, 3),
        "spark_row_per_mod_noop_mods_per_s": round(mods / per_mod_s),
        "materialised": "noop sink: every column of every row reaches the JVM; count: the "
        "Python workers still read and convert everything (no column pruning), the JVM only "
        "counts",
        "count_over_baseline": round(baseline_s / count_s, 3),
        "noop_over_baseline": round(baseline_s / noop_s, 3),
        "row_per_mod_noop_over_baseline": round(baseline_s / per_mod_s, 3),
    }


class Writer:
    """Commits ``rate`` transactions per second of ``rows`` upserts of random keys below
    ``keys`` (so every partition sees writes), on its own connection, for ``seconds``."""

    def __init__(self, path: str, rate: float, rows: int, seconds: float, keys: int) -> None:
        self.path, self.rate, self.rows, self.seconds = path, rate, rows, seconds
        self.keys = keys
        self.written: list[int] = []
        self.transactions = 0
        self.last_commit = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        rng = random.Random(self.rows)
        with changestream.open(self.path) as db:
            began = time.monotonic()
            while time.monotonic() - began < self.seconds:
                keys = rng.sample(range(self.keys), self.rows)
                rows = [[key, "streaming", i, "express"] for i, key in enumerate(keys)]
                with db.transaction() as tx:
                    tx.insert_or_update("Orders", COLUMNS, rows)
                self.written += keys
                self.transactions += 1
                pause = began + self.transactions / self.rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            self.last_commit = store_of(db).last_commit_ts()


def percentiles(values_ms: list[float]) -> dict[str, float]:
    if not values_ms:
        return {"rows": 0}
    ordered = sorted(values_ms)
    return {
        "rows": len(ordered),
        "p50_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(ordered[max(int(len(ordered) * 0.99) - 1, 0)], 1),
        "max_ms": round(ordered[-1], 1),
    }


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise CheckFailed(f"check failed: timed out waiting for {what}")
        time.sleep(0.1)


def streaming_spark(args: argparse.Namespace, spark: Any, path: str, tmp: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    latencies: list[float] = []
    seen: list[int] = []
    batches: list[float] = []
    received: dict[tuple[str, int, str], list[str]] = {}

    def sink(frame: Any, batch_id: int) -> None:
        began = time.perf_counter()
        columns = ["commit_timestamp", "partition_token", "record_sequence"]
        table = frame.select(*columns, F.col("mods.keys").alias("keys")).toArrow()
        arrived = now_us()
        stamps = table.column(0).cast("int64").to_pylist()
        latencies.extend((arrived - ts) / 1000 for ts in stamps)
        seen.extend(stamps)
        batches.append(time.perf_counter() - began)
        tokens, sequences, keys = (table.column(i).to_pylist() for i in (1, 2, 3))
        for identity in zip(tokens, stamps, sequences, keys, strict=True):
            received[identity[:3]] = identity[3]

    with changestream.open(path) as db:
        start = store_of(db).last_commit_ts() + 1
    query = (
        spark.readStream.format("changestream")
        .option("database", path)
        .option("stream", STREAM)
        .option("startingTimestamp", format_ts(start))
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        wait_for(lambda: query.lastProgress is not None, 120, "the first micro-batch")
        writer = Writer(path, args.rate, args.rows_per_txn, args.seconds, args.mods)
        writer.start()
        writer.join()
        wait_for(lambda: max(seen, default=0) >= writer.last_commit, 60, "the last commit")
        progress = list(query.recentProgress)
    finally:
        query.stop()
    keys = [json.loads(k)["OrderId"] for ks in received.values() for k in ks]
    expect("streaming: keys of the unique records received", sorted(keys), sorted(writer.written))
    durations = [p["batchDuration"] for p in progress if p.get("numInputRows")]
    return {
        "transactions": writer.transactions,
        **percentiles(latencies),
        "micro_batches_with_rows": len(durations),
        "batch_duration_p50_ms": statistics.median(durations) if durations else None,
        "foreach_batch_collect_p50_ms": round(statistics.median(batches) * 1000, 1),
    }


def streaming_baseline(args: argparse.Namespace, path: str) -> dict[str, Any]:
    """The same writer, read by a loop that wakes every second and reads every partition
    from where it left off up to now, through the read function."""
    latencies: list[float] = []
    keys: list[int] = []
    with changestream.open(path) as db:
        last = store_of(db).last_commit_ts()
        tokens = [p.token for p in db.partitions(STREAM)]
        writer = Writer(path, args.rate, args.rows_per_txn, args.seconds, args.mods)
        writer.start()
        tick = time.monotonic()
        while True:
            tick += 1.0
            time.sleep(max(0.0, tick - time.monotonic()))
            done = not writer.is_alive()
            until = now_us()
            records = [
                record
                for token in tokens
                for record in db.read_change_stream(STREAM, last + 1, until, token, 10_000)
                if isinstance(record, DataChangeRecord)
            ]
            arrived = now_us()
            latencies.extend((arrived - r.commit_timestamp) / 1000 for r in records)
            keys += [mod.keys["OrderId"] for r in records for mod in r.mods]
            last = until
            if done and last >= writer.last_commit:
                break
    expect("streaming baseline: keys read", sorted(keys), sorted(writer.written))
    return {"transactions": writer.transactions, **percentiles(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mods", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--seconds", type=float, default=20.0, help="streaming writer time")
    parser.add_argument("--rate", type=float, default=100.0, help="streaming transactions/s")
    parser.add_argument("--rows-per-txn", type=int, default=5, help="streaming rows per txn")
    parser.add_argument("--skip-streaming", action="store_true")
    parser.add_argument(
        "--skip-batch", action="store_true", help="only the streaming part (on an empty table)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    # No console progress bars on stderr (the JVM reads this when it starts).
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell"
    )
    from changestream.spark import local_session

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        spark = local_session(args.master, "changestream-bench")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            result: dict[str, Any] = {"benchmark": "spark_read", "master": args.master}
            if args.skip_batch:
                with changestream.open(path) as db:
                    load(db, 1, args.partitions)  # the table, its stream and partitions
            else:
                result["batch"] = batch(args, spark, path)
            if not args.skip_streaming:
                log.info("streaming: Spark, %.0f tx/s for %.0fs", args.rate, args.seconds)
                ours = streaming_spark(args, spark, path, Path(tmp))
                log.info("streaming: baseline loop")
                floor = streaming_baseline(args, path)
                result["streaming"] = {
                    "trigger_s": 1.0,
                    "rate_tx_per_s": args.rate,
                    "rows_per_txn": args.rows_per_txn,
                    "seconds": args.seconds,
                    "spark_foreach_batch": ours,
                    "baseline_1s_poll_loop": floor,
                    "p50_over_baseline": round(ours["p50_ms"] / max(floor["p50_ms"], 0.001), 2),
                    "p99_over_baseline": round(ours["p99_ms"] / max(floor["p99_ms"], 0.001), 2),
                }
        finally:
            spark.stop()
    goals(result, [])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
