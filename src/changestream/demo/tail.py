"""The tour's last step: every live partition tailed while a writer commits transfers."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from rich.text import Text

from changestream import (
    ChangeRecord,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    Partition,
)
from changestream.clock import now_us
from changestream.demo.bank import (
    STREAM,
    TAIL_HEARTBEAT_MS,
    TAIL_TAG,
)
from changestream.demo.base import TourBase
from changestream.render import (
    describe,
    json_line,
    plural,
    short_token,
)


class TailStep(TourBase):
    """Step 10: live partitions, each read in a thread of its own; it is also the
    :class:`~changestream.RecordActions` that prints each tailed record."""

    def tail(self, seconds: float) -> None:
        """Step 10: live partitions, read while a background writer commits."""
        self.step(
            "10. Tailing live partitions",
            f"Read every live partition with end_timestamp NULL and a "
            f"{TAIL_HEARTBEAT_MS} ms heartbeat for {seconds:g} s, while a background writer "
            "commits a transfer about every second. Id1 sits alone in its partition, so that "
            "reader gets heartbeats whenever a second passes without a change there.",
        )
        live = self.db.partitions(STREAM)
        for partition in live:
            self.note(f"reading {describe(partition)}")
        events: queue.Queue[tuple[str, ChangeRecord] | Exception] = queue.Queue()
        with self._tail_threads(live, now_us(), events):
            deadline = time.monotonic() + seconds
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    event = events.get(timeout=remaining)
                except queue.Empty:
                    break
                if isinstance(event, Exception):
                    raise event
                self._print_live(*event)

    @contextmanager
    def _tail_threads(
        self,
        live: Sequence[Partition],
        start: int,
        events: queue.Queue[tuple[str, ChangeRecord] | Exception],
    ) -> Iterator[None]:
        """One reader thread per live partition and one writer, stopped when the block ends."""
        stop = threading.Event()

        def read(token: str) -> None:
            try:
                records = self.db.read_change_stream(STREAM, start, None, token, TAIL_HEARTBEAT_MS)
                for record in records:
                    if stop.is_set():
                        return
                    events.put((token, record))
            except Exception as exc:
                events.put(exc)

        def write() -> None:
            # Mostly Id2 → Id3 (one partition); every third transfer also touches Id1's.
            number = 0
            while not stop.wait(0.5 if number == 0 else 1.0):
                source, target = ("Id1", "Id2") if number % 3 == 2 else ("Id2", "Id3")
                try:
                    self.transfer(source, target, 10 * (number + 1), TAIL_TAG)
                except Exception as exc:
                    events.put(exc)
                    return
                number += 1
                self.tail_transfers = number

        threads = [threading.Thread(target=read, args=(p.token,), daemon=True) for p in live]
        threads.append(threading.Thread(target=write, daemon=True))
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            # A reader notices the stop at its next record; heartbeats bound that to ~1 s.
            for thread in threads:
                thread.join(timeout=2 * TAIL_HEARTBEAT_MS / 1000)

    def _print_live(self, token: str, record: ChangeRecord) -> None:
        prefix = f"{time.strftime('%H:%M:%S')}  {short_token(token)}  {record.record_type}  "
        self.console.print(Text(prefix + record.handle(self)))

    def on_data_change(self, record: DataChangeRecord) -> str:
        """A tailed transfer, as a line of the tail."""
        self.tail_data_records += 1
        changes = ", ".join(
            f"{mod.keys['AccountId']} {mod.old_values.get('Balance')} → "
            f"{mod.new_values.get('Balance')}"
            for mod in record.mods
        )
        return (
            f"tx {record.server_transaction_id} {record.mod_type} {changes} "
            f"(the transaction touched "
            f"{plural(record.number_of_partitions_in_transaction, 'partition')})"
        )

    def on_heartbeat(self, record: HeartbeatRecord) -> str:
        """A tailed heartbeat, as a line of the tail."""
        self.tail_heartbeats += 1
        return json_line(record.to_dict())

    def on_child_partitions(self, record: ChildPartitionsRecord) -> str:
        """A tailed split or merge, as a line of the tail."""
        return json_line(record.to_dict())
