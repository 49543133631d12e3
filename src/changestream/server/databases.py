"""Which databases a server serves: one file, or every database file of a directory."""

from __future__ import annotations

import os
import re
import sqlite3
import threading

import changestream
from changestream.errors import InvalidArgument, NotFound
from changestream.streams.database import EmbeddedDatabase

#: A database's name is its file name without ``.db``; names are URL path segments.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
SUFFIX = ".db"


def database_name(path: str) -> str:
    """The name a database file is served under: its file name without the suffix."""
    base = os.path.basename(path)
    return base[: -len(SUFFIX)] if base.endswith(SUFFIX) else base


class Databases:
    """The served databases by name, opened on first use and closed with the server.

    A directory is a cluster: every ``NAME.db`` file in it is database NAME, including files
    added while the server runs. Databases handed in already open (``add``) are the caller's
    to close.
    """

    def __init__(self, directory: str | None = None) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._open: dict[str, EmbeddedDatabase] = {}
        self._files: dict[str, str] = {}
        self._owned: set[str] = set()

    @staticmethod
    def serve(path: str) -> Databases:
        """The databases at ``path``: a database file, or a directory of them."""
        if os.path.isdir(path):
            return Databases(path)
        if not os.path.isfile(path):
            raise NotFound(
                f"no database file or directory at {path!r} (create one with `changestream ddl`)"
            )
        databases = Databases()
        databases._files[database_name(path)] = path
        return databases

    def add(self, name: str, db: EmbeddedDatabase) -> None:
        """Serve an open database under ``name``."""
        with self._lock:
            self._open[name] = db

    def remove(self, name: str) -> None:
        """Stop serving ``name`` (closing it if this object opened it)."""
        with self._lock:
            db = self._open.pop(name, None)
            owned = name in self._owned
            self._owned.discard(name)
        if db is not None and owned:
            db.close()

    def names(self) -> list[str]:
        with self._lock:
            return self._names()

    def _names(self) -> list[str]:
        names = set(self._open) | set(self._files)
        if self._directory is not None:
            names |= {
                database_name(entry.name)
                for entry in os.scandir(self._directory)
                if entry.name.endswith(SUFFIX) and NAME.match(entry.name) and entry.is_file()
            }
        return sorted(names)

    def get(self, name: str) -> EmbeddedDatabase:
        """The database called ``name``, opened if need be (this blocks: call it off the loop)."""
        with self._lock:
            db = self._open.get(name)
            if db is not None:
                return db
            path = self._files.get(name)
            if path is None and self._directory is not None and NAME.match(name):
                candidate = os.path.join(self._directory, name + SUFFIX)
                if os.path.isfile(candidate):
                    path = candidate
            if path is None:
                known = ", ".join(self._names()) or "none"
                raise NotFound(f"database {name!r} does not exist (databases: {known})")
            try:
                db = changestream.open(path)
            except sqlite3.DatabaseError as exc:
                raise InvalidArgument(f"{path!r} is not a changestream database: {exc}") from exc
            self._open[name] = db
            self._owned.add(name)
            return db

    def close(self) -> None:
        """Close the databases this object opened."""
        with self._lock:
            owned = [self._open.pop(name) for name in self._owned if name in self._open]
            self._owned.clear()
        for db in owned:
            db.close()
