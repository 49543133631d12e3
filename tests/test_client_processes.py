"""The Stream Client with real worker processes: failover after SIGKILL, rebalancing when a
worker joins, and racing for one lease.

Workers are ``tests/client_worker.py`` processes writing what they process to files. Waits
are bounded so a broken client fails a test instead of hanging it; the only timing
assertion (failover) has a generous margin over the 2x lease timeout the design aims at.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

import changestream
from changestream.client.lease_table import PARTITION_LEASE, WORKER, ready_leases
from changestream.streams.positions import Position

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parent.parent
STREAM = "AccStream"
LEASE_TIMEOUT = 2.0
WAIT_S = 60.0


def wait_for(what: str, condition: Callable[[], bool], timeout: float = WAIT_S) -> float:
    """Poll until ``condition()``; returns the seconds it took, fails after ``timeout``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started


@dataclass
class Cluster:
    """Worker processes over one database file, each logging to its own file."""

    path: str
    start: int
    tmp: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def spawn(self, worker: str, *extra: str) -> None:
        out = self.tmp / f"{worker}.jsonl"
        log = open(self.tmp / f"{worker}.log", "wb")  # noqa: SIM115 - closed with the process
        self.procs[worker] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.client_worker",
                self.path,
                STREAM,
                worker,
                str(out),
                "--lease-timeout",
                str(LEASE_TIMEOUT),
                "--start",
                str(self.start),
                *extra,
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def lines(self, worker: str) -> list[dict[str, Any]]:
        path = self.tmp / f"{worker}.jsonl"
        if not path.exists():
            return []
        raw = path.read_bytes()
        # A SIGKILL may cut the last line short; everything before it was flushed whole.
        return [orjson.loads(line) for line in raw.split(b"\n") if line.endswith(b"}")]

    def stop_all(self) -> None:
        """SIGTERM the workers one after the other, so the last one releases every lease."""
        for worker, proc in self.procs.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                pytest.fail(f"worker {worker} did not stop within {WAIT_S:.0f} s of SIGTERM")

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def log_tail(self, worker: str) -> str:
        return (self.tmp / f"{worker}.log").read_text(errors="replace")[-3000:]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    path = str(tmp_path / "acc.db")
    with changestream.open(path) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl("CREATE TABLE Acc (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)")
        created = db.execute_ddl(f"CREATE CHANGE STREAM {STREAM} FOR Acc")
        for boundary in range(20, 160, 20):
            db.split_at("Acc", (boundary,))
    result = Cluster(path, created, tmp_path)
    try:
        yield result
    finally:
        result.kill_all()


