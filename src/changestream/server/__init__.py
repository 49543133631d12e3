"""The changestream server: the Database interface over HTTP.

``changestream serve PATH_OR_DIR`` runs :func:`create_app` on uvicorn. The modules: ``app``
and ``routes`` (the ASGI application), ``auth`` (tokens and scopes), ``openapi`` (the
generated document and Swagger UI) and ``serve`` (uvicorn); the private ``_databases`` (which
files are served), ``_statuses`` (errors to HTTP statuses), ``_streaming`` and ``_workers``
(NDJSON responses fed by engine threads), ``_sessions`` (transactions with DML) and
``_metrics``. The endpoints,
their bodies and the JSON encodings are :mod:`changestream.wire`'s, shared with the client
(:mod:`changestream.remote`, also reachable here as before).

The names below are imported when first used, so the client (the ``client`` extra: httpx)
and ``token create`` (no extra) work without the server's own dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from changestream.remote import RemoteDatabase as RemoteDatabase
    from changestream.remote import RemoteTransaction as RemoteTransaction
    from changestream.remote import connect as connect
    from changestream.server._databases import Databases as Databases
    from changestream.server.app import ServerConfig as ServerConfig
    from changestream.server.app import create_app as create_app
    from changestream.server.auth import NoAuth as NoAuth
    from changestream.server.auth import TokenFile as TokenFile
    from changestream.server.auth import create_token as create_token
    from changestream.server.serve import RunningServer as RunningServer
    from changestream.server.serve import make_server as make_server
    from changestream.server.serve import serve_in_thread as serve_in_thread

#: Each public name and the module it lives in.
_HOMES = {
    "Databases": "_databases",
    "NoAuth": "auth",
    "RemoteDatabase": "changestream.remote",
    "RemoteTransaction": "changestream.remote",
    "RunningServer": "serve",
    "ServerConfig": "app",
    "TokenFile": "auth",
    "connect": "changestream.remote",
    "create_app": "app",
    "create_token": "auth",
    "make_server": "serve",
    "serve_in_thread": "serve",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = home if home.startswith("changestream.") else f"{__name__}.{home}"
    return getattr(importlib.import_module(module), name)
