"""Looking at a file before opening it as a database: whether it is a changestream database,
without writing anything to it (opening one initialises it)."""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from dataclasses import dataclass

from changestream.store.sqlite_layout import SYSTEM_TABLE_NAMES


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a file cannot be used as it is; ``fixable``: DDL (``changestream ddl``, or an admin
    request to a server) can make it a changestream database (it is empty, plain SQLite, or of
    an older layout)."""

    reason: str
    fixable: bool = True


def inspect(path: str) -> Problem | None:
    """Why the file at ``path`` cannot be served as it is, or None if it is a changestream
    database (looked at read-only: nothing is written)."""
    try:
        if os.path.getsize(path) == 0:
            return Problem("an empty file")
        uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True)
        try:
            found = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = {row[0] for row in found}
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as exc:
        return Problem(f"not an SQLite database ({exc})", fixable=False)
    missing = [name for name in SYSTEM_TABLE_NAMES if name not in tables]
    if len(missing) == len(SYSTEM_TABLE_NAMES):
        return Problem("an SQLite database without changestream's system tables")
    if missing:
        return Problem(f"made by an older version (no {', '.join(missing)})")
    return None
