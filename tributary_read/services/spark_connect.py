"""Start and stop a local Spark Connect server: a warm Spark that ``trib etl run`` (and any client) uses.

Every ``trib etl run`` with a classic driver pays a JVM start (30-40 CPU-seconds); a Spark Connect
server pays it once, and each run is then a thin gRPC client. The server is the pyspark wheel's own
(``SparkConnectServer`` in ``spark-connect_2.13-*.jar``), started with the wheel's ``spark-submit`` in
``local[2]`` mode, bound to 127.0.0.1 like its driver ports, its Python workers this interpreter (the
one that has trib). When the local Hive pair (:mod:`tributary_read.services.hive`) runs, its
metastore is the server's catalog, with its warehouse, as the classic session's would be.

State (pid, port, catalog) lives in ``DIR/spark-connect.json``, the log in ``DIR/logs``, JVM temp
files in ``DIR/tmp``. The process helpers (spawn, wait, stop, liveness, lock, state files) are the Hive
pair's: one owner for "is our service alive" and "stop only what we started".
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tributary_read.services import hive as _svc
from tributary_read.spark import ship

HOST = _svc.HOST
DEFAULT_PORT = 15002  # Spark Connect's own default: sc://127.0.0.1:15002
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_STATE = "spark-connect.json"


@dataclass(frozen=True)
class ConnectServer:
    """What :func:`start` launched: enough to connect, and to find the process again."""

    dir: str
    port: int
    pid: int
    metastore_uri: str | None = None  # the Hive catalog's, when the local pair ran at start
    warehouse_uri: str | None = None

    @property
    def remote(self) -> str:
        """The URL a client gives (``[spark] remote``, ``$TRIB_SPARK_REMOTE``)."""
        return f"sc://{HOST}:{self.port}"


def load(dir: str) -> ConnectServer | None:
    """The server recorded in ``dir`` (alive or not), or None."""
    return _svc.load_state(Path(dir).resolve() / _STATE, ConnectServer)


def alive(server: ConnectServer | None) -> bool:
    """The recorded process is still our server (a recycled pid is not) and its port accepts TCP."""
    return server is not None and _svc._service_alive(server.pid, SERVER_CLASS, server.port)


def start(dir: str = ".trib/spark", port: int = DEFAULT_PORT, *, hive_dir: str | None = ".trib/hive",
          timeout: float = 180.0) -> tuple[ConnectServer, bool]:
    """Launch the server detached; return (server, already_running) once its port answers.

    A server already running from ``dir`` is returned as it is (its recorded port wins over
    ``port``): ``up`` twice never starts two. ``port`` 0 takes a free port. ``hive_dir``: where the
    local Hive pair runs; when both its services are alive, its metastore is the catalog. On failure
    or timeout the process is killed and ``MetastoreError`` (exit 8: a service to fix) names the log
    and its telling line.
    """
    root = Path(dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    with _svc._locked(root):
        current = _svc.load_state(root / _STATE, ConnectServer)
        if alive(current):
            assert current is not None
            return current, True
        _stop_locked(root, 30.0)  # a recorded server that died: its leftovers, never another's process
        return _start_locked(root, port or _svc.free_ports(1)[0], hive_dir, timeout), False


def status(dir: str = ".trib/spark") -> dict:
    """pid, port, remote URL, catalog and liveness of the server recorded in ``dir``."""
    s = load(dir)
    if s is None:
        return {"pid": None, "port": None, "remote": None, "metastore_uri": None, "alive": False}
    return {"pid": s.pid, "port": s.port, "remote": s.remote, "metastore_uri": s.metastore_uri, "alive": alive(s)}


def stop(dir: str = ".trib/spark", timeout: float = 30.0) -> bool:
    """Stop the server ``start`` recorded in ``dir`` (SIGTERM, then SIGKILL); returns whether it ran.

    Only a process that is still our server is signalled; nothing else of the machine is touched.
    """
    root = Path(dir).resolve()
    if not (root / _STATE).exists():
        return False
    with _svc._locked(root):
        was = alive(_svc.load_state(root / _STATE, ConnectServer))
        _stop_locked(root, timeout)
        return was


def _stop_locked(root: Path, timeout: float) -> None:
    current = _svc.load_state(root / _STATE, ConnectServer)
    if current is not None and _svc._is_ours(current.pid, SERVER_CLASS):
        _svc._kill_group(current.pid, timeout)
    (root / _STATE).unlink(missing_ok=True)


def _hive_catalog(hive_dir: str | None) -> tuple[str | None, str | None]:
    """The local Hive pair's metastore and warehouse when both its services run from ``hive_dir``."""
    if not hive_dir or not all(s["alive"] for s in _svc.status(hive_dir).values()):
        return None, None
    pair = _svc._load(Path(hive_dir).resolve())
    return (pair.metastore_uri, pair.warehouse_uri) if pair is not None else (None, None)


