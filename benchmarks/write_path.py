"""Write-path benchmark: mods/s committing 100-row transactions.

(a) raw sqlite3 inserts of the same rows, (b) through the Database with no change stream,
(c) with one change stream tracking the table; in both durability modes. After each timed run
(not timed) the table must hold exactly the keys written and, for (c), the change stream must
return each of them once. Goals (issue 21): c ≥ 150k mods/s and c/b ≥ 0.67 in both modes.
Prints one JSON line.

The machine is noisy: a, b and c run in turns, ``--repeats`` rounds of the three, and the
fastest run of each counts, so a slow spell falls on all three rather than on one of them.
Every run's rate is in the line too (``*_runs``).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable

import changestream
from changestream.embedded.database import store_of
from checks import expect, goal, goals, key_checksum

ROWS_PER_TXN = 100
DDL = (
    "CREATE TABLE Orders (OrderId INT64 NOT NULL, Customer STRING(MAX), Amount INT64, "
    "Note STRING(MAX)) PRIMARY KEY (OrderId)"
)
COLUMNS = ["OrderId", "Customer", "Amount", "Note"]


def batches(transactions: int) -> list[list[list[object]]]:
    return [
        [
            [t * ROWS_PER_TXN + i, f"customer-{i % 97}", i * 7, "standard delivery"]
            for i in range(ROWS_PER_TXN)
        ]
        for t in range(transactions)
    ]


def raw_sqlite(path: str, data: list[list[list[object]]], synchronous: str) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(
        "CREATE TABLE Orders (OrderId INTEGER, Customer TEXT, Amount INTEGER, Note TEXT, "
        "PRIMARY KEY (OrderId))"
    )
    started = time.perf_counter()
    for rows in data:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO Orders VALUES (?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def through_database(
    path: str, data: list[list[list[object]]], durability: str, stream: bool
) -> float:
    with changestream.open(path, durability=durability) as db:
        db.execute_ddl(DDL)
        if stream:
            db.execute_ddl("CREATE CHANGE STREAM OrdersStream FOR Orders")
        created = store_of(db).last_commit_ts()
        started = time.perf_counter()
        for rows in data:
            with db.transaction() as tx:
                tx.insert("Orders", COLUMNS, rows)
        elapsed = time.perf_counter() - started
        written = key_checksum(row[0] for rows in data for row in rows)
        stored = db.execute_sql("SELECT OrderId FROM Orders")
        expect("keys in the table", key_checksum(row[0] for row in stored), written)
        if stream:
            end = store_of(db).last_commit_ts()
            (partition,) = db.partitions("OrdersStream")
            records = db.read_change_stream("OrdersStream", created, end, partition.token)
            keys = (
                mod.keys["OrderId"]
                for record in records
                if isinstance(record, changestream.DataChangeRecord)
                for mod in record.mods
            )
            expect("keys the change stream returned", key_checksum(keys), written)
        return elapsed


def run_once(run: Callable[[str], float], mods: int) -> float:
    """Mods/s of one run of ``run`` on a fresh file."""
    with tempfile.TemporaryDirectory() as tmp:
        return mods / run(os.path.join(tmp, "bench.db"))


def rates_in_turns(
    runs: dict[str, Callable[[str], float]], mods: int, rounds: int
) -> dict[str, list[float]]:
    """Each run's rates, ``rounds`` times, each round running every one of them once."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            rates[name].append(run_once(run, mods))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transactions", type=int, default=2000)
    parser.add_argument(
        "--repeats", type=int, default=5, help="rounds of a, b and c; the fastest of each counts"
    )
    args = parser.parse_args()
    data = batches(args.transactions)
    mods = args.transactions * ROWS_PER_TXN
    result: dict[str, object] = {
        "benchmark": "write_path",
        "rows_per_transaction": ROWS_PER_TXN,
        "transactions": args.transactions,
    }
    targets = []
    for durability, synchronous in (("normal", "NORMAL"), ("full", "FULL")):
        runs: dict[str, Callable[[str], float]] = {
            "a": lambda p, s=synchronous: raw_sqlite(p, data, s),
            "b": lambda p, d=durability: through_database(p, data, d, False),
            "c": lambda p, d=durability: through_database(p, data, d, True),
        }
        rates = rates_in_turns(runs, mods, args.repeats)
        a, b, c = (max(rates[name]) for name in ("a", "b", "c"))
        result[durability] = {
            "a_raw_sqlite_mods_per_s": round(a),
            "b_database_no_stream_mods_per_s": round(b),
            "c_database_one_stream_mods_per_s": round(c),
            "b_over_a": round(b / a, 3),
            "c_over_b": round(c / b, 3),
            **{f"{name}_runs": [round(rate) for rate in rates[name]] for name in rates},
        }
        targets += [
            goal(
                f"{durability} c_database_one_stream_mods_per_s",
                round(c),
                ">=",
                150_000,
                "issue 21",
            ),
            goal(f"{durability} c_over_b", round(c / b, 3), ">=", 0.67, "issue 21"),
        ]
    goals(result, targets)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
