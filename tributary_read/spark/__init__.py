"""Spark: read exactly the resolved files, write through the manifest committer.

Importing this package does not import pyspark; each function imports it when
called and a missing install names its pip extra (``tributary-read[spark]``).

* :func:`read_files` reads exactly a :class:`~tributary_read.read.fileset.FileSet`,
  with the layout's partition columns (``read``);
* :func:`read_incremental` resolves and reads in one call and returns a
  :class:`Batch` to ack once the caller's output is committed (``incremental``);
* :func:`write` writes a DataFrame into a trib table and commits one manifest
  carrying a transaction (``write``);
* :func:`list_on_executors` lists a very large table on the cluster (``listing``);
* :func:`trib_sink` is a Structured Streaming ``foreachBatch`` sink, exactly once per micro-batch (``stream``).
"""

from __future__ import annotations

from tributary_read.lazy import lazy_getattr

#: public name -> submodule that defines it
_LAZY = {
    "read_files": "read", "partition_columns": "columns",
    "read_incremental": "incremental", "Batch": "incremental", "BatchAck": "incremental",
    "write": "write", "WriteResult": "write",
    "list_on_executors": "listing", "spark_lister": "listing",
    "spark_session": "session",
    "trib_sink": "stream", "StreamSink": "stream",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)


def require_pyspark():
    """Import pyspark or raise MissingDependencyError naming the extra."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        from tributary_read.errors import missing_extra

        raise missing_extra("pyspark", "spark") from None
    return pyspark


def is_connect(spark) -> bool:
    """Whether ``spark`` (a SparkSession or DataFrame) is a Spark Connect client's: no JVM in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
