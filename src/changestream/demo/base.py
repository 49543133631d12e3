"""What every step of the tour builds on: the database and console, printing, and transfers."""

from __future__ import annotations

from typing import Any

import orjson
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.text import Text

from changestream import (
    COMMIT_TIMESTAMP,
    ChangeRecord,
    EmbeddedDatabase,
    Partition,
)
from changestream.clock import parse_ts
from changestream.demo.bank import (
    COLUMNS,
    TABLE,
)
from changestream.render import (
    documented_json,
    json_line,
)


class TourBase:
    """The tour's database and console, how it prints, and how it commits a transfer."""

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
