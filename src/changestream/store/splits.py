"""Splits: key ranges covering the key space, with the lineage of their splits and merges."""

from __future__ import annotations

import bisect
import sqlite3
from dataclasses import dataclass

import orjson

from changestream.errors import FailedPrecondition
from changestream.store.keys import describe_key, table_range


@dataclass(frozen=True, slots=True)
class Split:
    """One split: keys in ``[start_key, end_key)`` (None = no end) for ``[start_ts, end_ts)``."""

    split_id: int
    start_key: bytes
    end_key: bytes | None
    start_ts: int
    end_ts: int | None
    parents: tuple[int, ...]
    children: tuple[int, ...]

    def contains(self, key: bytes) -> bool:
        return self.start_key <= key and (self.end_key is None or key < self.end_key)


_COLUMNS = "split_id, start_key, end_key, start_ts, end_ts, parents, children"


def _row_to_split(row: tuple[object, ...]) -> Split:
    split_id, start_key, end_key, start_ts, end_ts, parents, children = row
    return Split(
        split_id=int(split_id),  # type: ignore[call-overload]
        start_key=bytes(start_key),  # type: ignore[call-overload]
        end_key=None if end_key is None else bytes(end_key),  # type: ignore[call-overload]
        start_ts=int(start_ts),  # type: ignore[call-overload]
        end_ts=None if end_ts is None else int(end_ts),  # type: ignore[call-overload]
        parents=tuple(orjson.loads(parents)),  # type: ignore[arg-type]
        children=tuple(orjson.loads(children)),  # type: ignore[arg-type]
    )


def load_split(conn: sqlite3.Connection, split_id: int) -> Split | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM _cs_splits WHERE split_id = ?", (split_id,))
    found = row.fetchone()
    return None if found is None else _row_to_split(found)


def load_splits(conn: sqlite3.Connection, split_ids: list[int] | tuple[int, ...]) -> list[Split]:
    return [s for s in (load_split(conn, i) for i in split_ids) if s is not None]


def splits_live_at(conn: sqlite3.Connection, ts: int) -> list[Split]:
    """Splits covering the key space at ``ts``, in key order."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM _cs_splits WHERE start_ts <= ? AND (end_ts IS NULL OR end_ts > ?)"
        " ORDER BY start_key",
        (ts, ts),
    )
    return [_row_to_split(r) for r in rows]


def all_splits(conn: sqlite3.Connection) -> list[Split]:
    """Every split ever, oldest first."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM _cs_splits ORDER BY split_id")
    return [_row_to_split(r) for r in rows]


class SplitMap:
    """The live splits in key order, for finding the split of a key by binary search."""

    def __init__(self, live: list[Split]) -> None:
        self.splits = live
        self._starts = [s.start_key for s in live]

    def find(self, key: bytes) -> Split:
        return self.splits[bisect.bisect_right(self._starts, key) - 1]

    def neighbours(self, boundary: bytes) -> tuple[Split, Split] | None:
        """The two live splits that meet at ``boundary``, or None when it is not a boundary."""
        index = bisect.bisect_left(self._starts, boundary)
        if index == 0 or index >= len(self._starts) or self._starts[index] != boundary:
            return None
        return self.splits[index - 1], self.splits[index]

    def single_split_for_table(self, table_name: str) -> Split | None:
        """The split holding every key of the table, when one split does."""
        start, end = table_range(table_name)
        split = self.find(start)
        if split.end_key is None or split.end_key >= end:
            return split
        return None


def create_initial_split(conn: sqlite3.Connection, ts: int) -> None:
    conn.execute(
        "INSERT INTO _cs_splits (start_key, end_key, start_ts, parents) VALUES (?, NULL, ?, '[]')",
        (b"", ts),
    )


def _insert_child(
    conn: sqlite3.Connection, start: bytes, end: bytes | None, ts: int, parents: list[int]
) -> int:
    cursor = conn.execute(
        "INSERT INTO _cs_splits (start_key, end_key, start_ts, parents) VALUES (?, ?, ?, ?)",
        (start, end, ts, orjson.dumps(parents)),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def _end(conn: sqlite3.Connection, split_id: int, ts: int, children: list[int]) -> None:
    conn.execute(
        "UPDATE _cs_splits SET end_ts = ?, children = ? WHERE split_id = ?",
        (ts, orjson.dumps(children), split_id),
    )


def split_at(conn: sqlite3.Connection, live: SplitMap, boundary: bytes, ts: int) -> list[int]:
    """End the split containing ``boundary`` at ``ts`` and start its two halves; return them."""
    parent = live.find(boundary)
    if parent.start_key == boundary:
        raise FailedPrecondition(f"{describe_key(boundary)} is already a split boundary")
    left = _insert_child(conn, parent.start_key, boundary, ts, [parent.split_id])
    right = _insert_child(conn, boundary, parent.end_key, ts, [parent.split_id])
    _end(conn, parent.split_id, ts, [left, right])
    return [left, right]


def merge_at(conn: sqlite3.Connection, live: SplitMap, boundary: bytes, ts: int) -> int:
    """End the two splits meeting at ``boundary`` at ``ts`` and start their union; return it."""
    pair = live.neighbours(boundary)
    if pair is None:
        raise FailedPrecondition(
            f"{describe_key(boundary)} is not a split boundary; nothing to merge there"
        )
    left, right = pair
    child = _insert_child(conn, left.start_key, right.end_key, ts, [left.split_id, right.split_id])
    _end(conn, left.split_id, ts, [child])
    _end(conn, right.split_id, ts, [child])
    return child
