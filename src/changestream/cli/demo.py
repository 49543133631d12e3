"""``changestream demo``: a guided tour of change streams on a fresh database.

The tour follows the bank-transfer example and the query workflow of Spanner's change streams
documentation ("Change streams partitions, records, and queries") step by step:

1. create the ``AccountBalance`` table and three change streams (one per value capture type);
2. insert accounts, split the key space so ``Id1`` and ``Id2`` live in different partitions,
   and commit the example's transfer (Id1 1500 → 1000, Id2 1500 → 2000) in one transaction;
3. run the initial query (no partition token), then query the partitions it names, and their
   children, wave by wave, until the transfer's two records (one per partition) come back;
4. merge two partitions and show that both parents announce the same child, which is read only
   once both of them have finished;
5. show the same transfer through the NEW_VALUES and NEW_ROW streams, and through
   ``execute_sql`` in GoogleSQL and PostgreSQL syntax;
6. tail the live partitions while a background writer keeps committing transfers.
"""

from __future__ import annotations

import json
import os
import queue
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import click
import orjson
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

import changestream
from changestream import (
    COMMIT_TIMESTAMP,
    ChangeRecord,
    ChildPartitionsRecord,
    DataChangeRecord,
    EmbeddedDatabase,
    HeartbeatRecord,
    Partition,
    parents_finished,
)
from changestream.cli.common import json_line
from changestream.cli.load_demo import run_load_demo
from changestream.cli.partitions import describe, lineage_tree, short_token
from changestream.clock import format_ts, now_us, parse_ts

TABLE = "AccountBalance"
COLUMNS = ("AccountId", "LastUpdate", "Balance")
STREAM = "AccountBalanceStream"
NEW_VALUES_STREAM = "AccountBalanceNewValues"
NEW_ROW_STREAM = "AccountBalanceNewRow"
TRANSFER_TAG = "app=banking,env=prod,action=update"
TAIL_TAG = "app=banking,env=demo,action=tail"
STARTING_BALANCE = 1500
ACCOUNTS = ("Id1", "Id2", "Id3")
WORKFLOW_HEARTBEAT_MS = 10_000
TAIL_HEARTBEAT_MS = 1_000

SCHEMA = [
    f"CREATE TABLE {TABLE} (AccountId STRING(MAX) NOT NULL, "
    "LastUpdate TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true), "
    "Balance INT64 NOT NULL) PRIMARY KEY (AccountId)",
    f"CREATE CHANGE STREAM {STREAM} FOR {TABLE}",
    f"CREATE CHANGE STREAM {NEW_VALUES_STREAM} FOR {TABLE} "
    "OPTIONS (value_capture_type = 'NEW_VALUES')",
    f"CREATE CHANGE STREAM {NEW_ROW_STREAM} FOR {TABLE} OPTIONS (value_capture_type = 'NEW_ROW')",
]

GOOGLESQL_QUERY = f"""SELECT ChangeRecord FROM READ_{STREAM} (
  start_timestamp => @start,
  end_timestamp => @end,
  partition_token => @token,
  heartbeat_milliseconds => {WORKFLOW_HEARTBEAT_MS}
)"""

POSTGRESQL_QUERY = f"""SELECT *
FROM "spanner"."read_json_{STREAM}" (
  $1, $2, $3, {WORKFLOW_HEARTBEAT_MS}, NULL
)"""


