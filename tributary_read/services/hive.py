"""Start and stop a local Hive Metastore + HiveServer2 pair for development and tests.

Everything runs from the jars inside the pyspark wheel, so a dev box needs only
``pip install 'tributary-read[hive,spark]'`` and a JDK 17, never a Hive install.

* The metastore is Hive 2.3's metastore handler over embedded Derby in ``DIR/metastore_db``,
  served by ``hive_udfs/java/trib/hive/LoopbackMetaStore.java`` on 127.0.0.1: stock
  ``HiveMetaStore`` opens its socket with a null host (all interfaces) and 2.3 has no setting for
  it. ``hive_udfs/build.py`` compiles the launcher at the first start of any pair and caches it in
  trib's cache directory (beside the UDF jar), so a pair in a new ``DIR`` starts without javac.
* HiveServer2 is the Spark Thrift Server (``HiveThriftServer2``) in ``local[2]``
  mode, bound to 127.0.0.1 like its driver ports, with that metastore as its catalog.

State (pids, ports) lives in ``DIR/services.json``, logs in ``DIR/logs``, JVM temp
files in ``DIR/tmp`` and the default warehouse in ``DIR/warehouse``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar
from xml.sax.saxutils import escape as xml_escape

from tributary_read.errors import InvalidInputError, MetastoreError, MissingDependencyError, missing_extra
from tributary_read.hive_udfs import build, registry
from tributary_read.processes import pid_alive

HOST = "127.0.0.1"
_S = TypeVar("_S")
_STATE = "services.json"
_HMS_CLASS = build.LAUNCHER_CLASS
_LEGACY_HMS_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"  # pairs started before it
_HS2_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"

# The module opens Spark's launcher (JavaModuleOptions) passes, so reflection works on Java 17.
_JAVA17_OPTS = ["-XX:+IgnoreUnrecognizedVMOptions"] + [
    f"--add-opens={m}=ALL-UNNAMED"
    for m in (
        "java.base/java.lang", "java.base/java.lang.invoke", "java.base/java.lang.reflect",
        "java.base/java.io", "java.base/java.net", "java.base/java.nio", "java.base/java.util",
        "java.base/java.util.concurrent", "java.base/java.util.concurrent.atomic",
        "java.base/jdk.internal.ref", "java.base/sun.nio.ch", "java.base/sun.nio.cs",
        "java.base/sun.security.action", "java.base/sun.util.calendar",
        "java.security.jgss/sun.security.krb5",
    )
]

# Per-statement chatter that would bury the one line explaining a failure.
_QUIET_LOGGERS = {
    "DataNucleus": "ERROR",
    "Datastore": "ERROR",
    "org.apache.hadoop.hive.metastore.HiveMetaStore.audit": "WARN",
    "org.apache.spark.scheduler.DAGScheduler": "ERROR",  # "Failed to cancel job group" per query
    "org.apache.hadoop.util.NativeCodeLoader": "ERROR",
}


@dataclass(frozen=True)
class HiveServices:
    """What ``start`` launched: enough to connect, and to find the processes again."""

    dir: str
    hms_port: int
    hs2_port: int
    hms_pid: int
    hs2_pid: int

    @property
    def metastore_uri(self) -> str:
        return f"thrift://{HOST}:{self.hms_port}"

    @property
    def warehouse_uri(self) -> str:
        """Clients must use this warehouse too, or their managed tables land elsewhere."""
        return (Path(self.dir) / "warehouse").as_uri()


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (held open together, so they cannot repeat)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start(
    dir: str = ".trib/hive", hms_port: int = 9083, hs2_port: int = 10000, timeout: float = 180.0
) -> HiveServices:
    """Launch the metastore and HiveServer2 detached; return once HS2 answers ``SELECT 1``.

    Services already running from ``dir`` are returned as they are (their recorded
    ports win over the arguments). A half-dead pair is stopped and started afresh,
    since a surviving metastore holds the Derby lock. On failure or timeout both
    processes are killed and ``MetastoreError`` names the log and its telling line.
    """
    root = Path(dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root):
        current = _load(root)
        if current and _service_alive(current.hms_pid, _HMS_CLASS, current.hms_port) and \
                _service_alive(current.hs2_pid, _HS2_CLASS, current.hs2_port):
            return current
        _stop_locked(root, 30.0)
        return _start_locked(root, hms_port, hs2_port, timeout)


def status(dir: str = ".trib/hive") -> dict:
    """Per service: pid, port, and alive (process alive AND port accepting TCP)."""
    current = _load(Path(dir).resolve())
    if current is None:
        return {name: {"pid": None, "port": None, "alive": False} for name in ("hms", "hs2")}
    return {
        "hms": {"pid": current.hms_pid, "port": current.hms_port,
                "alive": _service_alive(current.hms_pid, _HMS_CLASS, current.hms_port)},
        "hs2": {"pid": current.hs2_pid, "port": current.hs2_port,
                "alive": _service_alive(current.hs2_pid, _HS2_CLASS, current.hs2_port)},
    }


def stop(dir: str = ".trib/hive", timeout: float = 30.0) -> None:
    """SIGTERM both process groups, SIGKILL what outlives ``timeout``; a no-op if none run."""
    root = Path(dir).resolve()
    if not (root / _STATE).exists():
        return
    with _locked(root):
        _stop_locked(root, timeout)


# --- launching ---------------------------------------------------------------------------


def _start_locked(root: Path, hms_port: int, hs2_port: int, timeout: float) -> HiveServices:
    deadline = time.monotonic() + timeout
    try:  # fail before launching anything
        from pyhive import hive
    except ImportError as e:
        raise missing_extra("pyhive", "hive") from e
    spark_home, java = _spark_home(), _java()
    _env_java_opts()  # a bad value fails here, before anything is compiled or launched
    _check_port_free(HOST, hms_port, "metastore")
    _check_port_free(HOST, hs2_port, "HiveServer2")
    classes = build.launcher_classes(java, spark_home / "jars", deadline - time.monotonic(),
                                     MetastoreError)
    registry.jar_path(timeout=max(10.0, deadline - time.monotonic()))  # the UDF jar too, at first start
    conf, logs, tmp, warehouse = (root / d for d in ("conf", "logs", "tmp", "warehouse"))
    for d in (conf / "spark", logs, tmp / "scratch", warehouse):
        d.mkdir(parents=True, exist_ok=True)
    _write_conf(root, conf)

    hms = hs2 = None
    try:
        hms = _spawn(_hms_command(java, spark_home, classes, conf, tmp, logs / "derby.log", hms_port),
                     root, logs / "hms.log", os.environ.copy())
        _save(root, HiveServices(str(root), hms_port, hs2_port, hms.pid, 0))
        _wait(hms, logs / "hms.log", "metastore", deadline, lambda: _port_open(hms_port))

        hs2 = _spawn(
            _hs2_command(spark_home, hs2_port, warehouse, tmp, logs / "derby-hs2.log",
                         conf={"spark.hadoop.hive.metastore.uris": f"thrift://{HOST}:{hms_port}"},
                         classpath=(str(classes),)),
            root, logs / "hs2.log", _hs2_env(spark_home, conf / "spark"))
        _save(root, HiveServices(str(root), hms_port, hs2_port, hms.pid, hs2.pid))
        _wait(hs2, logs / "hs2.log", "HiveServer2", deadline,
              lambda: _port_open(hs2_port) and _answers(hive, hs2_port, deadline))
        # HS2 reaches the metastore lazily, so check it did not die meanwhile.
        _wait(hms, logs / "hms.log", "metastore", deadline, lambda: _port_open(hms_port))
        return HiveServices(str(root), hms_port, hs2_port, hms.pid, hs2.pid)
    except BaseException:
        for proc in (hs2, hms):
            if proc is not None:
                _kill_group(proc.pid, 10.0)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10.0)
        (root / _STATE).unlink(missing_ok=True)
        raise


def _env_java_opts() -> list[str]:
    """``$TRIB_HIVE_JAVA_OPTS`` split as a shell would; a value no shell could split is one line, exit 3.
    The options become the JVM's argv, which any user of the machine can read: a system property that
    names a secret (``-Dx.password=...``) is refused, as trib refuses secrets in argv everywhere."""
    import shlex

    from tributary_read.secret import is_secret

    try:
        opts = shlex.split(os.environ.get("TRIB_HIVE_JAVA_OPTS", ""))
    except ValueError as e:
        raise InvalidInputError(f"$TRIB_HIVE_JAVA_OPTS cannot be split into JVM options: {e}") from None
    for o in opts:
        if o.startswith("-D") and is_secret(o[2:].partition("=")[0]):
            raise InvalidInputError(f"$TRIB_HIVE_JAVA_OPTS: {o.partition('=')[0]} holds a secret, which a JVM's "
                                    "command line would show to every user of the machine; set it in the "
                                    "metastore's hive-site.xml instead")
    return opts


def _hms_command(java: str, spark_home: Path, classes: Path, conf: Path, tmp: Path, derby_log: Path, port: int,
                 java_opts: tuple[str, ...] = ()) -> list[str]:
    """java argv of the loopback metastore launcher (the secured one adds its Kerberos flags).
    ``$TRIB_HIVE_JAVA_OPTS``: the metastore JVM's own options (HiveServer2's JVM is spark-submit's, which
    takes ``$SPARK_SUBMIT_OPTS``); the tests give it the same C1-only, one-GC-thread options as their Spark."""
    return [java, "-Xmx512m", *_JAVA17_OPTS, *_env_java_opts(), *java_opts, f"-Djava.io.tmpdir={tmp}",
            f"-Dderby.stream.error.file={derby_log}",
            # conf first, so our hive-site.xml / hive-log4j2.properties beat the jars' defaults
            "-cp", os.pathsep.join([str(conf), str(classes), f"{spark_home / 'jars'}/*"]),
            _HMS_CLASS, str(port), HOST]


def _hs2_env(spark_home: Path, spark_conf: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The Thrift Server's environment: the wheel's Spark, our conf dir only, loopback only."""
    env = os.environ.copy()
    env["SPARK_HOME"] = str(spark_home)  # a user's SPARK_HOME would run another Spark
    env["SPARK_CONF_DIR"] = str(spark_conf)  # no stray spark-defaults.conf / hive-site.xml
    env["SPARK_LOCAL_IP"] = HOST  # driver RPC and block manager on loopback too
    for var in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "HIVE_CONF_DIR"):
        env.pop(var, None)  # a cluster core-site.xml would turn '/tmp/x' into hdfs://
    env.update(extra or {})
    return env


