"""Whether a process is still there, by its pid."""

from __future__ import annotations

import os


def is_running(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie, exited but not yet waited for, counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # there, though not ours to signal
        pass
    return True
