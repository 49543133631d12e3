"""ALTER TABLE ADD COLUMN on a large table: how long writers are blocked, and the write rate
before and after. Prints one JSON line.

A table of ``--rows`` rows (tracked by a FOR ALL change stream) takes upserts of 10 rows per
transaction from a writer process for ``--seconds`` before the DDL and ``--seconds`` after it;
the main process runs ``ALTER TABLE ... ADD COLUMN`` in between and times it. Writers blocked:
the longest gap between two of the writer's commits around the DDL. Adding a column must not
rewrite the table, so the DDL takes about as long on a large table as on a small one.
Checks: the change stream holds exactly the writer's changes (count and key checksum), and
every row reads back with the new column.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import changestream
from changestream import DataChangeRecord
from changestream.embedded.database import store_of
from checks import expect, goal, goals, key_checksum

DDL = "CREATE TABLE Items (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)"
STREAM = "CREATE CHANGE STREAM Everything FOR ALL OPTIONS (value_capture_type = 'NEW_ROW')"
ALTER = "ALTER TABLE Items ADD COLUMN Note STRING(MAX)"
ROWS_PER_TXN = 10
GOALS = (("writers_blocked_ms", "<=", 1000),)

WRITER = """
import random, sys, time
import changestream
path, seconds, keys = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
with changestream.open(path) as db:
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        picked = rng.sample(range(keys), 10)
        with db.transaction() as tx:
            tx.insert_or_update("Items", ["K", "V"], [[k, "w"] for k in picked])
        print(time.monotonic(), *picked, flush=True)
"""


def load(path: str, rows: int) -> None:
    with changestream.open(path) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl([DDL, STREAM])
        for start in range(0, rows, 10_000):
            with db.transaction() as tx:
                tx.insert("Items", ["K", "V"], [[k, "x"] for k in range(start, start + 10_000)])


def run(path: str, rows: int, seconds: float) -> dict[str, Any]:
    with changestream.open(path) as db:
        start = store_of(db).last_commit_ts() + 1
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, path, str(2 * seconds + 1), str(rows)],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(seconds)
    with changestream.open(path) as db:
        began = time.monotonic()
        db.execute_ddl(ALTER)
        ended = time.monotonic()
        ddl_s = ended - began
        out, _ = writer.communicate(timeout=120 + 3 * seconds)
        expect("writer exit status", writer.returncode, 0)
        commits = [line.split() for line in out.splitlines()]
        stamps = [float(c[0]) for c in commits]
        written = [int(k) for c in commits for k in c[1:]]
        before = [t for t in stamps if t < began]
        after = [t for t in stamps if t > ended]
        around = [t for t in stamps if began - 1 <= t <= ended + 1]
        gaps = [b - a for a, b in itertools.pairwise(around)]
        changed = _stream_keys(db, start)
        expect("changes recorded by the stream", key_checksum(changed), key_checksum(written))
        expect("rows with the new column", len(db.read("Items", columns=["K", "Note"])), rows)
    return {
        "ddl_seconds": round(ddl_s, 4),
        "writers_blocked_ms": round(1000 * max(gaps, default=ddl_s), 1),
        "write_tx_per_s_before": round(len(before) / max(began - stamps[0], 1e-9)),
        "write_tx_per_s_after": round(len(after) / max(stamps[-1] - ended, 1e-9)) if after else 0,
        "transactions": len(commits),
    }


def _stream_keys(db: changestream.EmbeddedDatabase, start: int) -> list[int]:
    (partition,) = db.partitions("Everything")
    end = store_of(db).last_commit_ts()
    return [
        mod.keys["K"]
        for record in db.read_change_stream("Everything", start, end, partition.token)
        if isinstance(record, DataChangeRecord)
        for mod in record.mods
    ]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=2.0, help="writes before and after")
    parser.add_argument("--smoke", action="store_true", help="a tiny run checking its counts")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.seconds = 20_000, 0.5
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "schema.db")
        load(path, args.rows)
        result: dict[str, Any] = {"benchmark": "schema_change", "rows": args.rows}
        result.update(run(path, args.rows, args.seconds))
    goals(
        result,
        [goal(name, result[name], op, target, "issue 18") for name, op, target in GOALS],
    )
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
