"""Per-account balances kept up to date by Stream Client workers.

A bank moves money between accounts in the table ``AccountBalance``; the change stream
``AccountBalanceStream`` records every change. Stream Client workers share the stream's
partitions and keep a read model, ``balances`` in a separate SQLite file, up to date. Each
upsert applies only if it is newer than what the view holds, so a record delivered twice
(after a worker crash) does no harm.

Everything in one process (a writer, three workers as threads, splits and a merge)::

    python examples/balances.py

Or by hand, in several terminals, to watch leases move when workers start and stop::

    python examples/balances.py setup balances.db
    python examples/balances.py write balances.db --seconds 120
    python examples/balances.py work balances.db worker-1      # start 2 or 3; Ctrl-C stops one
    changestream leases balances.db AccountBalanceStream        # the live lease table
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import signal
import sqlite3
import tempfile
import time
from pathlib import Path

import changestream
from changestream import COMMIT_TIMESTAMP, DataChangeRecord
from changestream.client import (
    Checkpointer,
    InitializationContext,
    RecordProcessor,
    ShutdownReason,
    StreamClient,
    describe_leases,
)
from changestream.clock import now_us

STREAM = "AccountBalanceStream"
ACCOUNTS = [f"acct-{i:03d}" for i in range(60)]
OPENING_BALANCE = 1_000
COLUMNS = ["AccountId", "LastUpdate", "Balance"]


class BalanceProcessor(RecordProcessor):
    """Applies balance changes of one partition to the ``balances`` view, then checkpoints."""

    def __init__(self, view_path: str) -> None:
        self._view_path = view_path
        self._view: sqlite3.Connection | None = None

    def initialize(self, context: InitializationContext) -> None:
        self._view = open_view(self._view_path)
        logging.info("%s starts partition …%s", context.worker_id, context.partition_token[-8:])

    def process_records(self, records: list[DataChangeRecord], checkpointer: Checkpointer) -> None:
        assert self._view is not None
        with self._view:  # one view transaction per batch
            for record in records:
                for mod in record.mods:
                    if "Balance" not in mod.new_values:
                        continue  # a delete, or a change that left the balance alone
                    self._view.execute(
                        "INSERT INTO balances (account, balance, as_of) VALUES (?, ?, ?)"
                        " ON CONFLICT (account) DO UPDATE SET balance = excluded.balance,"
                        " as_of = excluded.as_of WHERE excluded.as_of > balances.as_of",
                        (mod.keys["AccountId"], mod.new_values["Balance"], record.commit_timestamp),
                    )
        # The view is committed: from here on these records need not come again.
        checkpointer.checkpoint()

    def shutdown(self, reason: ShutdownReason, checkpointer: Checkpointer) -> None:
        if self._view is not None:
            self._view.close()


def open_view(path: str) -> sqlite3.Connection:
    view = sqlite3.connect(path, timeout=30)
    # WAL is the file's mode, set once. Workers opening the view at the same moment race to
    # set it, and SQLite refuses the losers at once (no busy wait): one winner is enough.
    if view.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        with contextlib.suppress(sqlite3.OperationalError):
            view.execute("PRAGMA journal_mode=WAL")
    view.execute(
        "CREATE TABLE IF NOT EXISTS balances"
        " (account TEXT PRIMARY KEY, balance INTEGER NOT NULL, as_of INTEGER NOT NULL)"
    )
    return view


def setup(path: str) -> None:
    """The table, the change stream, opening balances, and four partitions to share."""
    with changestream.open(path) as db:
        db.execute_ddl(
            [
                "CREATE TABLE AccountBalance (AccountId STRING(MAX) NOT NULL, "
                "LastUpdate TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true), "
                "Balance INT64 NOT NULL) PRIMARY KEY (AccountId)",
                f"CREATE CHANGE STREAM {STREAM} FOR AccountBalance",
            ]
        )
        for boundary in ("acct-015", "acct-030", "acct-045"):
            db.split_at("AccountBalance", (boundary,))
        with db.transaction(tag="app=bank,action=open") as tx:
            tx.insert(
                "AccountBalance",
                COLUMNS,
                [[a, COMMIT_TIMESTAMP, OPENING_BALANCE] for a in ACCOUNTS],
            )
    print(f"created {path}: {len(ACCOUNTS)} accounts of {OPENING_BALANCE}, 4 partitions")


def write(path: str, seconds: float, reshape: bool = False) -> int:
    """Random transfers for ``seconds`` (splitting and merging midway when ``reshape``)."""
    rng = random.Random()
    transfers = 0
    with changestream.open(path) as db:
        balances = {a: b for a, _, b in db.read("AccountBalance")}
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            source, target = rng.sample(ACCOUNTS, 2)
            amount = rng.randint(1, max(1, balances[source] // 4))
            balances[source] -= amount
            balances[target] += amount
            with db.transaction(tag="app=bank,action=transfer") as tx:
                tx.update(
                    "AccountBalance",
                    COLUMNS,
                    [
                        [source, COMMIT_TIMESTAMP, balances[source]],
                        [target, COMMIT_TIMESTAMP, balances[target]],
                    ],
                )
            transfers += 1
            if reshape and transfers == 300:
                db.split_at("AccountBalance", ("acct-052",))
            if reshape and transfers == 600:
                db.merge_at("AccountBalance", ("acct-015",))  # one child of two parents
            time.sleep(0.005)
    return transfers


def work(
    db: changestream.Database, worker_id: str, view_path: str, start: int | None = None
) -> StreamClient:
    """A worker of the ``balances`` consumer group (not started)."""
    return StreamClient(
        db,
        STREAM,
        worker_id,
        lambda: BalanceProcessor(view_path),
        lease_timeout=3.0,
        consumer="balances",
        start_timestamp=start,
    )


def view_matches(path: str, view_path: str) -> bool:
    with changestream.open(path) as db:
        table = {a: b for a, _, b in db.read("AccountBalance")}
    view = open_view(view_path)
    try:
        return table == dict(view.execute("SELECT account, balance FROM balances"))
    finally:
        view.close()


def demo(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path, view_path = str(Path(tmp) / "bank.db"), str(Path(tmp) / "bank-view.db")
        setup(path)
        with changestream.open(path) as db:
            start = min(p.start_timestamp for p in db.partition_history(STREAM))
            # Workers normally run in processes of their own (see `work`); threads share one.
            workers = [work(db, f"worker-{i}", view_path, start) for i in (1, 2, 3)]
            for worker in workers:
                worker.start()
            print(
                f"3 workers consume while transfers run for {seconds:g} s, with a split and a merge"
            )
            transfers = write(path, seconds, reshape=True)
            deadline = time.monotonic() + 60
            while not view_matches(path, view_path) and time.monotonic() < deadline:
                time.sleep(0.2)
            for status in describe_leases(db.leases(STREAM, "balances").list_leases(), now_us()):
                owner = status.lease.lease_owner or "-"
                print(f"  partition …{status.lease.status_value[-8:]}  {status.state:<9} {owner}")
            for worker in workers:
                worker.stop()
        view = open_view(view_path)
        total = view.execute("SELECT sum(balance) FROM balances").fetchone()[0]
        view.close()
        matches = view_matches(path, view_path)
        print(
            f"{transfers} transfers; the view {'matches' if matches else 'DOES NOT match'} "
            f"the table; money in the view: {total} (opened with "
            f"{OPENING_BALANCE * len(ACCOUNTS)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="Per-account balances with the Stream Client.")
    commands = parser.add_subparsers(dest="command")
    demo_cmd = commands.add_parser("demo", help="everything in one process (the default)")
    demo_cmd.add_argument("--seconds", type=float, default=8.0)
    commands.add_parser("setup", help="create the database").add_argument("path")
    write_cmd = commands.add_parser("write", help="make random transfers")
    write_cmd.add_argument("path")
    write_cmd.add_argument("--seconds", type=float, default=60.0)
    work_cmd = commands.add_parser("work", help="run one worker until Ctrl-C")
    work_cmd.add_argument("path")
    work_cmd.add_argument("worker_id")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.command == "work" else logging.WARNING)
    if args.command == "setup":
        try:
            setup(args.path)
        except changestream.AlreadyExists as exc:
            # The README's quickstart makes the same table in bank.db: say so, no traceback.
            raise SystemExit(f"error: {exc}; set up a new file, e.g. balances.db") from None
    elif args.command == "write":
        print(f"{write(args.path, args.seconds)} transfers")
    elif args.command == "work":
        view_path = str(Path(args.path).with_suffix(".view.db"))
        print(f"{args.worker_id} keeps {view_path} up to date; Ctrl-C stops it cleanly")
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops it cleanly too
        with changestream.open(args.path) as db:
            work(db, args.worker_id, view_path).run()
    else:
        demo(getattr(args, "seconds", 8.0))


if __name__ == "__main__":
    main()
