"""Write load per split: mods per second in one-second buckets, and sampled written keys."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(slots=True)
class SplitLoad:
    """What one transaction wrote to one split: how many mods, and one key it wrote."""

    mods: int
    sample_key: bytes


def record_load(conn: sqlite3.Connection, commit_ts: int, load: dict[int, SplitLoad]) -> None:
    """Add a transaction's mods to its splits' current buckets, inside the transaction."""
    bucket = commit_ts // 1_000_000
    conn.executemany(
        "INSERT INTO _cs_split_load (split_id, bucket, mods) VALUES (?, ?, ?)"
        " ON CONFLICT (split_id, bucket) DO UPDATE SET mods = mods + excluded.mods",
        [(split_id, bucket, entry.mods) for split_id, entry in load.items()],
    )
    conn.executemany(
        "INSERT INTO _cs_split_samples (split_id, commit_ts, key, weight) VALUES (?, ?, ?, ?)",
        [(split_id, commit_ts, entry.sample_key, entry.mods) for split_id, entry in load.items()],
    )


def write_rates(conn: sqlite3.Connection, now_us: int, window_s: float) -> dict[int, float]:
    """Mods per second over the last ``window_s`` seconds, per split that had any."""
    since = (now_us // 1_000_000) - int(window_s) + 1
    rows = conn.execute(
        "SELECT split_id, sum(mods) FROM _cs_split_load WHERE bucket >= ? GROUP BY split_id",
        (since,),
    )
    return {split_id: total / window_s for split_id, total in rows}


def load_weighted_key(
    conn: sqlite3.Connection, split_id: int, since_us: int, above: bytes
) -> bytes | None:
    """The written key at which half of the split's recent load lies on each side, strictly
    above ``above`` (the split's start); None when the load has no such key."""
    rows = conn.execute(
        "SELECT key, sum(weight) FROM _cs_split_samples WHERE split_id = ? AND commit_ts >= ?"
        " GROUP BY key ORDER BY key",
        (split_id, since_us),
    ).fetchall()
    samples: list[tuple[bytes, int]] = [
        (bytes(key), int(weight)) for key, weight in rows if bytes(key) > above
    ]
    if len(samples) < 2:
        return None
    total = sum(weight for _, weight in samples)
    running = 0
    for index, (key, weight) in enumerate(samples):
        running += weight
        if running * 2 >= total:
            # Split before the median key, unless it is the lowest: then just above it.
            return key if index > 0 else samples[1][0]
    return None


def forget_before(conn: sqlite3.Connection, before_us: int) -> None:
    """Drop load buckets and samples older than ``before_us``."""
    conn.execute("DELETE FROM _cs_split_load WHERE bucket < ?", (before_us // 1_000_000,))
    conn.execute("DELETE FROM _cs_split_samples WHERE commit_ts < ?", (before_us,))
