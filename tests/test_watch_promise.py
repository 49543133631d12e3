"""An idle partition's promise never lets an event through before an earlier commit of another
partition: watch() over eight partitions while concurrent writers (threads of this process and
a writer process) commit to random partitions with random pauses, so partitions go idle and
wake up again at random. Every event comes out once, in commit order, none missing."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import changestream
from changestream.clock import parse_ts
from tests.watch_support import COLUMNS, ITEMS, key, take

pytestmark = pytest.mark.timeout(600)

PARTITIONS = 8
SPAN = 100  # keys per partition: partition i holds [SPAN * i, SPAN * (i + 1))

#: One writer's commits: (partition, pause in milliseconds before the commit).
writes = st.lists(
    st.tuples(st.integers(0, PARTITIONS - 1), st.sampled_from([0, 0, 1, 3, 10])),
    min_size=1,
    max_size=20,
)

_PROCESS_WRITER = f"""
import sys, time
import changestream
path, plan = sys.argv[1], sys.argv[2]
with changestream.open(path) as db:
    for number, step in enumerate(plan.split(",")):
        partition, pause = map(int, step.split(":"))
        time.sleep(pause / 1000)
        key = partition * {SPAN} + 50 + number % 40
        with db.transaction() as tx:
            tx.insert_or_update("Items", ["Id", "V", "N"], [[key, "process", number]])
        print(tx.commit_timestamp.isoformat(), key, flush=True)
"""


def _thread_writer(
    db: changestream.EmbeddedDatabase,
    plan: list[tuple[int, int]],
    writer: int,
    committed: list[tuple[int, int]],
    errors: list[BaseException],
) -> None:
    try:
        for number, (partition, pause) in enumerate(plan):
            threading.Event().wait(pause / 1000)
            # Keys of a writer never collide with another's, so each commit is one event.
            row_key = partition * SPAN + writer * 10 + number % 10
            with db.transaction() as tx:
                tx.insert_or_update("Items", COLUMNS, [[row_key, f"w{writer}", number]])
            assert tx.commit_timestamp is not None
            committed.append((parse_ts(tx.commit_timestamp), row_key))
    except BaseException as exc:
        errors.append(exc)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(threads=st.lists(writes, min_size=1, max_size=3), process=writes)
def test_an_idle_partitions_promise_never_lets_a_later_event_through(
    tmp_path_factory: pytest.TempPathFactory,
    threads: list[list[tuple[int, int]]],
    process: list[tuple[int, int]],
) -> None:
    path = tmp_path_factory.mktemp("promise") / "promise.db"
    with changestream.open(str(path)) as db:
        db.execute_ddl(ITEMS)
        for boundary in range(SPAN, PARTITIONS * SPAN, SPAN):
            db.split_at("Items", [boundary])
        stream = db.ensure_watch_stream().stream
        assert len(db.partitions(stream)) == PARTITIONS
        cursor = db.watch(max_await_time_ms=20)
        committed: list[tuple[int, int]] = []
        errors: list[BaseException] = []
        writers = [
            threading.Thread(target=_thread_writer, args=(db, plan, n, committed, errors))
            for n, plan in enumerate(threads)
        ]
        plan_text = ",".join(f"{p}:{pause}" for p, pause in process)
        child = subprocess.Popen(
            [sys.executable, "-c", _PROCESS_WRITER, str(path), plan_text],
            stdout=subprocess.PIPE,
            text=True,
        )
        for thread in writers:
            thread.start()
        events: list[dict[str, Any]] = []
        try:
            expected = sum(len(plan) for plan in threads) + len(process)
            events = take(cursor, expected)
            out, _ = child.communicate(timeout=60)
        finally:
            for thread in writers:
                thread.join(30)
            if child.poll() is None:
                child.kill()
                child.wait(30)
            cursor.close()
        assert not errors and child.returncode == 0
        for line in out.splitlines():
            stamp, row_key = line.split()
            committed.append((parse_ts(stamp), int(row_key)))

    stamps = [event["clusterTime"].to_us() for event in events]
    keys = [key(event) for event in events]
    assert keys == sorted(keys) and len(set(keys)) == len(keys), "commit order, each once"
    assert stamps == sorted(stamps)
    assert sorted(
        (event["clusterTime"].to_us(), event["documentKey"]["Id"]) for event in events
    ) == sorted(committed), "every commit, nothing else"
