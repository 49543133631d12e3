"""The Spark driver's scratch directory: one per process, removed even after a SIGKILL.

Spark's local directories (``spark-*``, ``blockmgr-*``), the driver JVM's temporary files
(``artifacts-*``, the native libraries it unpacks) and the Python workers' socket files go
into one directory per driver process under the system's temporary directory. Spark deletes
its own at a clean exit, but a driver killed with SIGKILL (``kill -9``, the OOM killer)
leaves them loose in ``/tmp``, a few on every crash. Here the process holds a lock on its
directory for as long as it lives, and every new driver first removes the directories whose
lock is free: their owner is gone, however it ended. A lock, not a process id, so a driver in
another PID namespace sharing the directory (a container) is never taken for a dead one.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Final

#: What every scratch directory's name starts with.
PREFIX: Final = "changestream-spark-"
#: The lock file a live owner holds; it appears only once locked.
LOCK: Final = ".lock"

#: Open lock files of this process's directory: closing one would free the lock.
_held: list[int] = []


@functools.cache
def scratch_dir() -> Path:
    """This process's scratch directory (made, locked and registered for removal at exit on
    the first call), after removing the ones their owners left."""
    root = Path(tempfile.gettempdir())
    remove_abandoned(root)
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))
    pending = path / f"{LOCK}.pending"
    fd = os.open(pending, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    # Renamed once locked: a sweeper that finds the lock file never finds it free too early.
    pending.rename(path / LOCK)
    _held.append(fd)
    atexit.register(_remove_own, path, os.getpid())
    return path


def _remove_own(path: Path, owner: int) -> None:
    # A forked child runs its parent's exit handlers too: the directory is the parent's.
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def remove_abandoned(root: Path) -> list[Path]:
    """Remove the scratch directories under ``root`` whose owner no longer holds their lock;
    returns them. One without a lock file yet is being made, and is left alone."""
    removed = []
    for candidate in root.glob(f"{PREFIX}*"):
        try:
            fd = os.open(candidate / LOCK, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its owner runs
        else:
            shutil.rmtree(candidate, ignore_errors=True)
            removed.append(candidate)
        finally:
            os.close(fd)
    return removed
