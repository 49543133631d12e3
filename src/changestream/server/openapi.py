"""The server's OpenAPI 3.1 document (``/openapi.json``) and its docs page (``/docs``)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import changestream

_ANY: dict[str, Any] = {"description": "A value in the typed JSON encoding (see the intro)."}
_TIMESTAMP: dict[str, Any] = {
    "description": "Integer microseconds since the epoch, an RFC 3339 string, or a $datetime.",
}
_NULLABLE_TEXT = {"type": ["string", "null"]}
_TEXTS = {"type": "array", "items": {"type": "string"}}
_KEYS = {
    "description": "A list of key lists, or a $key_range object.",
    "oneOf": [
        {"type": "array", "items": {"type": "array", "items": _ANY}},
        {"type": "object", "required": ["$key_range"], "properties": {"$key_range": _ANY}},
    ],
}

INTRO = """\
The change-stream database over HTTP: the same operations as the embedded
`changestream.Database`, for `changestream.connect(url, token=...)` and any HTTP client.

**Auth**: `Authorization: Bearer <token>`; tokens carry the scopes `read`, `write` and
`admin` (see each operation). A missing or unknown token answers 401, a missing scope 403.

**Errors** are JSON: `{"error": {"code": "<changestream.errors class>", "message": "..."}}`,
with the HTTP status of the error class (400 invalid argument, 404 not found, 409 already
exists, 412 failed precondition, 413 body too large, 503 busy or shutting down).

**Typed values**: JSON has no bytes, timestamps, dates, decimals, non-finite floats or the
commit-timestamp sentinel, so values (mutation rows, keys, query parameters, result rows)
write them as single-key objects: `{"$bytes": base64}`, `{"$datetime": iso}`,
`{"$date": iso}`, `{"$numeric": text}`, `{"$float": "NaN"}`, `{"$int": text}`,
`{"$commit_timestamp": true}`, `{"$key_range": {...}}`; an object with a key starting with
`$` is wrapped as `{"$object": {...}}`.

