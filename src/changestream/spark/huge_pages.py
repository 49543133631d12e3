"""Transparent huge pages off for the processes of changestream's Spark jobs.

pyarrow's allocator (mimalloc) asks the kernel for transparent huge pages, so each fresh
2 MB of its arenas is zeroed whole at its first touch, and a task's Arrow buffers come and
go all the time. On two cores a 300,000-change catch-up into JSON files and a Delta replica
spent a third of its CPU in the kernel, mostly zeroing huge pages in Spark's Python workers
and the driver; with them off, its kernel time fell from 5.2-5.6 s to 1.9-2.6 s and the run
from 8.7-9.1 s to 6.2-7.1 s (three alternations, ``perf`` for where the time went).

Linux's ``PR_SET_THP_DISABLE`` applies to the process from then on and to every process it
starts (the driver's JVM, Spark's Python daemon and its workers inherit it). Elsewhere, or
where the kernel refuses it, nothing changes.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import Final

log = logging.getLogger(__name__)

#: prctl(2) options (linux/prctl.h).
PR_SET_THP_DISABLE: Final = 41
PR_GET_THP_DISABLE: Final = 42

#: The mimalloc option whose setting, when the user gives one, is left to decide instead.
USER_SETTING: Final = "MIMALLOC_ALLOW_THP"


def _prctl(option: int, value: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, value, 0, 0, 0))


def disable_transparent_huge_pages() -> bool:
    """Turn transparent huge pages off for this process and the processes it starts, unless
    the environment sets ``MIMALLOC_ALLOW_THP`` (the user's choice for pyarrow's allocator
    then stands). Whether they are off."""
    if not sys.platform.startswith("linux") or USER_SETTING in os.environ:
        return False
    try:
        if _prctl(PR_SET_THP_DISABLE, 1) != 0:
            log.debug("PR_SET_THP_DISABLE refused: errno %d", ctypes.get_errno())
            return False
    except (OSError, AttributeError) as exc:  # no libc to load, or no prctl in it
        log.debug("PR_SET_THP_DISABLE unavailable: %s", exc)
        return False
    return True


def transparent_huge_pages_disabled() -> bool:
    """Whether transparent huge pages are off for this process (``PR_GET_THP_DISABLE``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _prctl(PR_GET_THP_DISABLE) == 1
    except (OSError, AttributeError):
        return False
