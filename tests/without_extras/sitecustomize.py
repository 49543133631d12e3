"""Makes this interpreter behave as an install without some extras: importing any module named
in ``CHANGESTREAM_HIDDEN_MODULES`` (comma-separated top-level names) fails as if it were not
installed. Put this directory first on ``PYTHONPATH`` (tests/test_packaging.py does)."""

from __future__ import annotations

import importlib.abc
import os
import sys

_HIDDEN = frozenset(filter(None, os.environ.get("CHANGESTREAM_HIDDEN_MODULES", "").split(",")))


class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname.split(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


if _HIDDEN:
    sys.meta_path.insert(0, _NotInstalled())
