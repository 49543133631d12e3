"""Spark's Python daemon, preloaded while the driver's JVM starts (local masters only).

The JVM starts its Python daemon (:mod:`changestream.spark._daemon`) at a session's first
Python task, and the daemon then imports the pipeline's task code before it can fork a
worker: 0.8 s on an idle machine, 1.2-1.9 s while the JVM is busy, on the critical path of
every run's first micro-batch. :func:`start_zygote` starts, before the JVM, a process that
does those imports at once (the *zygote*) and waits on a Unix socket. When the JVM then
starts the daemon, the process it started (the *stub*, :func:`hand_over`) passes the zygote
its standard streams, environment, path and working directory; the zygote forks a child
that takes them and runs ``pyspark.daemon`` with everything already imported. The stub
stays as the process the JVM knows: it passes a SIGTERM on and ends when the daemon ends.

A zygote serves one daemon, then exits; it also exits when its driver does. Wherever the
hand-over cannot happen (no zygote, a dead one, another machine's executors), the stub
runs the daemon itself.

With the zygote, a 300,000-change catch-up on two cores took 4.4-4.7 s against 4.8-5.3 s
without (three alternations): its first tasks no longer wait for the imports.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from changestream.processes import is_running

#: The environment variable naming the zygote's socket, which the JVM passes on to the stub.
SOCKET_VARIABLE: Final = "CHANGESTREAM_DAEMON_ZYGOTE"
#: The zygote's command-line flag (its children, the daemons, keep the zygote's command line).
ZYGOTE_FLAG: Final = "--zygote"
#: How long a stub waits for the zygote's answer (it may still be importing) before running
#: the daemon itself.
HAND_OVER_SECONDS: Final = 30.0
#: A Unix socket's path must fit in 107 bytes.
_LONGEST_SOCKET_PATH: Final = 100

_zygote: subprocess.Popen[bytes] | None = None
#: The process that started ``_zygote`` (a forked child leaves its parent's alone).
_owner = 0


def start_zygote(directory: Path, workers_environment: Mapping[str, str] | None = None) -> bool:
    """Start a zygote with its socket in ``directory`` and name it in this process's
    environment (so the JVM about to start passes it to its daemon); a zygote started
    before and never used is stopped first. Whether one was started.

    ``workers_environment``: what the JVM will set for its Python workers that the imports
    read, set for the zygote's imports too (numpy sizes its BLAS thread pool from
    ``OMP_NUM_THREADS`` when it is imported, and the workers inherit that pool)."""
    global _zygote, _owner
    stop_zygote()
    path = directory / f"zygote-{os.getpid()}-{os.urandom(4).hex()}.sock"
    if len(str(path)) > _LONGEST_SOCKET_PATH:
        return False
    # Listening before the zygote starts, so a stub never finds the socket missing; closed
    # here once the zygote has it, so a stub finds it refused once the zygote is gone.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        command = [sys.executable, "-m", "changestream.spark._daemon", ZYGOTE_FLAG]
        _zygote = subprocess.Popen(
            [*command, str(server.fileno()), str(path)],
            env={**os.environ, **(workers_environment or {})},
            pass_fds=[server.fileno()],
            # Its lifeline: it exits when this process closes the pipe, or ends.
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
    if not _owner:
        atexit.register(stop_zygote)
    _owner = os.getpid()
    os.environ[SOCKET_VARIABLE] = str(path)
    return True


def stop_zygote() -> None:
    """Stop this process's zygote if it is still there (it exits on its own once used; one
    never used holds nothing, so it is killed)."""
    global _zygote
    zygote, _zygote = _zygote, None
    os.environ.pop(SOCKET_VARIABLE, None)
    if zygote is None or _owner != os.getpid():
        return
    if zygote.stdin is not None:
        zygote.stdin.close()
    if zygote.poll() is None:
        zygote.kill()
    zygote.wait()


def serve(fd: int, path: str, prepare: Callable[[], None]) -> None:
    """The zygote: run ``prepare()`` (the daemon's imports), then fork the daemon for the
    first stub that connects to the listening socket ``fd`` (at ``path``, removed at the
    end); exit then, or when stdin (the driver's lifeline) closes."""
    server = socket.socket(fileno=fd)
    try:
        prepare()
        while True:
            ready, _, _ = select.select([server, sys.stdin], [], [])
            if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
                return
            if server in ready:
                connection, _ = server.accept()
                with connection:
                    if _fork_daemon(server, connection):
                        return
    finally:
        server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _fork_daemon(server: socket.socket, connection: socket.socket) -> bool:
    """Take one stub's request and fork the daemon for it; whether it was taken."""
    connection.settimeout(HAND_OVER_SECONDS)
    try:
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        request = json.loads(message)
    except (OSError, ValueError):
        return False
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return False
    if os.fork() == 0:  # the daemon
        code = 1
        try:
            server.close()
            # The daemon answers, not the zygote: a stub that got no answer knows no daemon
            # took its streams (the zygote may die between the fork and an answer of its own),
            # and a daemon whose answer failed exits rather than run beside the stub's own.
            connection.sendall(f"{os.getpid()}\n".encode())
            connection.close()
            _become_daemon(fds, request)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    return True


def _become_daemon(fds: list[int], request: dict[str, object]) -> None:
    """In the forked child: take the stub's streams, environment, path and directory, and
    run ``pyspark.daemon`` as the stub would have."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    environment = request["environ"]
    assert isinstance(environment, dict)
    os.environ.clear()
    os.environ.update(environment)
    os.chdir(str(request["cwd"]))
    path = request["path"]
    assert isinstance(path, list)
    sys.path[:] = path
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


def hand_over() -> bool:
    """In the stub: hand this process's daemon role to the zygote its environment names,
    then wait for the daemon to end; False (nothing done) when there is none to take it."""
    path = os.environ.pop(SOCKET_VARIABLE, None)
    if not path:
        return False
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(HAND_OVER_SECONDS)
    try:
        with connection:
            connection.connect(path)
            request = {"environ": dict(os.environ), "cwd": os.getcwd(), "path": sys.path}
            socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
            connection.shutdown(socket.SHUT_WR)
            answer = _read_all(connection)
        if not answer.endswith(b"\n"):
            return False  # no daemon took the streams (or its answer was cut short)
        pid = int(answer)
    except (OSError, ValueError):
        return False
    _follow(pid)
    return True


def _read_all(connection: socket.socket) -> bytes:
    chunks = []
    while chunk := connection.recv(64):
        chunks.append(chunk)
    return b"".join(chunks)


def _follow(pid: int) -> None:
    """Stay, as the process the JVM started, until the daemon ``pid`` ends: a SIGTERM (the
    JVM stopping its daemon) is passed on to it."""
    # The daemon writes to the JVM's pipes now: the JVM sees them end when the daemon does.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)

    def pass_on(signum: int, _: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    signal.signal(signal.SIGTERM, pass_on)
    try:
        watch = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (OSError, AttributeError):  # not Linux, or a kernel older than 5.3
        while is_running(pid):
            time.sleep(0.2)
        return
    try:
        select.select([watch], [], [])
    finally:
        os.close(watch)
