"""A source: how fast changes get from a real PostgreSQL 15 (``--source postgres``, the
default) or MariaDB (``--source mysql``) into the change log.

One run starts its own server in a temporary directory (PostgreSQL: ``initdb``, ``fsync =
off``; MariaDB: ``mariadb-install-db``, no binlog sync; our database file keeps its usual
settings), and measures, as a user runs it (``changestream sources run`` in a subprocess):

- the source's write rate alone: 100-row transactions from one client (the baseline);
- draining a backlog: the connector started after the backlog was written, until caught up
  (changes/s), with its peak RSS;
- the running connector's CPU when nothing is written;
- commit → our log latency of single-row transactions at 1,000 tx/s (p50/p99), from the
  writer's clock after its commit returned to our commit timestamp (same machine clock);
- steady state: the connector running while one client writes 100-row transactions as fast
  as it can (changes/s from the first write until the last is in our log).

Every phase checks, by reading the change stream, that each change arrived exactly once.
Goals (issue 19): ≥ 50k changes/s draining a backlog, p99 ≤ 20 ms at 1,000 tx/s, < 2% of a
core idle, < 200 MB RSS. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import mariadb_support, postgres_support  # noqa: E402

import changestream  # noqa: E402
from changestream.clock import now_us  # noqa: E402
from changestream.sources import add_source, describe_source  # noqa: E402
from checks import expect, goal, goals  # noqa: E402

TABLE = {
    "postgres": "CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL, qty integer, "
    "price numeric(12, 2), seen timestamptz DEFAULT now())",
    "mysql": "CREATE TABLE items (id bigint PRIMARY KEY, name varchar(100) NOT NULL, qty int, "
    "price decimal(12, 2), seen timestamp(6) DEFAULT CURRENT_TIMESTAMP(6))",
}
#: The mirror of ``items`` of each kind of source.
MIRROR = {"postgres": "public_items", "mysql": "bench_items"}
ROWS_PER_TX = 100


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Source:
    """The benchmark's source database and one client writing to it."""

    def __init__(self, kind: str, dsn: str, conn: Any) -> None:
        self.kind = kind
        self.dsn = dsn
        self.conn = conn
        self.next_id = 0

    def write_batches(self, transactions: int) -> float:
        """Commit ``transactions`` of 100 inserted rows each; returns the seconds it took."""
        started = time.perf_counter()
        with self.conn.cursor() as cur:
            for _ in range(transactions):
                first = self.next_id
                self.next_id += ROWS_PER_TX
                if self.kind == "mysql":
                    rows = ", ".join(
                        f"({g}, 'item {g}', {g % 100}, {g % 1000 / 10.0})"
                        for g in range(first, self.next_id)
                    )
                    cur.execute(f"INSERT INTO items (id, name, qty, price) VALUES {rows}")
                else:
                    cur.execute(
                        "INSERT INTO items (id, name, qty, price) "
                        "SELECT g, 'item ' || g, g %% 100, (g %% 1000) / 10.0 "
                        "FROM generate_series(%s, %s) g",
                        (first, self.next_id - 1),
                    )
                self.conn.commit()
        return time.perf_counter() - started

    def write_paced(self, rate: float, seconds: float) -> dict[int, int]:
        """Single-row transactions at ``rate`` per second; id → wall clock (µs) at commit."""
        committed: dict[int, int] = {}
        started = time.monotonic()
        with self.conn.cursor() as cur:
            while time.monotonic() - started < seconds:
                key = self.next_id
                self.next_id += 1
                cur.execute("INSERT INTO items (id, name) VALUES (%s, 'paced')", (key,))
                self.conn.commit()
                committed[key] = now_us()
                pause = started + len(committed) / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
        return committed

    def count(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM items")
            (count,) = cur.fetchone()
        self.conn.commit()
        return int(count)


def connector(path: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "changestream", "sources", "run", "Items", "--db", path, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def caught_up(path: str) -> tuple[float, float]:
    """Run the connector until it has caught up; returns the seconds it took and its peak RSS
    (MB, from its own rusage: the source server, also a child here, is not counted)."""
    started = time.perf_counter()
    process = connector(path, "--until-caught-up")
    assert process.stderr is not None
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"the connector failed: {err.decode()[-2000:]}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024


def captured(db: changestream.EmbeddedDatabase, since: int) -> dict[int, int]:
    """Each inserted id in the change stream committed after ``since`` → our commit
    timestamp; a repeated id fails the check."""
    seen: dict[int, int] = {}
    repeated = 0
    for partition in changestream.walk_partitions(db, "Items", since, now_us()):
        for record in changestream.data_changes(partition.records()):
            for mod in record.mods:
                key = int(mod.keys["id"])
                repeated += key in seen
                seen[key] = record.commit_timestamp
    expect("ids read more than once from the change stream", repeated, 0)
    return seen


def mirror_count(db: changestream.EmbeddedDatabase, kind: str) -> int:
    ((count,),) = list(db.execute_sql(f"SELECT COUNT(*) FROM {MIRROR[kind]}"))
    return int(count)


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"check failed: {what} within {timeout:.0f} s")
        time.sleep(0.05)


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
    }


