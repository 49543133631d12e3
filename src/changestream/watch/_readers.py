"""The process-wide pool that runs watch()'s partition readers.

A partition reader blocks in a live read-function query for the partition's whole life, so the
pool grows to as many threads as readers run at once; threads are reused across partitions and
cursors (see :mod:`changestream.threads`)."""

from __future__ import annotations

from changestream.threads import ThreadPool

READERS = ThreadPool("changestream-watch-reader", "watch() partition reader")
