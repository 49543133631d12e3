"""A watch() cursor in another process, killed with SIGKILL again and again and resumed from the
last token it printed, sees every change exactly once, in commit order, while a writer runs
and partitions split and merge. Nothing asserts on timings; every wait is bounded."""

from __future__ import annotations

import json
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream.clock import parse_ts
from tests.watch_support import COLUMNS, ITEMS

pytestmark = pytest.mark.timeout(120)

WAIT_S = 60.0

# argv: database path, then "at <microseconds>" or "after <token JSON>".
CONSUMER = """
import json, sys
import changestream

path, mode, position = sys.argv[1:4]
db = changestream.open(path)
start = {"start_at_operation_time": int(position)} if mode == "at" else {
    "resume_after": json.loads(position)
}
with db.watch(max_await_time_ms=100, **start) as cursor:
    for event in cursor:
        line = {
            "token": event["_id"],
            "op": event["operationType"],
            "ts": event["clusterTime"].to_us(),
            "id": event["documentKey"]["Id"],
        }
        sys.stdout.write(json.dumps(line) + "\\n")
        sys.stdout.flush()
"""


class Consumer:
    """The consumer process; complete stdout lines arrive on a queue."""

    def __init__(self, path: Path, mode: str, position: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CONSUMER, str(path), mode, position],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def events(self, count: int, wait_s: float) -> list[dict[str, Any]]:
        """Up to ``count`` complete events, waiting at most ``wait_s`` in all."""
        deadline = time.monotonic() + wait_s
        found: list[dict[str, Any]] = []
        while len(found) < count:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if line is None:
                assert self.proc.stderr is not None
                pytest.fail(f"consumer exited: {self.proc.wait()} {self.proc.stderr.read()}")
            if line.endswith("\n"):  # a line cut by SIGKILL is not an event the consumer saw
                found.append(json.loads(line))
            if time.monotonic() > deadline:
                break
        return found

    def kill(self) -> list[dict[str, Any]]:
        """SIGKILL, then whatever complete lines it wrote before dying."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(WAIT_S)
        rest: list[dict[str, Any]] = []
        while (line := self.lines.get(timeout=WAIT_S)) is not None:
            if line.endswith("\n"):
                rest.append(json.loads(line))
        return rest


def test_killed_consumer_resumes_from_its_last_token(tmp_path: Path) -> None:
    path = tmp_path / "process.db"
    db = changestream.open(str(path))
    db.execute_ddl(ITEMS)
    db.split_at("Items", [500])
    start = db.ensure_watch_stream().now
    rng = random.Random(3)
    expected: list[tuple[int, str, int]] = []
    live: set[int] = set()
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for n in range(400):
                ids = sorted(set(rng.sample(range(1000), rng.randint(1, 3))))
                ops: list[tuple[str, int]] = []
                with db.transaction() as tx:
                    for i in ids:
                        if i in live and rng.random() < 0.2:
                            tx.delete("Items", [[i]])
                            ops.append(("delete", i))
                        else:
                            tx.insert_or_update("Items", COLUMNS, [[i, f"v{n}", n]])
                            ops.append(("update" if i in live else "insert", i))
                assert tx.commit_timestamp is not None
                ts = parse_ts(tx.commit_timestamp)
                for op, i in ops:
                    expected.append((ts, op, i))
                    (live.discard if op == "delete" else live.add)(i)
                time.sleep(0.004)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen: list[dict[str, Any]] = []
    consumer = Consumer(path, "at", str(start))
    try:
        boundaries = iter([250, 750, 125])
        for round_ in range(4):
            seen.extend(consumer.events(15 + 10 * round_, WAIT_S))
            # Change the partitions while the consumer is down or running, then kill it.
            boundary = next(boundaries, None)
            if boundary is not None:
                db.split_at("Items", [boundary])
            elif round_ == 3:
                db.merge_at("Items", [500])
            seen.extend(consumer.kill())
            position = json.dumps(seen[-1]["token"]) if seen else str(start)
            consumer = Consumer(path, "after" if seen else "at", position)
        thread.join(WAIT_S)
        assert done.is_set() and not errors
        while len(seen) < len(expected):
            more = consumer.events(len(expected) - len(seen), WAIT_S)
            assert more, f"stuck at {len(seen)} of {len(expected)} events"
            seen.extend(more)
    finally:
        consumer.kill()
        done.wait(WAIT_S)
        db.close()

    tokens = [e["token"]["_data"] for e in seen]
    assert tokens == sorted(tokens), "commit order across restarts"
    assert len(set(tokens)) == len(tokens), "no duplicate"
    got = sorted((e["ts"], e["op"], e["id"]) for e in seen)
    assert got == sorted(expected), "no gap"
