"""Fault injection for the benchmark and source tests: a broken build, or a crash, on demand.

With this directory on ``PYTHONPATH`` and ``CHANGESTREAM_FAULT=drop-every-10th``, every change
stream read (embedded, server, watch(), Stream Client, Spark workers: every process started with
this environment) drops every tenth data change record it reads. With
``CHANGESTREAM_FAULT=drop-every-10th-in-children`` the first process is spared and only the
processes it starts drop records (so an in-process baseline stays right and a Spark read does
not). Without the variable it does nothing. The benchmarks' own checks must then fail.

With ``CHANGESTREAM_FAULT=sigkill-before-source-apply``, a source connector kills its own
process with SIGKILL when it is about to apply the first source transaction that changed rows:
after it followed that transaction's statements, before the transaction is in the mirror.
"""

import os

_MODE = os.environ.get("CHANGESTREAM_FAULT")
if _MODE == "drop-every-10th-in-children" and "CHANGESTREAM_FAULT_SPARED" not in os.environ:
    os.environ["CHANGESTREAM_FAULT_SPARED"] = str(os.getpid())
elif _MODE in ("drop-every-10th", "drop-every-10th-in-children"):
    import itertools

    from changestream.streams import read as _read

    _original = _read.ChangeStreamReader._partition
    # Counted per process, not per query: a reader that splits its work into many short
    # queries (a Spark source cutting ranges for its tasks) still loses every tenth record.
    _seen = itertools.count(1)

    def _dropping(self, split):  # type: ignore[no-untyped-def]
        for record in _original(self, split):
            data = not isinstance(record, (_read.HeartbeatRecord, _read.ChildPartitionsRecord))
            if data and next(_seen) % 10 == 0:
                continue
            yield record

    _read.ChangeStreamReader._partition = _dropping
elif _MODE == "sigkill-before-source-apply":
    import signal

    from changestream.sources import mirror as _mirror

    _apply = _mirror.Mirror.apply

    def _killed(self, transaction, idempotent=False):  # type: ignore[no-untyped-def]
        if transaction.changes:
            os.kill(os.getpid(), signal.SIGKILL)
        return _apply(self, transaction, idempotent)

    _mirror.Mirror.apply = _killed
