"""Console benchmark: the web console's data endpoints against the plain ``partitions`` call.

Builds a database with ``--partitions`` live partitions (splits by hand, so the lineage holds
about twice as many), ``--leases`` Stream Client leases in one consumer group, and writes spread
over every partition; serves it with ``changestream serve`` in a subprocess; then asks, in turn,
``partitions`` (the baseline), ``lineage`` (the whole life), ``consumer_status`` and
``overview`` ``--requests`` times each, and reports each one's p50 and p99 latency and its p99
over the baseline's.

Checks that fail the run: the lineage lists every partition of the stream's history, each with
the record count the read function gives for it (read partition by partition, so a lost record
shows); the consumer status lists every lease; the overview counts the live partitions.
Goal (issue 23): each console endpoint p99 ≤ 100 ms with 1,000 partitions and 100 leases.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

import changestream
from changestream.client.lease_table import PARTITION_LEASE
from changestream.clock import now_us
from changestream.store.models import Lease
from changestream.streams.lineage import walk_partitions
from checks import expect, goal, goals

STREAM = "Everything"
CONSUMER = "dashboard"
ENDPOINTS = {
    "partitions": "/streams/Everything/partitions",
    "lineage": "/streams/Everything/lineage",
    "consumer_status": "/streams/Everything/consumer_status",
    "overview": "/overview",
}


def build(path: str, partitions: int, leases: int, transactions: int) -> None:
    """The database: ``partitions`` live partitions over Orders' keys, ``leases`` leases, and
    ``transactions`` transactions of 50 random keys."""
    keys = partitions * 10
    with changestream.open(path) as db:
        db.execute_ddl(
            [
                "CREATE TABLE Orders (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)",
                f"CREATE CHANGE STREAM {STREAM} FOR ALL",
            ]
        )
        db.set_split_policy(enabled=False)  # the partitions made here, and no others
        rng = random.Random(23)
        for boundary in range(10, keys, 10):
            db.split_at("Orders", [boundary])
            if boundary % 500 == 0:
                with db.transaction() as txn:
                    txn.insert_or_update("Orders", ["Id", "Note"], [[boundary, "split"]])
        for _ in range(transactions):
            with db.transaction() as txn:
                chosen = sorted(set(rng.randrange(keys) for _ in range(50)))
                txn.insert_or_update("Orders", ["Id", "Note"], [[k, "x"] for k in chosen])
        table = db.leases(STREAM, CONSUMER)
        started = now_us() - 10_000_000
        for number, partition in enumerate(db.partitions(STREAM)[:leases]):
            owner = f"worker-{number % 4}"
            table.insert_if_absent(
                Lease(PARTITION_LEASE, partition.token, "", 0, owner, None, (), started)
            )


def expected_counts(path: str) -> dict[str, int]:
    """Records per partition, as the read function gives them."""
    with changestream.open(path) as db:
        created = db.partition_history(STREAM)[0].start_timestamp
        counts: dict[str, int] = {}
        for partition in walk_partitions(db, STREAM, created, now_us()):
            counts[partition.token] = sum(
                r.record_type == "data_change_record" for r in partition.records()
            )
        return counts


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def latencies(client: httpx.Client, url: str, requests: int) -> dict[str, list[float]]:
    """Milliseconds per request of each endpoint, asked in turn so noise hits all alike."""
    taken: dict[str, list[float]] = {name: [] for name in ENDPOINTS}
    for _ in range(requests):
        for name, path in ENDPOINTS.items():
            started = time.perf_counter()
            client.get(url + path).raise_for_status()
            taken[name].append((time.perf_counter() - started) * 1000)
    return taken


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000, help="live partitions")
    parser.add_argument("--leases", type=int, default=100, help="leases in one consumer group")
    parser.add_argument("--transactions", type=int, default=200, help="50-row transactions")
    parser.add_argument("--requests", type=int, default=200, help="requests per endpoint")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "console.db")
        build(path, args.partitions, args.leases, args.transactions)
        counts = expected_counts(path)
        port = free_port()
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "changestream", "serve", path),
                *("--port", str(port), "--insecure-no-auth"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}/v1/databases/console"
        try:
            with httpx.Client(timeout=30) as client:
                deadline = time.monotonic() + 30
                while True:
                    try:
                        client.get(f"http://127.0.0.1:{port}/healthz").raise_for_status()
                        break
                    except httpx.HTTPError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)
                lineage = client.get(url + ENDPOINTS["lineage"]).json()
                expect("lineage partitions", lineage["total"], len(counts))
                expect(
                    "partitions whose lineage record count differs from the read function's",
                    [
                        p["token"]
                        for p in lineage["partitions"]
                        if p["record_count"] != counts.get(p["token"])
                    ],
                    [],
                )
                (group,) = client.get(url + ENDPOINTS["consumer_status"]).json()["consumers"]
                expect("leases listed", len(group["leases"]), min(args.leases, args.partitions))
                overview = client.get(url + ENDPOINTS["overview"]).json()
                expect(
                    "live partitions", overview["streams"][0]["live_partitions"], args.partitions
                )
                taken = latencies(client, url, args.requests)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    result: dict[str, object] = {
        "benchmark": "console",
        "partitions": args.partitions,
        "lineage_partitions": len(counts),
        "leases": args.leases,
        "requests": args.requests,
    }
    for name, values in taken.items():
        result[f"{name}_p50_ms"] = round(statistics.median(values), 2)
        result[f"{name}_p99_ms"] = round(p99(values), 2)
    for name in ("lineage", "consumer_status", "overview"):
        result[f"{name}_p99_over_partitions"] = round(
            p99(taken[name]) / p99(taken["partitions"]), 2
        )
    goals(
        result,
        [
            goal(f"{name}_p99_ms", result[f"{name}_p99_ms"], "<=", 100, "issue 23")
            for name in ("lineage", "consumer_status", "overview")
        ],
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
