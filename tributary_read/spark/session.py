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
from pathlib import Path
from typing import Collection, Mapping

from tributary_read.spark import require_pyspark
from tributary_read.spark.ship import is_local, ship_to_executors

METASTORE_URIS = "spark.hadoop.hive.metastore.uris"


def resolve_master(master: str | None = None) -> str:
    """The master a session would use (see the module docstring)."""
    return master or os.environ.get("TRIB_SPARK_MASTER") or os.environ.get("SPARK_MASTER") or "local[*]"


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


def metastore_conf(uri) -> dict[str, str]:
    """The conf that makes a session's Hive catalog the metastore at ``uri`` (``thrift://`` or ``spark``)."""
    from tributary_read.hive.uri import MetastoreURI

    return MetastoreURI.parse(uri).catalog_conf() if uri else {}


#: The JDO connection of a Hive catalog's embedded metastore (Derby; relative to the cwd by default).
EMBEDDED_URL = "spark.hadoop.javax.jdo.option.ConnectionURL"


def embedded_catalog_dir() -> str:
    """Where a ``spark`` catalog keeps its embedded metastore: ``$XDG_STATE_HOME/trib/spark-catalog``
    (default ``~/.local/state/trib/spark-catalog``), never the working directory."""
    from tributary_read.paths import state_dir

    return state_dir("spark-catalog")


def embedded_catalog_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The conf that keeps a ``spark`` catalog's Derby ``metastore_db/`` and its managed tables'
    warehouse under :func:`embedded_catalog_dir`; empty if ``conf`` names a metastore or a JDO URL.

    Hive's defaults put ``metastore_db/`` and ``spark-warehouse/`` in the working directory, and
    Derby's ``derby.log`` there too (:func:`sql_session` moves it with ``derby.system.home``).
    """
    if conf.get(METASTORE_URIS) or conf.get(EMBEDDED_URL):
        return {}
    home = embedded_catalog_dir()
    return {EMBEDDED_URL: f"jdbc:derby:;databaseName={os.path.join(home, 'metastore_db')};create=true",
            "spark.sql.warehouse.dir": Path(home, "warehouse").as_uri()}


def under_spark_submit() -> bool:
    """True in a Python driver that ``spark-submit`` started (its JVM is already running)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "trib", *,
                  hive: bool = False):
    """A SparkSession (``getOrCreate``: an active session is reused, with ``conf`` set where runtime-settable)."""
    require_pyspark()
    from pyspark.sql import SparkSession

    # pyspark itself would take $SPARK_REMOTE as a Spark Connect URL and refuse the master given here: a
    # classic session is what the caller chose (a job's master wins over the environment's remote).
    os.environ.pop("SPARK_REMOTE", None)
    builder = SparkSession.builder.appName(app_name)
    if under_spark_submit():
        extra = {str(k): str(v) for k, v in (conf or {}).items()}
        if hive:
            extra.setdefault("spark.sql.catalogImplementation", "hive")
    else:
        m = resolve_master(master)
        builder = builder.master(m)
        extra = session_conf(m, conf, hive=hive)
        _executors_python(extra, given=conf or {}, local=is_local(m))
    for k, v in extra.items():
        builder = builder.config(k, v)
    if extra.get("spark.sql.catalogImplementation") == "hive":
        builder = builder.enableHiveSupport()
    spark = builder.getOrCreate()
    ship_to_executors(spark)  # a cluster's executors import trib from the zip it adds
    return spark


CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"
#: Spark Connect session id -> $SPARK_CONNECT_MODE_ENABLED as it was before :func:`connect_session`.
_MODE_BEFORE: dict[str, str | None] = {}


def end_connect_session(spark) -> None:
    """End this process's use of a session of :func:`connect_session` and give it back the pyspark mode it
    had: a classic session built later in the same process gets classic functions again. A session made for
    this process alone is released on its server (its views and artifacts go now, not at the server's idle
    timeout); a kept one stays for the job's next run. Best effort."""
    try:
        spark.stop()  # releases the session, unless it is kept (connect_session's session_id)
    except Exception:  # noqa: BLE001 - the server times the session out
        pass
    key = getattr(spark, "session_id", None)
    if key in _MODE_BEFORE:
        before = _MODE_BEFORE.pop(key)
        if before is None:
            os.environ.pop(CONNECT_MODE, None)
        else:
            os.environ[CONNECT_MODE] = before


