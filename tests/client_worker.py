"""A Stream Client worker process for the tests: ``python -m tests.client_worker ...``.

It appends one JSON line per processed mod to its output file, flushed before the batch is
checkpointed, then a ``checkpoint`` line once the checkpoint is recorded; a SIGKILL between
the two leaves processed but uncheckpointed records behind, as a crash would. SIGTERM stops
the worker cleanly.
"""

from __future__ import annotations

import argparse
import logging
import signal
import time
from typing import IO

import orjson

import changestream
from changestream import DataChangeRecord
from changestream.client import Checkpointer, Position, RecordProcessor, StreamClient


class LoggingProcessor(RecordProcessor):
    """Writes every mod it processes to ``out``; checkpoints after each batch."""

    def __init__(self, out: IO[bytes], worker: str, work_seconds: float) -> None:
        self._out = out
        self._worker = worker
        self._work_seconds = work_seconds

    def process_records(self, records: list[DataChangeRecord], checkpointer: Checkpointer) -> None:
        stamp = time.monotonic_ns()
        lines = []
        for record in records:
            position = Position.of(record)
            for mod in record.mods:
                line = {
                    "w": self._worker,
                    "p": record.partition_token,
                    "ts": position.timestamp,
                    "seq": position.sequence,
                    "t": stamp,
                    "k": mod.keys["K"],
                    "v": mod.new_values.get("V"),
                }
                lines.append(orjson.dumps(line) + b"\n")
        self._out.write(b"".join(lines))
        self._out.flush()
        time.sleep(self._work_seconds)
        checkpointer.checkpoint()
        done = {"w": self._worker, "checkpoint": checkpointer.last_checkpoint.to_text()}
        self._out.write(orjson.dumps({**done, "p": checkpointer.partition_token}) + b"\n")
        self._out.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("stream")
    parser.add_argument("worker")
    parser.add_argument("out")
    parser.add_argument("--lease-timeout", type=float, default=2.0)
    parser.add_argument("--start", type=int, default=None)
    parser.add_argument("--consumer", default="default")
    parser.add_argument("--work-seconds", type=float, default=0.0)
    parser.add_argument("--max-records", type=int, default=1000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.worker} %(message)s")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with changestream.open(args.path) as db, open(args.out, "ab") as out:
        client = StreamClient(
            db,
            args.stream,
            args.worker,
            lambda: LoggingProcessor(out, args.worker, args.work_seconds),
            lease_timeout=args.lease_timeout,
            consumer=args.consumer,
            start_timestamp=args.start,
            max_records=args.max_records,
        )
        client.run()


if __name__ == "__main__":
    main()
