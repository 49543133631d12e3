"""Fault injection for the benchmark tests: a broken build on demand.

With this directory on ``PYTHONPATH`` and ``CHANGESTREAM_FAULT=drop-every-10th``, every change
stream read (embedded, server, watch(), Stream Client, Spark workers: every process started with
this environment) drops every tenth data change record of each partition query. Without the
variable it does nothing. The benchmarks' own checks must then fail.
"""

import os

if os.environ.get("CHANGESTREAM_FAULT") == "drop-every-10th":
    from changestream.streams import read as _read

    _original = _read.ChangeStreamReader._partition

    def _dropping(self, split):  # type: ignore[no-untyped-def]
        data = 0
        for record in _original(self, split):
            if not isinstance(record, (_read.HeartbeatRecord, _read.ChildPartitionsRecord)):
                data += 1
                if data % 10 == 0:
                    continue
            yield record

    _read.ChangeStreamReader._partition = _dropping
