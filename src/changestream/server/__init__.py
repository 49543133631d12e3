"""The changestream server: the Database interface over HTTP, and ``connect(url)``.

``changestream serve PATH_OR_DIR`` runs :func:`create_app` on uvicorn; :func:`connect` returns a
:class:`RemoteDatabase` with the embedded database's interface. The modules: ``app`` and
``routes`` (the ASGI application), ``api`` (every endpoint declared once) and ``models``
(its typed bodies), ``auth`` (tokens and scopes), ``databases`` (which files are served),
``statuses`` (errors to HTTP statuses), ``streaming`` and ``workers`` (NDJSON responses fed
by engine threads), ``sessions`` (transactions with DML), ``values`` and ``wire`` (the JSON
encodings), ``metrics``, ``openapi`` (the generated document and Swagger UI), ``serve``
(uvicorn) and ``client``.
"""

from __future__ import annotations

from changestream.server.app import ServerConfig, create_app
from changestream.server.auth import NoAuth, TokenFile, create_token
from changestream.server.client import RemoteDatabase, RemoteTransaction, connect
from changestream.server.databases import Databases
from changestream.server.serve import RunningServer, make_server, serve_in_thread

__all__ = [
    "Databases",
    "NoAuth",
    "RemoteDatabase",
    "RemoteTransaction",
    "RunningServer",
    "ServerConfig",
    "TokenFile",
    "connect",
    "create_app",
    "create_token",
    "make_server",
    "serve_in_thread",
]