def _hs2_command(spark_home: Path, port: int, warehouse: Path, tmp: Path, derby_log: Path, *,
                 name: str = "trib-hs2", submit: tuple[str, ...] = (), conf: dict[str, str] | None = None,
                 java_opts: tuple[str, ...] = (), hiveconf: dict[str, str] | None = None,
                 classpath: tuple[str, ...] = ()) -> list[str]:
    """spark-submit argv of a ``HiveThriftServer2`` in ``local[2]`` on 127.0.0.1 (the secured ones add to it).

    ``classpath``: more on the driver's classpath (the dev pair's classes: its JSON SerDe, which a jsonl
    table's DDL names and the wheel's Hive 2.3 lacks; :func:`tributary_read.hive_udfs.build.launcher_classes`).
    """
    cmd = [str(spark_home / "bin" / "spark-submit"), "--class", _HS2_CLASS,
           "--master", "local[2]", "--name", name, "--driver-memory", "1g",
           "--conf", "spark.ui.enabled=false",
           # Spark's 200 is for a cluster: on two local cores, a query over a partition of many small
           # files (trib's commits) writes 200 shuffle files per task, and a count(DISTINCT) took 4x as long.
           "--conf", "spark.sql.shuffle.partitions=4",
           # trib's jar: the seed-002 `set` lines and the UDF classes work in every session
           *registry.spark_args(),
           # ...and on the driver's own classpath: the server closes a session's class loader
           # with the session, and Hadoop loads the path filter through whichever is current.
           "--driver-class-path", os.pathsep.join([str(registry.jar_path()), *classpath]), *submit,
           "--conf", f"spark.sql.warehouse.dir={warehouse.as_uri()}"]
    for key, value in (conf or {}).items():
        cmd += ["--conf", f"{key}={value}"]
    java = " ".join([f'-Djava.io.tmpdir="{tmp}" -Dderby.stream.error.file="{derby_log}"', *java_opts])
    cmd += ["--conf", f"spark.driver.extraJavaOptions={java}",
            "spark-internal"]  # the "no application jar" primary resource
    hive = {"hive.server2.thrift.port": str(port),
            "hive.server2.thrift.bind.host": HOST,
            "hive.server2.logging.operation.log.location": str(tmp / "operation_logs"),
            # must exist, or every session close logs "Unable to access pipeout files"
            "hive.exec.local.scratchdir": str(tmp / "scratch"), **(hiveconf or {})}
    for key, value in hive.items():
        cmd += ["--hiveconf", f"{key}={value}"]
    return cmd


