"""A Spark standalone cluster for the tests: a master and one worker from the pyspark wheel, on 127.0.0.1.

``Cluster(work_dir, executor_python()).start()`` runs
``<pyspark>/bin/spark-class org.apache.spark.deploy.master.Master`` and
``…deploy.worker.Worker spark://127.0.0.1:P`` on free loopback ports, each in
its own process group, and waits until the master's web UI (``/json``) counts
the worker as alive. :meth:`Cluster.stop` kills both groups by their ids: the
worker's group holds the executor JVMs it launched and their Python workers,
so nothing is left behind.

The executors' Python is a venv WITHOUT tributary_read: pyarrow only, the
driver's version (:func:`executor_python`, built once and cached under
``~/.cache/trib-tests/``). pyspark itself is not installed there: the executors
get it from the worker's Spark home (the wheel's ``python/lib/pyspark.zip`` and
py4j zip, put on their PYTHONPATH by Spark), and pyspark's Python worker needs
nothing else for what trib runs (RDD tasks, ``mapInArrow``): no pandas, no
numpy (the cluster tests prove it: the write path runs there).

Which Python the executors run (verified on this cluster, PySpark 4.3): the
driver decides it, not the worker and not the session's conf. A PySpark driver
reads ``PYSPARK_PYTHON`` from its own ``os.environ`` when its SparkContext
starts (``SparkContext.pythonExec``, default ``python3``) and sends that name
with every Python function; each executor runs it as is, a bare name resolved
on the executor's ``PATH`` (the worker's). Tried one at a time:

* the driver's ``PYSPARK_PYTHON`` (in its environment, or set in
  ``os.environ`` before the SparkContext starts): the executors run it;
* ``spark.pyspark.python`` in the conf of a session built in a running Python
  process (``SparkSession.builder``, as trib builds them): no effect;
* ``--conf spark.pyspark.python=…`` on a ``spark-submit`` line: the executors
  run it (spark-submit sets the Python driver's ``PYSPARK_PYTHON`` from it
  before starting it);
* ``PYSPARK_PYTHON`` in the worker's environment, or
  ``spark.executorEnv.PYSPARK_PYTHON``: no effect (the executor's environment
  has the variable; its Python is still the driver's choice);
* nothing set: ``python3`` on the worker's ``PATH``.

So :meth:`Cluster.driver_env` sets the driver's ``PYSPARK_PYTHON`` to the venv,
and the worker's ``PATH`` starts with the venv's ``bin``, so that a driver that
names no Python gets the nodes' one too: a node with nothing but pyspark and
pyarrow.

Run ``python tests/spark_cluster.py`` to start one by hand (Ctrl-C stops it).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from helpers import group_pids as _group

#: Variables that would point the daemons (or a driver) at another Spark, Hadoop or Python setup.
FOREIGN_ENV = ("SPARK_HOME", "SPARK_CONF_DIR", "SPARK_MASTER", "TRIB_SPARK_MASTER", "HADOOP_CONF_DIR",
               "YARN_CONF_DIR", "HIVE_CONF_DIR", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH",
               "PYTHONHOME", "SPARK_LOCAL_DIRS", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class ClusterUnavailable(RuntimeError):
    """No Java, or the pyspark wheel cannot start a master (fixtures skip with this reason)."""


class ClusterError(RuntimeError):
    """The cluster started but did not become ready, or the executors' venv could not be built."""


def spark_home() -> Path:
    """The pyspark wheel's own Spark (``bin/spark-class``, ``jars/``, ``python/lib/pyspark.zip``)."""
    try:
        import pyspark
    except ImportError as e:
        raise ClusterUnavailable(f"pyspark is not installed: {e}") from e
    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").is_file():
        raise ClusterUnavailable(f"{home} has no bin/spark-class")
    return home


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not exe or not os.access(exe, os.X_OK):
        raise ClusterUnavailable("no Java (set JAVA_HOME or put java on PATH)")
    return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


# -- the executors' Python: pyarrow only ----------------------------------------------------
def cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "trib-tests"


