"""Tail latency: commit → reader in another process, and what an idle reader costs.

A reader process tails the single partition of a change stream (end_timestamp NULL) and logs
when each record arrives. This process commits single-row transactions at 1,000 tx/s and then
as fast as it can. Latency is arrival time minus commit timestamp. The baseline, measured in
the same run, is a reader that spins on SQLite's ``PRAGMA data_version`` and reads the newest
log row itself: the floor for any reader of the same file. Every phase checks that the reader
received exactly the commits made, each once. Goals (issue 21): p99 ≤ 2 ms at 1,000 tx/s and an
idle reader under 2% of a core. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import changestream
from changestream.clock import parse_ts
from changestream.embedded.database import store_of
from checks import expect, goal, goals

READER = """
import sys, time, sqlite3
import changestream
from changestream.clock import now_us
path, token, start, out, mode = sys.argv[1:6]
with open(out, "w", buffering=1) as sink:
    sink.write("ready\\n")
    if mode == "baseline":
        conn = sqlite3.connect(path, isolation_level=None)
        version, last = None, int(start)
        while True:
            current = conn.execute("PRAGMA data_version").fetchone()[0]
            if current != version:
                version = current
                rows = conn.execute(
                    "SELECT commit_ts FROM _cs_log WHERE commit_ts > ? ORDER BY commit_ts", (last,)
                ).fetchall()
                arrived = now_us()
                for (ts,) in rows:
                    sink.write(f"{ts} {arrived}\\n")
                    last = ts
    else:
        db = changestream.open(path)
        for record in db.read_change_stream("S", int(start), None, token, 1000):
            if isinstance(record, changestream.DataChangeRecord):
                sink.write(f"{record.commit_timestamp} {now_us()}\\n")
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_reader(
    db: changestream.EmbeddedDatabase, path: str, out: Path, mode: str
) -> subprocess.Popen[bytes]:
    (partition,) = db.partitions("S")
    start = store_of(db).last_commit_ts()
    args = [sys.executable, "-c", READER, path, partition.token, str(start), str(out), mode]
    reader = subprocess.Popen(args)
    deadline = time.monotonic() + 30
    while (not out.exists() or not out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    return reader


def commit_at(db: changestream.EmbeddedDatabase, rate: float | None, seconds: float) -> list[int]:
    """Commits single-row transactions for ``seconds``; returns their commit timestamps."""
    committed: list[int] = []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        with db.transaction() as tx:
            tx.insert_or_update("T", ["K", "V"], [[len(committed) % 1000, len(committed)]])
        assert tx.commit_timestamp is not None
        committed.append(parse_ts(tx.commit_timestamp))
        if rate is not None:
            pause = started + len(committed) / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
    return committed


def arrivals(out: Path) -> list[tuple[int, int]]:
    """(commit timestamp, arrival) of every complete line the reader wrote."""
    lines = out.read_text().split("\n")[1:-1]
    return [(int(a), int(b)) for a, b in (line.split() for line in lines)]


def wait_for_all(out: Path, last: int, timeout: float = 30.0) -> None:
    """Until the reader logged the commit ``last`` (or ``timeout`` passed: the check fails)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and all(ts != last for ts, _ in arrivals(out)):
        time.sleep(0.05)


def latencies(out: Path, committed: list[int]) -> dict[str, float]:
    """Latency percentiles of the ``committed`` transactions, which must each arrive once."""
    wanted = set(committed)
    got = [(ts, at) for ts, at in arrivals(out) if committed[0] <= ts <= committed[-1]]
    expect("commit timestamps the reader received", sorted(ts for ts, _ in got), committed)
    values = [(at - ts) / 1000 for ts, at in got if ts in wanted]
    ordered = sorted(values)
    return {
        "records": len(values),
        "p50_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1], 3),
        "max_ms": round(ordered[-1], 3),
    }


def measure(mode: str, seconds: float, tmp: Path) -> dict[str, object]:
    path = str(tmp / f"{mode}.db")
    out = tmp / f"{mode}.out"
    with changestream.open(path) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl(
            [
                "CREATE TABLE T (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)",
                "CREATE CHANGE STREAM S FOR T",
            ]
        )
        reader = start_reader(db, path, out, mode)
        try:
            cpu_before = cpu_seconds(reader.pid)
            time.sleep(seconds)
            idle_cpu = (cpu_seconds(reader.pid) - cpu_before) / seconds
            paced = commit_at(db, 1000.0, seconds)
            full = commit_at(db, None, seconds)
            wait_for_all(out, full[-1])
        finally:
            reader.kill()
            reader.wait()
    return {
        "idle_reader_cpu_percent_of_core": round(idle_cpu * 100, 2),
        "at_1000_tx_per_s": {"tx": len(paced), **latencies(out, paced)},
        "full_speed": {
            "tx": len(full),
            "tx_per_s": round(len(full) / seconds),
            **latencies(out, full),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = {
            "benchmark": "tail_latency",
            "read_function": measure("read_function", args.seconds, Path(tmp)),
            "baseline_spinning_reader": measure("baseline", args.seconds, Path(tmp)),
        }
    ours = result["read_function"]
    floor = result["baseline_spinning_reader"]
    assert isinstance(ours, dict) and isinstance(floor, dict)
    p99 = ours["at_1000_tx_per_s"]["p99_ms"]
    result["p99_at_1000_over_baseline"] = round(
        p99 / max(floor["at_1000_tx_per_s"]["p99_ms"], 0.001), 2
    )
    idle = ours["idle_reader_cpu_percent_of_core"]
    goals(
        result,
        [
            goal("read_function at_1000_tx_per_s p99_ms", p99, "<=", 2, "issue 21"),
            goal("read_function idle_reader_cpu_percent_of_core", idle, "<", 2, "issue 21"),
        ],
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
