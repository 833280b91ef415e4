"""Whether a run's SQL runs on a Spark Connect server, and whether the job can: decided before any Spark starts.

A run uses a server (``sc://HOST:PORT``) when the job's ``[spark] remote`` names one; else, unless
the job's ``[spark] master`` asks for a classic driver, when ``$TRIB_SPARK_REMOTE`` or
``$SPARK_REMOTE`` does. A driver that ``spark-submit`` started (``trib etl submit``) is classic.

Over Spark Connect this process holds no JVM: what a job needs from the driver's JVM cannot work
there, and the job is refused before anything runs (:func:`refusal`, exit 3), with one line naming
what needs a classic driver. Everything else the ETL does (read, SQL, trib's write tasks, the commit,
a Hive sync through ``thrift://`` or ``hs2://``) works over Connect.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tributary_read.errors import InvalidInputError
from tributary_read.secret import redacted_url

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.etl.job import Job

ENV_VARS = ("TRIB_SPARK_REMOTE", "SPARK_REMOTE")

#: ``[spark] conf`` keys that configure a driver or its JVM when it starts: a server has started already.
DRIVER_CONF = ("spark.master", "spark.driver.", "spark.executor.", "spark.pyspark.", "spark.submit.", "spark.jars",
               "spark.files", "spark.archives", "spark.ui.", "spark.sql.catalogImplementation",
               "spark.sql.warehouse.dir", "spark.hadoop.javax.jdo.", "spark.hadoop.hive.metastore.")


def remote_for(job: Job) -> str | None:
    """The Spark Connect URL the job's run uses, or None for a classic driver (see the module docstring)."""
    from tributary_read.spark.session import under_spark_submit

    if job.spark.remote:
        return job.spark.remote
    if job.spark.master or under_spark_submit():
        return None
    return next((os.environ[v] for v in ENV_VARS if os.environ.get(v)), None)


def is_connect_url(url: str) -> bool:
    """Whether ``url`` names a Spark Connect server (``sc://HOST:PORT``): the job file's and the environment's rule."""
    return url.startswith("sc://") and len(url) > len("sc://")


def url_params(url: str) -> dict[str, str]:
    """The parameters of a Spark Connect URL (``sc://HOST:PORT/;name=value;...``), by name."""
    return dict(p.partition("=")[::2] for p in url.split(";")[1:] if p)


def check_url(url: str, where: str) -> str:
    """``url`` if it is a Spark Connect URL, else one line naming ``where`` it came from (its secrets redacted)."""
    if not is_connect_url(url):
        raise InvalidInputError(f"{where} = {redacted_url(url)!r}: a Spark Connect server is sc://HOST:PORT")
    return url


def refusal(job: Job, url: str) -> InvalidInputError | None:
    """What in ``job`` needs a classic driver's JVM, as the one line that refuses it over ``url``; None: it runs."""
    where = "[spark] remote" if job.spark.remote else next((f"${v}" for v in ENV_VARS if os.environ.get(v)), "remote")
    how = f"job {job.name} runs on the Spark Connect server {redacted_url(url)} ({where})"
    fix = "run it with a classic driver ([spark] master, and no remote)"
    if job.catalog is not None:
        return InvalidInputError(f"{how}, but [hive] metastore = {job.hive.metastore if job.hive else 'spark'} is "
                                 "the session's own catalog, which needs a classic driver: give the metastore's "
                                 f"thrift:// or hs2:// address, or {fix}")
    for i, spec in enumerate(job.inputs):
        if spec.hive_table is not None and job.hive is None:
            return InvalidInputError(f"{how}, but inputs[{i}].hive_table is looked up in the session's own catalog "
                                     f"(no [hive] metastore), which needs a classic driver: add [hive] with the "
                                     f"metastore's thrift:// address, or {fix}")
    keys = sorted(k for k in job.spark.conf if k.startswith(DRIVER_CONF))
    if keys:
        return InvalidInputError(f"{how}, but [spark] conf {keys[0]} configures a driver as it starts, and the "
                                 f"server's has started: set it where the server starts, or {fix}")
    return None


def check(job: Job) -> str | None:
    """The URL the job's run uses (None: a classic driver), after refusing what cannot run there (exit 3)."""
    url = remote_for(job)
    if url is None:
        return None
    check_url(url, "[spark] remote" if job.spark.remote else next(f"${v}" for v in ENV_VARS if os.environ.get(v)))
    e = refusal(job, url)
    if e is not None:
        raise e
    return url
