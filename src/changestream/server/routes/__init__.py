"""The handlers of the endpoints declared in :mod:`changestream.wire.api`, each a thin layer
over the embedded database, by resource: ``data`` (transactions, DDL, reads, SQL, documents,
the read function), ``splits``, ``leases`` (and watch's stream), ``streams`` (Datastream-style
streams) and ``service`` (the server itself); ``common`` holds what they share.

A handler gets the request body already validated into its declared model; values in the
typed encoding of :mod:`changestream.wire.values` are decoded here, and the engine checks
them exactly as it does for embedded callers (same errors, same messages). Every engine call
runs on a worker thread.
"""

from __future__ import annotations

from changestream.server.app import Handler
from changestream.server.routes.console import (
    console,
    consumer_status,
    lineage,
    overview,
    stream_errors,
    tail,
    whoami,
)
from changestream.server.routes.data import (
    change_streams,
    commit,
    current_timestamp,
    ddl,
    documents_delete,
    documents_list,
    documents_put,
    execute_update,
    log_append,
    log_list,
    read,
    read_change_stream,
    read_snapshot,
    rollback,
    sql,
    tables,
)
from changestream.server.routes.leases import (
    consumers,
    leases_delete,
    leases_get,
    leases_insert_if_absent,
    leases_list,
    leases_update,
    watch_source,
)
from changestream.server.routes.service import (
    docs,
    healthz,
    list_databases,
    metrics,
    openapi,
    readyz,
)
from changestream.server.routes.splits import (
    change_sizes,
    get_split_policy,
    merge,
    partition_history,
    partitions,
    rebalance,
    set_split_policy,
    split,
)
from changestream.server.routes.streams import (
    change_stream_state,
    create_stream,
    delete_stream,
    describe_stream,
    list_streams,
)
from changestream.wire import api

#: Each declared endpoint's handler, by the endpoint's name (see ``api.ENDPOINTS``).
HANDLERS: dict[str, Handler] = {
    "healthz": healthz,
    "readyz": readyz,
    "metrics": metrics,
    "openapi": openapi,
    "docs": docs,
    "list_databases": list_databases,
    "ddl": ddl,
    "commit": commit,
    "execute_update": execute_update,
    "rollback": rollback,
    "read": read,
    "read_snapshot": read_snapshot,
    "tables": tables,
    "current_timestamp": current_timestamp,
    "change_streams": change_streams,
    "documents_list": documents_list,
    "documents_put": documents_put,
    "documents_delete": documents_delete,
    "log_append": log_append,
    "log_list": log_list,
    "sql": sql,
    "read_change_stream": read_change_stream,
    "split": split,
    "merge": merge,
    "get_split_policy": get_split_policy,
    "set_split_policy": set_split_policy,
    "rebalance": rebalance,
    "watch_source": watch_source,
    "partitions": partitions,
    "partition_history": partition_history,
    "change_sizes": change_sizes,
    "consumers": consumers,
    "leases_list": leases_list,
    "leases_get": leases_get,
    "leases_insert_if_absent": leases_insert_if_absent,
    "leases_update": leases_update,
    "leases_delete": leases_delete,
    "list_streams": list_streams,
    "create_stream": create_stream,
    "describe_stream": describe_stream,
    "delete_stream": delete_stream,
    "change_stream_state": change_stream_state,
    "console": console,
    "whoami": whoami,
    "overview": overview,
    "lineage": lineage,
    "consumer_status": consumer_status,
    "stream_errors": stream_errors,
    "tail": tail,
}

#: (path, method, scope or None for public, handler) of every endpoint.
ROUTES: list[tuple[str, str, str | None, Handler]] = [
    (e.path, e.method, e.scope, HANDLERS[e.name]) for e in api.ENDPOINTS
]
