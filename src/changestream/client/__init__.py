"""The Stream Client: lease-based parallel consumers of a change stream.

Workers of a consumer group share a stream's partitions through a lease table in the
database itself; each partition is processed in order by one worker at a time, checkpointed,
and handed over on failure or for balance, children only after their parents::

    class Printer(RecordProcessor):
        def process_records(self, records, checkpointer):
            for record in records:
                print(record.to_json())
            checkpointer.checkpoint()

    StreamClient(db, "OrdersStream", "worker-1", Printer).run()
"""

from __future__ import annotations

from changestream.client._checkpointer import Checkpointer, LeaseLost
from changestream.client._processor import (
    InitializationContext,
    ProcessorFactory,
    RecordBatch,
    RecordProcessor,
    ShutdownReason,
)
from changestream.client._worker import StreamClient
from changestream.client.lease_table import LeaseStatus, describe_leases
from changestream.streams.positions import Position

__all__ = [
    "Checkpointer",
    "InitializationContext",
    "LeaseLost",
    "LeaseStatus",
    "Position",
    "ProcessorFactory",
    "RecordBatch",
    "RecordProcessor",
    "ShutdownReason",
    "StreamClient",
    "describe_leases",
]
