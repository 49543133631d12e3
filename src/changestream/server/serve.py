"""Running the server on uvicorn, in the foreground (the CLI) or in a thread (tests, embedding).

Shutdown (SIGTERM, SIGINT, or :meth:`RunningServer.stop`) is graceful: the server stops
accepting connections, ends every stream with a ``shutdown`` line (clients reconnect
elsewhere or later, from where they were), rolls back transactions that have not asked to
commit, lets requests in flight (commits) finish, and then closes the databases.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from changestream.errors import Unavailable
from changestream.server.app import ServerState

#: Longest wait for requests in flight once shutdown has begun, in seconds.
GRACEFUL_SHUTDOWN_S = 30


class Server(uvicorn.Server):
    """uvicorn's server, telling the application when shutdown begins so streams end."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.begin_shutdown()
        super().handle_exit(sig, frame)

    def begin_shutdown(self) -> None:
        app = self.config.app
        loop = self._loop
        if loop is not None and isinstance(app, Starlette):
            state: ServerState = app.state.server
            loop.call_soon_threadsafe(state.begin_shutdown)

    @property
    def port(self) -> int:
        """The port it listens on (useful after asking for port 0)."""
        (server,) = self.servers
        port: int = server.sockets[0].getsockname()[1]
        return port


def make_server(
    app: Starlette,
    host: str = "127.0.0.1",
    port: int = 7070,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    log_level: str = "info",
) -> Server:
    """A server for ``app``; ``run()`` it in the foreground or use :func:`serve_in_thread`."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        log_level=log_level,
        access_log=False,
        lifespan="on",
    )
    return Server(config)


class RunningServer:
    """A server running in a background thread; ``stop()`` shuts it down gracefully."""

    def __init__(self, server: Server, thread: threading.Thread) -> None:
        self.server = server
        self._thread = thread
        scheme = "https" if server.config.ssl_certfile else "http"
        self.url = f"{scheme}://{server.config.host}:{server.port}"

    def stop(self, timeout: float = GRACEFUL_SHUTDOWN_S + 5) -> None:
        self.server.begin_shutdown()
        self.server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise Unavailable(f"the server at {self.url} did not stop within {timeout} s")

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(
    app: Starlette,
    host: str = "127.0.0.1",
    port: int = 0,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    startup_timeout: float = 30.0,
) -> RunningServer:
    """Start ``app`` on ``host:port`` (0: any free port) in a thread; returns once it listens."""
    server = make_server(app, host, port, tls_cert, tls_key, log_level="warning")
    thread = threading.Thread(target=server.run, name="changestream-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise Unavailable(f"the server on {host}:{port} did not start")
        time.sleep(0.01)
    return RunningServer(server, thread)
