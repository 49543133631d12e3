"""Spark integration (the ``spark`` extra): the ``changestream`` data source, batch and
streaming, built on the PySpark Python Data Source API, and the pipeline jobs.

The names below are imported when first used, so importing a module of this package does
not import pyspark: Spark's Python daemon (:mod:`changestream.spark._daemon`) must choose
where pyspark comes from before anything imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from changestream.spark._session import local_session
    from changestream.spark._source import ChangeStreamDataSource, register

__all__ = ["ChangeStreamDataSource", "local_session", "register"]

_HOMES = {
    "local_session": "changestream.spark._session",
    "ChangeStreamDataSource": "changestream.spark._source",
    "register": "changestream.spark._source",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
