"""Reads of the change log and what it depends on, for the read function: whether a stream
still exists, where a split ended, the next rows of one partition, how much a range holds,
and the file's version."""

from __future__ import annotations

import sqlite3


def stream_exists(conn: sqlite3.Connection, stream_id: int) -> bool:
    """Whether the change stream ``stream_id`` exists (it was not dropped)."""
    found = conn.execute("SELECT 1 FROM _cs_streams WHERE stream_id = ?", (stream_id,))
    return found.fetchone() is not None


def split_end(conn: sqlite3.Connection, split_id: int) -> int | None:
    """When split ``split_id`` ended (None: it is live)."""
    (end_ts,) = conn.execute(
        "SELECT end_ts FROM _cs_splits WHERE split_id = ?", (split_id,)
    ).fetchone()
    return None if end_ts is None else int(end_ts)


def next_log_rows(
    conn: sqlite3.Connection,
    stream_id: int,
    split_id: int,
    after: tuple[int, int],
    through: int,
    limit: int,
) -> list[tuple[int, int, bytes]]:
    """Up to ``limit`` log rows (commit timestamp, record sequence, payload) of one stream and
    split, after position ``after`` and committed at or before ``through``, in order."""
    return conn.execute(
        "SELECT commit_ts, record_sequence, payload FROM _cs_log"
        " WHERE stream_id = ? AND split_id = ? AND (commit_ts, record_sequence) > (?, ?)"
        " AND commit_ts <= ? ORDER BY commit_ts, record_sequence LIMIT ?",
        (stream_id, split_id, after[0], after[1], through, limit),
    ).fetchall()


def data_version(conn: sqlite3.Connection) -> int:
    """SQLite's counter of commits by other connections (it changes when one commits)."""
    (version,) = conn.execute("PRAGMA data_version").fetchone()
    return int(version)


def log_sizes(
    conn: sqlite3.Connection,
    stream_id: int,
    split_id: int,
    first: int,
    through: int,
    limit: int,
    mod_arrays: tuple[str, ...],
) -> list[tuple[int, int, int, int]]:
    """Per commit timestamp of one stream and split in ``[first, through]``, in order and at
    most ``limit`` of them: (commit timestamp, log rows, mods, payload bytes). A row's mods
    are its ``mods`` column; a row written before the column existed has the elements of
    the first of the JSON arrays at the paths ``mod_arrays`` its payload has. No payload
    leaves SQLite."""
    counted = ", ".join("json_array_length(CAST(payload AS TEXT), ?)" for _ in mod_arrays)
    return conn.execute(
        f"SELECT commit_ts, COUNT(*), SUM(COALESCE(mods, {counted}, 0)), SUM(LENGTH(payload))"
        " FROM _cs_log WHERE stream_id = ? AND split_id = ? AND commit_ts BETWEEN ? AND ?"
        " GROUP BY commit_ts ORDER BY commit_ts LIMIT ?",
        (*mod_arrays, stream_id, split_id, first, through, limit),
    ).fetchall()
