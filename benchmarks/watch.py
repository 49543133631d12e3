"""watch() benchmark: events/s through one cursor over 16 partitions, and commit→event latency
with one idle partition. Prints one JSON line.

Throughput: ``--transactions`` inserts of ``ROWS_PER_TXN`` rows, each spread over the 16
partitions, are read back (a) through ``db.watch(start_at_operation_time=...)`` and (b), as the
baseline measured in the same run, with the raw read function: each partition read to the end
one after another, no merge, no events.

Latency: ``--commits`` single-row transactions, ``--pace-ms`` apart, to 15 of the 16 partitions
(the 16th stays idle) while (a) a watch() cursor waits for each, and (b) as the baseline, the same
writes to one partition while a raw live read-function query on that partition waits for them.
Latency is the time from ``commit()`` returning to the event (or record) arriving. Also reported:
the cursor's latency with the merge's idle-partition probe turned off, where only heartbeats
(one a second) release the others.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable

import changestream
from changestream import DataChangeRecord
from changestream.watch import merge

PARTITIONS = 16
STRIDE = 100_000
ROWS_PER_TXN = 16
DDL = "CREATE TABLE Items (Id INT64 NOT NULL, V STRING(MAX), N INT64) PRIMARY KEY (Id)"
COLUMNS = ["Id", "V", "N"]
WAIT_S = 120.0


def open_split(path: str) -> tuple[changestream.EmbeddedDatabase, str]:
    """A database whose Items table spans 16 partitions of the watch stream."""
    db = changestream.open(path)
    db.set_split_policy(enabled=False)
    db.execute_ddl(DDL)
    for p in range(1, PARTITIONS):
        db.split_at("Items", [p * STRIDE])
    stream = db.ensure_watch_stream().stream
    return db, stream


def load(db: changestream.EmbeddedDatabase, transactions: int) -> None:
    for t in range(transactions):
        rows = [[p * STRIDE + t, "payload", t] for p in range(ROWS_PER_TXN)]
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, rows)


def read_raw(db: changestream.EmbeddedDatabase, stream: str, start: int, end: int) -> int:
    """Mods of every partition, partition by partition, with the raw read function."""
    events = 0
    for partition in db.partitions(stream, at=start):
        for record in db.read_change_stream(stream, start, end, partition.token, 10_000):
            if isinstance(record, DataChangeRecord):
                events += len(record.mods)
    return events


def read_watch(db: changestream.EmbeddedDatabase, start: int, expected: int) -> int:
    events = 0
    deadline = time.monotonic() + WAIT_S
    with db.watch(start_at_operation_time=start) as cursor:
        while events < expected and time.monotonic() < deadline:
            if cursor.try_next() is not None:
                events += 1
    return events


def throughput(path: str, transactions: int, repeats: int) -> dict[str, float]:
    db, stream = open_split(path)
    try:
        start = db.ensure_watch_stream().now
        load(db, transactions)
        end = db.last_commit_ts()
        expected = transactions * ROWS_PER_TXN
        raw_s, watch_s = [], []
        for _ in range(repeats):
            raw_s.append(timed(lambda: read_raw(db, stream, start, end), expected))
            watch_s.append(timed(lambda: read_watch(db, start, expected), expected))
    finally:
        db.close()
    raw, watched = min(raw_s), min(watch_s)
    return {
        "events": expected,
        "watch_events_per_s": round(expected / watched),
        "baseline_raw_read_events_per_s": round(expected / raw),
        "watch_over_baseline": round(raw / watched, 3),
    }


def timed(run: Callable[[], int], expected: int) -> float:
    started = time.perf_counter()
    got = run()
    elapsed = time.perf_counter() - started
    if got != expected:
        raise SystemExit(f"read {got} events, expected {expected}")
    return elapsed


def writes(
    db: changestream.EmbeddedDatabase, commits: int, pace_s: float, key: Callable[[int], int]
) -> dict[int, float]:
    """Commit one row per transaction; returns row id → when commit() returned."""
    committed: dict[int, float] = {}
    for n in range(commits):
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, [[key(n), "x", n]])
        committed[key(n)] = time.perf_counter()
        time.sleep(pace_s)
    return committed


def percentiles(committed: dict[int, float], arrived: dict[int, float]) -> tuple[float, float]:
    missing = set(committed) - set(arrived)
    if missing:
        raise SystemExit(f"{len(missing)} commits never arrived")
    latencies = sorted(max(arrived[k] - committed[k], 0.0) * 1000 for k in committed)
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return round(cuts[49], 2), round(cuts[98], 2)


def watch_latency(path: str, commits: int, pace_s: float) -> tuple[float, float]:
    """Commit→event latency through watch() with 15 partitions written and one idle."""
    db, _ = open_split(path)
    try:
        arrived: dict[int, float] = {}
        cursor = db.watch(max_await_time_ms=100)

        def consume() -> None:
            deadline = time.monotonic() + WAIT_S
            while len(arrived) < commits and time.monotonic() < deadline:
                event = cursor.try_next()
                if event is not None:
                    arrived[event["documentKey"]["Id"]] = time.perf_counter()

        reader = threading.Thread(target=consume)
        reader.start()
        time.sleep(0.2)  # let the readers reach their live tails
        # Partition 15 (keys from 15 * STRIDE) is never written.
        committed = writes(db, commits, pace_s, lambda n: (n % 15) * STRIDE + n)
        reader.join(WAIT_S)
        cursor.close()
        return percentiles(committed, arrived)
    finally:
        db.close()


def raw_latency(path: str, commits: int, pace_s: float) -> tuple[float, float]:
    """The baseline: one live read-function query on the one partition written to."""
    db, stream = open_split(path)
    try:
        arrived: dict[int, float] = {}
        start = db.ensure_watch_stream().now
        token = db.partitions(stream)[0].token
        records = db.read_change_stream(stream, start, None, token, 1000)

        def consume() -> None:
            deadline = time.monotonic() + WAIT_S
            for record in records:
                if isinstance(record, DataChangeRecord):
                    for mod in record.mods:
                        arrived[mod.keys["Id"]] = time.perf_counter()
                if len(arrived) >= commits or time.monotonic() > deadline:
                    return

        reader = threading.Thread(target=consume)
        reader.start()
        time.sleep(0.2)
        committed = writes(db, commits, pace_s, lambda n: n)
        reader.join(WAIT_S)
        return percentiles(committed, arrived)
    finally:
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transactions", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--pace-ms", type=float, default=10.0)
    args = parser.parse_args()
    pace_s = args.pace_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        result: dict[str, object] = {"benchmark": "watch", "partitions": PARTITIONS}
        result.update(throughput(os.path.join(tmp, "t.db"), args.transactions, args.repeats))
        raw_p50, raw_p99 = raw_latency(os.path.join(tmp, "r.db"), args.commits, pace_s)
        p50, p99 = watch_latency(os.path.join(tmp, "w.db"), args.commits, pace_s)
        probe_after = merge.PROBE_AFTER_S
        merge.PROBE_AFTER_S = float("inf")
        try:
            slow_p50, slow_p99 = watch_latency(os.path.join(tmp, "h.db"), args.commits, pace_s)
        finally:
            merge.PROBE_AFTER_S = probe_after
    result.update(
        {
            "latency_commits": args.commits,
            "latency_pace_ms": args.pace_ms,
            "watch_latency_p50_ms": p50,
            "watch_latency_p99_ms": p99,
            "baseline_raw_read_latency_p50_ms": raw_p50,
            "baseline_raw_read_latency_p99_ms": raw_p99,
            "watch_over_baseline_latency_p50": round(p50 / raw_p50, 2) if raw_p50 else None,
            "watch_over_baseline_latency_p99": round(p99 / raw_p99, 2) if raw_p99 else None,
            "heartbeat_only_latency_p50_ms": slow_p50,
            "heartbeat_only_latency_p99_ms": slow_p99,
        }
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
