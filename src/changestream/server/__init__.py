"""The changestream server: the Database interface over HTTP, and ``connect(url)``.

``changestream serve PATH_OR_DIR`` runs :func:`create_app` on uvicorn; :func:`connect` returns a
:class:`RemoteDatabase` with the embedded database's interface. The modules: ``app`` and
``routes`` (the ASGI application), ``api`` (every endpoint declared once) and ``models``
(its typed bodies), ``auth`` (tokens and scopes), ``databases`` (which files are served),
``statuses`` (errors to HTTP statuses), ``streaming`` and ``workers`` (NDJSON responses fed
by engine threads), ``sessions`` (transactions with DML), ``values`` and ``wire`` (the JSON
encodings), ``metrics``, ``openapi`` (the generated document and Swagger UI), ``serve``
(uvicorn) and ``client``.

The names below are imported when first used, so the client (the ``client`` extra: httpx and
msgspec) and ``token create`` (no extra) work without the server's own dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from changestream.server.app import ServerConfig as ServerConfig
    from changestream.server.app import create_app as create_app
    from changestream.server.auth import NoAuth as NoAuth
    from changestream.server.auth import TokenFile as TokenFile
    from changestream.server.auth import create_token as create_token
    from changestream.server.client import RemoteDatabase as RemoteDatabase
    from changestream.server.client import RemoteTransaction as RemoteTransaction
    from changestream.server.client import connect as connect
    from changestream.server.databases import Databases as Databases
    from changestream.server.serve import RunningServer as RunningServer
    from changestream.server.serve import make_server as make_server
    from changestream.server.serve import serve_in_thread as serve_in_thread

#: Each public name and the module it lives in.
_HOMES = {
    "Databases": "databases",
    "NoAuth": "auth",
    "RemoteDatabase": "client",
    "RemoteTransaction": "client",
    "RunningServer": "serve",
    "ServerConfig": "app",
    "TokenFile": "auth",
    "connect": "client",
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
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