def documented_json(value: Any, indent: int = 0, room: int = 76) -> str:
    """Indented JSON laid out like the documentation's examples: an object or array that fits in
    ``room`` characters stays on one line, so ``"type": {"code": "STRING"}`` reads as one."""
    inline = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, dict | list) or not value or len(inline) <= room - indent:
        return inline
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            name = json.dumps(key, ensure_ascii=False) + ": "
            items.append(pad + name + documented_json(item, indent + 2, room - len(name)))
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + documented_json(item, indent + 2, room) for item in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def plural(count: int, noun: str) -> str:
    """``1 partition``, ``2 partitions``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


@dataclass(frozen=True, slots=True)
class PartitionQuery:
    """One change stream query to run: a partition token and where to start reading it."""

    token: str
    start: int
    parents: tuple[str, ...] = ()


@dataclass(slots=True)
class WorkflowResult:
    """What a run of the query workflow returned."""

    data: list[DataChangeRecord] = field(default_factory=list)
    #: The child partitions records, by the token of the partition that returned them.
    children: dict[str, list[ChildPartitionsRecord]] = field(default_factory=dict)


class Tour:
    """The demo's steps, run in order on one fresh database, printing as they go."""

    def __init__(self, db: EmbeddedDatabase, console: Console) -> None:
        self.db = db
        self.console = console
        self._highlight = JSONHighlighter()
        self.created = 0
        self.transfer_ts = 0
        self.tail_data_records = 0
        self.tail_heartbeats = 0
        self.tail_transfers = 0

    # -- printing ------------------------------------------------------------------------------

    def step(self, title: str, explanation: str) -> None:
        """Start a step: a rule with its title, then one line saying what it shows."""
        self.console.print()
        self.console.rule(Text(title, style="bold"))
        self.console.print(Text(explanation))

    def note(self, text: str) -> None:
        """An observation, marked with an arrow."""
        self.console.print(Text("→ " + text, style="cyan"))

    def show_json(self, value: Any) -> None:
        """``value`` as highlighted JSON; datetimes, NUMERIC and BYTES as ``changestream sql``
        prints them."""
        plain = orjson.loads(json_line(value))
        self.console.print(self._highlight(documented_json(plain)))

    def show(self, record: ChangeRecord) -> None:
        """A record in the documented shape: ``{"data_change_record": {...}}`` and so on."""
        self.show_json({record.record_type: record.to_dict()})

    def partition_names(self, stream: str) -> dict[str, Partition]:
        """Every partition of ``stream`` by token, to describe them by key range."""
        return {p.token: p for p in self.db.partition_history(stream)}

    # -- writing -------------------------------------------------------------------------------

    def transfer(self, source: str, target: str, amount: int, tag: str) -> int:
        """Move ``amount`` between two accounts in one transaction; returns its commit time."""
        # The tour has a single writer, so reading balances before the transaction is safe.
        balances = dict(self.db.read(TABLE, [(source,), (target,)], ["AccountId", "Balance"]))
        with self.db.transaction(tag=tag) as tx:
            tx.update(
                TABLE,
                COLUMNS,
                [
                    [source, COMMIT_TIMESTAMP, balances[source] - amount],
                    [target, COMMIT_TIMESTAMP, balances[target] + amount],
                ],
            )
        assert tx.commit_timestamp is not None
        return parse_ts(tx.commit_timestamp)

    # -- the steps -----------------------------------------------------------------------------

    def create_schema(self) -> None:
        """Step 1: the table and three change streams."""
        self.step(
            "1. Schema",
            "The AccountBalance table of Spanner's change streams documentation, and three "
            "change streams watching it, each with another value capture type "
            "(OLD_AND_NEW_VALUES is the default).",
        )
        for statement in SCHEMA:
            self.console.print(Text("  " + statement, style="green"))
        self.created = self.db.execute_ddl(SCHEMA)
        self.note(f"change streams created at {format_ts(self.created)}")

    def insert_accounts(self) -> None:
        """Step 2: the accounts, 1500 each."""
        self.step(
            "2. Accounts",
            "Insert the accounts; LastUpdate takes the commit timestamp "
            "(changestream.COMMIT_TIMESTAMP).",
        )
        with self.db.transaction() as tx:
            tx.insert(
                TABLE,
                COLUMNS,
                [[account, COMMIT_TIMESTAMP, STARTING_BALANCE] for account in ACCOUNTS],
            )
        for account in ACCOUNTS:
            self.note(f"{account}: {STARTING_BALANCE}")

    def split_key_space(self) -> None:
        """Step 3: split so Id1, Id2 and Id3 are in three partitions."""
        self.step(
            "3. Splits",
            "Split the key space at Id2 and at Id3, as the database does under load, so Id1 "
            "and Id2 land in different partitions. A split ends the parent partition and "
            "starts its children at the split time.",
        )
        self.db.split_at(TABLE, ("Id2",))
        self.db.split_at(TABLE, ("Id3",))
        self.console.print(
            lineage_tree(f"change stream {STREAM}", self.db.partition_history(STREAM))
        )

    def first_transfer(self) -> None:
        """Step 4: the documentation's transfer, across two partitions."""
        self.step(
            "4. The transfer",
            f"One transaction tagged {TRANSFER_TAG!r}: Id1 1500 → 1000 and Id2 1500 → 2000.",
        )
        self.transfer_ts = self.transfer("Id1", "Id2", 500, TRANSFER_TAG)
        self.note(f"committed at {format_ts(self.transfer_ts)}")

    def initial_query(self, stream: str, start: int, end: int, show: bool) -> list[PartitionQuery]:
        """The first query of the workflow: no partition token, answered with the partitions
        that cover the key space at ``start``."""
        records = list(self.db.read_change_stream(stream, start, end, None, WORKFLOW_HEARTBEAT_MS))
        queries: list[PartitionQuery] = []
        for record in records:
            if show:
                self.show(record)
            assert isinstance(record, ChildPartitionsRecord)
            queries.extend(
                PartitionQuery(child.token, record.start_timestamp)
                for child in record.child_partitions
            )
        return queries

    def follow(
        self, stream: str, first: list[PartitionQuery], end: int, show: bool
    ) -> WorkflowResult:
        """Run the documented query workflow from ``first`` up to ``end``.

        Each wave queries its partitions in parallel (one thread each) and then prints their
        records in a fixed order. A child partition joins the next wave only once every one
        of its parents has finished, which keeps each key's changes in commit order.
        """
        result = WorkflowResult()
        finished: set[str] = set()
        scheduled = {query.token for query in first}
        names = self.partition_names(stream)

        def read(query: PartitionQuery) -> list[ChangeRecord]:
            return list(
                self.db.read_change_stream(
                    stream, query.start, end, query.token, WORKFLOW_HEARTBEAT_MS
                )
            )

        wave = first
        number = 0
        with ThreadPoolExecutor(max_workers=4) as pool:
            while wave:
                number += 1
                if show:
                    self.note(
                        f"wave {number}: {plural(len(wave), 'partition')}, queried in parallel"
                    )
                next_wave: list[PartitionQuery] = []
                for query, records in zip(wave, pool.map(read, wave), strict=True):
                    if show:
                        self.console.print(
                            Text(f"partition {describe(names[query.token])}", style="bold")
                        )
                    if show and not records:
                        self.console.print(Text("(no records in this time range)"))
                    children: list[PartitionQuery] = []
                    for record in records:
                        if show:
                            self.show(record)
                        if isinstance(record, DataChangeRecord):
                            result.data.append(record)
                        elif isinstance(record, ChildPartitionsRecord):
                            result.children.setdefault(query.token, []).append(record)
                            children.extend(
                                PartitionQuery(
                                    c.token, record.start_timestamp, c.parent_partition_tokens
                                )
                                for c in record.child_partitions
                            )
                    finished.add(query.token)
                    next_wave += self._ready(children, finished, scheduled, show)
                wave = next_wave
        return result

    def _ready(
        self, children: list[PartitionQuery], finished: set[str], scheduled: set[str], show: bool
    ) -> list[PartitionQuery]:
        """The children that may be read now: each only once, and only after all its parents
        finished. A merge child announced by its first parent waits for the others."""
        ready: list[PartitionQuery] = []
        for child in children:
            if child.token in scheduled:
                continue
            if not parents_finished(child.parents, finished):
                if show:
                    waiting_for = [p for p in child.parents if p not in finished]
                    self.note(
                        f"child {short_token(child.token)} must wait for its other parent(s): "
                        f"{', '.join(short_token(p) for p in waiting_for)}"
                    )
                continue
            if show and len(child.parents) > 1:
                self.note(
                    f"all parents of {short_token(child.token)} have finished: "
                    "it is read in the next wave"
                )
            scheduled.add(child.token)
            ready.append(child)
        return ready

    def query_workflow(self) -> None:
        """Steps 5 and 6: the initial query, then the partitions down to the live ones."""
        self.step(
            "5. The initial query",
            "With partition_token NULL, the read function answers with a child partitions "
            "record naming the partitions to read from start_timestamp (here: the stream's "
            "creation). end_timestamp is the transfer's commit time, so every query finishes.",
        )
        first = self.initial_query(STREAM, self.created, self.transfer_ts, show=True)
        self.step(
            "6. Following the partitions",
            "Query each partition from its child partitions record's start_timestamp. A "
            "partition that was split returns its data records, then a child partitions "
            "record naming its children, and finishes.",
        )
        result = self.follow(STREAM, first, self.transfer_ts, show=True)
        transfer = [r for r in result.data if r.commit_timestamp == self.transfer_ts]
        self.note(
            f"the transfer came back as {len(transfer)} records from {len(transfer)} partitions "
            f"(number_of_partitions_in_transaction = "
            f"{transfer[0].number_of_partitions_in_transaction}, one server_transaction_id "
            f"{transfer[0].server_transaction_id}, record_sequence "
            f"{' and '.join(r.record_sequence for r in transfer)})"
        )

    def merge(self) -> None:
        """Step 7: a merge, announced by both parents, read after both."""
        self.step(
            "7. A merge",
            "Merge the partitions of [Id2, Id3) and [Id3, ∞) into one, then move 250 from Id2 "
            "to Id3, which now touches a single partition.",
        )
        self.db.merge_at(TABLE, ("Id3",))
        after_merge = self.transfer("Id2", "Id3", 250, TRANSFER_TAG)
        self.console.print(
            lineage_tree(f"change stream {STREAM}", self.db.partition_history(STREAM))
        )
        merged = next(p for p in self.db.partitions(STREAM) if len(p.parent_tokens) > 1)
        self.note(
            "both parents are read from just after the transfer (end_timestamp is inclusive), "
            "in parallel; each returns the same child partitions record"
        )
        parents = [PartitionQuery(t, self.transfer_ts + 1) for t in merged.parent_tokens]
        result = self.follow(STREAM, parents, after_merge, show=True)
        announced = [result.children[t][0].to_dict() for t in merged.parent_tokens]
        same = announced[0] == announced[1]
        self.note(f"both parents returned the same child partitions record: {same}")

    def value_capture_types(self) -> None:
        """Step 8: the transfer through the NEW_VALUES and NEW_ROW streams."""
        self.step(
            "8. Value capture types",
            "The same transfer through the NEW_VALUES stream (new values of the changed "
            "columns only) and the NEW_ROW stream (the whole new row, no old values). "
            "Start and end at the transfer's commit time to read just that transaction.",
        )
        for stream in (NEW_VALUES_STREAM, NEW_ROW_STREAM):
            self.console.print(Text(f"change stream {stream}", style="bold"))
            first = self.initial_query(stream, self.transfer_ts, self.transfer_ts, show=False)
            for record in self.follow(stream, first, self.transfer_ts, show=False).data:
                self.show(record)

    def sql_dialects(self) -> None:
        """Step 9: the read function through execute_sql in both dialects."""
        self.step(
            "9. The same query in SQL",
            "execute_sql runs the read function in GoogleSQL and PostgreSQL syntax; here "
            "for the partition of Id1 at the transfer's commit time.",
        )
        partition = self.db.partitions(STREAM, at=self.transfer_ts)[0]
        moment = format_ts(self.transfer_ts)
        named = {"start": moment, "end": moment, "token": partition.token}
        positional = [moment, moment, partition.token]
        for query, params in ((GOOGLESQL_QUERY, named), (POSTGRESQL_QUERY, positional)):
            self.console.print(Text(query, style="green"))
            result = self.db.execute_sql(query, params)
            for row in result:
                self.show_json(dict(zip(result.fields, row, strict=True)))

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
        if isinstance(record, DataChangeRecord):
            self.tail_data_records += 1
            changes = ", ".join(
                f"{mod.keys['AccountId']} {mod.old_values.get('Balance')} → "
                f"{mod.new_values.get('Balance')}"
                for mod in record.mods
            )
            line = (
                f"tx {record.server_transaction_id} {record.mod_type} {changes} "
                f"(the transaction touched "
                f"{plural(record.number_of_partitions_in_transaction, 'partition')})"
            )
        else:
            if isinstance(record, HeartbeatRecord):
                self.tail_heartbeats += 1
            line = json_line(record.to_dict())
        self.console.print(Text(prefix + line))

    def summary(self, path: str | None) -> None:
        """The balances (the total never changes) and what the tour showed."""
        self.step("Summary", "What the tour showed, and where the money is.")
        table = Table("account", "balance")
        rows = self.db.read(TABLE, columns=["AccountId", "Balance"])
        for account, balance in rows:
            table.add_row(Text(account), Text(str(balance)))
        table.add_row(Text("total"), Text(str(sum(b for _, b in rows))), style="bold")
        self.console.print(table)
        lines = [
            "the initial query names the partitions to read; child partitions records lead on",
            "a transaction spanning two partitions returns one record from each "
            "(number_of_partitions_in_transaction = 2)",
            "a merge child is announced by both parents and read after both finished",
            f"tailing: {plural(self.tail_transfers, 'transfer')} committed, "
            f"{plural(self.tail_data_records, 'data change record')} and "
            f"{plural(self.tail_heartbeats, 'heartbeat')} read",
        ]
        for line in lines:
            self.note(line)
        if path is not None:
            self.console.print(
                Text(
                    f"\nThe database is kept at {path}. Try:\n"
                    f"  changestream partitions {path} {STREAM}\n"
                    f'  changestream sql {path} "SELECT * FROM {TABLE}"'
                )
            )


