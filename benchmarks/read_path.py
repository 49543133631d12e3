"""Read-path benchmark: records/s and mods/s reading one partition through the read function.

Loads ``--mods`` row inserts (``ROWS_PER_TXN`` per transaction) into a table tracked by one
change stream, then reads the single partition from the stream's creation to the last commit:
(a) through ``db.read_change_stream(...)``, (b) as a baseline measured in the same run, a raw
sqlite3 scan of the same ``_cs_log`` rows in the same order plus ``orjson.loads`` of each
payload (and the mods' dicts, when stored in the compact form). Every timed run checks its
(records, mods) counts; once, untimed, the keys the read function returned are checked against
the keys written. No goal is set in the issues for this path. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from typing import Any

import orjson

import changestream
from changestream.embedded.database import store_of
from checks import expect, goals, key_checksum

ROWS_PER_TXN = 100
STREAM = "OrdersStream"
DDL = (
    "CREATE TABLE Orders (OrderId INT64 NOT NULL, Customer STRING(MAX), Amount INT64, "
    "Note STRING(MAX)) PRIMARY KEY (OrderId)"
)
COLUMNS = ["OrderId", "Customer", "Amount", "Note"]


def load(db: changestream.EmbeddedDatabase, transactions: int) -> tuple[int, float]:
    """Create the table and stream and commit the transactions; returns (created, seconds)."""
    db.execute_ddl(DDL)
    created = db.execute_ddl(f"CREATE CHANGE STREAM {STREAM} FOR Orders")
    started = time.perf_counter()
    for t in range(transactions):
        rows = [
            [t * ROWS_PER_TXN + i, f"customer-{i % 97}", i * 7, "standard delivery"]
            for i in range(ROWS_PER_TXN)
        ]
        with db.transaction() as tx:
            tx.insert("Orders", COLUMNS, rows)
    return created, time.perf_counter() - started


def read_function(
    db: changestream.EmbeddedDatabase, created: int, end: int, token: str
) -> tuple[int, int]:
    """(records, mods) read through the read function."""
    records = mods = 0
    for record in db.read_change_stream(STREAM, created, end, token, 10_000):
        if isinstance(record, changestream.DataChangeRecord):
            records += 1
            mods += len(record.mods)
    return records, mods


def expand(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The seed's mods of a record stored in the compact form (``mod_columns`` and
    ``mod_values``), as a reader of the log would have to build them."""
    keys, new, old = data["mod_columns"]
    first, second = len(keys), len(keys) + len(new)
    return [
        {
            "keys": dict(zip(keys, row[:first], strict=True)),
            "new_values": dict(zip(new, row[first:second], strict=True)),
            "old_values": dict(zip(old, row[second:], strict=True)),
        }
        for row in data["mod_values"]
    ]


def raw_scan(path: str, stream_id: int, split_id: int, end: int) -> tuple[int, int]:
    """(records, mods) from a raw scan of the same log rows, decoding every payload."""
    conn = sqlite3.connect(path)
    try:
        records = mods = 0
        cursor = conn.execute(
            "SELECT commit_ts, payload FROM _cs_log WHERE stream_id = ? AND split_id = ?"
            " AND commit_ts <= ? ORDER BY commit_ts, record_sequence",
            (stream_id, split_id, end),
        )
        for _, payload in cursor:
            data = orjson.loads(payload)
            records += 1
            mods += len(data["mods"] if "mods" in data else expand(data))
        return records, mods
    finally:
        conn.close()


def timed(run: Callable[[], tuple[int, int]], expected: tuple[int, int]) -> float:
    started = time.perf_counter()
    got = run()
    elapsed = time.perf_counter() - started
    expect("(records, mods) read", got, expected)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mods", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    transactions = max(args.mods // ROWS_PER_TXN, 1)
    mods = transactions * ROWS_PER_TXN
    expected = (transactions, mods)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        with changestream.open(path) as db:
            created, load_s = load(db, transactions)
            end = store_of(db).last_commit_ts()
            (partition,) = db.partitions(STREAM)
            conn = store_of(db).connection()
            (stream_id,) = conn.execute(
                "SELECT stream_id FROM _cs_streams WHERE name = ?", (STREAM,)
            ).fetchone()
            (split_id,) = conn.execute(
                "SELECT split_id FROM _cs_splits WHERE end_ts IS NULL"
            ).fetchone()
            function_s: list[float] = []
            baseline_s: list[float] = []
            for _ in range(args.repeats):
                baseline_s.append(timed(lambda: raw_scan(path, stream_id, split_id, end), expected))
                function_s.append(
                    timed(lambda: read_function(db, created, end, partition.token), expected)
                )
            keys = (
                mod.keys["OrderId"]
                for record in db.read_change_stream(STREAM, created, end, partition.token)
                if isinstance(record, changestream.DataChangeRecord)
                for mod in record.mods
            )
            expect("keys the read function returned", key_checksum(keys), key_checksum(range(mods)))
    a, b = min(function_s), min(baseline_s)
    result = {
        "benchmark": "read_path",
        "rows_per_transaction": ROWS_PER_TXN,
        "transactions": transactions,
        "records": transactions,
        "mods": mods,
        "load_s": round(load_s, 3),
        "load_mods_per_s": round(mods / load_s),
        "read_function_s": round(a, 3),
        "read_function_records_per_s": round(transactions / a),
        "read_function_mods_per_s": round(mods / a),
        "baseline_raw_scan_s": round(b, 3),
        "baseline_records_per_s": round(transactions / b),
        "baseline_mods_per_s": round(mods / b),
        "read_function_over_baseline": round(b / a, 3),
    }
    goals(result, [])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