def measure(args: argparse.Namespace, work: Path, source: Source) -> dict[str, Any]:
    kind = source.kind
    path = str(work / "mirror.db")
    result: dict[str, Any] = {"rows_per_transaction": ROWS_PER_TX}

    seconds = source.write_batches(args.write_transactions)
    result["source_write_changes_per_s"] = round(args.write_transactions * ROWS_PER_TX / seconds)

    with changestream.open(path) as db:
        add_source(db, "Items", **{kind: source.dsn})
    copy_seconds, _ = caught_up(path)
    copied = source.count()
    result["initial_copy"] = {"rows": copied, "rows_per_s": round(copied / copy_seconds)}

    backlog_tx = args.backlog_changes // ROWS_PER_TX
    since = now_us()
    source.write_batches(backlog_tx)
    drain_seconds, peak_mb = caught_up(path)
    with changestream.open(path) as db:
        got = captured(db, since)
        expect("backlog changes in the change stream", len(got), backlog_tx * ROWS_PER_TX)
        expect("mirror rows after the backlog", mirror_count(db, kind), source.count())
    result["backlog"] = {
        "changes": backlog_tx * ROWS_PER_TX,
        "changes_per_s": round(backlog_tx * ROWS_PER_TX / drain_seconds),
        "connector_peak_rss_mb": round(peak_mb, 1),
    }

    running = connector(path)
    try:
        with changestream.open(path) as db:
            wait_until(lambda: describe_source(db, "Items")["state"] == "streaming", 60, "start")
            time.sleep(1.0)
            before_cpu = cpu_seconds(running.pid)
            time.sleep(args.idle_seconds)
            idle = (cpu_seconds(running.pid) - before_cpu) / args.idle_seconds
            result["idle_connector_cpu_percent_of_core"] = round(idle * 100, 2)

            since = now_us()
            committed = source.write_paced(1000, args.latency_seconds)
            total = source.count()
            wait_until(lambda: mirror_count(db, kind) == total, 120, "the paced writes arrived")
            got = captured(db, since)
            expect("paced ids in the change stream", sorted(got), sorted(committed))
            latencies = [(got[key] - at) / 1000 for key, at in committed.items()]
            result["at_1000_tx_per_s"] = {
                "tx": len(committed),
                "tx_per_s": round(len(committed) / args.latency_seconds),
                **percentiles(latencies),
            }
            since = now_us()
            started = time.perf_counter()
            source.write_batches(args.steady_transactions)
            total = source.count()
            wait_until(lambda: mirror_count(db, kind) == total, 600, "the steady writes arrived")
            steady_seconds = time.perf_counter() - started
            got = captured(db, since)
            expect("steady changes in the change stream", len(got), args.steady_transactions * 100)
            result["steady"] = {
                "changes": args.steady_transactions * ROWS_PER_TX,
                "changes_per_s": round(args.steady_transactions * ROWS_PER_TX / steady_seconds),
            }

    finally:
        running.send_signal(signal.SIGTERM)
        running.wait(timeout=60)
    return result


def measure_postgres(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import psycopg2  # type: ignore[import-untyped]

    server = postgres_support.start_server()
    try:
        dsn = server.create_database("bench")
        server.sql(TABLE["postgres"], "bench")
        return measure(args, work, Source("postgres", dsn, psycopg2.connect(dsn)))
    finally:
        postgres_support.stop_server(server)


def measure_mariadb(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    server = mariadb_support.start_server()
    try:
        dsn = server.create_database("bench")
        server.sql(TABLE["mysql"], "bench")
        conn = server.connect("bench")
        conn.autocommit(False)
        return measure(args, work, Source("mysql", dsn, conn))
    finally:
        mariadb_support.stop_server(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write-transactions", type=int, default=1000)
    parser.add_argument("--backlog-changes", type=int, default=300_000)
    parser.add_argument("--steady-transactions", type=int, default=1000)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--source", choices=["postgres", "mysql"], default="postgres")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        if args.source == "mysql":
            result = {"benchmark": "sources", "source": "mariadb, binlog not synced"}
            result.update(measure_mariadb(args, Path(work)))
        else:
            result = {"benchmark": "sources", "source": "postgresql 15, fsync off"}
            result.update(measure_postgres(args, Path(work)))
    backlog, paced = result["backlog"], result["at_1000_tx_per_s"]
    idle = result["idle_connector_cpu_percent_of_core"]
    goals(
        result,
        [
            goal("backlog changes_per_s", backlog["changes_per_s"], ">=", 50_000, "issue 19"),
            goal("at_1000_tx_per_s p99_ms", paced["p99_ms"], "<=", 20, "issue 19"),
            goal("idle_connector_cpu_percent_of_core", idle, "<", 2, "issue 19"),
            goal("connector_peak_rss_mb", backlog["connector_peak_rss_mb"], "<", 200, "issue 19"),
        ],
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
