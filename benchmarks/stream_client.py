"""Stream Client benchmark: records/s with 1, 2 and 4 worker processes over 16 partitions,
failover time after a SIGKILL, and the duplicates it causes. Prints one JSON line.

Loads a backlog into a table whose change stream has 16 partitions, then lets a fresh
consumer group of 1, 2 and 4 worker processes consume it: records/s from the moment the
first processor starts on a partition (before its first read) to the moment the last record
is processed (lease balancing included), timed by the workers themselves, and seconds from
starting the processes to the last record. The baseline, measured in the same run, is one
process reading the 16 partitions one after the other with the read function and no leases.
The baseline and the 1-worker run alternate ``--repeats`` times and the fastest of each is
compared (the machine is noisy; both get the same treatment). Then 2 workers consume while a
writer commits; one is killed with SIGKILL and the time until its leases are owned elsewhere
is measured, as are the records delivered twice (the killed worker's records after its last
checkpoint).

Workers are this script run with ``--worker``; each writes ``<partition> <ts> <seq>`` per
record it processed (flushed before checkpointing), ``C <partition>`` after each checkpoint
and ``T <monotonic ns> <process CPU ns> <catch-up thread CPU ns>`` when a processor starts and
after each batch (for the 1-worker run, the CPU the worker process used while it drained, per
record, is reported beside the baseline's, and so is the share of it its catch-up thread used:
the thread that reads every partition's backlog, the rest being the consumer threads that
process the batches, lease renewals and checkpoints). A second baseline, alternating with
the others, makes the same reads but takes the records in lists of the client's batch size:
the part of the gap that handing out batches costs by itself. Every run counts unique
records, not lines, and checks their number against what was written: one record per
partition and mod type each transaction touched, worked out from the keys and the split
points. Goal (issue 21): 1 worker ≥ 0.7 of the one-reader baseline.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple, TextIO

import changestream
from changestream import DataChangeRecord
from changestream.client import (
    Checkpointer,
    InitializationContext,
    RecordProcessor,
    StreamClient,
)
from changestream.client.lease_table import PARTITION_LEASE
from changestream.embedded.database import store_of
from changestream.streams.chunks import next_chunk
from checks import CheckFailed, expect, goal, goals

STREAM = "OrdersStream"
PARTITIONS = 16
KEYS = 1600
COLUMNS = ["OrderId", "Amount", "Note"]
#: The Stream Client's default ``max_records``: the size of its catch-up batches.
CLIENT_BATCH: int = inspect.signature(StreamClient).parameters["max_records"].default


#: The name the Stream Client gives the thread its partitions catch up on (``_N`` follows).
CATCH_UP_THREAD = "-catch-up_"


def _catch_up_clock() -> int | None:
    """The CPU clock of this worker's catch-up thread (see ``CATCH_UP_THREAD``), if it runs."""
    found = [t.ident for t in threading.enumerate() if CATCH_UP_THREAD in t.name and t.ident]
    return time.pthread_getcpuclockid(found[0]) if len(found) == 1 else None


def _times(catch_up: int | None) -> str:
    """A ``T`` line: this machine's monotonic clock, this process's CPU and the CPU of its
    catch-up thread (0 before it started), in ns."""
    thread_ns = 0 if catch_up is None else time.clock_gettime_ns(catch_up)
    return f"T {time.monotonic_ns()} {time.process_time_ns()} {thread_ns}\n"


class FileSink(RecordProcessor):
    """Writes one line per record, flushes, then checkpoints the batch. Also writes a ``T``
    line (``time.monotonic_ns()``, one clock for every process of the machine, and the
    process's CPU) when it starts on a partition and after each batch, so the parent times the
    client from its first read to its last processed record instead of by polling these
    files."""

    def __init__(self, out: TextIO, work_us: int) -> None:
        self._out = out
        self._work_s = work_us / 1e6
        self._catch_up: int | None = None

    def process_records(self, records: list[DataChangeRecord], checkpointer: Checkpointer) -> None:
        if self._work_s:
            time.sleep(self._work_s * len(records))
        lines = "".join(
            f"{r.partition_token} {r.commit_timestamp} {r.record_sequence}\n" for r in records
        )
        if self._catch_up is None:
            self._catch_up = _catch_up_clock()
        self._out.write(f"{lines}{_times(self._catch_up)}")
        self._out.flush()
        checkpointer.checkpoint()
        self._out.write(f"C {checkpointer.partition_token}\n")
        self._out.flush()

    def initialize(self, context: InitializationContext) -> None:
        # A processor serves one lease: none of its batches was read yet.
        self._out.write(_times(None))
        self._out.flush()


