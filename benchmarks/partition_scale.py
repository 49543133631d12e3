"""Partition scale: write and read throughput with 1, 10, 100 and 1,000 live partitions.

The same workload each time — 100-row transactions over random keys of one table — against a
table split into P partitions; then every partition is read through the read function. Prints
one JSON line with mods/s and the cost in µs per record, per mod and per transaction for each P,
and ratios against P = 1. The cost per record falls as P grows only because each transaction
writes more records (≈ 1 at P = 1, ≈ 95 at P = 1,000), so the goal (issue 4: cost flat in the
number of partitions, read here as at most 1.5× the cost at P = 1) is judged on the cost per mod.
Every run checks that the read returned every key written, once (count, sum, sum of squares).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

import changestream
from changestream import DataChangeRecord
from changestream.embedded.database import store_of
from checks import expect, goal, goals, key_checksum

#: "Flat": at most this multiple of the cost at one partition.
FLAT = 1.5


def run(partitions: int, transactions: int, tmp: str) -> dict[str, float]:
    keys = 100_000
    rng = random.Random(partitions)
    with changestream.open(os.path.join(tmp, f"p{partitions}.db")) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl(
            [
                "CREATE TABLE T (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)",
                "CREATE CHANGE STREAM S FOR T",
            ]
        )
        for index in range(1, partitions):
            db.split_at("T", (index * keys // partitions,))
        start = store_of(db).last_commit_ts()
        batches = [
            [[k, "value"] for k in rng.sample(range(keys), 100)] for _ in range(transactions)
        ]
        began = time.perf_counter()
        for rows in batches:
            with db.transaction() as tx:
                tx.insert_or_update("T", ["K", "V"], rows)
        write_s = time.perf_counter() - began
        end = store_of(db).last_commit_ts()
        live = db.partitions("S")
        assert len(live) == partitions
        began = time.perf_counter()
        records = 0
        keys_read: list[int] = []
        for partition in live:
            for record in db.read_change_stream("S", start, end, partition.token, 10_000):
                if isinstance(record, DataChangeRecord):
                    records += 1
                    keys_read.extend(mod.keys["K"] for mod in record.mods)
        read_s = time.perf_counter() - began
    mods = transactions * 100
    expect(
        f"keys read at {partitions} partitions (count, sum, sum of squares)",
        key_checksum(keys_read),
        key_checksum(k for rows in batches for k, _ in rows),
    )
    return {
        "partitions": partitions,
        "records": records,
        "records_per_transaction": round(records / transactions, 2),
        "write_mods_per_s": round(mods / write_s),
        "write_us_per_record": round(write_s / records * 1e6, 2),
        "write_us_per_mod": round(write_s / mods * 1e6, 3),
        "write_us_per_transaction": round(write_s / transactions * 1e6, 1),
        "read_mods_per_s": round(mods / read_s),
        "read_us_per_record": round(read_s / records * 1e6, 2),
        "read_us_per_mod": round(read_s / mods * 1e6, 3),
        "read_us_per_transaction": round(read_s / transactions * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--partitions", default="1,10,100,1000")
    args = parser.parse_args()
    counts = [int(p) for p in args.partitions.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run(p, args.transactions, tmp) for p in counts]
    base = runs[0]
    for entry in runs:
        for side in ("write", "read"):
            for unit in ("record", "mod", "transaction"):
                cost = f"{side}_us_per_{unit}"
                entry[f"{cost}_over_1"] = round(entry[cost] / base[cost], 2)
    result = {"benchmark": "partition_scale", "runs": runs}
    source = f"issue 4 (flat, read as <= {FLAT}x of 1 partition)"
    goals(
        result,
        [
            goal(
                f"{side}_us_per_mod_over_1 at {entry['partitions']} partitions",
                entry[f"{side}_us_per_mod_over_1"],
                "<=",
                FLAT,
                source,
            )
            for entry in runs[1:]
            for side in ("write", "read")
        ],
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
