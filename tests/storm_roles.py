"""The processes of the storm test: writers with keys of their own, and live workflow readers.

``python -m tests.storm_roles writer PATH ID SECONDS OUT`` commits random transactions and
writes each commit's net mods to OUT; ``python -m tests.storm_roles reader PATH START STOP OUT``
follows the query workflow live through the public walker (a thread per partition, children
after all their parents) and writes every record it reads to OUT, until every partition has
passed the commit timestamp that appears in the file STOP. Both write JSON lines.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson

import changestream
from changestream import ChildPartitionsRecord, DataChangeRecord, HeartbeatRecord
from changestream.clock import parse_ts


def writer(path: str, writer_id: int, seconds: float, out: str) -> None:
    """Random transactions on the keys (writer_id, 0..400) of table Storm."""
    rng = random.Random(writer_id)
    rows: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    with changestream.open(path, busy_timeout=30) as db, open(out, "wb") as sink:
        while time.monotonic() < deadline:
            after = dict(rows)
            touched: set[int] = set()
            with db.transaction(tag=f"w{writer_id}") as tx:
                if rng.random() < 0.2:
                    # DML takes effect when it runs; buffered mutations at commit.
                    limit = rng.randint(0, 400)
                    tx.execute_update(
                        "UPDATE Storm SET V = V + 1 WHERE W = @w AND K < @k",
                        {"w": writer_id, "k": limit},
                    )
                    bumped = [k for k in after if k < limit]
                    after.update({k: after[k] + 1 for k in bumped})
                    touched.update(bumped)
                for _ in range(rng.randint(1, 20)):
                    key = rng.randint(0, 400)
                    if rng.random() < 0.7:
                        value = rng.randint(0, 10**6)
                        tx.insert_or_update("Storm", ["W", "K", "V"], [[writer_id, key, value]])
                        after[key] = value
                        touched.add(key)
                    elif key in after:
                        tx.delete("Storm", [(writer_id, key)])
                        del after[key]
                        touched.add(key)
            assert tx.commit_timestamp is not None
            ts = parse_ts(tx.commit_timestamp)
            for key in sorted(touched):
                if key in rows or key in after:
                    kind = (
                        "INSERT" if key not in rows else "DELETE" if key not in after else "UPDATE"
                    )
                    sink.write(orjson.dumps([ts, writer_id, key, kind]) + b"\n")
            rows = after


def reader(path: str, start: int, stop_file: str, out: str) -> None:
    """The seed's workflow, live: each ready partition in its own thread."""
    stop_at: list[int] = []

    def reached(ts: int) -> bool:
        if not stop_at and os.path.exists(stop_file):
            with open(stop_file) as handle:
                text = handle.read().strip()
            if text:
                stop_at.append(int(text))
        return bool(stop_at) and ts >= stop_at[0]

    lock = threading.Lock()
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []

    with changestream.open(path, busy_timeout=30) as db, open(out, "wb") as sink:

        def emit(entry: list[Any]) -> None:
            with lock:
                sink.write(orjson.dumps(entry) + b"\n")

        def read_partition(token: str, records: Iterator[changestream.ChangeRecord]) -> None:
            try:
                for record in records:
                    if isinstance(record, DataChangeRecord):
                        for mod in record.mods:
                            keys = mod.keys
                            emit(
                                [
                                    "data",
                                    token,
                                    record.commit_timestamp,
                                    int(record.record_sequence),
                                    keys["W"],
                                    keys["K"],
                                    record.mod_type,
                                    mod.new_values.get("V"),
                                ]
                            )
                    elif isinstance(record, HeartbeatRecord):
                        emit(["heartbeat", token, record.timestamp])
                    else:
                        emit(["end", token, record.start_timestamp])
                    moment = record.timestamp
                    if isinstance(record, ChildPartitionsRecord):
                        moment -= 1
                    if reached(moment):
                        break
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        # The public walker gives each partition once all its parents' reads have finished.
        for partition in changestream.walk_partitions(db, "Storm", start, None, 1000):
            emit(
                ["start", partition.token, partition.start_timestamp, list(partition.parent_tokens)]
            )
            thread = threading.Thread(
                target=read_partition, args=(partition.token, partition.records())
            )
            threads.append(thread)
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]


if __name__ == "__main__":
    role, path, *rest = sys.argv[1:]
    if role == "writer":
        writer(path, int(rest[0]), float(rest[1]), rest[2])
    else:
        reader(path, int(rest[0]), rest[1], rest[2])
