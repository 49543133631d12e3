"""Pipeline benchmark: `changestream pipeline run` as users run it, on Spark, with its checks.

A source database with one table (``--partitions`` partitions, split policy off) and a ``FOR
ALL`` change stream (``NEW_ROW_AND_OLD_VALUES``); two streams started before any change, one
writing JSON files and one Avro files, each with a Delta replica, backfill ``none``. Workload:
upserts of distinct random keys below ``--keys``, ``--rows-per-txn`` rows per transaction.

1. Baseline, in this process: the raw read function over the same changes (mods/s).
2. Catch-up, per format: ``changestream pipeline run NAME --db PATH --until-caught-up`` in a
   subprocess; changes/s is the changes over the wall clock from the command's start to its
   exit (start-up included; the time to the first micro-batch is reported beside it). The
   driver's peak RSS (its Python process and its JVM) is sampled every 0.1 s, with the CPU
   seconds of the driver's Python, its JVM and Spark's Python workers and the cores they kept
   busy. Where the time goes: each micro-batch's progress, which the pipeline keeps with its
   commit in the checkpoint (planning, offset log, the batch's work), and the wall time of
   Spark's stages inside the batch's work, from the run's Spark event log.
3. Fixed cost: one more transaction (``--rows-per-txn`` changes) is committed and the JSON
   stream's ``pipeline run --until-caught-up`` lands it, timed as the catch-ups are: what any
   run costs whatever it lands (the interpreter, the JVM and its context, Spark's Python
   workers, one micro-batch, the Delta commit, the exit). Beside it, the JSON catch-up's
   changes/s with that cost taken out (null when the catch-up took no longer: at a tiny size,
   and the machine's noise, it may not).
4. Live: the JSON stream's pipeline runs while a writer process commits ``--rate`` changes/s
   for ``--seconds``; each change's lag is the end of the first micro-batch whose end offset
   covers its commit timestamp (from the checkpoint) minus that commit timestamp. Where that
   time goes: the medians, over the micro-batches that carried the writer's changes, of
   their durations (``latestOffset``, ``addBatch``, the offset log, and the two parts of
   ``addBatch`` the commit times: ``cdcTasks``, the CDC tasks' Spark job as the driver waits
   for it, and ``replicaMerge``, the replica MERGE) and of the time Spark's tasks ran inside
   each batch, the longest batch, and each batch's duration and MERGE.

Every phase checks what it produced and exits non-zero on a mismatch: the event files hold
exactly the uuids of the changes committed after ``streams start`` (derived from the read
function, each once), and each replica equals the source row for row. ``--smoke`` runs it all
at a tiny size. Prints one JSON line, with the goals of the pipeline issue and whether each
was met.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

import changestream
from changestream import DataChangeRecord
from changestream.embedded.database import store_of
from changestream.spark import jvm_archive
from changestream.spark.offset_log import commit_metadata
from checks import CheckFailed, goal, goals

log = logging.getLogger("pipeline_bench")

DDL = (
    "CREATE TABLE Orders (OrderId INT64 NOT NULL, Customer STRING(MAX), Amount INT64, "
    "Note STRING(MAX)) PRIMARY KEY (OrderId)"
)
CHANGE_STREAM = (
    "CREATE CHANGE STREAM Everything FOR ALL "
    "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')"
)
COLUMNS = ["OrderId", "Customer", "Amount", "Note"]
FORMATS = ("json", "avro")
#: The parts of a micro-batch's work its commit times (inside ``addBatch``): the CDC tasks'
#: Spark job, as the driver waits for it, and the replica MERGEs.
PARTS = ("cdcTasks", "replicaMerge")
#: The goals of the pipeline issue (issue 24), on local[2]: figure, comparison, target.
GOALS = (
    ("json_delta_changes_per_s", ">=", 100_000),
    ("json_delta_over_raw_read", ">=", 0.2),
    ("avro_delta_changes_per_s", ">=", 60_000),
    ("live_lag_p99_ms", "<=", 1_500),
)
#: The documented recipe of CDC event uuids (see ``changestream.datastream.events``).
UUID_NAMESPACE = uuid.UUID("6b19f7f1-b143-460a-aabc-117f902a791b")

WRITER = """
import random, sys, time
import changestream
path, rate, seconds, rows_per_txn, keys, seed = sys.argv[1:7]
rate, seconds, rows_per_txn, keys = float(rate), float(seconds), int(rows_per_txn), int(keys)
rng = random.Random(int(seed))
columns = ["OrderId", "Customer", "Amount", "Note"]
with changestream.open(path) as db:
    began, done = time.monotonic(), 0
    while time.monotonic() - began < seconds:
        picked = rng.sample(range(keys), rows_per_txn)
        rows = [[key, f"c{done % 97}", done, "live"] for key in picked]
        with db.transaction() as tx:
            tx.insert_or_update("Orders", columns, rows)
        done += rows_per_txn
        if rate > 0:
            pause = began + done / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
    print(done, time.monotonic() - began, flush=True)
