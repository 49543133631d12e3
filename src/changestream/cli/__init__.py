"""The ``changestream`` command line: ``sql``, ``partitions``, ``ddl`` and ``demo``."""

from __future__ import annotations

from changestream.cli.main import main

__all__ = ["main"]
