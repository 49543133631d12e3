"""Names that moved: the old name keeps working, with a DeprecationWarning."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any


def renamed(module: str, old: str, new: Any) -> Callable[[str], Any]:
    """A module ``__getattr__`` answering ``old`` with ``new`` (and a warning)."""

    def __getattr__(name: str) -> Any:
        if name == old:
            warnings.warn(f"{module}.{old} is now {new.__name__}", DeprecationWarning, stacklevel=2)
            return new
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
