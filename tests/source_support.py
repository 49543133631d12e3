"""Helpers shared by the source tests: what a source's change stream holds, waiting for a
source's copy, and a workload in a thread."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import changestream
from changestream.clock import now_us
from changestream.sources import describe_source, run_source
from changestream.streams.origins import source_of_tag


def captured_transactions(db: changestream.EmbeddedDatabase, stream: str) -> list[str]:
    """The source transaction id of each changestream transaction of ``stream``, in commit
    order (one entry per transaction, however many records it made)."""
    seen: dict[str, int] = {}
    start = min(p.start_timestamp for p in db.partition_history(stream))
    for partition in changestream.walk_partitions(db, stream, start, now_us()):
        for record in changestream.data_changes(partition.records()):
            origin = source_of_tag(record.transaction_tag)
            assert origin is not None, record.transaction_tag
            seen.setdefault(origin[0], record.commit_timestamp)
    return sorted(seen, key=lambda x: seen[x])


def wait_until_streaming(db: changestream.EmbeddedDatabase, name: str) -> None:
    """Until the source's initial copy is whole (60 s at most)."""
    deadline = time.monotonic() + 60
    while describe_source(db, name)["state"] != "streaming":
        assert time.monotonic() < deadline, f"source {name} did not finish its copy in 60 s"
        time.sleep(0.05)


class Writer(threading.Thread):
    """``work(*args)`` in a thread; ``join()`` re-raises what stopped it."""

    def __init__(self, work: Callable[..., None], *args: Any) -> None:
        super().__init__()
        self._work = work
        self._args = args
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._work(*self._args)
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error


def wait_while_running(done: Callable[[], bool], runner: threading.Thread) -> None:
    """Until ``done()``, while the connector thread ``runner`` runs (60 s at most)."""
    deadline = time.monotonic() + 60
    while not done():
        assert runner.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)


@contextlib.contextmanager
def running_source(
    db: changestream.EmbeddedDatabase, name: str = "Bank"
) -> Iterator[threading.Thread]:
    """``run_source(db, name)`` in a thread while the block runs (the thread is given to
    ``wait_while_running``); then stopped, and it must end within 60 s."""
    stop = threading.Event()
    runner = threading.Thread(target=run_source, args=(db, name), kwargs={"stop": stop})
    runner.start()
    try:
        yield runner
    finally:
        stop.set()
        runner.join(timeout=60)
    assert not runner.is_alive()


def start_connector(
    path: str, name: str = "Bank", fault: str | None = None
) -> subprocess.Popen[bytes]:
    """``changestream sources run NAME --db PATH`` in a process of its own (with ``fault``,
    that mode of ``tests/faults``)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if fault is not None:
        faults = str(Path(__file__).parent / "faults")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [faults, env.get("PYTHONPATH")]))
        env["CHANGESTREAM_FAULT"] = fault
    return subprocess.Popen(
        [sys.executable, "-m", "changestream", "sources", "run", name, "--db", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def kill_while_writing(path: str, writer: threading.Thread, at_least: int = 20) -> int:
    """Start the connector and SIGKILL it at a random moment, again and again, while
    ``writer`` writes (and at least ``at_least`` times); how many times it was killed."""
    rng = random.Random(5)
    kills = 0
    while writer.is_alive() or kills < at_least:
        process = start_connector(path)
        time.sleep(rng.uniform(0.4, 1.5))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        kills += 1
    return kills
