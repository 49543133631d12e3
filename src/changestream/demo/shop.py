"""The shop of the pipeline tour: an ``Orders`` table with a change stream, filled with orders,
and a writer that keeps committing new and changed orders while the pipeline runs."""

from __future__ import annotations

import decimal
import random
import threading
from typing import Any

import changestream
from changestream import COMMIT_TIMESTAMP

DATABASE = "shop.db"
TABLE = "Orders"
CHANGE_STREAM = "OrdersFeed"
STREAM = "orders"
COLUMNS = ["OrderId", "Customer", "Status", "Amount", "UpdatedAt"]
INITIAL_ROWS = 2_000
CHUNK_ROWS = 500
SPLIT_KEY = 1_000
STATUSES = ("new", "paid", "packed", "shipped", "delivered")
CUSTOMERS = ("ana", "bruno", "carla", "diego", "eva", "felipe", "gabi", "hugo")

SCHEMA = [
    f"CREATE TABLE {TABLE} (OrderId INT64 NOT NULL, Customer STRING(MAX) NOT NULL, "
    "Status STRING(MAX) NOT NULL, Amount NUMERIC, "
    "UpdatedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (OrderId)",
    f"CREATE CHANGE STREAM {CHANGE_STREAM} FOR ALL "
    "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
]

#: How long to wait for the drain (after the writer stopped) before calling it a failure.


def _amount(rng: random.Random) -> decimal.Decimal:
    return decimal.Decimal(rng.randrange(100, 100_000)) / 100


def _order(rng: random.Random, order_id: int) -> list[Any]:
    return [order_id, rng.choice(CUSTOMERS), "new", _amount(rng), COMMIT_TIMESTAMP]


def create_source(path: str, rows: int = INITIAL_ROWS) -> None:
    """The source database: table, change stream and ``rows`` orders."""
    rng = random.Random(1)
    with changestream.open(path) as db:
        db.execute_ddl(SCHEMA)
        # The demo splits and merges by hand; keep the automatic policy out of the picture.
        db.set_split_policy(enabled=False)
        with db.transaction(tag="demo=pipeline,action=seed") as tx:
            tx.insert(TABLE, COLUMNS, [_order(rng, i) for i in range(1, rows + 1)])


class Writer:
    """Commits orders on its own connection: new ones, status changes, cancellations (deletes);
    splits the key space at :data:`SPLIT_KEY` after a while, and merges it back later."""

    def __init__(self, path: str, next_id: int) -> None:
        self.path = path
        self.next_id = next_id
        self._live = set(range(1, next_id))
        self.commits = 0
        self.mods = 0
        self.notes: list[str] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop writing (and wait for the last commit); harmless when stopped already or
        never started."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        rng = random.Random(2)
        try:
            with changestream.open(self.path) as db:
                while not self._stop.is_set():
                    self._commit(db, rng)
                    if self.commits == 40:
                        db.split_at(TABLE, [SPLIT_KEY])
                        self.notes.append(f"split the key space of {TABLE} at {SPLIT_KEY}")
                    elif self.commits == 120:
                        db.merge_at(TABLE, [SPLIT_KEY])
                        self.notes.append(f"merged the key space of {TABLE} back at {SPLIT_KEY}")
                    self._stop.wait(0.05)
        except BaseException as exc:  # shown by the demo, which then stops
            self.error = exc

    def _commit(self, db: changestream.EmbeddedDatabase, rng: random.Random) -> None:
        new = [_order(rng, self.next_id + i) for i in range(rng.randrange(1, 4))]
        self.next_id += len(new)
        picked = rng.sample(sorted(self._live), min(len(self._live), rng.randrange(2, 6)))
        gone = [order_id for order_id in picked if rng.random() < 0.15]
        updated = [
            [order_id, rng.choice(STATUSES), _amount(rng), COMMIT_TIMESTAMP]
            for order_id in picked
            if order_id not in gone
        ]
        with db.transaction(tag="demo=pipeline,action=orders") as tx:
            tx.insert(TABLE, COLUMNS, new)
            if updated:
                tx.update(TABLE, ["OrderId", "Status", "Amount", "UpdatedAt"], updated)
            if gone:
                tx.delete(TABLE, [[order_id] for order_id in gone])
        self._live.update(row[0] for row in new)
        self._live.difference_update(gone)
        self.commits += 1
        self.mods += len(new) + len(picked)
