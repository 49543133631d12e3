"""What every connector shares: its state (mirror, position, summary), the error a failing
server ends a run with, the chunked, resumable copy of one table, and the bookkeeping of one
applied source transaction. Each kind of source adds how it reads (``postgres``, ``mysql``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from changestream.errors import Unavailable
from changestream.sources.definition import SourceDefinition, SourcePosition
from changestream.sources.mirror import Mirror, SourceTransaction
from changestream.sources.summary import Progress, RunSummary

if TYPE_CHECKING:
    from changestream.embedded import EmbeddedDatabase

log = logging.getLogger(__name__)

#: Rows per transaction of the initial copy.
COPY_CHUNK_ROWS = 5_000

Row = Sequence[Any]


def key_page(cur: Any, select: str, keys: str, after: Sequence[Any] | None) -> list[Row]:
    """Up to :data:`COPY_CHUNK_ROWS` rows of ``select`` (a query without WHERE) in the order
    of ``keys``, its key columns: from the first, or after the key values ``after``."""
    if after is None:
        cur.execute(f"{select} ORDER BY {keys} LIMIT %s", (COPY_CHUNK_ROWS,))
    else:
        marks = ", ".join(["%s"] * len(after))
        cur.execute(
            f"{select} WHERE ({keys}) > ({marks}) ORDER BY {keys} LIMIT %s",
            (*after, COPY_CHUNK_ROWS),
        )
    return list(cur.fetchall())


def key_pages(cur: Any, select: str, keys: str, at: Sequence[int]) -> Iterator[list[Row]]:
    """Every row of ``select`` in the order of ``keys``, which are the values at positions
    ``at`` of each row, a :func:`key_page` at a time."""
    after: tuple[Any, ...] | None = None
    while True:
        rows = key_page(cur, select, keys, after)
        if rows:
            yield rows
        if len(rows) < COPY_CHUNK_ROWS:
            return
        after = tuple(rows[-1][i] for i in at)


class Connector:
    """Keeps the mirror tables of one source up to date (see the subclasses)."""

    def __init__(
        self,
        db: EmbeddedDatabase,
        definition: SourceDefinition,
        position: SourcePosition | None,
        progress: Progress | None = None,
    ) -> None:
        self._db = db
        self._definition = definition
        self._position = position
        self._progress = progress or (lambda summary: None)
        self._mirror = Mirror(db, definition)
        self.summary = RunSummary(lsn=0 if position is None else position.lsn)

    def run(self, stop: threading.Event, until_caught_up: bool = False) -> RunSummary:
        """Copy (when not done yet), then follow the source until ``stop`` is set or, with
        ``until_caught_up``, until every source commit made before the call is here. A server
        that fails or goes away ends it with Unavailable naming the source."""
        try:
            return self._run(stop, until_caught_up)
        except self._server_error() as exc:
            name, reason = self._definition.name, self._reason(exc)
            raise Unavailable(f"source {name}: the server failed: {reason}") from exc

    def _run(self, stop: threading.Event, until_caught_up: bool) -> RunSummary:
        raise NotImplementedError

    def _server_error(self) -> type[Exception]:
        """The base class of what the source's client raises."""
        raise NotImplementedError

    def _reason(self, error: BaseException) -> str:
        raise NotImplementedError

    def _copy_chunks(
        self,
        table: str,
        columns: Sequence[str],
        fetch: Callable[[Any], list[Row]],
        convert: Callable[[Row], list[Any]],
        key_of: Callable[[Row], Any],
        stop: threading.Event,
    ) -> bool:
        """Copy ``table`` from where the copy's progress says: ``fetch(last)`` gives the next
        chunk of rows in key order after key ``last`` (None: from the first), each written
        here in one transaction with the key it reached (``key_of`` its last row, as JSON).
        False when ``stop`` cut it short."""
        assert self._position is not None
        last = self._position.progress.get(table)
        if last is True:
            return True
        while not stop.is_set():
            rows = fetch(last)
            if not rows:
                self._position = self._position.progressed(table, True)
                self._mirror.save_position(self._position)
                return True
            last = key_of(rows[-1])
            self._position = self._position.progressed(table, last)
            self._mirror.copy_rows(table, columns, [convert(r) for r in rows], self._position)
            self.summary.copied_rows += len(rows)
            self._progress(self.summary)
        return False

    def _apply(self, transaction: SourceTransaction, idempotent: bool) -> None:
        """Apply one source transaction and move the position past it."""
        self._mirror.apply(transaction, idempotent)
        self._position = transaction.end
        self.summary.transactions += 1
        self.summary.lsn = transaction.end.lsn
        self._progress(self.summary)
        log.debug("source transaction %s applied (%s)", transaction.tx_id, transaction.position)
