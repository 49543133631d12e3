"""Write load per split: mods per second in one-second buckets, and sampled written keys."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass


@dataclass(slots=True)
class SplitLoad:
    """What one transaction wrote to one split: how many mods, and one key it wrote."""

    mods: int
    sample_key: bytes


#: How long a process keeps write load in memory before it goes to the tables.
FLUSH_AFTER_S = 1.0


class LoadBuffer:
    """Write load of this process's commits not yet in the tables.

    Load only steers the split policy, so it need not be in each commit's own transaction:
    writing it there dirtied two more tables' pages per commit. Commits add to the buffer,
    and it goes to the tables in one statement per table inside a later commit (once the
    oldest entry is ``FLUSH_AFTER_S`` old), before the policy runs here, once a second from
    the policy's background loop, and when the database closes. A process killed before
    then loses at most that second of load, never data."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mods: Counter[tuple[int, int]] = Counter()
        self._samples: list[tuple[int, int, bytes, int]] = []
        self._since: float | None = None

    def add(self, commit_ts: int, load: dict[int, SplitLoad]) -> None:
        """A committing transaction's mods per split, and one key it wrote in each."""
        bucket = commit_ts // 1_000_000
        with self._lock:
            for split_id, entry in load.items():
                self._mods[(split_id, bucket)] += entry.mods
                self._samples.append((split_id, commit_ts, entry.sample_key, entry.mods))
            if self._since is None:
                self._since = time.monotonic()

    @property
    def empty(self) -> bool:
        return self._since is None

    @property
    def due(self) -> bool:
        """Whether the oldest entry has waited ``FLUSH_AFTER_S``."""
        since = self._since
        return since is not None and time.monotonic() - since >= FLUSH_AFTER_S

    def flush(self, conn: sqlite3.Connection) -> None:
        """Write every entry to the tables, in ``conn``'s open write transaction."""
        with self._lock:
            mods, samples = self._mods, self._samples
            self._mods, self._samples, self._since = Counter(), [], None
        if mods:
            conn.executemany(
                "INSERT INTO _cs_split_load (split_id, bucket, mods) VALUES (?, ?, ?)"
                " ON CONFLICT (split_id, bucket) DO UPDATE SET mods = mods + excluded.mods",
                [(split_id, bucket, n) for (split_id, bucket), n in mods.items()],
            )
        if samples:
            conn.executemany(
                "INSERT INTO _cs_split_samples (split_id, commit_ts, key, weight)"
                " VALUES (?, ?, ?, ?)",
                samples,
            )

    def rates(self, now_us: int, window_s: float) -> dict[int, float]:
        """Mods per second per split over the last ``window_s`` seconds, of the entries here."""
        since = (now_us // 1_000_000) - int(window_s) + 1
        rates: Counter[int] = Counter()
        with self._lock:
            for (split_id, bucket), n in self._mods.items():
                if bucket >= since:
                    rates[split_id] += n
        return {split_id: total / window_s for split_id, total in rates.items()}


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
