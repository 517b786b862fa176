"""odradek for PySpark: `spark.read/readStream.format("odradek")` and the matching sink.

Install with `pip install odradek[spark]`; register with `odradek.spark.register(spark)`.
Options and columns follow Spark's built-in Kafka connector (see source.py).
"""

from __future__ import annotations


def register(spark) -> None:
    """Make format "odradek" available to this SparkSession."""
    from .source import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)


__all__ = ["register", "session"]


def session(master: str = "local[2]", app_name: str = "odradek", **conf):
    """A SparkSession set up for odradek: Python workers run this interpreter (so they import
    odradek), the UI is off unless asked for, and format "odradek" is registered."""
    import os
    import sys

    from pyspark.sql import SparkSession

    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local session stays on loopback
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name).config("spark.ui.enabled", "false")
    for key, value in conf.items():
        builder = builder.config(key.replace("__", "."), value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
