"""The split policy: when splits split (too many rows, too hot) and merge (cold and small)."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from changestream.ddl.schema import Table
from changestream.store.keys import decode_key, encode_key, quote, table_range
from changestream.store.load import load_weighted_key, write_rates
from changestream.store.models import Action as Action
from changestream.store.models import SplitPolicy as SplitPolicy
from changestream.store.splits import Split


def load_policy(conn: sqlite3.Connection) -> SplitPolicy:
    (definition,) = conn.execute("SELECT definition FROM _cs_policy").fetchone()
    return SplitPolicy(**orjson.loads(definition))


def save_policy(conn: sqlite3.Connection, policy: SplitPolicy) -> None:
    conn.execute(
        "INSERT INTO _cs_policy (id, definition) VALUES (1, ?)"
        " ON CONFLICT (id) DO UPDATE SET definition = excluded.definition",
        (orjson.dumps(policy.to_dict()),),
    )


def take_leadership(conn: sqlite3.Connection, me: str, now_us: int, lease_us: int) -> bool:
    """Become (or stay) the one process running the policy; inside a write transaction."""
    cursor = conn.execute(
        "UPDATE _cs_policy SET leader = ?, lease_expires = ?"
        " WHERE leader IS NULL OR leader = ? OR lease_expires < ?",
        (me, now_us + lease_us, me, now_us),
    )
    return cursor.rowcount == 1


@dataclass(frozen=True, slots=True)
class SplitStats:
    """A live split's size and heat, as the policy saw them."""

    split: Split
    rows: int
    write_rate: float


def _table_condition(
    table: Table, split: Split, tables: Mapping[str, Table]
) -> tuple[str, list[Any]] | None:
    """The SQL condition selecting the split's part of ``table``, or None if they are apart."""
    start, end = table_range(table.name)
    if (split.end_key is not None and split.end_key <= start) or split.start_key >= end:
        return None
    clauses: list[str] = []
    params: list[Any] = []
    for bound, op in ((split.start_key, ">="), (split.end_key, "<")):
        decoded = None if bound is None else decode_key(bound, tables)
        if decoded is None or decoded[0] != table.name or not decoded[1]:
            continue
        names = ", ".join(quote(c.name) for c in table.key_columns[: len(decoded[1])])
        clauses.append(f"({names}) {op} ({', '.join('?' * len(decoded[1]))})")
        params.extend(decoded[1])
    return " AND ".join(clauses) or "1", params


def _rows_by_table(
    conn: sqlite3.Connection, split: Split, tables: Mapping[str, Table]
) -> dict[str, int]:
    counts: dict[str, int] = {}
    for table in tables.values():
        condition = _table_condition(table, split, tables)
        if condition is not None:
            sql = f"SELECT count(*) FROM {quote(table.name)} WHERE {condition[0]}"
            counts[table.name] = conn.execute(sql, condition[1]).fetchone()[0]
    return counts


def median_key_by_rows(
    conn: sqlite3.Connection, split: Split, tables: Mapping[str, Table]
) -> bytes | None:
    """The key halfway through the split's biggest table part, as a boundary inside the split."""
    counts = _rows_by_table(conn, split, tables)
    if not counts:
        return None
    name = max(counts, key=counts.__getitem__)
    table = tables[name]
    condition = _table_condition(table, split, tables)
    assert condition is not None
    keys = ", ".join(quote(k) for k in table.primary_key)
    row = conn.execute(
        f"SELECT {keys} FROM {quote(name)} WHERE {condition[0]} ORDER BY {keys} LIMIT 1 OFFSET ?",
        [*condition[1], counts[name] // 2],
    ).fetchone()
    if row is None:
        return None
    boundary = encode_key(table, row)
    return boundary if boundary > split.start_key else None


def measure(
    conn: sqlite3.Connection,
    live: list[Split],
    tables: Mapping[str, Table],
    policy: SplitPolicy,
    now_us: int,
) -> list[SplitStats]:
    """Rows and write rate of every live split (in one read snapshot)."""
    rates = write_rates(conn, now_us, policy.window_seconds)
    return [
        SplitStats(s, sum(_rows_by_table(conn, s, tables).values()), rates.get(s.split_id, 0.0))
        for s in live
    ]


def plan(
    conn: sqlite3.Connection,
    stats: list[SplitStats],
    tables: Mapping[str, Table],
    policy: SplitPolicy,
    now_us: int,
) -> list[Action]:
    """The splits and merges the policy wants now; each split takes part in at most one."""
    min_age = policy.min_lifetime_seconds * 1_000_000
    old_enough = {s.split.split_id for s in stats if now_us - s.split.start_ts >= min_age}
    actions: list[Action] = []
    busy: set[int] = set()
    since = now_us - int(policy.window_seconds * 1_000_000)
    for entry in stats:
        split = entry.split
        if split.split_id not in old_enough:
            continue
        boundary = None
        if entry.rows > policy.max_rows:
            boundary = median_key_by_rows(conn, split, tables)
            reason = f"{entry.rows} rows > max_rows {policy.max_rows}"
        elif entry.write_rate > policy.max_write_rate:
            boundary = load_weighted_key(conn, split.split_id, since, split.start_key)
            reason = f"{entry.write_rate:.0f} mods/s > max_write_rate {policy.max_write_rate:g}"
        if boundary is not None and (split.end_key is None or boundary < split.end_key):
            actions.append(Action(False, boundary, reason))
            busy.add(split.split_id)
    for left, right in itertools.pairwise(stats):
        ids = {left.split.split_id, right.split.split_id}
        if ids & busy or not ids <= old_enough:
            continue
        rows = left.rows + right.rows
        rate = left.write_rate + right.write_rate
        if rows <= policy.merge_max_rows and rate <= policy.merge_max_write_rate:
            actions.append(
                Action(True, right.split.start_key, f"{rows} rows and {rate:.0f} mods/s together")
            )
            busy |= ids
    return actions
