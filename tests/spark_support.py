"""Test helpers for the Spark source: a workload with splits and merges, the expected mods
read through the read function, and a streaming driver that can run in its own process."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import changestream
from changestream import DataChangeRecord, FailedPrecondition
from changestream.clock import format_ts
from tests.lineage import read_lineage

ITEMS = "CREATE TABLE Items (Id INT64 NOT NULL, Name STRING(MAX), Qty INT64) PRIMARY KEY (Id)"
STREAM = "CREATE CHANGE STREAM ItemStream FOR Items OPTIONS (value_capture_type = 'NEW_ROW')"

#: A mod's identity: commit timestamp, transaction, record sequence, partition, index.
ModId = tuple[int, str, str, str, int]


def run_script(script: str, *args: str, timeout: float = 300) -> str:
    """Run Python ``script`` in a process of its own (a Spark session there starts its own
    JVM) and return its output; fails the test with the end of its stderr if it fails."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def create_items_db(path: str) -> changestream.EmbeddedDatabase:
    """A database with table Items, change stream ItemStream, and no automatic splits."""
    db = changestream.open(path)
    db.execute_ddl([ITEMS, STREAM])
    db.set_split_policy(enabled=False)
    return db


def write_items(
    db: changestream.Database,
    seed: int,
    transactions: int,
    keys: int = 200,
    stop: threading.Event | None = None,
    pause: float = 0.0,
    reshape_every: int = 10,
) -> None:
    """Random upserts and deletes, with a split or merge every ``reshape_every`` transactions;
    ``stop`` ends it early, ``pause`` seconds between transactions pace it."""
    rng = random.Random(seed)
    boundaries: list[int] = []
    for n in range(transactions):
        if stop is not None and stop.is_set():
            return
        time.sleep(pause)
        with db.transaction() as tx:
            rows = [[rng.randrange(keys), f"n{n}", rng.randrange(100)] for _ in range(5)]
            tx.insert_or_update("Items", ["Id", "Name", "Qty"], rows)
            if n % 3 == 0:
                tx.delete("Items", [[rng.randrange(keys)]])
        if n % reshape_every == reshape_every // 2:
            key = rng.randrange(1, keys)
            merge = bool(boundaries) and rng.random() < 0.4
            if merge:
                key = boundaries.pop(rng.randrange(len(boundaries)))
            try:
                (db.merge_at if merge else db.split_at)("Items", [key])
            except FailedPrecondition:
                continue  # another writer already split (or merged) there
            if not merge:
                boundaries.append(key)


class Writer:
    """``write_items`` on its own connection in a thread, paced, until stopped or done."""

    def __init__(
        self, path: str, seed: int, transactions: int, pause: float = 0.01, reshape_every: int = 25
    ) -> None:
        self.stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(path, seed, transactions, pause, reshape_every), daemon=True
        )
        self._thread.start()

    def _run(
        self, path: str, seed: int, transactions: int, pause: float, reshape_every: int
    ) -> None:
        with changestream.open(path) as db:
            write_items(
                db, seed, transactions, stop=self.stop, pause=pause, reshape_every=reshape_every
            )

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def finish(self, stop: bool = False) -> None:
        """Wait for the writer (stopping it first when ``stop``)."""
        if stop:
            self.stop.set()
        self._thread.join()


def expected_mods(path: str, start: int, end: int) -> list[ModId]:
    """Every mod of ItemStream committed in ``[start, end]``, by the read function."""
    with changestream.open(path) as db:
        records = [r for p in read_lineage(db, "ItemStream", start, end) for r in p.records]
    return sorted(mod_ids(records))


def mod_ids(records: list[DataChangeRecord]) -> list[ModId]:
    return [
        (r.commit_timestamp, r.server_transaction_id, r.record_sequence, r.partition_token, i)
        for r in records
        for i in range(len(r.mods))
    ]


def difference(expected: list[ModId], got: list[ModId]) -> str:
    """Missing and duplicated mods per partition, and when they were committed."""
    missing = Counter(m[3][-8:] for m in set(expected) - set(got))
    extra = Counter(m[3][-8:] for m in set(got) - set(expected))
    stamps = sorted(m[0] for m in set(expected) - set(got))
    return (
        f"missing {dict(missing)} (commit timestamps {stamps[:2]}..{stamps[-2:]}), "
        f"unexpected {dict(extra)}, duplicates {len(got) - len(set(got))}"
    )


def sink_mods(sink: Path) -> list[ModId]:
    """The mods in a Parquet sink written one directory per batch id (rowPerMod rows)."""
    files = sorted(sink.glob("batch=*/*.parquet"))
    if not files:
        return []
    out: list[ModId] = []
    for file in files:
        try:
            table = pq.read_table(file)
        except FileNotFoundError:
            # Its batch is being written again (a query restarted on the checkpoint replays
            # the batch it had not committed): this look comes up short, the next one not.
            continue
        for row in table.to_pylist():
            ts = row["commit_timestamp"]
            micros = int(ts.timestamp()) * 1_000_000 + ts.microsecond
            out.append(
                (
                    micros,
                    row["server_transaction_id"],
                    row["record_sequence"],
                    row["partition_token"],
                    row["mod_index"],
                )
            )
    return sorted(out)


def start_query(spark: Any, db_path: str, start: str, sink: Path, checkpoint: Path) -> Any:
    """A streaming query of ItemStream (one row per mod, at most 300 per batch) writing each
    batch to ``sink/batch=<id>`` with overwrite, so a replayed batch replaces itself."""

    def write(batch: Any, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(str(sink / f"batch={batch_id}"))

    frame = (
        spark.readStream.format("changestream")
        .option("database", db_path)
        .option("stream", "ItemStream")
        .option("startingTimestamp", start)
        .option("rowPerMod", "true")
        .option("maxRecordsPerTrigger", "300")
        .option("heartbeatMilliseconds", "200")
        .load()
    )
    return (
        frame.writeStream.foreachBatch(write)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def main(argv: list[str]) -> None:
    """Run a streaming query until killed: ``python -m tests.spark_support DB START SINK CKPT``."""
    from changestream.spark import local_session

    db_path, start, sink, checkpoint = argv
    spark = local_session()
    query = start_query(spark, db_path, start, Path(sink), Path(checkpoint))
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])


def batch_read(spark: Any, database: str, start: int, end: int, **options: str) -> Any:
    """A batch read of ``ItemStream`` from ``start`` to ``end`` with the given source options."""
    reader = (
        spark.read.format("changestream")
        .option("database", database)
        .option("stream", "ItemStream")
        .option("startTimestamp", format_ts(start))
        .option("endTimestamp", format_ts(end))
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()