def _spawn(cmd: list[str], cwd: Path, log: Path, env: dict) -> subprocess.Popen:
    with open(log, "ab") as out:
        out.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
        out.flush()
        # Own session: the services outlive this Python process and die as one group.
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait(proc: subprocess.Popen, log: Path, what: str, deadline: float,
          ready: Callable[[], bool]) -> None:
    while True:
        if proc.poll() is not None:
            raise MetastoreError(f"{what} exited with status {proc.returncode} while starting; "
                                 f"see {log}: {_last_line(log)}")
        if ready():
            return
        if time.monotonic() > deadline:
            raise MetastoreError(f"{what} not ready before the timeout; see {log}: {_last_line(log)}")
        time.sleep(0.5)


def _answers(hive, port: int, deadline: float) -> bool:
    """True once ``SELECT 1`` round-trips; run in a thread so a hung handshake cannot block."""
    result: list[bool] = []

    def probe() -> None:
        try:
            # Spark's HS2 defaults to hive.server2.authentication=NONE, i.e. SASL PLAIN;
            # auth='NOSASL' gets the connection dropped ("TSocket read 0 bytes").
            conn = hive.connect(host=HOST, port=port, auth="NONE", username="trib")
            try:
                cur = conn.cursor()
                cur.execute("SELECT 1")
                result.append(cur.fetchall() == [(1,)])
            finally:
                conn.close()
        except Exception:  # not ready yet; the caller polls again
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(max(1.0, min(60.0, deadline - time.monotonic())))
    return bool(result and result[0])


