"""Names that moved: the old name keeps working, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def renamed(module: str, old: str, new: Any) -> Callable[[str], Any]:
    """A module ``__getattr__`` answering ``old`` with ``new`` (and a warning)."""

    def __getattr__(name: str) -> Any:
        if name == old:
            warnings.warn(f"{module}.{old} is now {new.__name__}", DeprecationWarning, stacklevel=2)
            return new
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def moved(module: str, where: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` answering each old name in ``names`` with its new name in
    module ``where`` (imported on first use, and with a warning)."""

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is now {where}.{new}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), new)

    return __getattr__
