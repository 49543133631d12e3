"""A local SparkSession set up for changestream jobs."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def local_session(master: str = "local[2]", app_name: str = "changestream") -> SparkSession:
    """A SparkSession on ``master`` whose Python workers run this interpreter (so they see
    the same packages), with the ``changestream`` source registered."""
    from changestream.spark.source import register

    # Workers must import changestream and pyarrow from this environment.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    register(spark)
    return spark
