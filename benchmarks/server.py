"""Server benchmark: the remote database against the embedded one, measured in the same run.

Runs ``changestream serve`` in a subprocess on a copy-free second database file and compares:

- commit throughput of 100-row transactions (``connect(url)`` vs ``open(path)``);
- streaming read throughput of one partition through the read function, in records/s, for
  records of 100 mods (the transactions above) and of 1 mod;
- commit-to-reader latency (commit timestamp to the record reaching the reader) with 1 and 32
  concurrent readers tailing the partition, p50 and p99, remote and embedded.

Every read checks its record count against the transactions committed, and every latency run
that each reader received each commit once. Goals: 32 readers p99 ≤ 15 ms embedded and ≤ 25 ms
remote (issue 21); remote streaming reads ≥ 0.5 of embedded (issue 9).

Prints one JSON line; ratios are remote over embedded (throughput: higher is better).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import httpx

import changestream
from changestream import DataChangeRecord
from changestream.clock import now_us, parse_ts
from checks import expect, goal, goals

STREAM = "OrdersStream"
DDL = [
    "CREATE TABLE Orders (OrderId INT64 NOT NULL, Customer STRING(MAX), Amount INT64, "
    "Note STRING(MAX)) PRIMARY KEY (OrderId)",
    f"CREATE CHANGE STREAM {STREAM} FOR Orders",
]
COLUMNS = ["OrderId", "Customer", "Amount", "Note"]


def rows(first: int, count: int) -> list[list[object]]:
    return [[first + i, f"customer-{i % 97}", i * 7, "standard delivery"] for i in range(count)]


def commit_rate(
    db: changestream.Database, transactions: int, size: int, first: int = 0
) -> tuple[float, int]:
    """(transactions per second, last commit timestamp) committing ``size``-row transactions."""
    started = time.perf_counter()
    for t in range(transactions):
        with db.transaction() as tx:
            tx.insert("Orders", COLUMNS, rows(first + t * size, size))
    elapsed = time.perf_counter() - started
    assert tx.commit_timestamp is not None
    return transactions / elapsed, parse_ts(tx.commit_timestamp)


def read_rate(db: changestream.Database, start: int, end: int, token: str) -> tuple[float, int]:
    """(records per second, records) reading one partition from ``start`` to ``end``."""
    started = time.perf_counter()
    count = 0
    for record in db.read_change_stream(STREAM, start, end, token, 10_000):
        count += isinstance(record, DataChangeRecord)
    return count / (time.perf_counter() - started), count


def latencies(
    open_reader: Callable[[], changestream.Database],
    writer: changestream.Database,
    readers: int,
    commits: int,
    rate: float,
    first_key: int,
    own_readers: bool,
) -> list[float]:
    """Milliseconds from each commit to each reader receiving its record; fails unless every
    reader received every commit once."""
    token = writer.partitions(STREAM)[0].token
    start = now_us()
    samples: list[float] = []
    received: list[int] = []
    lock = threading.Lock()
    ready = threading.Barrier(readers + 1)

    def read() -> None:
        db = open_reader()
        seen = 0
        stream = db.read_change_stream(STREAM, start, None, token, 1000)
        ready.wait()
        for record in stream:
            if isinstance(record, DataChangeRecord):
                delay = (now_us() - record.commit_timestamp) / 1000
                with lock:
                    samples.append(delay)
                    received.extend(mod.keys["OrderId"] for mod in record.mods)
                seen += 1
                if seen == commits:
                    break
        stream.close()  # type: ignore[attr-defined]
        if own_readers:
            db.close()

    threads = [threading.Thread(target=read, daemon=True) for _ in range(readers)]
    for thread in threads:
        thread.start()
    ready.wait()
    for i in range(commits):
        with writer.transaction() as tx:
            tx.insert("Orders", COLUMNS, rows(first_key + i, 1))
        time.sleep(1 / rate)
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    expected = sorted(k for k in range(first_key, first_key + commits) for _ in range(readers))
    expect(f"keys {readers} readers received", sorted(received), expected)
    return samples


def percentile(samples: list[float], q: float) -> float:
    return round(statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1], 2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transactions", type=int, default=300, help="100-row transactions")
    parser.add_argument("--small", type=int, default=5000, help="1-row transactions to read")
    parser.add_argument("--latency-commits", type=int, default=150)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        local_path, served_path = os.path.join(tmp, "local.db"), os.path.join(tmp, "served.db")
        for path in (local_path, served_path):
            with changestream.open(path) as db:
                db.execute_ddl(DDL)
                # One partition throughout: the numbers compare reads of the same records.
                db.set_split_policy(enabled=False)
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "changestream",
                "serve",
                served_path,
                "--port",
                str(port),
                "--insecure-no-auth",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}/served"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            local = changestream.open(local_path)
            # Loads the served file directly (SQLite allows it), so loading is not measured.
            served = changestream.open(served_path)
            remote = changestream.connect(url)
            dbs: dict[str, changestream.Database] = {"embedded": local, "remote": remote}
            created = {
                name: min(p.start_timestamp for p in db.partition_history(STREAM))  # type: ignore[attr-defined]
                for name, db in dbs.items()
            }
            tokens = {name: db.partitions(STREAM)[0].token for name, db in dbs.items()}
            result: dict[str, object] = {"benchmark": "server"}
            rates, ends = {}, {}
            for name, db in dbs.items():
                rates[name], ends[name] = commit_rate(db, args.transactions, 100)
            result |= {
                "commit_100_rows_embedded_tx_per_s": round(rates["embedded"], 1),
                "commit_100_rows_remote_tx_per_s": round(rates["remote"], 1),
                "commit_ratio": round(rates["remote"] / rates["embedded"], 3),
            }
            reads = {n: read_rate(db, created[n], ends[n], tokens[n]) for n, db in dbs.items()}
            for name, (_, count) in reads.items():
                expect(f"{name} 100-mod records read", count, args.transactions)
            small_ends = {
                name: commit_rate(db, args.small, 1, 10_000_000)[1]
                for name, db in (("embedded", local), ("remote", served))
            }
            small = {
                n: read_rate(db, ends[n] + 1, small_ends[n], tokens[n]) for n, db in dbs.items()
            }
            for name, (_, count) in small.items():
                expect(f"{name} 1-mod records read", count, args.small)
            for label, found in (("100_mod", reads), ("1_mod", small)):
                result |= {
                    f"read_{label}_records_embedded_per_s": round(found["embedded"][0]),
                    f"read_{label}_records_remote_per_s": round(found["remote"][0]),
                    f"read_{label}_ratio": round(found["remote"][0] / found["embedded"][0], 3),
                }
            key = 20_000_000
            for readers in (1, 32):
                for name, writer, opener, own in (
                    ("embedded", local, lambda: local, False),
                    ("remote", served, lambda: changestream.connect(url), True),
                ):
                    samples = latencies(opener, writer, readers, args.latency_commits, 50, key, own)
                    key += args.latency_commits
                    result[f"latency_ms_{name}_{readers}_readers_p50"] = percentile(samples, 50)
                    result[f"latency_ms_{name}_{readers}_readers_p99"] = percentile(samples, 99)
            for db in (local, served, remote):
                db.close()
            goals(
                result,
                [
                    goal(
                        f"latency_ms_{name}_32_readers_p99",
                        result[f"latency_ms_{name}_32_readers_p99"],
                        "<=",
                        limit,
                        "issue 21",
                    )
                    for name, limit in (("embedded", 15), ("remote", 25))
                ]
                + [
                    goal(f"read_{label}_ratio", result[f"read_{label}_ratio"], ">=", 0.5, "issue 9")
                    for label in ("100_mod", "1_mod")
                ],
            )
            print(json.dumps(result))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)


if __name__ == "__main__":
    main()
