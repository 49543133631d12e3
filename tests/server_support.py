"""Helpers for the server tests: servers in threads and subprocesses, and a cuttable TCP proxy."""

from __future__ import annotations

import contextlib
import functools
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema_rs

import changestream
from changestream.server import (
    Databases,
    NoAuth,
    RunningServer,
    ServerConfig,
    create_app,
    serve_in_thread,
)
from changestream.server.openapi import openapi_document

#: The scope each endpoint needs, written down here as the README documents it (read: reads,
#: SQL, streams; write: transactions, leases, system documents; admin: DDL, split/merge, split
#: policy, creating and deleting Datastream streams), not taken from the server's own tables.
DB = "/v1/databases/{database}"
STREAM = DB + "/streams/{stream}"
EXPECTED_SCOPES: dict[tuple[str, str], str | None] = {
    ("GET", "/healthz"): None,
    ("GET", "/readyz"): None,
    ("GET", "/openapi.json"): None,
    ("GET", "/docs"): None,
    ("GET", "/metrics"): "read",
    ("GET", "/v1/databases"): "read",
    ("POST", DB + "/ddl"): "admin",
    ("POST", DB + "/commit"): "write",
    ("POST", DB + "/execute_update"): "write",
    ("POST", DB + "/rollback"): "write",
    ("POST", DB + "/read"): "read",
    ("POST", DB + "/read_snapshot"): "read",
    ("GET", DB + "/tables"): "read",
    ("GET", DB + "/current_timestamp"): "read",
    ("GET", DB + "/change_streams"): "read",
    ("POST", DB + "/system_documents/list"): "read",
    ("POST", DB + "/system_documents/put"): "write",
    ("POST", DB + "/system_documents/delete"): "write",
    ("POST", DB + "/system_log/append"): "write",
    ("POST", DB + "/system_log/list"): "read",
    ("POST", DB + "/sql"): "read",
    ("POST", DB + "/read_change_stream"): "read",
    ("POST", DB + "/split"): "admin",
    ("POST", DB + "/merge"): "admin",
    ("GET", DB + "/split_policy"): "read",
    ("PUT", DB + "/split_policy"): "admin",
    ("POST", DB + "/rebalance"): "admin",
    ("POST", DB + "/watch_source"): "read",
    ("GET", STREAM + "/partitions"): "read",
    ("GET", STREAM + "/partition_history"): "read",
    ("POST", STREAM + "/change_sizes"): "read",
    ("GET", STREAM + "/consumers"): "read",
    ("POST", STREAM + "/leases/list"): "read",
    ("POST", STREAM + "/leases/get"): "read",
    ("POST", STREAM + "/leases/insert_if_absent"): "write",
    ("POST", STREAM + "/leases/update"): "write",
    ("POST", STREAM + "/leases/delete"): "write",
    ("GET", DB + "/streams"): "read",
    ("POST", DB + "/streams"): "admin",
    ("GET", STREAM): "read",
    ("DELETE", STREAM): "admin",
    ("PUT", STREAM + "/state"): "write",
    ("GET", "/console"): None,
    ("GET", "/v1/whoami"): "read",
    ("GET", DB + "/overview"): "read",
    ("GET", STREAM + "/lineage"): "read",
    ("GET", STREAM + "/consumer_status"): "read",
    ("GET", STREAM + "/errors"): "read",
    ("GET", STREAM + "/tail"): "read",
}

#: Every wait is bounded so a broken server fails a test instead of hanging it.
WAIT_S = 30.0


@contextlib.contextmanager
def serving(
    dbs: dict[str, changestream.EmbeddedDatabase],
    auth: Any = None,
    port: int = 0,
    **config: Any,
) -> Iterator[RunningServer]:
    """A server in a thread serving open databases by name, stopped at the end."""
    databases = Databases()
    for name, db in dbs.items():
        databases.add(name, db)
    app = create_app(databases, auth or NoAuth(), ServerConfig(**config))
    running = serve_in_thread(app, port=port)
    try:
        yield running
    finally:
        running.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_healthy(url: str, process: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until the server at ``url`` answers /healthz (or fail within WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        time.sleep(0.05)
    raise AssertionError(f"no server at {url} within {WAIT_S} s")


def spawn_server(path: str, port: int, *args: str) -> subprocess.Popen[bytes]:
    """``changestream serve PATH`` in a subprocess; returns once it is healthy."""
    process = subprocess.Popen(
        [sys.executable, "-m", "changestream", "serve", path, "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process)
    except BaseException:
        process.kill()
        process.wait(WAIT_S)
        raise
    return process


class Proxy:
    """A TCP proxy to ``127.0.0.1:target``; ``cut()`` drops every connection through it, and
    with ``cut_after`` each connection is dropped once it has carried that many bytes from the
    server (wherever that falls: inside a record, a chunk, a transaction)."""

    def __init__(self, target: int, cut_after: int | None = None) -> None:
        self._target = target
        self._cut_after = cut_after
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._stopped = False
        #: Connections made through the proxy so far.
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            with self._lock:
                self._sockets += [client, upstream]
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        peers = {client: upstream, upstream: client}
        budget = self._cut_after
        try:
            while True:
                readable, _, _ = select.select([client, upstream], [], [], 0.2)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is upstream and budget is not None:
                        data = data[:budget]
                        budget -= len(data)
                    peers[sock].sendall(data)
                    if budget == 0:
                        return
        except (OSError, ValueError):  # cut: the sockets were closed under us
            return
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.close()

    def cut(self) -> None:
        """Reset every open connection (new ones still go through)."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        self._stopped = True
        self._listener.close()
        self.cut()


@functools.cache
def _document() -> dict[str, Any]:
    return openapi_document()


def response_validator(method: str, path: str) -> Any:
    """A validator of the 200 answer of an operation (of each line, for NDJSON), or None for
    one that is not JSON."""
    content = _document()["paths"][path][method.lower()]["responses"]["200"]["content"]
    media, described = next(iter(content.items()))
    if "json" not in media or "schema" not in described:
        return None
    schema = {**described["schema"], "components": _document()["components"]}
    return jsonschema_rs.validator_for(schema)
