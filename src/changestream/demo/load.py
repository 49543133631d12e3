"""``changestream demo --load``: a skewed workload, and the partitions following it live."""

from __future__ import annotations

import random
import threading
import time

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from changestream import EmbeddedDatabase, data_changes, walk_partitions
from changestream.clock import format_ts, now_us

HOT_KEYS = range(900, 1000)
ALL_KEYS = range(0, 1000)


def _writer(db: EmbeddedDatabase, stop: threading.Event, counts: list[int]) -> None:
    """Mostly the hot range, a little everywhere else, as a skewed application would write."""
    rng = random.Random(7)
    while not stop.is_set():
        keys = {rng.choice(HOT_KEYS if rng.random() < 0.9 else ALL_KEYS) for _ in range(50)}
        with db.transaction(tag="load") as tx:
            tx.insert_or_update("Orders", ["OrderId", "Status"], [[k, "paid"] for k in keys])
        counts[0] += len(keys)


def _view(db: EmbeddedDatabase, phase: str, mods: int, events: list[str]) -> Group:
    table = Table(title=f"live partitions of change stream OrdersStream — {phase}")
    for column in ("token", "key range", "started", "mods/s"):
        table.add_column(column)
    for partition in db.partitions("OrdersStream"):
        table.add_row(
            "…" + partition.token[-10:],
            f"[{partition.start_key}, {partition.end_key})",
            format_ts(partition.start_timestamp)[11:23],
            f"{partition.write_rate:,.0f}",
        )
    log = Text("\n".join(events[-6:]) or "no split or merge yet", style="dim")
    return Group(table, Text(f"{mods:,} mods written"), log)


def _lineage_events(db: EmbeddedDatabase, seen: set[str], events: list[str]) -> None:
    for partition in db.partition_history("OrdersStream"):
        if partition.token in seen or not partition.parent_tokens:
            continue
        seen.add(partition.token)
        kind = "merge" if len(partition.parent_tokens) > 1 else "split"
        events.append(
            f"{format_ts(partition.start_timestamp)[11:23]}  {kind}: new partition "
            f"[{partition.start_key}, {partition.end_key})"
        )


def run_load_demo(db: EmbeddedDatabase, console: Console, seconds: float) -> None:
    """Write a skewed load for ``seconds``, then stay idle as long, showing the partitions."""
    console.rule("[bold]Partitions that follow the load")
    console.print(
        "A table of 1,000 orders; 90% of the writes go to orders 900–999. The split policy "
        "(here: split above 400 mods/s, merge below 100, partitions live at least 2 s) runs in "
        "the background, so the hot range gets partitions of its own, and once the load stops "
        "the cold partitions merge back.\n"
    )
    db.execute_ddl(
        [
            "CREATE TABLE Orders (OrderId INT64 NOT NULL, Status STRING(MAX)) "
            "PRIMARY KEY (OrderId)",
            "CREATE CHANGE STREAM OrdersStream FOR Orders",
        ]
    )
    db.set_split_policy(
        max_write_rate=400,
        merge_max_write_rate=100,
        merge_max_rows=500,
        max_rows=100_000,
        window_seconds=2,
        min_lifetime_seconds=2,
        check_interval_seconds=0.5,
    )
    start = min(p.start_timestamp for p in db.partition_history("OrdersStream"))
    stop = threading.Event()
    counts = [0]
    events: list[str] = []
    seen: set[str] = set()
    writer = threading.Thread(target=_writer, args=(db, stop, counts), daemon=True)
    writer.start()
    began = time.monotonic()
    with Live(_view(db, "writing", 0, events), console=console, refresh_per_second=4) as live:
        while time.monotonic() - began < 2 * seconds:
            writing = time.monotonic() - began < seconds
            if not writing:
                stop.set()
            _lineage_events(db, seen, events)
            live.update(_view(db, "writing" if writing else "idle", counts[0], events))
            time.sleep(0.25)
    stop.set()
    writer.join()
    _lineage_events(db, seen, events)
    splits = sum("split" in e for e in events)
    merges = sum("merge" in e for e in events)
    console.print(f"\n{splits} splits and {merges} merges. Checking that every mod is there…")
    _check_every_mod(db, start, counts[0], console)


def _check_every_mod(db: EmbeddedDatabase, start: int, written: int, console: Console) -> None:
    """Read the whole lineage, parents first, and count the mods."""
    end = now_us()  # the writer has stopped: every commit is at or before now
    partitions = 0
    mods = 0
    for partition in walk_partitions(db, "OrdersStream", start, end, 1000):
        partitions += 1
        for record in data_changes(partition.records()):
            mods += len(record.mods)
    verdict = "all there" if mods == written else "MISSING"
    console.print(f"{partitions} partitions read, {mods:,} of {written:,} mods: {verdict}.")