def _write_conf(root: Path, conf: Path, extra: dict[str, str] | None = None) -> None:
    """hive-site.xml (``extra`` on top of the metastore's own settings) and the log4j2 files."""
    _atomic_write(conf / "hive-site.xml", _site_xml({**_metastore_props(root, conf), **(extra or {})}))
    _atomic_write(conf / "hive-log4j2.properties", _log4j2("org.apache.hadoop.hive.metastore"))
    _atomic_write(conf / "spark" / "log4j2.properties",
                  _log4j2("org.apache.spark.sql.hive.thriftserver"))


def _metastore_props(root: Path, conf: Path) -> dict[str, str]:
    """An embedded-Derby metastore in ``root/metastore_db``, its warehouse ``root/warehouse``."""
    return {
        "javax.jdo.option.ConnectionURL":
            f"jdbc:derby:;databaseName={root / 'metastore_db'};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": (root / "warehouse").as_uri(),
        "hive.async.log.enabled": "false",  # needs the LMAX disruptor jar, absent from pyspark
        "hive.log4j.file": str(conf / "hive-log4j2.properties"),
        "hive.metastore.server.min.threads": "5",  # stock 200 core threads never time out
        "hive.metastore.server.max.threads": "200",
        # Hive's default pool is BoneCP, which pyspark does not ship: DataNucleus falls back quietly,
        # but the ACID listener's TxnHandler does not, so every DROP DATABASE failed mid-call.
        "datanucleus.connectionPoolingType": "HikariCP",
    }