"""


def fail(message: str) -> CheckFailed:
    """The error that stops the run: what was produced is not what was committed."""
    return CheckFailed(f"check failed: {message}")


def stream_name(fmt: str) -> str:
    return f"bench_{fmt}"


def upserts(db: changestream.EmbeddedDatabase, changes: int, per_txn: int, keys: int) -> None:
    rng = random.Random(changes)
    for n in range(0, changes, per_txn):
        picked = rng.sample(range(keys), min(per_txn, changes - n))
        rows = [
            [key, f"customer-{i % 97}", n + i, "standard delivery"] for i, key in enumerate(picked)
        ]
        with db.transaction() as tx:
            tx.insert_or_update("Orders", COLUMNS, rows)


def setup(path: str, tmp: Path, args: argparse.Namespace) -> None:
    from changestream.datastream import StreamCatalog, StreamDefinition

    with changestream.open(path) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl([DDL, CHANGE_STREAM])
        for index in range(1, args.partitions):
            db.split_at("Orders", (index * args.keys // args.partitions,))
        catalog = StreamCatalog(db)
        for fmt in FORMATS:
            catalog.create(
                StreamDefinition(
                    name=stream_name(fmt),
                    database=path,
                    change_stream="Everything",
                    destination=str(tmp / f"events-{fmt}"),
                    format=fmt,
                    replica=str(tmp / f"replica-{fmt}"),
                    backfill="none",
                )
            )
            catalog.transition(stream_name(fmt), "start")


Change = tuple[int, str, str, int]


def read_changes(path: str, start: int, end: int) -> tuple[float, list[Change]]:
    """Seconds to read every mod committed in ``[start, end]`` with the read function (each
    partition of the lineage over its own time range), and each mod's identity: commit
    timestamp, transaction, record sequence, index in its record."""
    began = time.perf_counter()
    changes: list[Change] = []
    with changestream.open(path) as db:
        for partition in db.partition_history("Everything"):
            first = max(start, partition.start_timestamp)
            last = end if partition.end_timestamp is None else min(end, partition.end_timestamp - 1)
            if first > last:
                continue
            for record in db.read_change_stream("Everything", first, last, partition.token):
                if isinstance(record, DataChangeRecord):
                    changes.extend(
                        (
                            record.commit_timestamp,
                            record.server_transaction_id,
                            record.record_sequence,
                            index,
                        )
                        for index in range(len(record.mods))
                    )
    return time.perf_counter() - began, changes


def expected_uuids(stream: str, changes: Sequence[Change]) -> set[str]:
    """The uuid of each change's event, by the documented recipe."""
    return {
        str(
            uuid.uuid5(
                UUID_NAMESPACE,
                orjson.dumps(["cdc", stream, "source_Orders", ts, tx, seq, index]).decode(),
            )
        )
        for ts, tx, seq, index in changes
    }


def check_events(root: Path, stream: str, changes: Sequence[Change]) -> int:
    """Exit unless the event files under ``root`` hold exactly one event per change (by uuid;
    a uuid twice only as the same event replayed). Returns the number of events read."""
    from changestream.datastream.files import event_files, read_events

    seen: dict[str, str] = {}
    count = 0
    for file in event_files(root):
        for event in read_events(file):
            count += 1
            body = orjson.dumps({**event, "read_timestamp": None}, option=orjson.OPT_SORT_KEYS)
            digest = hashlib.sha1(body).hexdigest()
            if seen.setdefault(event["uuid"], digest) != digest:
                raise fail(f"{stream}: uuid {event['uuid']} names two different events")
    wanted = expected_uuids(stream, changes)
    got = set(seen)
    if got != wanted:
        raise fail(
            f"{stream}: {len(wanted - got)} changes have no event, "
            f"{len(got - wanted)} events match no change ({len(got)} distinct, {count} read)"
        )
    return count