def executor_python(cache: Path | None = None) -> Path:
    """A venv's ``bin/python`` with the driver's pyarrow and nothing else (no tributary_read, no pyspark).

    Built once per Python minor version and pyarrow version (PySpark refuses a
    worker whose Python differs from the driver's in its minor version), under a
    lock (concurrent test sessions share it) and atomically: built in a
    temporary directory, then renamed into place. A venv holds absolute paths
    only in its scripts, and the tests run ``bin/python`` alone.
    """
    import pyarrow

    major, minor = sys.version_info[:2]
    root = cache or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    dest = root / f"executor-venv-py{major}.{minor}-pyarrow-{pyarrow.__version__}"
    python = dest / "bin" / "python"
    with open(root / f"{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists():
            return python
        tmp = root / f"{dest.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            steps = [[sys.executable, "-m", "venv", str(tmp)],
                     [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", f"pyarrow=={pyarrow.__version__}"]]
            for argv in steps:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
                if p.returncode != 0:
                    raise ClusterError(f"building the executors' venv: {' '.join(argv)} exited {p.returncode}:\n"
                                       f"{(p.stderr or p.stdout)[-3000:]}")
            os.rename(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return python


def check_executor_python(python: Path) -> None:
    """The venv imports pyarrow and no tributary_read or pyspark of its own (else the tests prove nothing)."""
    code = ("import importlib.util as u, pyarrow; "
            "print(u.find_spec('tributary_read') is None and u.find_spec('pyspark') is None)")
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    p = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd="/")
    if p.returncode != 0 or p.stdout.strip() != "True":
        raise ClusterError(f"{python} is not a pyarrow-only Python: exit {p.returncode}, {p.stdout}{p.stderr[-2000:]}")


# -- the cluster ------------------------------------------------------------------------------
class Cluster:
    """A standalone master and one worker (``cores`` cores, ``memory``) on 127.0.0.1.

    ``python``: the nodes' Python (first on the worker's PATH); see the module docstring.
    """

    def __init__(self, work_dir: str | os.PathLike, python: str | os.PathLike, *, cores: int = 2,
                 memory: str = "1g", ready_timeout: float = 180.0):
        self.home = spark_home()
        self.java = java()
        self.dir = Path(work_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.python = Path(python)
        self.cores, self.memory, self.ready_timeout = cores, memory, ready_timeout
        self.port, self.web_port, self.worker_web_port = free_port(), free_port(), free_port()
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def daemon_env(self, worker: bool = False) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
        env.update(SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m",
                   # The master's REST submission server listens on a fixed port (6066) by default: two test
                   # sessions on one machine would collide on it, and the tests submit through the RPC port.
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        if worker:  # the nodes' Python: what a bare "python3" names on an executor
            env["PATH"] = f"{self.python.parent}{os.pathsep}{env.get('PATH', '')}"
        # The tests' JVM options (tests/conftest.py's SPARK_SUBMIT_OPTS: C1 only, serial GC, the class-data
        # archive of the wheel's jars), as the tests' drivers have them: for the master and the worker, and the
        # executor JVMs the worker starts (they inherit its environment). An executor lives for one short
        # application, and C2 compiling in it starved CI's two cores; the master started without them cost
        # 15 CPU-seconds to become ready, against 4.5-5 with them (2026-11-29, same machine, same minutes).
        opts = os.environ.get("SPARK_SUBMIT_OPTS", "").strip()
        if opts:
            env["JAVA_TOOL_OPTIONS"] = opts
        return env

    def driver_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a driver process (``trib`` or a script) that runs on this cluster.

        Its ``PYSPARK_PYTHON`` is what the executors run (the module docstring);
        its own interpreter is the caller's (the test venv, with tributary_read).
        """
        env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
        env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=str(self.python), TRIB_SPARK_MASTER=self.master)
        env.update(extra or {})
        return env

    def _spawn(self, name: str, *args: str, worker: bool = False) -> None:
        log = self.dir / f"{name}.log"
        with open(log, "ab") as out:
            self.procs[name] = subprocess.Popen([str(self.home / "bin" / "spark-class"), *args],
                                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                                env=self.daemon_env(worker), cwd=self.dir, start_new_session=True)

    def start(self) -> Cluster:
        self._spawn("master", MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                    "--webui-port", str(self.web_port))
        try:
            self._wait(lambda s: s is not None, "the master's web UI")
        except ClusterError as e:
            self.stop()
            raise ClusterUnavailable(str(e)) from None  # the wheel cannot run a master here
        work = self.dir / "work"
        work.mkdir(exist_ok=True)
        self._spawn("worker", WORKER_CLASS, self.master, "--host", "127.0.0.1", "--cores", str(self.cores),
                    "--memory", self.memory, "--webui-port", str(self.worker_web_port), "--work-dir", str(work),
                    worker=True)
        try:
            self._wait(lambda s: s is not None and self.alive_workers(s) >= 1, "a registered worker")
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict | None:
        """The master's ``/json`` (workers, applications), or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.web_url}/json", timeout=5) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    @staticmethod
    def alive_workers(state: dict) -> int:
        if "aliveworkers" in state:
            return int(state["aliveworkers"])
        return sum(1 for w in state.get("workers", ()) if w.get("state") == "ALIVE")

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise ClusterError(f"the {name} exited {p.returncode} before {what}:\n"
                                       f"{_tail(self.dir / f'{name}.log')}")
            if ready(self.state()):
                return
            time.sleep(0.3)
        logs = "\n".join(f"--- {n}:\n{_tail(self.dir / f'{n}.log')}" for n in self.procs)
        raise ClusterError(f"no {what} within {self.ready_timeout:.0f} s:\n{logs}")

    def applications(self) -> list[dict]:
        """Running applications (a finished or killed driver's app leaves this list)."""
        state = self.state() or {}
        return list(state.get("activeapps", ()))

    def app_dirs(self) -> set[Path]:
        """The worker's directory of each application it ran executors for (``work/app-…``)."""
        return set((self.dir / "work").glob("app-*"))

    @staticmethod
    def fetched(app_dir: Path) -> list[str]:
        """Files an application's executors fetched (addFile, addPyFile, --py-files), besides their logs."""
        return sorted(f.name for d in app_dir.iterdir() if d.is_dir() for f in d.iterdir()
                      if f.name not in ("stdout", "stderr"))

    def executors(self) -> list[int]:
        """Live pids the worker started: executor JVMs and their Python workers (the worker's group but itself)."""
        p = self.procs.get("worker")
        return [pid for pid in self.group("worker") if p is None or pid != p.pid]

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until no application holds the worker and its executors are gone.

        A driver killed with SIGKILL leaves its application to the master, which
        removes it when the driver's connection drops; the worker then kills the
        executor. A process still there after ``timeout`` is a leak: ClusterError.
        """
        deadline = time.monotonic() + timeout
        while self.applications() or self.executors():
            if time.monotonic() > deadline:
                raise ClusterError(f"after {timeout:.0f} s, applications {[a.get('name') for a in self.applications()]}"
                                   f" and executor processes {self.executors()} are still there")
            time.sleep(0.3)

    def group(self, name: str) -> list[int]:
        """Live pids of a daemon's process group (the worker's holds its executors and their Python)."""
        p = self.procs.get(name)
        return _group(p.pid) if p is not None else []

    def stop(self, grace: float = 15.0) -> list[int]:
        """SIGTERM both process groups, SIGKILL what is left after ``grace``; returns the pids that needed it."""
        killed: list[int] = []
        for name in ("worker", "master"):
            p = self.procs.get(name)
            if p is None:
                continue
            try:
                os.killpg(p.pid, signal.SIGTERM)  # our own daemon's group only
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace
            while _group(p.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            left = _group(p.pid)
            if left:
                killed += left
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()
        return killed




if __name__ == "__main__":
    import tempfile

    py = executor_python()
    check_executor_python(py)
    c = Cluster(tempfile.mkdtemp(prefix="trib-cluster-"), py).start()
    print(f"master {c.master}, web UI {c.web_url}, executors' Python {py}, logs in {c.dir}", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