class Writer(threading.Thread):
    """Commits increasing values per key (1-3 keys a transaction) and records what it
    committed; runs the splits and merges it is given between commits."""

    def __init__(self, path: str) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.committed: dict[int, list[int]] = defaultdict(list)
        self.halt = threading.Event()
        self.reshapes: list[tuple[str, int]] = []
        self.reshaped: list[tuple[str, int]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(7)
        try:
            with changestream.open(self.path) as db:
                while not self.halt.is_set():
                    keys = rng.sample(range(160), rng.randint(1, 3))
                    rows = [[k, len(self.committed[k]) + 1] for k in keys]
                    with db.transaction() as tx:
                        tx.insert_or_update("Acc", ["K", "V"], rows)
                    for k, v in rows:
                        self.committed[k].append(v)
                    if self.reshapes:
                        kind, key = self.reshapes.pop(0)
                        (db.split_at if kind == "split" else db.merge_at)("Acc", (key,))
                        self.reshaped.append((kind, key))
                    time.sleep(0.003)
        except BaseException as exc:
            self.error = exc
            raise

    def total(self) -> int:
        return sum(len(values) for values in self.committed.values())


def owners(path: str) -> Counter[str]:
    """Ready leases per owner, now."""
    with changestream.open(path) as db:
        leases = db.leases(STREAM, "default").list_leases()
    partition = [r for r in leases if r.status_type == PARTITION_LEASE]
    return Counter(r.lease_owner or "-" for r in ready_leases(partition))


def leases_of(path: str) -> list[changestream.Lease]:
    """The partition leases (not the group's other rows)."""
    with changestream.open(path) as db:
        rows = db.leases(STREAM, "default").list_leases()
    return [r for r in rows if r.status_type == PARTITION_LEASE]


def workers_of(path: str) -> set[str]:
    """The workers with a ``Worker`` row."""
    with changestream.open(path) as db:
        rows = db.leases(STREAM, "default").list_leases()
    return {r.status_value for r in rows if r.status_type == WORKER}


def test_workers_fail_over_rebalance_and_deliver_every_mod_in_key_order(cluster: Cluster) -> None:
    for worker in ("w1", "w2", "w3"):
        cluster.spawn(worker, "--work-seconds", "0.02", "--max-records", "20")
    writer = Writer(cluster.path)
    writer.start()
    wait_for(
        "three workers to share the leases",
        lambda: {"w1", "w2", "w3"} <= set(owners(cluster.path)),
    )
    # Splits and merges while three workers consume, including merges of partitions read
    # by different workers (a child must wait for both parents).
    writer.reshapes += [
        ("split", 10),
        ("merge", 20),
        ("split", 30),
        ("merge", 60),
        ("merge", 10),
        ("split", 90),
        ("split", 130),
    ]
    wait_for("the splits and merges", lambda: not writer.reshapes)
    wait_for("w1 to process records", lambda: len(cluster.lines("w1")) > 50)

    # SIGKILL w1 in the middle of a batch: its last line is a record, not a checkpoint.
    wait_for("w1 to be mid-batch", lambda: "checkpoint" not in (cluster.lines("w1") or [{}])[-1])
    cluster.procs["w1"].kill()
    cluster.procs["w1"].wait()
    held_by_w1 = {r.status_value for r in leases_of(cluster.path) if r.lease_owner == "w1"}
    assert held_by_w1, "w1 held no lease when it was killed"
    wait_for(
        "w1's leases to move",
        lambda: (
            not any(
                r.lease_owner == "w1"
                for r in leases_of(cluster.path)
                if r.status_value in held_by_w1
            )
        ),
    )
    # How long the move takes is measured by benchmarks/stream_client.py (failover_seconds);
    # here it only has to happen within wait_for's bound.

    # A replacement and then a 4th live worker: leases spread to within one of even.
    cluster.spawn("w4", "--work-seconds", "0.02", "--max-records", "20")
    cluster.spawn("w5", "--work-seconds", "0.02", "--max-records", "20")
    live = {"w2", "w3", "w4", "w5"}

    def balanced() -> bool:
        counts = owners(cluster.path)
        per_worker = [counts.get(w, 0) for w in live]
        return set(counts) <= live and max(per_worker) - min(per_worker) <= 1

    wait_for("the leases to rebalance over four workers", balanced)
    counts = owners(cluster.path)
    # 8 partitions, 4 splits and 3 merges: 9 live partitions over 4 workers.
    assert sum(counts.values()) == 9 and sorted(counts.values()) == [2, 2, 2, 3]

    writer.halt.set()
    writer.join(timeout=WAIT_S)
    assert writer.error is None
    committed = {(k, v) for k, values in writer.committed.items() for v in values}

    def processed() -> set[tuple[int, int]]:
        return {
            (line["k"], line["v"])
            for worker in cluster.procs
            for line in cluster.lines(worker)
            if "k" in line
        }

    wait_for("every committed mod to be processed", lambda: committed <= processed())
    cluster.stop_all()
    for worker, proc in cluster.procs.items():
        if worker != "w1":
            assert proc.returncode == 0, cluster.log_tail(worker)

    check_delivery(cluster, committed, killed="w1")
    # A clean stop releases every lease and leaves each partition checkpointed.
    assert all(r.lease_owner is None for r in leases_of(cluster.path))


def test_a_joining_worker_gets_its_share_handed_over_at_once_and_nothing_comes_back(
    cluster: Cluster,
) -> None:
    cluster.spawn("w1")
    wait_for("w1 to hold every lease", lambda: owners(cluster.path) == {"w1": 8})
    cluster.spawn("w2")
    wait_for("w2 to sign in", lambda: workers_of(cluster.path) == {"w1", "w2"})
    wait_for("the leases to split", lambda: owners(cluster.path) == {"w1": 4, "w2": 4})
    # Two more of each worker's rounds: nothing moves again.
    time.sleep(2 * LEASE_TIMEOUT / 3 + 0.5)
    assert owners(cluster.path) == {"w1": 4, "w2": 4}
    cluster.stop_all()
    w1_log, w2_log = ((cluster.tmp / f"{w}.log").read_text() for w in ("w1", "w2"))
    # w1 saw w2's row and handed over its surplus in one round; w2 stole none of it (it
    # gives a registered worker rounds to do so) and gave nothing back.
    assert w1_log.count("w1 offers w2 partition") == 4, w1_log
    assert "w2 asks" not in w2_log and "handed w1" not in w2_log, w2_log
    # A stopped worker signs off; the group keeps no row of it.
    assert workers_of(cluster.path) == set()


def check_delivery(cluster: Cluster, committed: set[tuple[int, int]], killed: str) -> None:
    """Every mod processed, first deliveries in key order, duplicates only of what the
    killed worker processed after its last checkpoint of that partition."""
    events = []
    last_checkpoint: dict[str, Position] = {}
    for worker in cluster.procs:
        for index, line in enumerate(cluster.lines(worker)):
            if "checkpoint" in line:
                if worker == killed:
                    last_checkpoint[line["p"]] = Position.from_text(line["checkpoint"])
            else:
                events.append((line["t"], worker, index, line))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    seen: Counter[tuple[int, int]] = Counter()
    first_values: dict[int, list[int]] = defaultdict(list)
    by_mod: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for _, _, _, line in events:
        mod = (line["k"], line["v"])
        seen[mod] += 1
        by_mod[mod].append(line)
        if seen[mod] == 1:
            first_values[line["k"]].append(line["v"])
    assert set(seen) == committed
    for key, values in first_values.items():
        assert values == sorted(values), f"key {key} was processed out of order: {values}"
    duplicates = {mod: lines for mod, lines in by_mod.items() if len(lines) > 1}
    for mod, lines in duplicates.items():
        assert len(lines) == 2, f"{mod} processed {len(lines)} times: {lines}"
        first, again = lines
        assert first["w"] == killed and again["w"] != killed, (mod, lines)
        position = Position(first["ts"], first["seq"])
        assert first["p"] not in last_checkpoint or position > last_checkpoint[first["p"]], (
            f"{mod} was processed again although {killed} had checkpointed past it"
        )


def test_two_processes_racing_for_the_same_leases_never_both_win(tmp_path: Path) -> None:
    path = str(tmp_path / "race.db")
    leases = 40
    with changestream.open(path) as db:
        db.execute_ddl("CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)")
        db.execute_ddl("CREATE CHANGE STREAM S FOR T")
        table = db.leases("S", "racers")
        for i in range(leases):
            table.insert_if_absent(changestream.Lease(PARTITION_LEASE, f"p{i:03d}"))
    go = tmp_path / "go"
    # Both racers read every lease first, then wait for the same moment to take them all
    # from the counter they read: at most one conditional update per lease can succeed.
    script = (
        "import sys, time, dataclasses, changestream\n"
        "db = changestream.open(sys.argv[1]); table = db.leases('S', 'racers')\n"
        "seen = table.list_leases()\n"
        "print('ready', flush=True)\n"
        "while not __import__('os').path.exists(sys.argv[2]): time.sleep(0.001)\n"
        "for lease in seen:\n"
        "    if table.update(dataclasses.replace(lease, lease_owner=sys.argv[3])):\n"
        "        print(lease.status_value, flush=True)\n"
    )
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", script, path, str(go), name],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("alice", "bob")
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
        go.touch()
        won = {}
        for name, racer in zip(("alice", "bob"), racers, strict=True):
            out, _ = racer.communicate(timeout=WAIT_S)
            assert racer.returncode == 0
            won[name] = set(out.split())
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
    assert not won["alice"] & won["bob"]
    assert won["alice"] | won["bob"] == {f"p{i:03d}" for i in range(leases)}
    with changestream.open(path) as db:
        rows = db.leases("S", "racers").list_leases()
    for row in rows:
        winner = "alice" if row.status_value in won["alice"] else "bob"
        assert (row.lease_owner, row.lease_counter) == (winner, 1)
