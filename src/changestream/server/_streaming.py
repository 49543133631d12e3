"""Streaming responses: a worker thread produces NDJSON lines, the event loop sends them.

Each line goes out as soon as it is made; lines made while the previous send was under way
go out together in one chunk, so a fast producer is not held to one write per record. An idle
stream sends a keepalive line every ``keepalive_s`` so proxies and clients see it is alive.
Every stream ends with an ``end`` line, an ``error`` line, or a ``shutdown`` line (the server
is stopping: reconnect); a stream that ends with none of them was cut.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import suppress
from typing import Any, TypeVar

import orjson

from changestream.errors import ChangeStreamError
from changestream.server._workers import WorkerThreads, settle
from changestream.wire.records import error_to_json

_log = logging.getLogger(__name__)

T = TypeVar("T")

KEEPALIVE = b'{"type":"keepalive"}\n'
END = b'{"type":"end"}\n'
SHUTDOWN = b'{"type":"shutdown"}\n'
#: Bytes a producer may get ahead of the client before it waits.
_MAX_BUFFERED = 1 << 20


def error_line(exc: ChangeStreamError) -> bytes:
    return orjson.dumps({"type": "error", "error": error_to_json(exc)}) + b"\n"


class LineStream:
    """The lines of one streaming response, handed from a producer thread to the event loop."""

    def __init__(self, keepalive_s: float, closing: Callable[[], bool]) -> None:
        self._loop = asyncio.get_running_loop()
        self._keepalive_s = keepalive_s
        self._closing = closing
        self._cond = threading.Condition()
        self._lines: list[bytes] = []
        self._size = 0
        self._done = False
        self._stopped = False
        self._wake = asyncio.Event()

    # -- the producer thread -------------------------------------------------------------

    def put(self, line: bytes) -> bool:
        """Queue a line; False once the client is gone (the producer should stop)."""
        with self._cond:
            while self._size >= _MAX_BUFFERED and not self._stopped:
                self._cond.wait()
            if self._stopped:
                return False
            first = not self._lines
            self._lines.append(line)
            self._size += len(line)
        if first:
            self._notify()
        return True

    def finish(self, last: bytes) -> None:
        """Queue the final line (``END`` or an error) and end the stream."""
        with self._cond:
            self._lines.append(last)
            self._done = True
        self._notify()

    def _notify(self) -> None:
        with suppress(RuntimeError):  # the loop is gone: nobody is listening any more
            self._loop.call_soon_threadsafe(self._wake.set)

    # -- the event loop --------------------------------------------------------------------

    def wake(self) -> None:
        """Make the sender look at the stream now (the server is shutting down)."""
        self._wake.set()

    @property
    def stopped(self) -> bool:
        """True once the client is gone (polled by work that should then stop)."""
        return self._stopped

    def stop(self) -> None:
        """The client is gone: release a producer waiting for room and refuse further lines."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _take(self) -> tuple[list[bytes], bool]:
        with self._cond:
            lines, self._lines, self._size = self._lines, [], 0
            self._cond.notify_all()
            return lines, self._done

    async def chunks(self) -> AsyncIterator[bytes]:
        """The response body: the lines as they come, keepalives while idle."""
        try:
            while True:
                lines, done = self._take()
                if self._closing() and not done:
                    yield b"".join([*lines, SHUTDOWN])
                    return
                if lines:
                    yield b"".join(lines)
                    continue
                if done:
                    return
                self._wake.clear()
                with self._cond:
                    if self._lines or self._done:  # a line came after _take: no need to wait
                        continue
                try:
                    await asyncio.wait_for(self._wake.wait(), self._keepalive_s)
                except TimeoutError:
                    yield KEEPALIVE
        finally:
            self.stop()


async def start_stream(
    threads: WorkerThreads,
    stream: LineStream,
    open_items: Callable[[], Iterator[T]],
    render: Callable[[T], bytes],
    on_close: Callable[[], None] = lambda: None,
) -> None:
    """Open the items on a worker thread and keep that thread producing their lines.

    Returns once ``open_items`` has returned, so its errors (bad arguments, unknown stream)
    become an ordinary error response; later errors end the stream with an error line.
    """
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[None] = loop.create_future()

    def report(error: BaseException | None) -> None:
        outcome = (True, None) if error is None else (False, error)
        with suppress(RuntimeError):  # the loop is gone: the server stopped meanwhile
            loop.call_soon_threadsafe(settle, opened, outcome)

    def produce() -> None:
        try:
            try:
                items = open_items()
            except BaseException as exc:
                report(exc)
                return
            report(None)
            _pump(stream, items, render)
        finally:
            on_close()

    threads.submit(produce)
    await opened


def _pump(stream: LineStream, items: Iterator[Any], render: Callable[[Any], bytes]) -> None:
    try:
        for item in items:
            if not stream.put(render(item)):
                return
        stream.finish(END)
    except ChangeStreamError as exc:
        stream.finish(error_line(exc))
    except Exception:
        _log.exception("a streaming response failed")
        stream.finish(error_line(ChangeStreamError("internal server error (see the server log)")))
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()