def command(spark_home: Path, port: int, tmp: Path, warehouse: str, metastore_uri: str | None) -> list[str]:
    """spark-submit argv of the server in ``local[2]`` on 127.0.0.1, its Python workers this interpreter."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
        # two local cores: Spark's 200 shuffle partitions would be 200 tiny tasks per shuffle
        "spark.sql.shuffle.partitions": "4",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.bindAddress": HOST,
        "spark.driver.host": HOST,
        "spark.sql.warehouse.dir": warehouse,
        # a client killed mid-write leaves its execution detached: interrupt it after a minute, not Spark's
        # five, so a dead run's tasks stop taking the cores its rerun needs (their files commit nowhere anyway)
        "spark.connect.execute.manager.detachedTimeout": "60s",
        # a job's runs keep one session (its Python workers stay warm, tributary_read/etl/commit_step.py):
        # Spark's 60-minute idle timeout would end an hourly job's session just before its next run
        "spark.connect.session.manager.defaultSessionTimeout": "3h",
        # the code its workers import: a client with the same code ships none (tributary_read/spark/ship.py)
        ship.CODE_CONF: os.path.basename(ship.package_zip()),
        "spark.driver.extraJavaOptions": f'-Djava.io.tmpdir="{tmp}" -Dderby.stream.error.file="{tmp / "derby.log"}"',
    }
    if metastore_uri:  # the same keys a classic session takes for it (MetastoreURI.catalog_conf)
        conf["spark.sql.catalogImplementation"] = "hive"
        conf["spark.hadoop.hive.metastore.uris"] = metastore_uri
    cmd = [str(spark_home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", "local[2]",
           "--name", "trib-spark-connect", "--driver-memory", "1g"]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, "spark-internal"]  # the "no application jar" primary resource


def _start_locked(root: Path, port: int, hive_dir: str | None, timeout: float) -> ConnectServer:
    deadline = time.monotonic() + timeout
    spark_home = _svc._spark_home()
    _svc._java()  # a missing JDK is one line before anything starts
    _svc._check_port_free(HOST, port, "the Spark Connect server")
    conf, logs, tmp, warehouse = (root / d for d in ("conf", "logs", "tmp", "warehouse"))
    for d in (conf, logs, tmp, warehouse):
        d.mkdir(parents=True, exist_ok=True)
    _svc._atomic_write(conf / "log4j2.properties", _svc._log4j2("org.apache.spark.sql.connect.service"))
    metastore_uri, pair_warehouse = _hive_catalog(hive_dir)
    wh = pair_warehouse or warehouse.as_uri()
    env = _svc._hs2_env(spark_home, conf, {"PYSPARK_PYTHON": sys.executable})
    log = logs / "spark-connect.log"
    proc = None
    try:
        proc = _svc._spawn(command(spark_home, port, tmp, wh, metastore_uri), root, log, env)
        server = ConnectServer(str(root), port, proc.pid, metastore_uri, wh)
        _svc.save_state(root / _STATE, server)
        _svc._wait(proc, log, "the Spark Connect server", deadline, lambda: _svc._port_open(port))
        return server
    except BaseException:
        if proc is not None:
            _svc._kill_group(proc.pid, 10.0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10.0)
        (root / _STATE).unlink(missing_ok=True)
        raise


__all__ = ["ConnectServer", "DEFAULT_PORT", "alive", "load", "start", "status", "stop"]