def run_tour(db: EmbeddedDatabase, console: Console, tail_seconds: float, path: str | None) -> None:
    """Every step of the tour, in order."""
    console.print(
        Panel(
            Text(
                "A change stream records every change to the tables it watches, in the same "
                "transaction as the change. Readers query it partition by partition with the "
                "read function READ_<stream>(start_timestamp, end_timestamp, partition_token, "
                "heartbeat_milliseconds), following child partitions records as the key space "
                "splits and merges."
            ),
            title=f"changestream {changestream.__version__} demo",
        )
    )
    tour = Tour(db, console)
    tour.create_schema()
    tour.insert_accounts()
    tour.split_key_space()
    tour.first_transfer()
    tour.query_workflow()
    tour.merge()
    tour.value_capture_types()
    tour.sql_dialects()
    tour.tail(tail_seconds)
    tour.summary(path)


@click.command()
@click.option(
    "--path",
    type=click.Path(dir_okay=False),
    help="Keep the demo database in this new file (default: a temporary file).",
)
@click.option(
    "--tail-seconds",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="How long to tail the live partitions at the end.",
)
@click.option(
    "--load",
    "load_seconds",
    type=click.FloatRange(min=1),
    is_flag=False,
    flag_value=10.0,
    default=None,
    help="Instead: drive a skewed load for this many seconds (default 10) and show the "
    "partitions splitting on the hot range, then merging back while idle.",
)
@click.option(
    "--pipeline",
    "pipeline_seconds",
    type=click.FloatRange(min=1),
    is_flag=False,
    flag_value=10.0,
    default=None,
    help="Instead: define a stream, run its pipeline on Spark local[2] while a writer "
    "commits for this many seconds (default 10), then drain it; shows the event files and "
    "the Delta replica catching up (needs the spark extra and Java 17+).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    help="With --pipeline: keep the database, event files and replica in this new (or empty) "
    "directory (default: a temporary one).",
)
def demo(
    path: str | None,
    tail_seconds: float,
    load_seconds: float | None,
    pipeline_seconds: float | None,
    directory: str | None,
) -> None:
    """A guided tour: splits, the query workflow, a merge, and live tailing.

    With --load, the partitions following a skewed write load instead; with --pipeline, a
    stream run on Spark into event files and a Delta Lake replica.
    """
    if pipeline_seconds is not None:
        if load_seconds is not None or path is not None:
            raise click.UsageError("--pipeline does not combine with --load or --path")
        from changestream.cli.pipeline_demo import run_pipeline_demo

        run_pipeline_demo(Console(), pipeline_seconds, directory)
        return
    if directory is not None:
        raise click.UsageError("--dir applies to --pipeline only (use --path for the tour)")
    if path is not None and os.path.exists(path):
        raise click.BadParameter(f"{path!r} exists; the demo needs a new file", param_hint="--path")
    console = Console()
    with (
        tempfile.TemporaryDirectory(prefix="changestream-demo-") as scratch,
        changestream.open(path or os.path.join(scratch, "demo.db")) as db,
    ):
        if load_seconds is not None:
            run_load_demo(db, console, load_seconds)
            return
        run_tour(db, console, tail_seconds, path)
