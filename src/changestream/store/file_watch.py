"""Pauses that end early when a file is written: inotify on Linux, a plain sleep elsewhere.

The commit poller pauses between looks at the change log's watermark. Every commit of any
process writes the database's WAL file, so a pause that ends on that write lets an idle
poller wait long (waking a few times a second instead of 125) and still see a commit at once.
Where inotify is missing (another OS, or the user's inotify instances used up), the pause is a
sleep and :attr:`FileWatch.watching` is False: the caller keeps its pauses short.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import time
from types import TracebackType

log = logging.getLogger(__name__)

try:
    from inotify_simple import INotify, flags
except ImportError:  # not a Unix: pauses are sleeps
    INotify = None

#: select() takes file descriptors below this only (FD_SETSIZE).
_SELECT_LIMIT = 1024


class Wakeup:
    """Ends the pauses of the file watches given it at once (a closing database does not
    wait for its poller's long pause to run out); close it once no watch uses it."""

    def __init__(self) -> None:
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # full: a wake is pending already
            os.write(self._write_fd, b"\0")

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 4096):
                pass

    def close(self) -> None:
        os.close(self.fd)
        os.close(self._write_fd)


class FileWatch:
    """Writes to ``path``, waited for with a timeout (ended early by ``wakeup``); close it
    when done."""

    def __init__(self, path: str, wakeup: Wakeup | None = None) -> None:
        self._path = path
        self._wakeup = wakeup
        self._inotify: INotify | None = None
        if INotify is None:
            return
        try:
            self._inotify = INotify()
            self._inotify.add_watch(path, flags.MODIFY)
        except OSError as exc:  # no such file, or too many inotify instances or watches
            log.debug("not watching %s, pauses are sleeps: %s", path, exc)
            self.close()

    @property
    def watching(self) -> bool:
        """True when a write ends :meth:`pause` early."""
        return self._inotify is not None

    def pause(self, seconds: float) -> bool:
        """Wait ``seconds``, or less if the file is written or the wakeup wakes meanwhile;
        True when the file was written (a write made since the last pause counts)."""
        if self._inotify is None:
            time.sleep(seconds)
            return False
        fds = [self._inotify.fileno()]
        if self._wakeup is not None:
            fds.append(self._wakeup.fd)
        if max(fds) < _SELECT_LIMIT:
            # select() waits to the microsecond; poll() rounds a 0.5 ms pause up to 1 ms.
            select.select(fds, [], [], seconds)
        else:
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            poller.poll(seconds * 1000)
        if self._wakeup is not None:
            self._wakeup.clear()
        events = self._inotify.read(timeout=0)
        if any(event.mask & flags.IGNORED for event in events):
            # The file was removed: its writes are no longer seen, so pauses become sleeps.
            log.debug("%s was removed, pauses are sleeps", self._path)
            self.close()
        return bool(events)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    def __enter__(self) -> FileWatch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
