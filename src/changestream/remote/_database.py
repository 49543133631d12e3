"""``changestream.connect(url, token=...)``: a remote database with the embedded one's interface.

Every method makes one HTTP request to a ``changestream serve`` server and answers with the same
values, records and ``changestream.errors`` exceptions the embedded database would.

Transactions: mutations are buffered here and sent with the commit, in one request, applied in
one SQLite transaction on the server (all or nothing, as embedded). ``execute_update`` must
answer with a row count, so DML runs on the server when it is called, inside a server-side
transaction that holds the write lock until the commit, exactly like an embedded transaction
(which also takes the lock at its first DML); mutations buffered before or after it are sent
with the commit and applied after the DML, again as embedded. Running DML in a dry run and
again at commit would be one request less but could count rows the commit then does not
write, so it is not done. A transaction with DML that stays idle on the server for longer
than the server's session timeout (30 s by default) is rolled back there. Mutation errors
(unknown table, bad value) are raised by ``commit()`` rather than by ``insert()``.

Streams: ``read_change_stream`` returns once the server has accepted the query (so argument
errors raise at the call, as embedded) and then yields records as they arrive. When the
connection breaks or the server restarts, it reconnects and carries on from the last record it
returned, skipping what it already gave, so no record is lost or repeated; it gives up after
``reconnect_timeout`` seconds without a server.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import msgspec
import orjson

from changestream.clock import parse_ts
from changestream.ddl.schema import ChangeStream, Table
from changestream.errors import (
    Unavailable,
    reported_items,
)
from changestream.remote import _http as http
from changestream.remote._http import Endpoints
from changestream.remote._leases import RemoteLeaseTable
from changestream.remote._transaction import RemoteTransaction
from changestream.store.keys import KeyRange
from changestream.store.models import (
    Action,
    SnapshotRead,
    SplitPolicy,
    SystemDocument,
    check_consumer,
)
from changestream.streams.models import (
    DEFAULT_HEARTBEAT_MS,
    Params,
    Partition,
    ResultSet,
    Timestamp,
)
from changestream.streams.positions import Position
from changestream.streams.read_function_rows import read_function_rows
from changestream.streams.records import (
    ChangeRecord,
)
from changestream.streams.roles import WatchSource
from changestream.streams.sizes import DEFAULT_SIZES, ChangeSize
from changestream.streams.stored_changes import StoredRecord
from changestream.streams.watch_arguments import WatchCursor
from changestream.watch.cluster import ClusterChangeStreamCursor
from changestream.watch.cursor import ChangeStreamCursor
from changestream.watch.watchable import Stages, WatchableDatabase
from changestream.wire import models
from changestream.wire.records import (
    StreamLine,
    action_from_json,
    error_from_json,
    policy_from_json,
    record_from_stream_line,
    stored_record_from_stream_line,
)
from changestream.wire.values import decode, encode

if TYPE_CHECKING:
    from changestream.datastream.definition import StreamDefinition
    from changestream.streams.watch_arguments import WatchArguments


#: A record as a read returns it (see ``read_stored_changes``).
_Record = TypeVar("_Record", ChangeRecord, StoredRecord)
_RECORD_TYPES = frozenset({"data_change_record", "heartbeat_record", "child_partitions_record"})


def _read_request(
    stream: str,
    start: Timestamp,
    end: Timestamp | None,
    token: str | None,
    heartbeat_milliseconds: int,
    read_options: object = None,
) -> models.ReadChangeStreamRequest:
    """The body of a read function request."""
    return models.ReadChangeStreamRequest(
        stream=stream,
        start_timestamp=encode(start),
        end_timestamp=encode(end),
        partition_token=encode(token),
        heartbeat_milliseconds=encode(heartbeat_milliseconds),
        read_options=encode(read_options),
    )


def connect(
    url: str,
    token: str | None = None,
    *,
    timeout: float = 60.0,
    reconnect_timeout: float = 30.0,
    verify: bool | str = True,
) -> RemoteDatabase:
    """Connect to the database at ``url`` on a ``changestream serve`` server.

    ``url`` is ``http(s)://host:port/NAME`` for database NAME, or ``http(s)://host:port``, the
    server's root: then ``watch()`` follows every database the server serves (MongoDB's
    client-level change stream), and the other calls go to its database when it serves exactly
    one. ``token`` defaults to ``$CHANGESTREAM_TOKEN``.
    ``timeout`` bounds each request and each silence of a stream (the server sends keepalives);
    ``reconnect_timeout`` is how long calls and streams retry a server that stopped answering;
    one never reached since ``connect()`` is reported within about two seconds.
    ``verify``: check the server's TLS certificate (a path names the CA bundle to trust).
    """
    return RemoteDatabase(url, token, timeout, reconnect_timeout, verify)


class RemoteDatabase(WatchableDatabase):
    """A change-stream database on a server (see :func:`connect` and the module docs)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 60.0,
        reconnect_timeout: float = 30.0,
        verify: bool | str = True,
    ) -> None:
        self._http = Endpoints(url, token, timeout, reconnect_timeout, verify)
        self.url = url
        self._settings = (token, timeout, reconnect_timeout, verify)
        #: This handle's session: its commits are recorded under it (watch()'s ``lsid``).
        self.session_id = str(uuid.uuid4())
        name = self._http.database
        self._root = self._http.root if not name else None
        if not name:
            names = self.list_database_names()
            name = names[0] if len(names) == 1 else ""
            self._http.database = name
        #: The database's name on the server ("" for a server root serving several).
        self.name = name

    def _invoke(
        self,
        name: str,
        body: models.Request | None = None,
        *,
        stream: str | None = None,
        query: dict[str, str] | None = None,
        idempotent: bool = True,
    ) -> Any:
        return self._http.invoke(name, body, stream=stream, query=query, idempotent=idempotent)

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connections; the object cannot be used afterwards."""
        self._http.close()

    def __enter__(self) -> RemoteDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteDatabase({self.url!r})"

    # -- the Database interface ---------------------------------------------------------------

    def execute_ddl(self, statements: str | Sequence[str]) -> int:
        """Apply DDL statements atomically on the server; returns their commit timestamp."""
        texts = statements if isinstance(statements, str) else list(statements)
        reply = self._invoke("ddl", models.DdlRequest(statements=texts), idempotent=False)
        return int(reply.commit_timestamp)

    def transaction(
        self, tag: str | None = None, exclude_txn_from_change_streams: bool = False
    ) -> RemoteTransaction:
        """A transaction whose mutations are sent with its commit (see the module docs);
        ``exclude_txn_from_change_streams`` as for the embedded database."""
        return RemoteTransaction(self, tag, exclude_txn_from_change_streams)

    def read(
        self,
        table: str,
        keys: Sequence[Sequence[Any]] | KeyRange | None = None,
        columns: Sequence[str] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Rows of ``table`` in key order: all rows, the given keys, or a KeyRange."""
        body = models.ReadRequest(
            table=table,
            keys=None if keys is None else encode(keys),
            columns=None if columns is None else list(columns),
        )
        rows = decode(self._invoke("read", body).rows)
        return [tuple(row) for row in rows]

    def read_snapshot(
        self,
        table: str,
        keys: KeyRange | None = None,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> SnapshotRead:
        """Rows of ``table`` in key order (all, or a KeyRange; the first ``limit``) read in one
        snapshot on the server, with that snapshot's commit timestamp."""
        body = models.ReadSnapshotRequest(
            table=table,
            keys=None if keys is None else encode(keys),
            columns=None if columns is None else list(columns),
            limit=limit,
        )
        reply = self._invoke("read_snapshot", body)
        return SnapshotRead([tuple(row) for row in decode(reply.rows)], reply.read_timestamp)

    def tables(self) -> list[Table]:
        """The user tables, by name: columns in schema order, primary key in key order."""
        return [Table.from_catalog(http.plain(t)) for t in self._invoke("tables").tables]

    def change_streams(self) -> list[ChangeStream]:
        """The change streams users created (not the engine's own), by name."""
        reply = self._invoke("change_streams")
        return [ChangeStream.from_catalog(http.plain(s)) for s in reply.change_streams]

    def system_documents(self, kind: str) -> dict[str, SystemDocument]:
        """Every system document of ``kind``, by name."""
        reply = self._invoke("documents_list", models.KindRequest(kind=kind))
        return {d.name: SystemDocument(d.name, d.version, decode(d.body)) for d in reply.documents}

    def put_system_document(
        self, kind: str, name: str, body: Mapping[str, Any], expected_version: int | None
    ) -> int:
        """Write a system document if it is at ``expected_version`` (None: only if it does not
        exist); returns the new version. AlreadyExists / FailedPrecondition otherwise."""
        request = models.PutDocumentRequest(
            kind=kind, name=name, body=encode(body), expected_version=expected_version
        )
        # Not repeated on a broken connection: a repeat would find its own write and fail.
        return int(self._invoke("documents_put", request, idempotent=False).version)

    def delete_system_document(
        self, kind: str, name: str, expected_version: int | None = None
    ) -> bool:
        """Remove a system document and its log; True when it existed."""
        request = models.DeleteDocumentRequest(
            kind=kind, name=name, expected_version=expected_version
        )
        return bool(self._invoke("documents_delete", request, idempotent=False).deleted)

    def append_system_log(self, kind: str, name: str, entry: Mapping[str, Any]) -> None:
        """Append a JSON object to the log of kind/name; it is stamped with ``time`` (µs)."""
        request = models.AppendLogRequest(kind=kind, name=name, entry=encode(entry))
        self._invoke("log_append", request, idempotent=False)

    def system_log(self, kind: str, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """The last ``limit`` entries of the log of kind/name, oldest first."""
        request = models.ListLogRequest(kind=kind, name=name, limit=limit)
        return list(decode(self._invoke("log_list", request).entries))

    def execute_sql(self, sql: str, params: Params = None) -> ResultSet:
        """A SELECT, or a read function in either dialect (streamed, resuming like
        :meth:`read_change_stream`)."""
        # Imported here: SQL is parsed with sqlglot, which a client that only reads and
        # writes rows never loads (see changestream.ddl.defaults).
        from changestream.sql.statements import ReadFunctionCall, parse_statement

        statement = parse_statement(sql, params)
        if isinstance(statement, ReadFunctionCall):
            return read_function_rows(self, statement)
        body = models.SqlRequest(sql=sql, params=encode(params))
        response = self._http.open_stream("sql", body, reconnect=False)
        lines = http.lines(response)
        try:
            first = next(lines, None)
        except httpx.TransportError as exc:
            response.close()
            raise Unavailable(f"the connection broke before the result came: {exc!r}") from exc
        if first is None or first["type"] != "fields":
            response.close()
            raise Unavailable("the server shut down before sending the result; run it again")
        return ResultSet(list(first["fields"]), _rows(response, lines))

    def read_change_stream(
        self,
        stream: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp | None = None,
        partition_token: str | None = None,
        heartbeat_milliseconds: int = DEFAULT_HEARTBEAT_MS,
        read_options: object = None,
    ) -> Iterator[ChangeRecord]:
        """The read function, streamed from the server; resumes across broken connections."""
        body = _read_request(
            stream,
            start_timestamp,
            end_timestamp,
            partition_token,
            heartbeat_milliseconds,
            read_options,
        )
        return self._read(body, record_from_stream_line)

    def read_stored_changes(
        self,
        stream: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp | None,
        partition_token: str | None,
        heartbeat_milliseconds: int,
    ) -> Iterator[StoredRecord]:
        """The read function, inserts stored compact coming as :class:`StoredInserts` (as the
        embedded ``read_stored_changes`` gives them; the server sends them as stored)."""
        body = _read_request(
            stream, start_timestamp, end_timestamp, partition_token, heartbeat_milliseconds
        )
        return self._read(body, stored_record_from_stream_line)

    def _read(
        self, body: models.ReadChangeStreamRequest, decode: Callable[[StreamLine], _Record]
    ) -> Iterator[_Record]:
        response = self._http.open_stream("read_change_stream", body, reconnect=False)
        records = self._records(body, response, decode)
        return reported_items(records, "reading a remote change stream")

    def _records(
        self,
        body: models.ReadChangeStreamRequest,
        response: httpx.Response,
        decode: Callable[[StreamLine], _Record],
    ) -> Iterator[_Record]:
        #: The record returned so far that goes furthest (None: none yet); its position is
        #: worked out only when a connection is cut.
        furthest: _Record | None = None
        #: Its position when the current connection was opened (None: the first one).
        resumed: Position | None = None
        try:
            while True:
                try:
                    for line in http.stream_lines(response):
                        kind = line.type
                        if kind in _RECORD_TYPES:
                            record = decode(line)
                            if resumed is not None and resumed.covers(record):
                                continue
                            if record.ends_partition:
                                yield record
                                return  # it ends the query; only the end line can follow
                            # Records come in position order: a later one at the same
                            # timestamp goes at least as far.
                            if furthest is None or record.timestamp >= furthest.timestamp:
                                furthest = record
                            yield record
                        elif kind == "end":
                            return
                        elif kind == "error":
                            raise error_from_json(orjson.loads(memoryview(line.error)), 200)
                        elif kind == "shutdown":
                            break
                except httpx.TransportError:
                    pass  # cut: carry on from where we are, on a new connection
                response.close()
                position = None if furthest is None else Position.after(furthest)
                resumed = position
                if position is not None:
                    # Records of the last transaction may span the cut: start at its timestamp
                    # and skip what was returned (``Position.covers``).
                    body = msgspec.structs.replace(body, start_timestamp=position.timestamp)
                response = self._http.open_stream("read_change_stream", body, reconnect=True)
        finally:
            response.close()

    def partitions(self, stream: str, at: Timestamp | None = None) -> list[Partition]:
        """The partitions of ``stream`` live now (or at timestamp ``at``), in key order."""
        query = None if at is None else {"at": str(parse_ts(at, "at"))}
        reply = self._invoke("partitions", stream=stream, query=query)
        return [_partition(p) for p in reply.partitions]

    def partition_history(self, stream: str) -> list[Partition]:
        """Every partition of ``stream`` since it was created, oldest first (the lineage)."""
        reply = self._invoke("partition_history", stream=stream)
        return [_partition(p) for p in reply.partitions]

    def current_timestamp(self) -> int:
        """The server's database clock, in microseconds since the epoch (not this machine's):
        a commit after this call gets a later timestamp."""
        return int(self._invoke("current_timestamp").timestamp)

    def change_sizes(
        self,
        stream: str,
        partition_token: str,
        start_timestamp: Timestamp,
        end_timestamp: Timestamp,
        limit: int = DEFAULT_SIZES,
    ) -> list[ChangeSize]:
        """How much the read of one partition holds, per commit timestamp (see
        ``EmbeddedDatabase.change_sizes``): the server counts, no record is sent."""
        body = models.ChangeSizesRequest(
            partition_token=encode(partition_token),
            start_timestamp=encode(start_timestamp),
            end_timestamp=encode(end_timestamp),
            limit=encode(limit),
        )
        reply = self._invoke("change_sizes", body, stream=stream)
        columns = (reply.commit_timestamps, reply.records, reply.mods, reply.bytes)
        return [ChangeSize(*size) for size in zip(*columns, strict=True)]

    def split_at(self, table: str, key: Sequence[Any]) -> int:
        """Split the split holding ``key`` of ``table`` at that key; returns the split time."""
        body = models.KeyRequest(table=table, key=encode(key))
        return int(self._invoke("split", body, idempotent=False).timestamp)

    def merge_at(self, table: str, key: Sequence[Any]) -> int:
        """Merge the two splits meeting at ``key`` of ``table``; returns the merge time."""
        body = models.KeyRequest(table=table, key=encode(key))
        return int(self._invoke("merge", body, idempotent=False).timestamp)

    def split_policy(self) -> SplitPolicy:
        """The database's split policy."""
        return policy_from_json(http.plain(self._invoke("get_split_policy")))

    def set_split_policy(self, policy: SplitPolicy | None = None, **changes: Any) -> SplitPolicy:
        """Replace the split policy, or change some of its settings; returns the new one."""
        body = models.SetSplitPolicyRequest(
            policy=None if policy is None else policy.to_dict(), changes=changes
        )
        return policy_from_json(http.plain(self._invoke("set_split_policy", body)))

    def rebalance(self) -> list[Action]:
        """Apply the split policy now; returns the splits and merges made."""
        reply = self._invoke("rebalance", models.NoBody(), idempotent=False)
        return [action_from_json(http.plain(a)) for a in reply.actions]

    def leases(self, stream: str, consumer: str) -> RemoteLeaseTable:
        """The lease table of consumer group ``consumer`` on ``stream``."""
        return RemoteLeaseTable(self, stream, check_consumer(consumer))

    def lease_consumers(self, stream: str) -> list[str]:
        """The consumer groups that keep leases on ``stream``, sorted."""
        return list(self._invoke("consumers", stream=stream).consumers)

    # -- Datastream-style streams: the server's stream resources ---------------------------

    def list_streams(self) -> list[models.StreamSummary]:
        """The streams defined in the database: name, state and definition of each."""
        return list(self._invoke("list_streams").streams)

    def create_stream(
        self, definition: StreamDefinition | Mapping[str, Any]
    ) -> models.StreamSummary:
        """Define a stream (it starts Not started); ``definition`` is a ``StreamDefinition``
        or a mapping of its fields. Needs the admin scope."""
        fields = definition if isinstance(definition, Mapping) else definition.to_dict()
        body = models.CreateStreamRequest(definition=dict(fields))
        return self._invoke("create_stream", body, idempotent=False)  # type: ignore[no-any-return]

    def describe_stream(self, name: str) -> models.StreamDescription:
        """The stream's state, definition, backfill per object, progress and lag."""
        return self._invoke("describe_stream", stream=name)  # type: ignore[no-any-return]

    def change_stream_state(self, name: str, verb: str) -> str:
        """Move the stream through its lifecycle (``start``, ``pause``, ``resume`` or
        ``drain``); returns the state it is now in."""
        body = models.StreamStateRequest(verb=verb)  # type: ignore[arg-type]
        return str(self._invoke("change_stream_state", body, stream=name, idempotent=False).state)

    def delete_stream(self, name: str) -> None:
        """Delete a stream no pipeline works on (its files stay). Needs the admin scope."""
        self._invoke("delete_stream", stream=name, idempotent=False)

    def ensure_watch_stream(self) -> WatchSource:
        """The internal change stream watch() reads, created on first use (which takes a
        token with the admin scope: a read token cannot make reading write)."""
        reply = self._invoke("watch_source", models.NoBody())
        return WatchSource(reply.stream, reply.database, reply.now)

    def _open_cursor(self, pipeline: Stages, arguments: WatchArguments) -> WatchCursor:
        """Merged here from the remote read function. On a server's root URL the cursor
        follows every database the server serves (see :mod:`changestream.watch.cluster`)."""
        if self._root is not None:
            return ClusterChangeStreamCursor(
                self.list_database_names, self._database, pipeline, **arguments
            )
        return ChangeStreamCursor(self, None, pipeline, **arguments)

    def list_database_names(self) -> list[str]:
        """The databases the server serves, sorted."""
        return sorted(self._invoke("list_databases").databases)

    def _database(self, name: str) -> RemoteDatabase:
        """Another database on the same server, reached with the same settings."""
        assert self._root is not None
        token, timeout, reconnect_timeout, verify = self._settings
        return RemoteDatabase(
            f"{self._root}/{http.segment(name)}", token, timeout, reconnect_timeout, verify
        )


def _partition(given: models.Partition) -> Partition:
    return Partition(
        token=given.token,
        start_timestamp=given.start_timestamp,
        end_timestamp=given.end_timestamp,
        start_key=given.start_key,
        end_key=given.end_key,
        parent_tokens=tuple(given.parent_tokens),
        child_tokens=tuple(given.child_tokens),
        write_rate=given.write_rate,
    )


def _rows(response: httpx.Response, lines: Iterator[dict[str, Any]]) -> Iterator[list[Any]]:
    """The rows of a SQL response."""
    try:
        for line in lines:
            kind = line["type"]
            if kind == "row":
                yield decode(line["row"])
            elif kind == "error":
                raise error_from_json(line["error"], 200)
            elif kind == "end":
                return
            elif kind == "shutdown":
                raise Unavailable("the server shut down while sending the rows; run it again")
        raise Unavailable("the connection broke while the server was sending the rows")
    except httpx.TransportError as exc:
        raise Unavailable(f"the connection broke while receiving the rows: {exc!r}") from exc
    finally:
        response.close()
