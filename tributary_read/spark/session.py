"""The SparkSession a ``trib`` command or job starts: master and conf from the job, then the environment.

Precedence for the master: the argument (a job file's ``[spark] master``),
then ``$TRIB_SPARK_MASTER``, then ``$SPARK_MASTER``, then ``local[*]``. Under
``spark-submit`` (a driver started with a gateway, ``$PYSPARK_GATEWAY_PORT``)
the submit line has already set the master and the conf, and a builder
``.master()`` would silently override the cluster with a local one: there only
an explicit ``conf`` is added.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

from tributary_read.spark import require_pyspark

METASTORE_URIS = "spark.hadoop.hive.metastore.uris"


def resolve_master(master: str | None = None) -> str:
    """The master a session would use (see the module docstring)."""
    return master or os.environ.get("TRIB_SPARK_MASTER") or os.environ.get("SPARK_MASTER") or "local[*]"


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster[")


def session_conf(master: str, conf: Mapping[str, str] | None = None, *, hive: bool = False) -> dict[str, str]:
    """The conf a session is built with: ``conf`` plus trib's defaults where unset.

    For local masters the Python workers run this interpreter (the one that has
    tributary_read), and the driver binds to the loopback address: a laptop or
    CI machine whose host name does not resolve still starts. Hive support is
    on when asked (a ``spark`` catalog sync) or when the conf names a metastore.
    """
    out = {str(k): str(v) for k, v in (conf or {}).items()}
    if is_local(master):
        out.setdefault("spark.pyspark.python", sys.executable)
        out.setdefault("spark.pyspark.driver.python", sys.executable)
        out.setdefault("spark.driver.bindAddress", "127.0.0.1")
        out.setdefault("spark.driver.host", "127.0.0.1")
        out.setdefault("spark.ui.showConsoleProgress", "false")
    if hive or out.get(METASTORE_URIS):
        out.setdefault("spark.sql.catalogImplementation", "hive")
    return out


def metastore_conf(uri: str | None) -> dict[str, str]:
    """The conf that makes a session's Hive catalog the metastore at ``uri`` (``thrift://`` or ``spark``)."""
    from tributary_read.errors import InvalidInputError
    from tributary_read.hive.metastore import BACKENDS, backend_for

    if not uri:
        return {}
    backend = backend_for(uri)
    if backend == BACKENDS["thrift"]:
        return {METASTORE_URIS: uri.split("?", 1)[0]}
    if backend == BACKENDS["spark"]:
        return {}
    raise InvalidInputError(f"a Spark session needs a metastore it can use as its catalog: thrift://HOST:PORT "
                            f"or spark, not {uri} (HiveServer2 runs SQL, it is not a catalog)")


def under_spark_submit() -> bool:
    """True in a Python driver that ``spark-submit`` started (its JVM is already running)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "trib", *,
                  hive: bool = False):
    """A SparkSession (``getOrCreate``: an active session is reused, with ``conf`` set where runtime-settable)."""
    require_pyspark()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if under_spark_submit():
        extra = {str(k): str(v) for k, v in (conf or {}).items()}
        if hive:
            extra.setdefault("spark.sql.catalogImplementation", "hive")
    else:
        m = resolve_master(master)
        builder = builder.master(m)
        extra = session_conf(m, conf, hive=hive)
        if is_local(m):
            # Python workers inherit this; spark.pyspark.python alone is read too late by some launchers.
            os.environ.setdefault("PYSPARK_PYTHON", extra["spark.pyspark.python"])
    for k, v in extra.items():
        builder = builder.config(k, v)
    if extra.get("spark.sql.catalogImplementation") == "hive":
        builder = builder.enableHiveSupport()
    return builder.getOrCreate()