**Streams** (`read_change_stream`, `sql`) answer NDJSON, one object per line with a `type`:
`data_change_record` / `heartbeat_record` / `child_partitions_record` (with `record` in the
seed's JSON shape, `partition_token`, and `timestamp_us`, the record's timestamp), `fields`
and `row` (SQL), `keepalive` (idle), `error`, then `end`; `shutdown` means the server is
stopping and the client should reconnect.
"""


def _error() -> dict[str, Any]:
    return {
        "description": "An error",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _operation(
    summary: str,
    scope: str | None,
    response: dict[str, Any],
    body: dict[str, Any] | None = None,
    required: tuple[str, ...] = (),
    parameters: tuple[str, ...] = (),
    stream: bool = False,
) -> dict[str, Any]:
    media = "application/x-ndjson" if stream else "application/json"
    operation: dict[str, Any] = {
        "summary": summary,
        "parameters": [{"$ref": f"#/components/parameters/{p}"} for p in parameters],
        "responses": {
            "200": {"description": "Success", "content": {media: {"schema": response}}},
            **{status: _error() for status in ("400", "401", "403", "404", "409", "412", "413")},
            "503": _error(),
        },
    }
    if scope is None:
        operation["security"] = []
        operation["responses"] = {"200": operation["responses"]["200"]}
    else:
        operation["description"] = f"Needs the `{scope}` scope."
    if body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"type": "object", "properties": body, "required": list(required)}
                }
            },
        }
    return operation


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


@cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI document describing every endpoint."""
    db = ("database",)
    stream = ("database", "stream")
    mutation = {
        "type": "object",
        "required": ["op", "table"],
        "properties": {
            "op": {"enum": ["insert", "update", "insert_or_update", "replace", "delete"]},
            "table": {"type": "string"},
            "columns": _TEXTS,
            "values": {"type": "array", "items": {"type": "array", "items": _ANY}},
            "keys": _KEYS,
        },
    }
    ref = {name: {"$ref": f"#/components/schemas/{name}"} for name in ("Partition", "Lease")}
    lease_body = {"consumer": {"type": "string"}, "lease": ref["Lease"]}
    partitions = _object(partitions={"type": "array", "items": ref["Partition"]})
    policy = {"$ref": "#/components/schemas/SplitPolicy"}
    document_key = {"kind": {"type": "string"}, "name": {"type": "string"}}
    version = {"type": ["integer", "null"]}
    document = _object(
        name={"type": "string"}, version={"type": "integer"}, body={"type": "object"}
    )
    paths: dict[str, dict[str, Any]] = {
        "/healthz": {"get": _operation("Health", None, _object(status={"type": "string"}))},
        "/metrics": {
            "get": _operation("Prometheus metrics (text format)", "read", {"type": "string"})
        },
        "/openapi.json": {"get": _operation("This document", None, {"type": "object"})},
        "/docs": {"get": _operation("The documentation page", None, {"type": "string"})},
        "/v1/databases": {"get": _operation("Served databases", "read", _object(databases=_TEXTS))},
        "/v1/databases/{database}/ddl": {
            "post": _operation(
                "Apply DDL statements atomically",
                "admin",
                _object(commit_timestamp={"type": "integer"}),
                {"statements": {"oneOf": [{"type": "string"}, _TEXTS]}},
                ("statements",),
                db,
            )
        },
        "/v1/databases/{database}/commit": {
            "post": _operation(
                "Commit a transaction: buffered mutations, after the DML of its session",
                "write",
                _object(commit_timestamp={"type": "integer"}),
                {
                    "tag": _NULLABLE_TEXT,
                    "session": _NULLABLE_TEXT,
                    "mutations": {"type": "array", "items": mutation},
                },
                (),
                db,
            )
        },
        "/v1/databases/{database}/execute_update": {
            "post": _operation(
                "Run DML in a transaction (a new one when session is null), returning its row"
                " count",
                "write",
                _object(session={"type": "string"}, row_count={"type": "integer"}),
                {
                    "dml": {"type": "string"},
                    "params": _ANY,
                    "session": _NULLABLE_TEXT,
                    "tag": _NULLABLE_TEXT,
                },
                ("dml",),
                db,
            )
        },
        "/v1/databases/{database}/rollback": {
            "post": _operation(
                "Roll back a transaction",
                "write",
                {"type": "object"},
                {"session": {"type": "string"}},
                ("session",),
                db,
            )
        },
        "/v1/databases/{database}/read": {
            "post": _operation(
                "Read rows by key, key range, or all",
                "read",
                _object(rows={"type": "array", "items": {"type": "array", "items": _ANY}}),
                {"table": {"type": "string"}, "keys": _KEYS, "columns": _TEXTS},
                ("table",),
                db,
            )
        },
        "/v1/databases/{database}/read_snapshot": {
            "post": _operation(
                "Read rows (all or a key range) in one snapshot, with its commit timestamp",
                "read",
                _object(
                    rows={"type": "array", "items": {"type": "array", "items": _ANY}},
                    read_timestamp={"type": "integer"},
                ),
                {
                    "table": {"type": "string"},
                    "keys": {"oneOf": [_KEYS["oneOf"][1], {"type": "null"}]},
                    "columns": _TEXTS,
                    "limit": {"type": ["integer", "null"]},
                },
                ("table",),
                db,
            )
        },
        "/v1/databases/{database}/tables": {
            "get": _operation(
                "The user tables (columns in schema order, primary key in key order)",
                "read",
                _object(tables={"type": "array", "items": {"type": "object"}}),
                parameters=db,
            )
        },
        "/v1/databases/{database}/change_streams": {
            "get": _operation(
                "The change streams users created",
                "read",
                _object(change_streams={"type": "array", "items": {"type": "object"}}),
                parameters=db,
            )
        },
        "/v1/databases/{database}/system_documents/list": {
            "post": _operation(
                "Every system document of a kind",
                "read",
                _object(documents={"type": "array", "items": document}),
                {"kind": {"type": "string"}},
                ("kind",),
                db,
            )
        },
        "/v1/databases/{database}/system_documents/put": {
            "post": _operation(
                "Write a system document if it is at expected_version (null: if absent)",
                "write",
                _object(version={"type": "integer"}),
                {**document_key, "body": {"type": "object"}, "expected_version": version},
                ("kind", "name", "body"),
                db,
            )
        },
        "/v1/databases/{database}/system_documents/delete": {
            "post": _operation(
                "Remove a system document and its log",
                "write",
                _object(deleted={"type": "boolean"}),
                {**document_key, "expected_version": version},
                ("kind", "name"),
                db,
            )
        },
        "/v1/databases/{database}/system_log/append": {
            "post": _operation(
                "Append an entry (stamped with time) to a system log",
                "write",
                {"type": "object"},
                {**document_key, "entry": {"type": "object"}},
                ("kind", "name", "entry"),
                db,
            )
        },
        "/v1/databases/{database}/system_log/list": {
            "post": _operation(
                "The last entries of a system log, oldest first",
                "read",
                _object(entries={"type": "array", "items": {"type": "object"}}),
                {**document_key, "limit": {"type": "integer"}},
                ("kind", "name"),
                db,
            )
        },
        "/v1/databases/{database}/sql": {
            "post": _operation(
                "Run a SELECT or a read function in either dialect (NDJSON: fields, rows)",
                "read",
                {"type": "string"},
                {"sql": {"type": "string"}, "params": _ANY},
                ("sql",),
                db,
                stream=True,
            )
        },
        "/v1/databases/{database}/read_change_stream": {
            "post": _operation(
                "The read function, streamed as NDJSON records",
                "read",
                {"type": "string"},
                {
                    "stream": {"type": "string"},
                    "start_timestamp": _TIMESTAMP,
                    "end_timestamp": _TIMESTAMP,
                    "partition_token": _NULLABLE_TEXT,
                    "heartbeat_milliseconds": {"type": "integer"},
                    "read_options": _ANY,
                },
                ("stream", "start_timestamp"),
                db,
                stream=True,
            )
        },
        "/v1/databases/{database}/split": {
            "post": _operation(
                "Split the key space at a key",
                "admin",
                _object(timestamp={"type": "integer"}),
                {"table": {"type": "string"}, "key": {"type": "array", "items": _ANY}},
                ("table", "key"),
                db,
            )
        },
        "/v1/databases/{database}/merge": {
            "post": _operation(
                "Merge the two splits meeting at a key",
                "admin",
                _object(timestamp={"type": "integer"}),
                {"table": {"type": "string"}, "key": {"type": "array", "items": _ANY}},
                ("table", "key"),
                db,
            )
        },
        "/v1/databases/{database}/split_policy": {
            "get": _operation("The split policy", "read", policy, parameters=db),
            "put": _operation(
                "Replace the split policy or change some settings",
                "admin",
                policy,
                {"policy": {"oneOf": [policy, {"type": "null"}]}, "changes": {"type": "object"}},
                (),
                db,
            ),
        },
        "/v1/databases/{database}/rebalance": {
            "post": _operation(
                "Apply the split policy now",
                "admin",
                _object(actions={"type": "array", "items": {"type": "object"}}),
                parameters=db,
            )
        },
        "/v1/databases/{database}/watch_source": {
            "post": _operation(
                "The internal change stream watch() reads (created on first use)",
                "read",
                {"$ref": "#/components/schemas/WatchSource"},
                parameters=db,
            )
        },
        "/v1/databases/{database}/streams/{stream}/partitions": {
            "get": _operation(
                "Partitions live now or at a time",
                "read",
                partitions,
                parameters=(*stream, "at"),
            )
        },
        "/v1/databases/{database}/streams/{stream}/partition_history": {
            "get": _operation(
                "Every partition (the lineage)", "read", partitions, parameters=stream
            )
        },
        "/v1/databases/{database}/streams/{stream}/consumers": {
            "get": _operation(
                "Consumer groups with leases", "read", _object(consumers=_TEXTS), parameters=stream
            )
        },
        "/v1/databases/{database}/streams/{stream}/leases/list": {
            "post": _operation(
                "A consumer group's leases",
                "read",
                _object(leases={"type": "array", "items": ref["Lease"]}),
                {"consumer": {"type": "string"}},
                ("consumer",),
                stream,
            )
        },
        "/v1/databases/{database}/streams/{stream}/leases/get": {
            "post": _operation(
                "One lease",
                "read",
                _object(lease=ref["Lease"]),
                {
                    "consumer": {"type": "string"},
                    "status_type": {"type": "string"},
                    "status_value": {"type": "string"},
                },
                ("consumer", "status_type", "status_value"),
                stream,
            )
        },
        "/v1/databases/{database}/streams/{stream}/leases/insert_if_absent": {
            "post": _operation(
                "Add a lease unless its key exists",
                "write",
                _object(inserted={"type": "boolean"}),
                lease_body,
                ("consumer", "lease"),
                stream,
            )
        },
        "/v1/databases/{database}/streams/{stream}/leases/update": {
            "post": _operation(
                "Update a lease if its counter matches",
                "write",
                _object(lease=ref["Lease"]),
                lease_body,
                ("consumer", "lease"),
                stream,
            )
        },
        "/v1/databases/{database}/streams/{stream}/leases/delete": {
            "post": _operation(
                "Delete a lease if its counter matches",
                "write",
                _object(deleted={"type": "boolean"}),
                lease_body,
                ("consumer", "lease"),
                stream,
            )
        },
    }
    for path, path_item in paths.items():
        for method, operation in path_item.items():
            short = path.removeprefix("/v1/databases/{database}").strip("/")
            operation["operationId"] = method + "_" + re.sub(r"[^A-Za-z0-9]+", "_", short)
    integer = {"type": "integer"}
    number = {"type": "number"}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "changestream",
            "version": changestream.__version__,
            "description": INTRO,
        },
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "parameters": {
                "database": {
                    "name": "database",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
                "stream": {
                    "name": "stream",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
                "at": {
                    "name": "at",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "RFC 3339 timestamp or integer microseconds",
                },
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": {"type": "string"},
                                "message": {"type": "string"},
                            },
                        }
                    },
                },
                "Partition": _object(
                    token={"type": "string"},
                    start_timestamp=integer,
                    end_timestamp={"type": ["integer", "null"]},
                    start_key={"type": "string"},
                    end_key={"type": "string"},
                    parent_tokens=_TEXTS,
                    child_tokens=_TEXTS,
                    write_rate=number,
                ),
                "Lease": {
                    **_object(
                        status_type={"type": "string"},
                        status_value={"type": "string"},
                        checkpoint={"type": "string"},
                        lease_counter=integer,
                        lease_owner=_NULLABLE_TEXT,
                        lease_stealer=_NULLABLE_TEXT,
                        parent_shard_ids=_TEXTS,
                        start_timestamp=integer,
                    ),
                    "required": ["status_type", "status_value"],
                },
                "SplitPolicy": _object(
                    enabled={"type": "boolean"},
                    max_rows=integer,
                    max_write_rate=number,
                    window_seconds=number,
                    merge_max_rows=integer,
                    merge_max_write_rate=number,
                    min_lifetime_seconds=number,
                    check_interval_seconds=number,
                ),
                "WatchSource": _object(
                    stream={"type": "string"}, database={"type": "string"}, now=integer
                ),
            },
        },
    }


DOCS_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>changestream API</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }
code, pre { background: #f4f4f4; padding: 0 .2rem; }
.op { border-top: 1px solid #ddd; padding: .5rem 0; }
.method { font-weight: bold; display: inline-block; width: 4rem; }
</style>
</head>
<body>
<h1>changestream API</h1>
<div id="intro"></div>
<div id="ops">Loading <a href="/openapi.json">/openapi.json</a>…</div>
<script>
fetch("openapi.json").then(r => r.json()).then(doc => {
  document.getElementById("intro").innerText = doc.info.description;
  const ops = document.getElementById("ops");
  ops.innerHTML = "";
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const div = document.createElement("div");
      div.className = "op";
      const body = op.requestBody
        ? JSON.stringify(op.requestBody.content["application/json"].schema.properties, null, 1)
        : "";
      div.innerHTML = `<span class="method">${method.toUpperCase()}</span><code>${path}</code>`
        + `<div>${op.summary}. ${op.description || "Public."}</div>`
        + (body ? `<pre>${body.replace(/</g, "&lt;")}</pre>` : "");
      ops.appendChild(div);
    }
  }
});
</script>
</body>
</html>
"""
