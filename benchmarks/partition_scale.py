"""Partition scale: write and read throughput with 1, 10, 100 and 1,000 live partitions.

The same workload each time — 100-row transactions over random keys of one table — against a
table split into P partitions; then every partition is read through the read function. Prints
one JSON line with mods/s and µs per record for each P, and ratios against P = 1 (the goal: the
cost per record stays flat as P grows).
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
        start = db.last_commit_ts()
        batches = [
            [[k, "value"] for k in rng.sample(range(keys), 100)] for _ in range(transactions)
        ]
        began = time.perf_counter()
        for rows in batches:
            with db.transaction() as tx:
                tx.insert_or_update("T", ["K", "V"], rows)
        write_s = time.perf_counter() - began
        end = db.last_commit_ts()
        live = db.partitions("S")
        assert len(live) == partitions
        began = time.perf_counter()
        records = mods = 0
        for partition in live:
            for record in db.read_change_stream("S", start, end, partition.token, 10_000):
                if isinstance(record, DataChangeRecord):
                    records += 1
                    mods += len(record.mods)
        read_s = time.perf_counter() - began
    assert mods == transactions * 100
    return {
        "partitions": partitions,
        "records": records,
        "write_mods_per_s": round(mods / write_s),
        "write_us_per_record": round(write_s / records * 1e6, 2),
        "read_mods_per_s": round(mods / read_s),
        "read_us_per_record": round(read_s / records * 1e6, 2),
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
        entry["write_us_per_record_over_1"] = round(
            entry["write_us_per_record"] / base["write_us_per_record"], 2
        )
        entry["read_us_per_record_over_1"] = round(
            entry["read_us_per_record"] / base["read_us_per_record"], 2
        )
    print(json.dumps({"benchmark": "partition_scale", "runs": runs}))


if __name__ == "__main__":
    main()
