"""trib's JVM library as Spark and Hive see it: seed 002's mtime window as a stock Hadoop path filter, a
Spark extension that keeps it right for Parquet/ORC Hive tables, and Hive GenericUDFs.

The class names here must match ``java/trib/udfs/``; :func:`jar_path` (``build.py``) compiles the jar
at first use against the installed pyspark wheel's jars and caches it under ``$TRIB_CACHE_DIR``
(default ``~/.cache/tributary-read``). Nothing is downloaded. Importing this module imports no pyspark.

With :func:`spark_conf` (or ``trib udfs spark-args``) added to a Spark application, its sessions
know trib's functions (the extension injects them) and seed 002's SQL runs verbatim::

    set dip.mapreduce.input.fileinputformat.sync=true;
    set dip.mapreduce.input.fileinputformat.starttime=1592928000000;
    set dip.mapreduce.input.fileinputformat.endtime=1592931599000;
    SELECT * FROM aliyunXweibo WHERE dt >= '2020061701' AND dt <= '2020062401'
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from tributary_read.errors import InvalidInputError
from tributary_read.hive_udfs.build import jar_path

PATH_FILTER_CLASS = "trib.udfs.MtimeWindowPathFilter"
EXTENSIONS_CLASS = "trib.udfs.TribSparkExtensions"
#: SQL name -> GenericUDF class.
FUNCTIONS: dict[str, str] = {
    "trib_partition_value": "trib.udfs.PartitionValueUDF",
    "trib_window_start_ms": "trib.udfs.WindowStartUDF",
    "trib_window_end_ms": "trib.udfs.WindowEndUDF",
    "trib_lateness_ms": "trib.udfs.LatenessUDF",
    "trib_file_mtime_ms": "trib.udfs.FileMtimeUDF",
}
#: The properties the filter reads (seed 002's, and trib's own namespace, which wins per key).
PROPERTIES = tuple(f"{ns}{k}" for ns in ("dip.mapreduce.input.fileinputformat.", "tributary.input.")
                   for k in ("sync", "starttime", "endtime"))
__all__ = ["EXTENSIONS_CLASS", "FUNCTIONS", "PATH_FILTER_CLASS", "PROPERTIES", "jar_path", "register",
           "injected", "register_sql", "shell_line", "spark_args", "spark_conf"]  # jar_path: build.py's, the API's too


def spark_conf(jar: str | os.PathLike | None = None) -> dict[str, str]:
    """The Spark confs that put the jar on the classpath, enable the filter and inject the functions."""
    return {
        "spark.jars": str(jar or jar_path()),
        "spark.hadoop.mapreduce.input.pathFilter.class": PATH_FILTER_CLASS,
        "spark.sql.extensions": EXTENSIONS_CLASS,
    }


def spark_args(jar: str | os.PathLike | None = None) -> list[str]:
    """:func:`spark_conf` as ``spark-sql`` / ``spark-submit`` arguments."""
    conf = spark_conf(jar)
    args = ["--jars", conf.pop("spark.jars")]
    for k, v in conf.items():
        args += ["--conf", f"{k}={v}"]
    return args


def shell_line(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


def register_sql(database: str | None = None, jar: str | os.PathLike | None = None) -> list[str]:
    """``CREATE TEMPORARY FUNCTION`` per function; with ``database``, permanent ones using the jar."""
    from tributary_read.hive.sql import create_function

    if database is None:
        return [create_function(name, cls, temporary=True) for name, cls in FUNCTIONS.items()]
    try:
        create_function("f", "c", database=database)
    except InvalidInputError:
        raise InvalidInputError(f"bad database name {database!r}") from None
    uri = Path(jar or jar_path()).resolve().as_uri()
    return [create_function(name, cls, database=database, jar_uri=uri) for name, cls in FUNCTIONS.items()]


#: Spark Connect sessions (ids) the jar was added to: an artifact is added once per session.
_JAR_ADDED: set[str] = set()


def injected(spark) -> bool:
    """True if ``spark``'s session already knows every function: the extension injected them.

    A session built with :func:`spark_conf` (``spark.sql.extensions``) has them from the start,
    in every session of its application; only a session built without it needs :func:`register`.
    """
    extensions = (spark.conf.get("spark.sql.extensions", "") or "").split(",")
    if EXTENSIONS_CLASS not in (e.strip() for e in extensions):
        return False
    return all(spark.catalog.functionExists(name) for name in FUNCTIONS)


def register(spark) -> list[str]:
    """Make every function known to ``spark``'s session; returns the names.

    A session the extension was loaded into has them already (:func:`injected`): nothing is
    registered twice. Any other gets the jar and a temporary function each. A Spark Connect session
    gets the jar as an artifact of that session (the server may be another machine's, and ``ADD
    JAR`` would name a path on it); its functions, like any session's temporary ones, are its own.
    """
    from tributary_read.hive.sql import add_jar, create_function

    if injected(spark):
        return list(FUNCTIONS)
    jar = jar_path()
    session_id = getattr(spark, "session_id", None)  # only a Spark Connect session has one (as in spark/ship.py)
    if session_id is not None:
        if session_id not in _JAR_ADDED:
            spark.addArtifacts(str(jar))
            _JAR_ADDED.add(session_id)
    elif str(jar) not in (spark.conf.get("spark.jars", "") or "").split(","):
        spark.sql(add_jar(str(jar)))
    for name, cls in FUNCTIONS.items():
        spark.sql(create_function(name, cls, temporary=True, replace=True))
    return list(FUNCTIONS)