def connect_session(remote: str, conf: Mapping[str, str] | None = None, app_name: str = "trib", *,
                    session_id: str | None = None, views: Collection[str] = ()):
    """A Spark Connect session on the server at ``remote`` (``sc://HOST:PORT``), ``conf`` set in it.

    No JVM starts here: the server's is warm. Each ``conf`` key is set in the session, and one the
    server refuses (a static setting) is one line naming it, not a setting silently ignored.
    trib's code is added to the session for the server's Python workers (:func:`ship_to_executors`).

    ``session_id``: the server's session of that id, kept across runs (:func:`end_connect_session`
    does not release it). A server gives each session its own Python daemon and workers, which a new
    session waits for at its first Python task (seconds on a small machine); a kept session's are
    warm. The caller guarantees that no other client uses the session (a job's lock). What an earlier
    client left in it is cleared before anything runs (:func:`_clear`), so a run sees it as a new
    session (``views``: temporary views the caller defines again first, left to be replaced). A session
    the server has closed (released, or idle past its timeout) cannot be reused: a new id is taken, and
    ``spark.session_id`` says which.
    """
    require_pyspark()
    try:
        import pyspark.sql.connect.session  # noqa: F401
    except ImportError as e:  # grpcio and friends: pyspark[connect]
        from tributary_read.errors import missing_extra

        raise missing_extra(getattr(e, "name", None) or "grpcio", "connect") from None
    from pyspark.sql import SparkSession

    from tributary_read.errors import InvalidInputError

    # pyspark's own builder: it also switches pyspark.sql.functions to their Spark Connect versions (by
    # setting $SPARK_CONNECT_MODE_ENABLED in this process, which end_connect_session puts back)
    before = os.environ.get(CONNECT_MODE)
    if session_id is None:
        spark = SparkSession.builder.remote(remote).config("spark.app.name", app_name).create()
    else:
        spark = _kept_session(remote, session_id, app_name, views)
    _MODE_BEFORE[spark.session_id] = before
    for k, v in (conf or {}).items():
        try:
            spark.conf.set(str(k), str(v))
        except Exception as e:  # noqa: BLE001 - the server's refusal, as one line
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise InvalidInputError(f"[spark] conf {k}: the Spark Connect server {remote} refuses it "
                                    f"({first})") from None
    ship_to_executors(spark)
    return spark


def _kept_session(remote: str, session_id: str, app_name: str, replaced: Collection[str]):
    """The server's session ``session_id`` (a new id if the server has closed that one), cleared."""
    import uuid

    from pyspark.sql import SparkSession

    base = remote if ";" in remote else f"{remote.rstrip('/')}/"
    for attempt in (session_id, str(uuid.uuid4())):
        spark = SparkSession.builder.remote(f"{base};session_id={attempt}").create()
        spark.release_session_on_close = False  # kept: end_connect_session only closes the channel
        try:
            _clear(spark, replaced)
        except Exception as e:  # noqa: BLE001 - only a closed session is retried, once
            if "SESSION_CLOSED" not in str(e) or attempt != session_id:
                raise
            spark.stop()
            continue
        spark.conf.set("spark.app.name", app_name)
        return spark
    raise AssertionError("unreachable")  # pragma: no cover


def _clear(spark, replaced: Collection[str] = ()) -> None:
    """Make a kept session what a new one is to a run: no operation of an earlier client still running
    (a killed run's write, interrupted), no temporary view (an input the job no longer has must not be
    found under its old name) but those in ``replaced``, which the caller defines again before anything
    reads them, the runtime conf back at the server's defaults (a key the job no longer sets must not
    stay set). A run's SQL is one query, so it can change nothing else of the session."""
    spark.interruptAll()
    for row in spark.sql("SHOW VIEWS").collect():
        if row["isTemporary"] and row["viewName"] not in replaced:
            spark.catalog.dropTempView(row["viewName"])
    spark.sql("RESET")  # a command: Spark Connect runs it as it is sent


PYTHON, DRIVER_PYTHON = "spark.pyspark.python", "spark.pyspark.driver.python"


