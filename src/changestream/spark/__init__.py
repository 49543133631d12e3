"""Spark integration (the ``spark`` extra): the ``changestream`` data source, batch and
streaming, built on the PySpark Python Data Source API, and the pipeline jobs."""

from changestream.spark._session import local_session
from changestream.spark._source import ChangeStreamDataSource, register

__all__ = ["ChangeStreamDataSource", "local_session", "register"]
