"""Spark's Python daemon for changestream's sessions: ``pyspark.daemon``, with pyspark
imported from the installed package rather than from Spark's ``pyspark.zip``, the
pipeline's task code imported before the daemon forks its workers (:func:`preload`), and
what it imported frozen out of the workers' garbage collections (:func:`freeze_for_fork`),
and transparent huge pages off for it and its workers (see
:mod:`changestream.spark.huge_pages`). In a local session it is usually the zygote of
:mod:`changestream.spark.zygote`, which did all that while the JVM started.

Spark puts its ``pyspark.zip`` (and py4j's zip) first on its Python workers' path. Python
never caches bytecode for modules it imports from a zip, so each daemon compiled pyspark anew
before the first task could run: 0.6 s against 0.1 s from the installed package, on the
critical path of every pipeline run's first micro-batch. When the installed package is the
zip's version, the zips go to the end of the path instead; otherwise the path is left alone
(a cluster's own pyspark must match its JVM).

:func:`changestream.spark.local_session` names this module in ``spark.python.daemon.module``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import re
import runpy
import sys
import zipfile

from changestream.spark.huge_pages import disable_transparent_huge_pages
from changestream.spark.zygote import ZYGOTE_FLAG, hand_over, serve

#: The zips Spark puts on its workers' path, and each one's package.
_ZIPS = (("pyspark", re.compile(r"pyspark\.zip$")), ("py4j", re.compile(r"py4j-[^/]*\.zip$")))


def _zip_version(path: str, package: str) -> str | None:
    """The version of ``package`` a zip on the path holds (None when it cannot tell)."""
    if package == "py4j":
        found = re.search(r"py4j-(.+)-src\.zip$", path)
        return found.group(1) if found else None
    try:
        with zipfile.ZipFile(path) as archive:
            text = archive.read("pyspark/version.py").decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    found = re.search(r"__version__[^=]*=\s*['\"]([^'\"]+)['\"]", text)
    return found.group(1) if found else None


def installed_first(path: list[str]) -> list[str]:
    """``path`` with each Spark zip whose package is installed in the same version moved to
    the end (the installed package, with its bytecode, is then the one imported)."""
    moved: list[str] = []
    for entry in path:
        for package, pattern in _ZIPS:
            if not pattern.search(entry):
                continue
            try:
                installed = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                continue
            if _zip_version(entry, package) == installed:
                moved.append(entry)
    return [entry for entry in path if entry not in moved] + moved


def preload() -> None:
    """Import what every pipeline task imports, once, in the daemon: the workers it forks
    start with it imported. A pipeline's first tasks each took 1.3-1.4 s where later ones
    took 0.8-0.9, each worker importing for 0.6 s on two busy cores; with this the
    first took 1.0-1.1 s (the daemon imports once, in 0.6 s). What fails to import here is
    left to the task that needs it, which reports it."""
    with contextlib.suppress(Exception):
        # JSON tasks build events in DuckDB, whose import took 0.13-0.15 s in a fresh
        # process: once here, not in each worker (a connection is each worker's own: one
        # made here would be forked).
        import duckdb  # noqa: F401
        import pyarrow as pa
        import pyspark.worker  # noqa: F401  (pyspark.daemon imports it: frozen with the rest)

        import changestream.spark._tasks  # noqa: F401

        pa.array([0])  # pyarrow's first conversion of Python values imports pandas
        # Staging picks each key's newest change with a group_by, whose first call imports
        # pyarrow.acero and pyarrow.dataset.
        pa.table({"k": [0]}).group_by("k", use_threads=False).aggregate([])


def freeze_for_fork() -> None:
    """Collect, then move every object left to the collector's permanent generation: the
    workers forked from the daemon then leave them alone. ``pyspark.daemon`` runs a full
    collection in a worker after each of its tasks: over the imported objects it took 20-30
    ms, and in a forked worker it writes to every page holding one, copying the pages the
    fork shared (see :func:`gc.freeze`). A pipeline's smallest tasks took 30-75 ms, and
    4-12 ms with them frozen."""
    gc.collect()
    gc.freeze()


def _prepare() -> None:
    preload()
    freeze_for_fork()


if __name__ == "__main__":
    # Before the imports: the daemon's workers inherit it (on a cluster's executors too).
    disable_transparent_huge_pages()
    sys.path[:] = installed_first(sys.path)
    if sys.argv[1:2] == [ZYGOTE_FLAG]:
        serve(int(sys.argv[2]), sys.argv[3], _prepare)
    elif not hand_over():
        _prepare()
        runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)
