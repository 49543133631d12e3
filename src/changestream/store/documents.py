"""System documents: small versioned JSON documents and append-only logs in system tables.

Layers above the store keep their own state here (the pipeline's stream definitions, states,
progress and errors) instead of in tables of their own. A document is addressed by a kind
(its owner, e.g. ``"datastream"``) and a name; every write names the version it read, so two
writers can never both succeed from the same view (optimistic concurrency, as for leases).
Bodies and log entries must be plain JSON: objects with string keys, lists, strings,
finite floats, 64-bit integers, booleans and null.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from changestream.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from changestream.store.models import SystemDocument as SystemDocument

if TYPE_CHECKING:
    from changestream.store.database import Store

MAX_KEY_LENGTH = 256
#: Log entries returned at most per call.
MAX_LOG_LIMIT = 10_000


def check_key(value: object, what: str) -> str:
    """A document kind or name: 1 to 256 printable characters."""
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= MAX_KEY_LENGTH
        or not value.isprintable()
    ):
        raise InvalidArgument(
            f"a system document {what} must be 1 to {MAX_KEY_LENGTH} printable characters, "
            f"got {value!r}"
        )
    return value


def _check_json(value: Any, path: str) -> None:
    if value is None or isinstance(value, str | bool):
        return
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise InvalidArgument(f"{path} is outside the 64-bit integer range: {value}")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(f"{path} must be a finite number, got {value}")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json(item, f"{path}[{index}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument(f"{path} has a non-string key {key!r}")
            _check_json(item, f"{path}.{key}")
        return
    raise InvalidArgument(
        f"{path} holds a {type(value).__name__}, which is not JSON (encode it as text first)"
    )


def dump_body(body: object, what: str) -> bytes:
    """``body`` (a JSON object) as stored text; InvalidArgument when it is not plain JSON."""
    if not isinstance(body, Mapping):
        raise InvalidArgument(f"a system document {what} must be a JSON object, got {body!r}")
    _check_json(body, what)
    return orjson.dumps(dict(body))


def _check_version(expected_version: object) -> None:
    if expected_version is not None and (
        isinstance(expected_version, bool) or not isinstance(expected_version, int)
    ):
        raise InvalidArgument(
            f"expected_version must be an integer or null, got {expected_version!r}"
        )


def _describe(kind: str, name: str) -> str:
    return f"system document {kind}/{name}"


def system_documents(conn: sqlite3.Connection, kind: str) -> dict[str, SystemDocument]:
    """Every document of ``kind``, by name."""
    rows = conn.execute(
        "SELECT name, version, body FROM _cs_documents WHERE kind = ? ORDER BY name",
        (check_key(kind, "kind"),),
    )
    return {name: SystemDocument(name, version, orjson.loads(body)) for name, version, body in rows}


def put_system_document(
    store: Store, kind: str, name: str, body: object, expected_version: int | None
) -> int:
    """Write a document if it is at ``expected_version`` (None: if it does not exist);
    returns its new version. AlreadyExists or FailedPrecondition when another writer was first."""
    check_key(kind, "kind")
    check_key(name, "name")
    text = dump_body(body, "body")
    _check_version(expected_version)
    with store.locked() as conn:
        row = conn.execute(
            "SELECT version FROM _cs_documents WHERE kind = ? AND name = ?", (kind, name)
        ).fetchone()
        current = None if row is None else int(row[0])
        if current != expected_version:
            if expected_version is None:
                raise AlreadyExists(f"{_describe(kind, name)} already exists (version {current})")
            found = "does not exist" if current is None else f"is at version {current}"
            raise FailedPrecondition(
                f"{_describe(kind, name)} {found}, not version {expected_version}: "
                "another writer changed it; read it again"
            )
        version = 1 if current is None else current + 1
        _write(conn, kind, name, version, text)
    return version


def write_in_transaction(conn: sqlite3.Connection, kind: str, name: str, text: bytes) -> None:
    """Write a document inside the write transaction open on ``conn``, whatever version it is
    at (its owner is the only writer: a source's position, written with its changes)."""
    conn.execute(
        "INSERT INTO _cs_documents (kind, name, version, body) VALUES (?, ?, 1, ?) "
        "ON CONFLICT (kind, name) DO UPDATE SET version = version + 1, body = excluded.body",
        (kind, name, text),
    )


def _write(conn: sqlite3.Connection, kind: str, name: str, version: int, text: bytes) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO _cs_documents (kind, name, version, body) VALUES (?, ?, ?, ?)",
        (kind, name, version, text),
    )


def delete_system_document(
    store: Store, kind: str, name: str, expected_version: int | None
) -> bool:
    """Remove a document and its log; True when it existed. With ``expected_version``,
    FailedPrecondition when the document is at another version."""
    check_key(kind, "kind")
    check_key(name, "name")
    _check_version(expected_version)
    with store.locked() as conn:
        row = conn.execute(
            "SELECT version FROM _cs_documents WHERE kind = ? AND name = ?", (kind, name)
        ).fetchone()
        if row is not None and expected_version is not None and row[0] != expected_version:
            raise FailedPrecondition(
                f"{_describe(kind, name)} is at version {row[0]}, not version "
                f"{expected_version}: another writer changed it; read it again"
            )
        conn.execute("DELETE FROM _cs_documents WHERE kind = ? AND name = ?", (kind, name))
        conn.execute("DELETE FROM _cs_document_log WHERE kind = ? AND name = ?", (kind, name))
    return row is not None


def append_system_log(store: Store, kind: str, name: str, entry: object) -> None:
    """Append ``entry`` (a JSON object) to the log of kind/name, stamped with ``time``
    (the database clock, microseconds)."""
    check_key(kind, "kind")
    check_key(name, "name")
    if isinstance(entry, Mapping) and "time" in entry:
        raise InvalidArgument("a system log entry must not set 'time'; the database stamps it")
    text = dump_body(entry, "log entry")
    with store.locked() as conn:
        conn.execute(
            "INSERT INTO _cs_document_log (kind, name, seq, time, entry) VALUES (?, ?,"
            " (SELECT coalesce(max(seq), 0) + 1 FROM _cs_document_log WHERE kind = ? AND name = ?),"
            " ?, ?)",
            (kind, name, kind, name, store.now(), text),
        )


def system_log(conn: sqlite3.Connection, kind: str, name: str, limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` entries of the log of kind/name, oldest first, each with its ``time``."""
    check_key(kind, "kind")
    check_key(name, "name")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_LOG_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_LOG_LIMIT}, got {limit!r}")
    rows = conn.execute(
        "SELECT time, entry FROM _cs_document_log WHERE kind = ? AND name = ?"
        " ORDER BY seq DESC LIMIT ?",
        (kind, name, limit),
    ).fetchall()
    return [{"time": time, **orjson.loads(entry)} for time, entry in reversed(rows)]