def worker_main(args: argparse.Namespace) -> None:
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with changestream.open(args.path) as db, open(args.out, "a") as out:
        StreamClient(
            db,
            STREAM,
            args.worker_id,
            lambda: FileSink(out, args.work_us),
            lease_timeout=args.lease_timeout,
            consumer=args.group,
            start_timestamp=args.start,
        ).run()


class Drain(NamedTuple):
    """One run of a consumer group over the backlog (see :func:`throughput`)."""

    records_per_s: float
    seconds: float
    cpu_us_per_record: float
    catch_up_cpu_us_per_record: float


class Written:
    """What a writer committed: the records it must make (one per partition and
    mod type a transaction touched), worked out from the split points, not by reading."""

    def __init__(self, existing: set[int]) -> None:
        self.existing = existing
        self.records = 0

    def add(self, keys: list[int]) -> None:
        self.records += len({(k // (KEYS // PARTITIONS), k in self.existing) for k in keys})
        self.existing.update(keys)


def load(path: str, transactions: int) -> tuple[int, Written]:
    """The table, a 16-partition stream and the backlog; returns (stream creation, writes)."""
    written = Written(set())
    with changestream.open(path) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl(
            "CREATE TABLE Orders (OrderId INT64 NOT NULL, Amount INT64, Note STRING(MAX))"
            " PRIMARY KEY (OrderId)"
        )
        step = KEYS // PARTITIONS
        for boundary in range(step, KEYS, step):
            db.split_at("Orders", (boundary,))
        created = db.execute_ddl(f"CREATE CHANGE STREAM {STREAM} FOR Orders")
        rng = random.Random(1)
        for t in range(transactions):
            keys = rng.sample(range(KEYS), 4)
            with db.transaction() as tx:
                tx.insert_or_update("Orders", COLUMNS, [[k, t, "standard"] for k in keys])
            written.add(keys)
    return created, written


def baseline(
    path: str, created: int, written: Written, batch: int | None = None
) -> tuple[float, float]:
    """(records/s, CPU µs per record) reading every partition with the read function in one
    process, one after the other. With ``batch``, the records are taken in lists of that many
    and each list is dropped only when the next is taken, as a client that hands out batches
    must: what batching alone costs, without the Stream Client's threads and leases."""
    with changestream.open(path) as db:
        end = store_of(db).last_commit_ts()
        started, cpu = time.perf_counter(), time.process_time()
        count = 0
        for partition in db.partitions(STREAM):
            records = iter(db.read_change_stream(STREAM, created, end, partition.token, 10_000))
            if batch is None:
                for record in records:
                    count += isinstance(record, DataChangeRecord)
            else:
                while taken := next_chunk(records, batch):
                    count += sum(isinstance(record, DataChangeRecord) for record in taken)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    expect("baseline records", count, written.records)
    return count / elapsed, cpu / count * 1e6


def spawn(
    path: str, group: str, worker: str, out: Path, start: int, timeout: float, work_us: int
) -> subprocess.Popen[bytes]:
    command = [sys.executable, __file__, "--worker", path, group, worker, str(out)]
    command += ["--start", str(start), "--lease-timeout", str(timeout), "--work-us", str(work_us)]
    return subprocess.Popen(command, stderr=subprocess.DEVNULL)


#: The starts of the lines that are not records: checkpoints and times.
_NOT_RECORDS = ("C ", "T ")
_NOT_RECORDS_B = tuple(p.encode() for p in _NOT_RECORDS)


def processed(outs: list[Path]) -> list[str]:
    """Every complete record line of the workers' files (a line cut short by a kill is not)."""
    lines: list[str] = []
    for out in outs:
        if out.exists():
            complete = out.read_text().split("\n")[:-1]
            lines += [ln for ln in complete if not ln.startswith(_NOT_RECORDS)]
    return lines


def _time_lines(out: Path) -> list[tuple[int, int, int]]:
    """The (monotonic ns, process CPU ns, catch-up thread CPU ns) of a worker's ``T`` lines
    (none when it got no lease)."""
    if not out.exists():
        return []
    lines = out.read_text().split("\n")[:-1]
    return [
        (int(a), int(b), int(c)) for a, b, c in (ln[2:].split() for ln in lines if ln[:2] == "T ")
    ]


def processing_seconds(outs: list[Path]) -> float:
    """Seconds from the first ``T`` line of the workers' files (a processor starting on a
    partition, before its first read) to the last (a batch processed)."""
    times = [at for out in outs for at, _, _ in _time_lines(out)]
    return (max(times) - min(times)) / 1e9


def processing_cpu_seconds(out: Path) -> tuple[float, float]:
    """The CPU seconds one worker's process used from its first ``T`` line to its last, and
    those its catch-up thread used, all of it from that span: the thread starts with the
    first read (0 and 0 for a worker that got no lease)."""
    lines = _time_lines(out)
    if not lines:
        return 0.0, 0.0
    cpu = [used for _, used, _ in lines]
    return (max(cpu) - min(cpu)) / 1e9, max(thread for _, _, thread in lines) / 1e9


def check_unique(what: str, lines: list[str], written: Written) -> None:
    """As many unique records among ``lines`` as ``written`` made."""
    expect(f"{what}: unique records", len(set(lines)), written.records)


class RecordCounter:
    """Counts unique record lines of growing files reading only what was appended, so polling
    does not take CPU from the workers being measured."""

    def __init__(self, outs: list[Path]) -> None:
        self._outs = outs
        self._offsets = [0] * len(outs)
        self._records: set[bytes] = set()

    def count(self) -> int:
        for i, out in enumerate(self._outs):
            if not out.exists():
                continue
            with open(out, "rb") as f:
                f.seek(self._offsets[i])
                chunk = f.read()
            whole = chunk[: chunk.rfind(b"\n") + 1]
            self._offsets[i] += len(whole)
            self._records.update(
                ln for ln in whole.split(b"\n") if ln and not ln.startswith(_NOT_RECORDS_B)
            )
        return len(self._records)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def throughput(
    path: str,
    tmp: Path,
    created: int,
    written: Written,
    workers: int,
    work_us: int,
    stall: float,
    run: int = 0,
) -> Drain:
    """Records/s from the first processor's start to the last record processed, seconds
    from the start of the processes to the last record, and CPU µs per record the workers'
    processes and their catch-up threads used meanwhile, by a fresh consumer group (one per
    ``run``). Fails if no new record arrives for ``stall`` seconds before all have."""
    records = written.records
    outs = [tmp / f"w{workers}-r{run}-{i}.txt" for i in range(workers)]
    started = time.perf_counter()
    procs = [
        spawn(path, f"bench-{workers}-r{run}", f"w{i}", out, created, 3.0, work_us)
        for i, out in enumerate(outs)
    ]
    counter = RecordCounter(outs)
    done, progressed = 0, started
    try:
        while done < records:
            now = time.perf_counter()
            if (newly := counter.count()) > done:
                done, progressed = newly, now
            elif now - progressed > stall:
                break
            time.sleep(0.02)
        finished = time.perf_counter()
    finally:
        stop(procs)
    check_unique(f"{workers} workers", processed(outs), written)
    cpu = [processing_cpu_seconds(out) for out in outs]
    return Drain(
        records / processing_seconds(outs),
        finished - started,
        sum(process for process, _ in cpu) / records * 1e6,
        sum(thread for _, thread in cpu) / records * 1e6,
    )


def failover(
    path: str, tmp: Path, lease_timeout: float, stall: float, existing: set[int]
) -> dict[str, float | int]:
    """Two workers on a live stream; SIGKILL one; measure the take-over and duplicates."""
    with changestream.open(path) as db:
        start = store_of(db).last_commit_ts() + 1  # after the backlog's last commit
    halt = threading.Event()
    written = Written(set(existing))

    def write() -> None:
        rng = random.Random(2)
        with changestream.open(path) as db:
            while not halt.is_set():
                with db.transaction() as tx:
                    keys = rng.sample(range(KEYS), 4)
                    tx.insert_or_update("Orders", COLUMNS, [[k, 0, "live"] for k in keys])
                written.add(keys)
                time.sleep(0.002)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    outs = [tmp / "fail-a.txt", tmp / "fail-b.txt"]
    procs = [
        spawn(path, "failover", name, out, start, lease_timeout, 0)
        for name, out in zip(("a", "b"), outs, strict=True)
    ]
    try:
        with changestream.open(path) as db:
            table = db.leases(STREAM, "failover")

            def partitions() -> list[changestream.Lease]:
                return [r for r in table.list_leases() if r.status_type == PARTITION_LEASE]

            def owners() -> Counter[str | None]:
                return Counter(r.lease_owner for r in partitions())

            deadline = time.monotonic() + 120
            while not (owners()["a"] and owners()["b"] and len(processed(outs[:1])) > 500):
                if time.monotonic() > deadline:
                    raise SystemExit("the failover workers did not start within 120 s")
                time.sleep(0.05)
            procs[0].send_signal(signal.SIGKILL)
            killed = time.monotonic()
            procs[0].wait()
            held = {r.status_value for r in partitions() if r.lease_owner == "a"}
            while any(r.lease_owner == "a" for r in partitions() if r.status_value in held):
                time.sleep(0.01)
            moved = time.monotonic() - killed
        # What the killed worker processed after its last checkpoint of a partition may come
        # again; a line cut short by the kill is dropped.
        at_risk: Counter[str] = Counter()
        for line in outs[0].read_text().split("\n")[:-1]:
            if line.startswith("C "):
                at_risk[line[2:]] = 0
            elif not line.startswith("T "):
                at_risk[line.split(" ")[0]] += 1
        halt.set()
        writer.join()
        counter = RecordCounter(outs)
        done, progressed = 0, time.monotonic()
        while done < written.records and time.monotonic() - progressed < stall:
            if (newly := counter.count()) > done:
                done, progressed = newly, time.monotonic()
            time.sleep(0.05)
        lines = processed(outs)
        check_unique("failover", lines, written)
        duplicates = len(lines) - len(set(lines))
        if duplicates > sum(at_risk.values()):
            raise SystemExit(
                f"check failed: {duplicates} records came twice, but only "
                f"{sum(at_risk.values())} were processed after the killed worker's checkpoints"
            )
        return {
            "failover_seconds": round(moved, 2),
            "duplicates_after_failover": duplicates,
            "uncheckpointed_when_killed": sum(at_risk.values()),
            "records_during_failover_run": written.records,
        }
    finally:
        halt.set()
        stop(procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=20000)
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of the baseline and of 1 worker, alternating; the fastest of each counts",
    )
    parser.add_argument("--work-us", type=int, default=0, help="simulated work per record")
    parser.add_argument("--lease-timeout", type=float, default=2.0, help="for the failover run")
    parser.add_argument("--worker", nargs=4, metavar=("PATH", "GROUP", "ID", "OUT"))
    parser.add_argument("--start", type=int)
    parser.add_argument(
        "--stall", type=float, default=60.0, help="fail if no new record arrives for this long"
    )
    args = parser.parse_args()
    if args.worker:
        args.path, args.group, args.worker_id, args.out = args.worker
        worker_main(args)
        return
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        path = str(tmp / "bench.db")
        created, written = load(path, args.transactions)
        # The machine is noisy: the ratio compares the fastest of as many runs of each.
        bases, batched, singles = [], [], []
        for run in range(args.repeats):
            bases.append(baseline(path, created, written))
            batched.append(baseline(path, created, written, CLIENT_BATCH))
            singles.append(
                throughput(path, tmp, created, written, 1, args.work_us, args.stall, run)
            )
        base, base_cpu = max(bases)
        in_batches, in_batches_cpu = max(batched)
        runs = {
            1: max(singles),
            **{
                n: throughput(path, tmp, created, written, n, args.work_us, args.stall)
                for n in (2, 4)
            },
        }
        if not runs[1].catch_up_cpu_us_per_record:
            raise CheckFailed(
                f"check failed: no thread named *{CATCH_UP_THREAD}N in the 1-worker run: the "
                "Stream Client's catch-up thread was renamed; update CATCH_UP_THREAD"
            )
        rates = {n: run.records_per_s for n, run in runs.items()}
        result: dict[str, object] = {
            "benchmark": "stream_client",
            "partitions": PARTITIONS,
            "records": written.records,
            "work_us_per_record": args.work_us,
            "cores": os.cpu_count(),
            "repeats": args.repeats,
            "baseline_read_function_records_per_s": round(base),
            "baseline_runs_records_per_s": [round(b) for b, _ in bases],
            "client_1_worker_runs_records_per_s": [round(r.records_per_s) for r in singles],
            **{f"records_per_s_{n}_workers": round(rate) for n, rate in rates.items()},
            **{f"seconds_to_drain_{n}_workers": round(r.seconds, 2) for n, r in runs.items()},
            # Where the time goes: the CPU each used per record, in the fastest run of each
            # (the worker's process: its consumer threads, lease renewals and checkpoints).
            "baseline_cpu_us_per_record": round(base_cpu, 2),
            # The same reads taking the records in lists of the client's batch size: of the
            # gap between the baseline and the client, what handing out batches costs by
            # itself (each batch's records are alive together, so colder in the caches).
            "baseline_batched_records_per_s": round(in_batches),
            "baseline_batched_cpu_us_per_record": round(in_batches_cpu, 2),
            "client_1_worker_vs_batched_baseline": round(rates[1] / in_batches, 2),
            "client_1_worker_cpu_us_per_record": round(runs[1].cpu_us_per_record, 2),
            # Of which the catch-up thread's reads (the baseline's whole work, plus handing
            # each batch over); the rest is the consumer threads and the lease upkeep.
            "client_1_worker_catch_up_thread_cpu_us_per_record": round(
                runs[1].catch_up_cpu_us_per_record, 2
            ),
            "scaling_2_vs_1": round(rates[2] / rates[1], 2),
            "scaling_4_vs_1": round(rates[4] / rates[1], 2),
            "client_1_worker_vs_baseline": round(rates[1] / base, 2),
            "lease_timeout_seconds": args.lease_timeout,
            **failover(path, tmp, args.lease_timeout, args.stall, written.existing),
        }
    ratio = result["client_1_worker_vs_baseline"]
    goals(result, [goal("client_1_worker_vs_baseline", ratio, ">=", 0.7, "issue 21")])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