def _executors_python(extra: Mapping[str, str], *, given: Mapping[str, str], local: bool) -> None:
    """Make ``spark.pyspark.python`` take effect in a session this process builds, or refuse it.

    PySpark picks the executors' Python from the driver's ``$PYSPARK_PYTHON`` when
    the SparkContext starts (verified on a standalone cluster, docs/etl.md): the conf
    key in a builder's conf is not read (only ``spark-submit`` turns it into that
    variable). So a key the job gives is copied into the variable, winning over
    one inherited from the environment; without it a local session runs this
    interpreter unless ``$PYSPARK_PYTHON`` says otherwise, and a cluster's
    executors run ``$PYSPARK_PYTHON`` or their nodes' ``python3``. The driver's
    Python is this process, already running: a different one is refused. So is a
    Python that an already running SparkContext of this process (which
    ``getOrCreate`` would reuse) does not use.
    """
    from tributary_read.errors import InvalidInputError

    driver = given.get(DRIVER_PYTHON)
    if driver and os.path.abspath(str(driver)) != os.path.abspath(sys.executable):
        raise InvalidInputError(
            f"{DRIVER_PYTHON} = {driver} cannot change the Python of this driver, which is already running "
            f"({sys.executable}): run trib with that Python, or submit the job with trib etl submit")
    wanted = given.get(PYTHON)
    if wanted:
        from pyspark import SparkContext

        active = SparkContext._active_spark_context
        running = getattr(active, "pythonExec", None) if active is not None else None
        if running is not None and os.path.abspath(running) != os.path.abspath(str(wanted)):
            raise InvalidInputError(
                f"{PYTHON} = {wanted} cannot take effect: this process already runs a Spark session whose "
                f"executors run {running}; use one Python per process")
        os.environ["PYSPARK_PYTHON"] = str(wanted)
    elif local:
        os.environ.setdefault("PYSPARK_PYTHON", extra[PYTHON])


def sql_session(master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "trib", *,
                catalog=None, udfs: bool = True):
    """The one way trib assembles a SQL session: trib's jar, a metastore as its catalog, trib's UDFs.

    ``trib sql``, the demo, the ETL, the catalog backend and the tests build through here, so a
    session that works in one works in all. ``catalog`` (a metastore URI: ``thrift://`` or
    ``spark``) turns Hive support on and wins over ``conf`` for the metastore's keys; without it
    Hive support is on only if ``conf`` names a metastore. A ``spark`` catalog whose conf names no
    metastore keeps its embedded one under :func:`embedded_catalog_dir`, not the working directory. ``udfs=False`` leaves the jar out
    (it is compiled at first use, which needs a JDK's javac): for sessions that run no user SQL.
    """
    from tributary_read.hive.uri import MetastoreURI

    out = {str(k): str(v) for k, v in (conf or {}).items()}
    embedded = False
    if catalog is not None:
        out.update(MetastoreURI.parse(catalog).catalog_conf())
        for k, v in embedded_catalog_conf(out).items():
            out.setdefault(k, v)
            embedded = True
    if udfs:
        from tributary_read.hive_udfs import registry as lib

        for k, v in lib.spark_conf().items():
            out.setdefault(k, v)
    if embedded:
        os.makedirs(embedded_catalog_dir(), exist_ok=True)
    spark = spark_session(master, out, app_name, hive=catalog is not None)
    if embedded:  # before the catalog's first use boots Derby, which writes derby.log in its home
        system = spark._jvm.java.lang.System
        if system.getProperty("derby.system.home") is None:
            system.setProperty("derby.system.home", embedded_catalog_dir())
    if udfs:
        lib.register(spark)
    return spark


#: The loggers that print a failed task's JVM stack trace on the driver's console (local mode: the executor too).
TASK_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager")


def quiet_task_failures(spark, more: tuple[str, ...] = ()) -> None:
    """Keep failed tasks' JVM stack traces off the console of a process that ends with one line.

    A task that fails on a planned file (a truncated gzip) makes Spark log the
    whole Java trace, three times, before trib says which file and what to do:
    a hundred lines a scheduler shows instead of the one that matters. The
    error itself still reaches the driver (and ``-v`` prints it); other Spark
    logging is untouched (but the loggers in ``more``). Best effort: a session without log4j2 is left as is.
    """
    try:
        jvm = spark.sparkContext._jvm
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in (*TASK_FAILURE_LOGGERS, *more):
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception:  # noqa: BLE001 - logging only
        pass


def end_before_last_line() -> None:
    """Stop this process's Spark, and its JVM, before trib prints the line a failed run ends with.

    The JVM shares trib's stderr and is stopped only at the process's exit, so
    its shutdown (an executor's late status update, "dropped due to sparkEnv is
    stopped") used to print after ``trib: error: …``, and a scheduler that
    shows the last line showed Spark's noise instead of the cause. Bounded and
    best effort: a JVM that does not exit within 15 s is left to the exit.
    A driver under ``spark-submit`` does not own its JVM; only its context is stopped.
    """
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        return
    try:
        sc.setLogLevel("OFF")
        sc.stop()
    except Exception:  # noqa: BLE001 - a failing run is ending anyway
        pass
    proc = getattr(SparkContext._gateway, "proc", None)
    if under_spark_submit() or proc is None or proc.stdin is None:
        return
    try:
        proc.stdin.close()  # the gateway exits when its stdin closes
        proc.wait(timeout=15)
    except Exception:  # noqa: BLE001 - left to the process's exit
        pass