def check_replica(path: str, tmp: Path, fmt: str) -> int:
    """Exit unless the format's Delta replica equals the source row for row."""
    from changestream.spark.replica import DeltaReplica

    with changestream.open(path) as db:
        table = next(t for t in db.tables() if t.name == "Orders")
        source = db.read("Orders")
    replica = DeltaReplica(tmp / f"replica-{fmt}", "source", table).read_rows()
    if replica != source:
        raise fail(f"replica-{fmt}: {len(replica)} rows, the source has {len(source)}")
    return len(source)


def spark_env(eventlog: Path) -> dict[str, str]:
    eventlog.mkdir(parents=True, exist_ok=True)
    conf = [
        "spark.eventLog.enabled=true",
        f"spark.eventLog.dir={eventlog}",
        "spark.eventLog.compress=false",
        "spark.ui.showConsoleProgress=false",
    ]
    args = " ".join(f"--conf {c}" for c in conf)
    return {**os.environ, "PYSPARK_SUBMIT_ARGS": f"{args} pyspark-shell"}


class ProcessSampler:
    """Samples, every 0.1 s until stopped, a process, its descendants (its JVM, its zygote)
    and Spark's Python daemon and workers: ``python_mb`` and ``jvm_mb`` are the peak resident
    memory of the process and of its JVM; :meth:`cpu_seconds` the CPU each kind of process
    used, as last sampled (a process's last 0.1 s before it exits can be missed)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.python_mb = 0.0
        self.jvm_mb = 0.0
        self._cpu: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Spark's Python daemon comes from the driver's zygote and outlives it, so it is no
        # descendant of the driver: its command line names the zygote's socket, which names
        # the driver (see changestream.spark.zygote).
        zygote_socket = f"zygote-{self.pid}-".encode()
        while not self._stop.wait(0.1):
            processes = _processes()
            self.python_mb = max(self.python_mb, _rss_mb(self.pid))
            self._note_cpu(processes, self.pid, "driver_python")
            daemons = [p for p in processes if zygote_socket in _full_cmdline(p)]
            family = {*_descendants(processes, self.pid), *daemons}
            family.update(c for d in daemons for c in _descendants(processes, d))
            for child in family:
                command = _cmdline(child)
                if b"java" in command:
                    self.jvm_mb = max(self.jvm_mb, _rss_mb(child))
                    self._note_cpu(processes, child, "jvm")
                elif b"python" in command:
                    self._note_cpu(processes, child, "spark_python_workers")

    def _note_cpu(self, processes: dict[int, tuple[int, float]], pid: int, kind: str) -> None:
        if pid in processes:
            self._cpu[pid] = (kind, processes[pid][1])

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds per kind of process: the driver's Python, its JVM (with Spark's
        launcher JVM), and the Python daemon and workers the JVM starts."""
        totals = dict.fromkeys(("driver_python", "jvm", "spark_python_workers"), 0.0)
        for kind, seconds in self._cpu.values():
            totals[kind] += seconds
        return {kind: round(seconds, 2) for kind, seconds in totals.items()}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _cmdline(pid: int) -> bytes:
    return _full_cmdline(pid).split(b"\0")[0]


def _full_cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _processes() -> dict[int, tuple[int, float]]:
    """Every process of the machine: its parent and the user and system CPU it has used, in
    seconds (one read of its ``/proc/PID/stat``)."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                found[int(entry.name)] = (
                    int(fields[1]),
                    (int(fields[11]) + int(fields[12])) / tick,
                )
            except (OSError, IndexError, ValueError):
                continue
    return found


def _descendants(processes: dict[int, tuple[int, float]], pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for child, (parent, _) in processes.items():
        children.setdefault(parent, []).append(child)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def spark_metrics(eventlog: Path, destination: Path) -> dict[str, Any]:
    """Per micro-batch, from the pipeline's checkpoint under ``destination`` (the metadata of
    its commits): start and end (ms since the epoch), end watermark (µs), and its durations;
    from Spark's event log, the application's start and the wall time of each stage."""
    batches: list[dict[str, Any]] = []
    for commits in sorted(destination.glob("_changestream/*/checkpoint/commits")):
        ids = sorted(int(entry.name) for entry in commits.iterdir() if entry.name.isdigit())
        for batch_id in ids:
            metadata = commit_metadata(commits.parent, batch_id)
            durations = metadata["durationMs"]
            begin = metadata["batchTimestampMs"]
            batches.append(
                {
                    "begin": begin,
                    "end": begin + durations["triggerExecution"],
                    "watermark": metadata["watermark"],
                    **durations,
                }
            )
    stages: list[tuple[int, int]] = []
    started: int | None = None
    for file in sorted(eventlog.rglob("events_*")):
        with open(file, "rb") as lines:
            for line in lines:
                event = orjson.loads(line)
                kind = event["Event"]
                if kind == "SparkListenerApplicationStart":
                    started = event["Timestamp"]
                elif kind == "SparkListenerStageCompleted":
                    info = event["Stage Info"]
                    if "Submission Time" in info and "Completion Time" in info:
                        stages.append((info["Submission Time"], info["Completion Time"]))
    return {"app_start": started, "batches": batches, "stages": stages}


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The intervals merged where they overlap (stages that ran at the same time, such as a
    publication beside a micro-batch's tasks, count once)."""
    merged: list[tuple[int, int]] = []
    for begin, end in sorted(intervals):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged


