"""Four writer processes under the automatic split policy, two reader processes following the
workflow live; afterwards the seed's guarantees hold against the table.

A short storm by default; ``CHANGESTREAM_STORM=long`` makes it a minute long.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

import changestream
from changestream.embedded.database import store_of
from changestream.store.keys import encode_key
from changestream.store.splits import load_split
from changestream.streams.tokens import decode_token

LONG = os.environ.get("CHANGESTREAM_STORM") == "long"
SECONDS = 60.0 if LONG else float(os.environ.get("CS_STORM_SECONDS", "6"))
ROOT = Path(__file__).resolve().parent.parent


def spawn(*args: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.storm_roles", *map(str, args)], cwd=ROOT)


def lines(path: Path) -> list[Any]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.mark.timeout(600)
def test_storm_of_writers_and_live_readers(tmp_path: Path) -> None:
    path = tmp_path / "storm.db"
    db = changestream.open(str(path))
    db.execute_ddl(
        [
            "CREATE TABLE Storm (W INT64 NOT NULL, K INT64 NOT NULL, V INT64) PRIMARY KEY (W, K)",
            "CREATE CHANGE STREAM Storm FOR Storm",
        ]
    )
    db.set_split_policy(
        max_rows=150,
        merge_max_rows=60,
        max_write_rate=300,
        merge_max_write_rate=100,
        window_seconds=2,
        min_lifetime_seconds=1,
        check_interval_seconds=0.2,
    )
    start = store_of(db).catalog().stream("Storm").created_ts
    stop_file = tmp_path / "stop"
    readers = [spawn("reader", path, start, stop_file, tmp_path / f"r{i}.jsonl") for i in range(2)]
    writers = [spawn("writer", path, w, SECONDS, tmp_path / f"w{w}.jsonl") for w in range(4)]
    try:
        for process in writers:
            assert process.wait(timeout=SECONDS + 120) == 0
        # Merge everything back while the readers are still live: merge children, two parents.
        for split in store_of(db).live_splits()[1:]:
            store_of(db).change_split_boundary(split.start_key, merge=True)
        with db.transaction(tag="last") as tx:
            tx.insert_or_update("Storm", ["W", "K", "V"], [[9, 0, 0]])
        assert tx.commit_timestamp is not None
        stop_file.write_text(str(changestream.clock.parse_ts(tx.commit_timestamp)))
        for process in readers:
            assert process.wait(timeout=SECONDS + 120) == 0
    finally:
        for process in readers + writers:
            process.kill()
            process.wait()

    expected = {tuple(m) for w in range(4) for m in lines(tmp_path / f"w{w}.jsonl")}
    expected.add((changestream.clock.parse_ts(tx.commit_timestamp), 9, 0, "INSERT"))
    history = db.partition_history("Storm")
    assert len(history) > 3, "the policy never split"
    assert any(len(p.parent_tokens) == 2 for p in history)
    table = store_of(db).catalog().table("Storm")
    secret = store_of(db).secret
    for index in range(2):
        entries = lines(tmp_path / f"r{index}.jsonl")
        data = [e for e in entries if e[0] == "data"]
        mods = [(e[2], e[4], e[5], e[6]) for e in data]
        assert len(mods) == len(set(mods)), "a mod was returned twice"  # (1)
        assert set(mods) == expected  # (1)
        by_token: dict[str, list[Any]] = defaultdict(list)
        for entry in entries:
            by_token[entry[1]].append(entry)
        ends = {e[1]: e[2] for e in entries if e[0] == "end"}
        position = {id(e): i for i, e in enumerate(entries)}
        for token, events in by_token.items():
            order = [(e[2], e[3]) for e in events if e[0] == "data"]
            assert order == sorted(order)  # (2)
            promised = -1
            for event in events:  # (6)
                if event[0] == "heartbeat":
                    promised = max(promised, event[2])
                elif event[0] == "data":
                    assert event[2] > promised
            split = load_split(store_of(db).connection(), decode_token(secret, token).split_id)
            assert split is not None
            for event in events:  # (3)
                if event[0] == "data":
                    assert split.contains(encode_key(table, (event[4], event[5])))
            (begin,) = [e for e in events if e[0] == "start"]
            for parent in begin[3]:  # (4)
                assert ends[parent] == begin[2]
                parent_events = by_token[parent]
                assert all(e[2] < begin[2] for e in parent_events if e[0] == "data")
                parent_end = next(e for e in parent_events if e[0] == "end")
                assert position[id(parent_end)] < position[id(begin)]
        replay: dict[tuple[int, int], int] = {}
        for entry in sorted(data, key=lambda e: (e[2], e[3])):  # (5)
            if entry[6] == "DELETE":
                del replay[(entry[4], entry[5])]
            else:
                replay[(entry[4], entry[5])] = entry[7]
        assert replay == {(w, k): v for w, k, v in db.read("Storm")}
    db.close()