def _site_xml(props: dict[str, str]) -> str:
    """A Hadoop-style ``*-site.xml`` holding ``props``."""
    body = "".join(f"  <property><name>{k}</name><value>{xml_escape(v)}</value></property>\n"
                   for k, v in props.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


def _log4j2(main_logger: str) -> str:
    levels = {main_logger: "INFO", **_QUIET_LOGGERS}
    return "".join(
        ["status = WARN\n",
         "appender.console.type = Console\nappender.console.name = console\n",
         "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n",
         "appender.console.layout.pattern = %d{ISO8601} %p [%t] %c{1}: %m%n%ex\n",
         "rootLogger.level = WARN\nrootLogger.appenderRef.console.ref = console\n"]
        + [f"logger.l{i}.name = {name}\nlogger.l{i}.level = {level}\n"
           for i, (name, level) in enumerate(levels.items())])


def _spark_home() -> Path:
    try:
        return build.spark_home()
    except MissingDependencyError as e:
        if "jars/" in str(e):
            raise MetastoreError(str(e)) from None
        raise


def _java() -> str:
    return build.java(MetastoreError)


def beeline_command(args: list[str], dir: str = ".trib/hive") -> list[str]:
    """The argv that runs the pyspark wheel's beeline with ``args``, whatever the caller's PATH.

    The wheel's ``bin/beeline`` script finds Spark through the ``python3`` on PATH, so it works
    only inside the venv; this runs BeeLine's class directly with the resolved ``java`` and the
    wheel's jars. Without a ``-u`` in ``args`` it connects to the HiveServer2 running from ``dir``
    (a ``MetastoreError`` if none does).
    """
    java, home = _java(), _spark_home()
    if not any(a.startswith(("-u", "--url")) for a in args):
        current = _load(Path(dir).resolve())
        if current is None or not _service_alive(current.hs2_pid, _HS2_CLASS, current.hs2_port):
            raise MetastoreError(f"no HiveServer2 runs from {dir}: start the local pair first, "
                                 "or give beeline its own -u jdbc:hive2://HOST:PORT/DB")
        args = ["-u", f"jdbc:hive2://{HOST}:{current.hs2_port}/default", "-n", "trib", *args]
    return [java, *_JAVA17_OPTS, "-cp", f"{home / 'jars'}/*", "org.apache.hive.beeline.BeeLine", *args]


# --- stopping and liveness ---------------------------------------------------------------


def _stop_locked(root: Path, timeout: float) -> None:
    current = _load(root)
    if current is not None:
        # HS2 first, so it does not log metastore connection errors while shutting down.
        for pid, marker in ((current.hs2_pid, _HS2_CLASS), (current.hms_pid, _HMS_CLASS),
                            (current.hms_pid, _LEGACY_HMS_CLASS)):
            if _is_ours(pid, marker):
                _kill_group(pid, timeout)
        # Only now that our JVMs are gone: HS2 leaves a *_resources dir per session here.
        shutil.rmtree(root / "tmp", ignore_errors=True)
    (root / _STATE).unlink(missing_ok=True)


def _kill_group(pid: int, timeout: float) -> None:
    """SIGTERM the process group ``pid`` leads, then SIGKILL it if the leader lingers."""
    for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + grace
        while time.monotonic() < end:
            if not pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):  # stragglers of the group
                    os.killpg(pid, signal.SIGKILL)
                return
            time.sleep(0.2)


def _service_alive(pid: int, marker: str, port: int) -> bool:
    return _is_ours(pid, marker) and _port_open(port)


def _is_ours(pid: int, marker: str) -> bool:
    """Alive and still our service: a recycled pid must never be signalled."""
    if not pid or not pid_alive(pid):
        return False
    if not Path("/proc/self").exists():
        return True  # no procfs (macOS): trust the recorded pid
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False



def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1.0):
        return True
    return False


def _check_port_free(host: str, port: int, what: str) -> None:
    # Otherwise a foreign listener would make "port accepts TCP" look like our success.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Java does: TIME_WAIT is fine
        try:
            s.bind((host, port))
        except OSError as e:
            raise MetastoreError(f"cannot start {what}: port {port} is in use ({e})") from e


# --- files -------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Serialize start/stop across processes (e.g. pytest-xdist workers sharing a dir)."""
    with open(root / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def load_state(path: Path, cls: type[_S]) -> _S | None:
    """The dataclass a service recorded at ``path`` when it started (alive or not); None if absent or unreadable.

    One reader for every local service's state file (this pair's, the KDC's, slapd's, the secured stack's).
    """
    try:
        return cls(**json.loads(path.read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def save_state(path: Path, state) -> None:
    """Record a started service's dataclass at ``path`` (readers see the old file or the new one)."""
    _atomic_write(path, json.dumps(asdict(state), indent=2) + "\n")


def _load(root: Path) -> HiveServices | None:
    return load_state(root / _STATE, HiveServices)


def _save(root: Path, services: HiveServices) -> None:
    save_state(root / _STATE, services)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


_NOISE = re.compile(r"^\s*$|^\s*at |^\s*\.\.\. \d+ more")
_TELLING = re.compile(r"\b(ERROR|FATAL)\b|^Caused by|^Exception in|^[\w.$]+(Exception|Error)\b")


def _last_line(log: Path) -> str:
    """The last error-looking line of this run's log (else its last line)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return "(no log)"
    runs = [i for i, ln in enumerate(lines) if ln.startswith("==== ")]  # _spawn's header
    lines = [ln.strip() for ln in lines[runs[-1] + 1 if runs else 0:] if not _NOISE.search(ln)]
    for ln in reversed(lines):
        if _TELLING.search(ln):
            return ln[:500]
    return lines[-1][:500] if lines else "(empty log)"