def breakdown(metrics: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Where the run's time went (shares of the wall clock)."""
    batches = [b for b in metrics["batches"] if b.get("addBatch")]
    if not batches:
        return {}
    in_tasks = 0
    for begin, end in _union(metrics["stages"]):
        for batch in batches:
            low, high = max(begin, batch["begin"]), min(end, batch["end"])
            in_tasks += max(0, high - low)
    add = sum(b["addBatch"] for b in batches)
    planning = sum(b["latestOffset"] for b in batches)
    offsets = sum(b["walCommit"] for b in batches)
    wall_ms = wall_s * 1000
    first = batches[0]["begin"]
    return {
        "micro_batches": len(batches),
        "to_first_batch_s": round((first - (metrics["app_start"] or first)) / 1000, 2),
        "share_spark_tasks": round(in_tasks / wall_ms, 3),
        "share_driver_in_batches": round(max(0, add - in_tasks) / wall_ms, 3),
        "share_planning_latest_offset": round(planning / wall_ms, 3),
        "share_offset_log": round(offsets / wall_ms, 3),
        "share_startup_and_between": round(max(0.0, 1 - (add + planning + offsets) / wall_ms), 3),
    }


def run_pipeline(
    path: str, name: str, args: argparse.Namespace, eventlog: Path, until_caught_up: bool
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "changestream", "pipeline", "run", name, "--db", path]
    command += ["--master", args.master, "--trigger-seconds", str(args.trigger_seconds)]
    if args.max_records_per_trigger is not None:
        command += ["--max-records-per-trigger", str(args.max_records_per_trigger)]
    if until_caught_up:
        command.append("--until-caught-up")
    return subprocess.Popen(
        command, env=spark_env(eventlog), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def finish(process: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise fail(f"{what}: did not finish within {timeout:.0f}s") from None
    if process.returncode != 0:
        raise fail(f"{what}: exit {process.returncode}: {stderr.decode()[-1500:]}")


def run_until_caught_up(
    path: str, name: str, args: argparse.Namespace, eventlog: Path, what: str, timeout: float
) -> tuple[float, float, ProcessSampler]:
    """Wall seconds of ``pipeline run NAME --until-caught-up``, the epoch ms it began at, and
    its processes' sampled CPU and memory."""
    began, began_epoch_ms = time.perf_counter(), time.time() * 1000
    process = run_pipeline(path, name, args, eventlog, until_caught_up=True)
    sampled = ProcessSampler(process.pid)
    try:
        finish(process, what, timeout=timeout)
    finally:
        sampled.stop()
    return time.perf_counter() - began, began_epoch_ms, sampled


def catch_up(
    path: str, tmp: Path, args: argparse.Namespace, fmt: str, changes: Sequence[Change]
) -> dict[str, Any]:
    eventlog = tmp / f"eventlog-catch-up-{fmt}"
    wall, began_epoch_ms, sampled = run_until_caught_up(
        path, stream_name(fmt), args, eventlog, f"catch-up {fmt}", timeout=3600
    )
    events = check_events(tmp / f"events-{fmt}", stream_name(fmt), changes)
    rows = check_replica(path, tmp, fmt)
    metrics = spark_metrics(eventlog, tmp / f"events-{fmt}")
    if not metrics["batches"]:
        raise fail(f"catch-up {fmt}: the pipeline's checkpoint shows no micro-batch")
    # Start-up: from the command's start to its first micro-batch (JVM, session, query).
    startup_s = (metrics["batches"][0]["begin"] - began_epoch_ms) / 1000
    return {
        "changes": len(changes),
        "events_read": events,
        "replica_rows": rows,
        "wall_s": round(wall, 2),
        "changes_per_s": round(len(changes) / wall),
        "startup_s": round(startup_s, 2),
        "after_startup_changes_per_s": round(len(changes) / (wall - startup_s)),
        "driver_peak_rss_mb": round(sampled.python_mb),
        "jvm_peak_rss_mb": round(sampled.jvm_mb),
        # Where the CPU goes, and how much of the two cores the run kept busy.
        "cpu_seconds": (cpu := sampled.cpu_seconds()),
        "cores_busy": round(sum(cpu.values()) / wall, 2),
        **breakdown(metrics, wall),
    }


def fixed_cost(path: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Wall seconds of a JSON ``pipeline run --until-caught-up`` landing one transaction,
    checked as the catch-ups are (every change since ``streams start`` has its event)."""
    with changestream.open(path) as db:
        upserts(db, args.rows_per_txn, args.rows_per_txn, args.keys)
        end = store_of(db).last_commit_ts()
    name = stream_name("json")
    eventlog = tmp / "eventlog-fixed-cost"
    wall, _, _ = run_until_caught_up(path, name, args, eventlog, "fixed cost", timeout=600)
    _, everything = read_changes(path, 0, end)
    check_events(tmp / "events-json", name, everything)
    check_replica(path, tmp, "json")
    return {"changes": args.rows_per_txn, "wall_s": round(wall, 2)}


def live(path: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    from changestream.datastream import StreamCatalog

    name = stream_name("json")
    eventlog = tmp / "eventlog-live"
    process = run_pipeline(path, name, args, eventlog, until_caught_up=False)
    try:
        deadline = time.monotonic() + 180
        with changestream.open(path) as db:
            catalog = StreamCatalog(db)
            while (
                not catalog.describe(name)["pipeline_attached"]
                or catalog.get(name).state.value != "Running"
            ):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise fail("live: the pipeline did not start")
                time.sleep(0.2)
            # Warm up: one change through a first micro-batch, which starts Spark's workers.
            before = catalog.progress(name).rows_processed
            with db.transaction() as tx:
                tx.insert_or_update("Orders", COLUMNS, [[0, "warm-up", 0, "live"]])
            while catalog.progress(name).rows_processed <= before:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise fail("live: the pipeline did not process a first change")
                time.sleep(0.2)
            warm = store_of(db).last_commit_ts()
            rate, seconds, per_txn = str(args.rate), str(args.seconds), str(args.live_rows_per_txn)
            writer = subprocess.run(
                [sys.executable, "-c", WRITER, path, rate, seconds, per_txn, str(args.keys), "1"],
                capture_output=True,
                text=True,
                check=True,
            )
            written, writer_s = writer.stdout.split()
            last = store_of(db).last_commit_ts()
            while (catalog.progress(name).last_commit_timestamp or 0) < last:
                if process.poll() is not None or time.monotonic() > deadline + args.seconds:
                    raise fail("live: the pipeline did not catch up with the writer")
                time.sleep(0.2)
            catalog.transition(name, "pause")
        finish(process, "live", timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _, changes = read_changes(path, warm + 1, last)
    if len(changes) != int(written):
        raise fail(f"live: {written} changes written, the stream holds {len(changes)}")
    _, everything = read_changes(path, 0, last)
    check_events(tmp / "events-json", name, everything)
    check_replica(path, tmp, "json")
    metrics = spark_metrics(eventlog, tmp / "events-json")
    batches = metrics["batches"]
    lags = []
    # Where a live change's wait goes: the micro-batches that carried the writer's changes
    # (by position in ``batches``; not the warm-up's, whose watermark is past its change).
    carriers: set[int] = set()
    for ts, *_ in changes:
        covering = [i for i, b in enumerate(batches) if b["watermark"] >= ts]
        if not covering:
            raise fail(f"live: no micro-batch covers the change committed at {ts}")
        first = min(covering, key=lambda i: batches[i]["end"])
        carriers.add(first)
        lags.append(batches[first]["end"] - ts / 1000)
    ordered = sorted(lags)
    carried = [batches[i] for i in sorted(carriers)]
    phases = ("triggerExecution", "latestOffset", "addBatch", "walCommit", *PARTS)
    for batch in carried:
        batch["tasks"] = sum(
            max(0, min(end, batch["end"]) - max(begin, batch["begin"]))
            for begin, end in _union(metrics["stages"])
        )
    return {
        **{
            f"batch_{phase}_ms_p50": statistics.median(b.get(phase, 0) for b in carried)
            for phase in (*phases, "tasks")
            if carried
        },
        **(
            {"batch_triggerExecution_ms_max": max(b["triggerExecution"] for b in carried)}
            if carried
            else {}
        ),
        "batches": len(carried),
        # Each carried batch's duration, in order: a change's lag is its wait for the next
        # trigger plus that batch, so the slowest batches make the p99.
        "batch_triggerExecution_ms_each": [b["triggerExecution"] for b in carried],
        "batch_tasks_ms_each": [b["tasks"] for b in carried],
        "batch_replicaMerge_ms_each": [b.get("replicaMerge", 0) for b in carried],
        "target_changes_per_s": args.rate,
        "rows_per_txn": args.live_rows_per_txn,
        "changes": len(changes),
        "writer_changes_per_s": round(int(written) / float(writer_s)),
        "lag_p50_ms": round(statistics.median(ordered), 1),
        "lag_p99_ms": round(ordered[max(int(len(ordered) * 0.99) - 1, 0)], 1),
        "lag_max_ms": round(ordered[-1], 1),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changes", type=int, default=300_000, help="catch-up changes")
    parser.add_argument("--keys", type=int, default=200_000, help="key space of the upserts")
    parser.add_argument("--rows-per-txn", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-records-per-trigger", type=int, default=None)
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rate", type=float, default=5_000, help="live changes/s (0: max)")
    parser.add_argument("--live-rows-per-txn", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20.0, help="live phase length")
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="a tiny run checking its counts")
    args = parser.parse_args(argv)
    if args.smoke:
        args.changes, args.keys, args.rate, args.seconds = 2_000, 5_000, 300, 3.0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    result: dict[str, Any] = {
        "benchmark": "pipeline",
        "master": args.master,
        # The driver JVM's class archive (`changestream pipeline prepare`, run by `make`), which
        # takes seconds off every start-up; null when the runs started without one.
        "jvm_class_archive": jvm_archive.driver_java_options(),
    }
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        path = str(tmp / "source.db")
        setup(path, tmp, args)
        began = time.perf_counter()
        with changestream.open(path) as db:
            upserts(db, args.changes, args.rows_per_txn, args.keys)
            end = store_of(db).last_commit_ts()
        load_s = time.perf_counter() - began
        read_s, changes = read_changes(path, 0, end)
        if len(changes) != args.changes:
            raise fail(f"read {len(changes)} changes, committed {args.changes}")
        raw = len(changes) / read_s
        log.info("raw read function: %.0f changes/s", raw)
        for fmt in FORMATS:
            log.info("catch-up into %s files + Delta: %d changes", fmt, len(changes))
            result[f"catch_up_{fmt}_delta"] = catch_up(path, tmp, args, fmt, changes)
        log.info("fixed cost: one transaction into json files + Delta")
        result["fixed_cost"] = fixed_cost(path, tmp, args)
        if not args.skip_live:
            log.info("live: %.0f changes/s for %.0fs", args.rate, args.seconds)
            result["live"] = live(path, tmp, args)
    json_rate = result["catch_up_json_delta"]["changes_per_s"]
    fixed_s = result["fixed_cost"]["wall_s"]
    beyond_s = result["catch_up_json_delta"]["wall_s"] - fixed_s
    figures = {
        "json_delta_changes_per_s": json_rate,
        "json_delta_over_raw_read": round(json_rate / raw, 3),
        "avro_delta_changes_per_s": result["catch_up_avro_delta"]["changes_per_s"],
    }
    if "live" in result:
        figures["live_lag_p99_ms"] = result["live"]["lag_p99_ms"]
    result.update(
        {
            "changes": args.changes,
            "rows_per_txn": args.rows_per_txn,
            "partitions": args.partitions,
            "load_changes_per_s": round(args.changes / load_s),
            "raw_read_changes_per_s": round(raw),
            "fixed_cost_s": fixed_s,
            "json_delta_beyond_fixed_cost_changes_per_s": (
                round(args.changes / beyond_s) if beyond_s > 0 else None
            ),
            **figures,
        }
    )
    goals(
        result,
        [
            goal(name, figures[name], op, target, "issue 24")
            for name, op, target in GOALS
            if name in figures
        ],
    )
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
