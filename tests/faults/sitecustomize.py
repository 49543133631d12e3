"""Fault injection for the benchmark tests: a broken build on demand.

With this directory on ``PYTHONPATH`` and ``CHANGESTREAM_FAULT=drop-every-10th``, every change
stream read (embedded, server, watch(), Stream Client, Spark workers: every process started with
this environment) drops every tenth data change record of each partition query. With
``CHANGESTREAM_FAULT=drop-every-10th-in-children`` the first process is spared and only the
processes it starts drop records (so an in-process baseline stays right and a Spark read does
not). Without the variable it does nothing. The benchmarks' own checks must then fail.
"""

import os

_MODE = os.environ.get("CHANGESTREAM_FAULT")
if _MODE == "drop-every-10th-in-children" and "CHANGESTREAM_FAULT_SPARED" not in os.environ:
    os.environ["CHANGESTREAM_FAULT_SPARED"] = str(os.getpid())
elif _MODE in ("drop-every-10th", "drop-every-10th-in-children"):
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
