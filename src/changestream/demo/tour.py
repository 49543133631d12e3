"""The guided tour ``changestream demo`` runs, on a fresh database, with the public API.

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

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

import changestream
from changestream import (
    COMMIT_TIMESTAMP,
    EmbeddedDatabase,
)
from changestream.clock import format_ts
from changestream.demo.bank import (
    ACCOUNTS,
    COLUMNS,
    GOOGLESQL_QUERY,
    NEW_ROW_STREAM,
    NEW_VALUES_STREAM,
    POSTGRESQL_QUERY,
    SCHEMA,
    STARTING_BALANCE,
    STREAM,
    TABLE,
    TRANSFER_TAG,
)
from changestream.demo.tail import TailStep
from changestream.demo.workflow import WorkflowSteps
from changestream.render import (
    lineage_tree,
    plural,
)


class Tour(WorkflowSteps, TailStep):
    """The demo's steps, run in order on one fresh database, printing as they go."""

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
