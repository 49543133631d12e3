"""The ``changestream`` command line: ``sql``, ``partitions``, ``ddl`` and ``demo``."""

from __future__ import annotations

import gc

from changestream.cli.main import main

__all__ = ["main", "run"]


def run() -> None:
    """The ``changestream`` command, as a process runs it: :func:`main`, then the exit.

    What the command imported (for a pipeline: pyspark, pyarrow, pandas, deltalake) is frozen
    on the way out (:func:`gc.freeze`), so the interpreter's last full collection does not
    walk it: a ``pipeline run`` took 0.38-0.45 s from its last Spark job to its exit, and
    0.18-0.20 s with this."""
    try:
        main()
    finally:
        gc.freeze()
