"""Which databases a server serves: one file, or every database file of a directory.

Serving never writes a file that is not already a changestream database: a file is looked at
read-only first, and one that is empty, a plain SQLite database, or made by an older version
(missing system tables) is opened (initialised, migrated) only when an admin request asks
(``get(name, initialise=True)``). A symlink whose target lies outside the served directory is
refused unless the server follows symlinks.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from dataclasses import dataclass

from changestream.embedded.database import EmbeddedDatabase
from changestream.errors import FailedPrecondition, InvalidArgument, NotFound
from changestream.store.inspection import inspect

#: A database's name is its file name without ``.db``; names are URL path segments.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
SUFFIX = ".db"


def database_name(path: str) -> str:
    """The name a database file is served under: its file name without the suffix."""
    base = os.path.basename(path)
    return base[: -len(SUFFIX)] if base.endswith(SUFFIX) else base


@dataclass(frozen=True, slots=True)
class Entry:
    """A file the server found: its name, and why it cannot be served (None: it can)."""

    name: str
    problem: str | None = None


class Databases:
    """The served databases by name, opened on first use and closed with the server.

    A directory is a cluster: every ``NAME.db`` file in it is database NAME, including files
    added while the server runs. Databases handed in already open (``add``) are the caller's
    to close.
    """

    def __init__(self, directory: str | None = None, follow_symlinks: bool = False) -> None:
        self._directory = directory
        self._root = None if directory is None else os.path.realpath(directory)
        self._follow_symlinks = follow_symlinks
        self._lock = threading.Lock()
        self._open: dict[str, EmbeddedDatabase] = {}
        self._files: dict[str, str] = {}
        self._owned: set[str] = set()

    @staticmethod
    def serve(path: str, follow_symlinks: bool = False) -> Databases:
        """The databases at ``path``: a database file, or a directory of them."""
        if os.path.isdir(path):
            return Databases(path, follow_symlinks)
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
        """The names of the databases that can be served (see :meth:`entries` for the rest)."""
        return [entry.name for entry in self.entries() if entry.problem is None]

    def entries(self) -> list[Entry]:
        """Every database file found, each with what keeps it from being served (if anything)."""
        with self._lock:
            opened = set(self._open)
            paths = dict(self._files)
        paths.update(self._scan())
        entries = [Entry(name) for name in opened]
        for name, path in paths.items():
            if name not in opened:
                entries.append(Entry(name, self._problem(path)))
        return sorted(entries, key=lambda entry: entry.name)

    def _scan(self) -> dict[str, str]:
        if self._directory is None:
            return {}
        return {
            database_name(entry.name): entry.path
            for entry in os.scandir(self._directory)
            if entry.name.endswith(SUFFIX) and NAME.match(entry.name) and entry.is_file()
        }

    def _refusal(self, path: str) -> str | None:
        """Why ``path`` may not be served whatever it holds: a symlink out of the directory."""
        if self._root is None or self._follow_symlinks:
            return None
        target = os.path.realpath(path)
        if os.path.commonpath([self._root, target]) != self._root:
            return "a symlink to a file outside the served directory (serve with --follow-symlinks)"
        return None

    def _problem(self, path: str) -> str | None:
        """Why ``path`` is not served (a file outside is not even looked at), or None."""
        refusal = self._refusal(path)
        if refusal is not None:
            return refusal
        problem = inspect(path)
        return None if problem is None else problem.reason

    def _path(self, name: str) -> str | None:
        path = self._files.get(name)
        if path is None and self._directory is not None and NAME.match(name):
            candidate = os.path.join(self._directory, name + SUFFIX)
            if os.path.isfile(candidate):
                path = candidate
        return path

    def get(self, name: str, initialise: bool = False) -> EmbeddedDatabase:
        """The database called ``name``, opened if need be (this blocks: call it off the loop).

        A file that is not a changestream database yet is refused unless ``initialise`` (an
        admin asks): then it is made one."""
        with self._lock:
            db = self._open.get(name)
            if db is not None:
                return db
            path = self._path(name)
            if path is None:
                known = ", ".join(self._all_names()) or "none"
                raise NotFound(f"database {name!r} does not exist (databases: {known})")
            refusal = self._refusal(path)
            if refusal is not None:
                raise FailedPrecondition(f"database {name!r} is not served: {refusal}")
            problem = inspect(path)
            if problem is not None and not (initialise and problem.fixable):
                how = "unless an admin request (DDL) asks" if problem.fixable else "at all"
                raise FailedPrecondition(
                    f"{name!r} is not a changestream database: {problem.reason}; "
                    f"the server does not change it {how}"
                )
            try:
                db = EmbeddedDatabase(path)
            except sqlite3.DatabaseError as exc:
                raise InvalidArgument(f"{path!r} is not a changestream database: {exc}") from exc
            self._open[name] = db
            self._owned.add(name)
            return db

    def _all_names(self) -> list[str]:
        return sorted(set(self._open) | set(self._files) | set(self._scan()))

    def close(self) -> None:
        """Close the databases this object opened."""
        with self._lock:
            owned = [self._open.pop(name) for name in self._owned if name in self._open]
            self._owned.clear()
        for db in owned:
            db.close()
