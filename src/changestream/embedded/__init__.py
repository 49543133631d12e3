"""The embedded database: what :func:`changestream.open` returns, over the engine in one
SQLite file (``store`` with ``streams``' capture and read function, ``watch``'s cursors)."""

from changestream.embedded.database import WATCH_STREAM, EmbeddedDatabase, store_of

__all__ = ["WATCH_STREAM", "EmbeddedDatabase", "store_of"]
