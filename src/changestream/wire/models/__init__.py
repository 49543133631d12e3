"""The typed bodies of the HTTP interface: requests, responses and stream lines.

msgspec Structs: values JSON cannot carry travel in the typed encoding of :mod:`.values`, so
fields holding such values are ``Any`` here and decoded by the handler (as are arguments the
engine checks itself, so remote callers get the embedded messages). Requests refuse fields
they do not know; responses do not, so a newer server may add some. This package imports
nothing from the server, so clients can use it without Starlette: ``base``, ``requests``,
``responses`` and ``lines``.
"""

from __future__ import annotations

from changestream.wire.models.base import Model as Model
from changestream.wire.models.base import Request as Request
from changestream.wire.models.lines import ChildPartitionBody as ChildPartitionBody
from changestream.wire.models.lines import ChildPartitionsLine as ChildPartitionsLine
from changestream.wire.models.lines import ChildPartitionsRecordBody as ChildPartitionsRecordBody
from changestream.wire.models.lines import ColumnTypeBody as ColumnTypeBody
from changestream.wire.models.lines import DataChangeRecordBody as DataChangeRecordBody
from changestream.wire.models.lines import EndLine as EndLine
from changestream.wire.models.lines import ErrorLine as ErrorLine
from changestream.wire.models.lines import FieldsLine as FieldsLine
from changestream.wire.models.lines import HeartbeatLine as HeartbeatLine
from changestream.wire.models.lines import HeartbeatRecordBody as HeartbeatRecordBody
from changestream.wire.models.lines import KeepaliveLine as KeepaliveLine
from changestream.wire.models.lines import Line as Line
from changestream.wire.models.lines import ModBody as ModBody
from changestream.wire.models.lines import RecordLine as RecordLine
from changestream.wire.models.lines import RecordStream as RecordStream
from changestream.wire.models.lines import RowLine as RowLine
from changestream.wire.models.lines import ShutdownLine as ShutdownLine
from changestream.wire.models.lines import SqlStream as SqlStream
from changestream.wire.models.requests import AppendLogRequest as AppendLogRequest
from changestream.wire.models.requests import ChangeSizesRequest as ChangeSizesRequest
from changestream.wire.models.requests import CommitRequest as CommitRequest
from changestream.wire.models.requests import ConsumerRequest as ConsumerRequest
from changestream.wire.models.requests import CreateStreamRequest as CreateStreamRequest
from changestream.wire.models.requests import DdlRequest as DdlRequest
from changestream.wire.models.requests import DeleteDocumentRequest as DeleteDocumentRequest
from changestream.wire.models.requests import ExecuteUpdateRequest as ExecuteUpdateRequest
from changestream.wire.models.requests import KeyRequest as KeyRequest
from changestream.wire.models.requests import KindRequest as KindRequest
from changestream.wire.models.requests import LeaseChangeRequest as LeaseChangeRequest
from changestream.wire.models.requests import LeaseGetRequest as LeaseGetRequest
from changestream.wire.models.requests import ListLogRequest as ListLogRequest
from changestream.wire.models.requests import Mutation as Mutation
from changestream.wire.models.requests import NoBody as NoBody
from changestream.wire.models.requests import PutDocumentRequest as PutDocumentRequest
from changestream.wire.models.requests import ReadChangeStreamRequest as ReadChangeStreamRequest
from changestream.wire.models.requests import ReadRequest as ReadRequest
from changestream.wire.models.requests import ReadSnapshotRequest as ReadSnapshotRequest
from changestream.wire.models.requests import RollbackRequest as RollbackRequest
from changestream.wire.models.requests import SetSplitPolicyRequest as SetSplitPolicyRequest
from changestream.wire.models.requests import SqlRequest as SqlRequest
from changestream.wire.models.requests import StreamStateRequest as StreamStateRequest
from changestream.wire.models.responses import ActionBody as ActionBody
from changestream.wire.models.responses import Actions as Actions
from changestream.wire.models.responses import ChangeSizes as ChangeSizes
from changestream.wire.models.responses import ChangeStreamBody as ChangeStreamBody
from changestream.wire.models.responses import ChangeStreams as ChangeStreams
from changestream.wire.models.responses import ColumnBody as ColumnBody
from changestream.wire.models.responses import CommitTimestamp as CommitTimestamp
from changestream.wire.models.responses import Consumers as Consumers
from changestream.wire.models.responses import ConsumerStatus as ConsumerStatus
from changestream.wire.models.responses import ConsumerStatuses as ConsumerStatuses
from changestream.wire.models.responses import DatabaseList as DatabaseList
from changestream.wire.models.responses import DatabaseOverview as DatabaseOverview
from changestream.wire.models.responses import Deleted as Deleted
from changestream.wire.models.responses import Document as Document
from changestream.wire.models.responses import Documents as Documents
from changestream.wire.models.responses import Empty as Empty
from changestream.wire.models.responses import Entries as Entries
from changestream.wire.models.responses import Error as Error
from changestream.wire.models.responses import ErrorDetail as ErrorDetail
from changestream.wire.models.responses import ExecuteUpdateResponse as ExecuteUpdateResponse
from changestream.wire.models.responses import Identity as Identity
from changestream.wire.models.responses import IndexBody as IndexBody
from changestream.wire.models.responses import Inserted as Inserted
from changestream.wire.models.responses import Leases as Leases
from changestream.wire.models.responses import LeaseStatusBody as LeaseStatusBody
from changestream.wire.models.responses import Lineage as Lineage
from changestream.wire.models.responses import LineagePartitionBody as LineagePartitionBody
from changestream.wire.models.responses import MaybeLease as MaybeLease
from changestream.wire.models.responses import NotDatabase as NotDatabase
from changestream.wire.models.responses import ObjectProgressBody as ObjectProgressBody
from changestream.wire.models.responses import Partition as Partition
from changestream.wire.models.responses import Partitions as Partitions
from changestream.wire.models.responses import PipelineBody as PipelineBody
from changestream.wire.models.responses import Readiness as Readiness
from changestream.wire.models.responses import RowDeletionPolicyBody as RowDeletionPolicyBody
from changestream.wire.models.responses import Rows as Rows
from changestream.wire.models.responses import SnapshotRows as SnapshotRows
from changestream.wire.models.responses import SplitPolicyBody as SplitPolicyBody
from changestream.wire.models.responses import Status as Status
from changestream.wire.models.responses import StreamActivity as StreamActivity
from changestream.wire.models.responses import StreamDefinitionBody as StreamDefinitionBody
from changestream.wire.models.responses import StreamDescription as StreamDescription
from changestream.wire.models.responses import StreamErrorBody as StreamErrorBody
from changestream.wire.models.responses import StreamErrors as StreamErrors
from changestream.wire.models.responses import StreamList as StreamList
from changestream.wire.models.responses import StreamState as StreamState
from changestream.wire.models.responses import StreamSummary as StreamSummary
from changestream.wire.models.responses import StreamTargetBody as StreamTargetBody
from changestream.wire.models.responses import TableBody as TableBody
from changestream.wire.models.responses import Tables as Tables
from changestream.wire.models.responses import Timestamp as Timestamp
from changestream.wire.models.responses import TypeBody as TypeBody
from changestream.wire.models.responses import Version as Version
from changestream.wire.models.responses import WatchSourceResponse as WatchSourceResponse
