"""A real Airflow for the provider's tests: its own venv, SQLite, ``dags test``.

Airflow's dependency pins differ from the project's, so it lives in a venv of its own: Airflow itself in
one made once per machine (under ``~/.cache``, as pip's cache is; a fresh clone finds it), under
``.airflow-venv``, this clone's layer with the project installed editable (the provider's entry point
registers, and its code is this checkout's). The
operator runs the project's ``trib`` (the test venv's, with pyspark), as a worker with its own venv
would. ``airflow dags test`` runs a DAG run in one process, triggers inline, retries after
``retry_delay``; its outcome is read from the metadata database (sqlite3).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
from pathlib import Path

from conftest import REPO

#: The per-clone venv the tests run ``airflow`` from: a thin layer over :data:`BASE` with this checkout's project in it.
VENV = REPO / ".airflow-venv"
REQUIREMENT = "apache-airflow>=3.2,<4"
AIRFLOW = VENV / "bin" / "airflow"
#: the project's trib: the test venv's (pyspark and the extras the jobs use)
TRIB_BIN = str(Path(sys.executable).parent / "trib")
_PY = getattr(sys, "_base_executable", sys.executable)


def _base_dir() -> Path:
    """Airflow itself, shared by every clone on the machine (as pip's cache is): a fresh clone, CI's
    included, finds it made. Keyed by the requirement and the interpreter; ``TRIB_TEST_AIRFLOW_CACHE``
    moves it (default ``$XDG_CACHE_HOME`` or ``~/.cache``, under ``tributary-read/``)."""
    root = os.environ.get("TRIB_TEST_AIRFLOW_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tributary-read")
    key = hashlib.sha256(f"{REQUIREMENT}\n{_PY}\n{sys.version}".encode()).hexdigest()[:12]
    return Path(root) / f"airflow-venv-{key}"


BASE = _base_dir()


_lock = threading.Lock()
_early: dict = {}
#: The migrated metadata database this session copies (:meth:`Airflow._migrate`).
_migrated: dict = {}
_migrate_lock = threading.Lock()


def _site(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _sh(*argv: str) -> None:
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {p.returncode}:\n{p.stderr[-4000:]}")


def _ensure_base() -> Path:
    """Airflow in a venv of its own, made once per machine (a minute of CPU: pip unpacking and compiling
    wheels). Compiled: the suite runs with PYTHONDONTWRITEBYTECODE as CI does, so an uncompiled Airflow
    compiled every module it imports again in each of its ~15 processes (5-6 CPU-seconds each)."""
    BASE.parent.mkdir(parents=True, exist_ok=True)
    with open(BASE.parent / f"{BASE.name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # other clones, pytest-xdist workers and suites on this machine
        stamp = BASE / ".installed"
        if stamp.exists() and stamp.read_text() == REQUIREMENT:
            return BASE
        _sh(_PY, "-m", "venv", "--clear", str(BASE))
        _sh(str(BASE / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", REQUIREMENT)
        stamp.write_text(REQUIREMENT)
        return BASE


def _project():
    """The test venv's installed tributary-read (editable by ``make dev``)."""
    from importlib.metadata import distributions

    here = [d for d in distributions(path=[sysconfig.get_paths()["purelib"]])
            if (d.metadata["Name"] or "").lower().replace("_", "-") == "tributary-read"]
    if len(here) != 1 or not here[0].files:
        raise AssertionError("the test venv has no installed tributary-read to put in Airflow's venv: run make dev")
    return here[0]


def _install_project(site: Path) -> None:
    """This checkout's project in the layer, as the test venv has it installed: the files of its RECORD
    under site-packages (the dist-info, whose entry point registers the provider, and the editable finder
    that maps the packages to this tree). No pip, no build: a copy of an install."""
    dist = _project()
    for f in dist.files or ():
        if str(f).startswith("..") or "__pycache__" in f.parts:  # scripts (bin/trib) and compiled files
            continue
        dest = site / str(f)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(dist.locate_file(f), dest)


def _want() -> str:
    """The layer's stamp: a new base, another tree or test venv, or a reinstalled project makes it again."""
    record = hashlib.sha256((_project().read_text("RECORD") or "").encode()).hexdigest()[:16]
    return f"{BASE}\n{REPO}\n{sys.executable}\n{record}\n"


def ensure_venv() -> Path:
    """The Airflow venv of this checkout: the machine's shared Airflow (:func:`_ensure_base`) under a thin
    venv of this clone's, which holds the project (its provider entry point, this tree's code) and the
    ``airflow`` command. Made in well under a second once the base exists."""
    early = _early.get("thread")
    if early is not None and early is not threading.current_thread():
        early.join()
    with _lock, open(REPO / ".airflow-venv.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # and across processes: pytest-xdist workers, two suites in one tree
        stamp = VENV / ".installed"
        if stamp.exists() and stamp.read_text() == _want():
            return VENV
        base = _ensure_base()
        _sh(_PY, "-m", "venv", "--clear", "--without-pip", str(VENV))
        site = _site(VENV)
        # A .pth line that imports runs at start-up: the base's site-packages, its own .pth files included.
        (site / "_trib_airflow_base.pth").write_text(f"import site; site.addsitedir({str(_site(base))!r})\n")
        _install_project(site)
        AIRFLOW.write_text(f"#!{VENV / 'bin' / 'python'}\nimport sys\nfrom airflow.__main__ import main\n"
                           "sys.exit(main())\n")
        AIRFLOW.chmod(0o755)
        stamp.write_text(_want())
        return VENV


def build_early() -> None:
    """Start making the venv in the background at collection, so the Airflow tests (late in the run) find
    it ready; a failure is raised again by the fixture's :func:`ensure_venv`."""
    stamp = VENV / ".installed"
    if "thread" in _early or (stamp.exists() and stamp.read_text() == _want()):
        return

    def build():
        try:
            ensure_venv()
        except BaseException:  # noqa: BLE001 - the fixture's own call builds again and reports it
            pass

    t = _early["thread"] = threading.Thread(target=build, name="airflow-venv", daemon=True)
    t.start()


def _template() -> Path:
    """Where the base keeps its freshly migrated database: named by the packages the base holds (their
    dist-info directories: Airflow's version and its dependencies'), so that another Airflow never starts
    from an older schema. Inside the base, so a remade base (``venv --clear``) drops it."""
    names = sorted(p.name for p in _site(BASE).glob("*.dist-info"))
    key = hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]
    return BASE / f"migrated-{key}.db"


class Airflow:
    """One AIRFLOW_HOME (SQLite, migrated once) with a DAG folder; runs ``airflow`` commands in it."""

    def __init__(self, home: Path):
        ensure_venv()
        self.home = home
        self.dags = home / "dags"
        self.dags.mkdir(parents=True, exist_ok=True)
        self.db = home / "airflow.db"
        self._migrate()

    def _migrate(self) -> None:
        """A copy of a freshly migrated database: ``airflow db migrate`` once per Airflow install on the machine.

        The migrated SQLite file holds the schema and Airflow's own rows, nothing of its home (the DAG
        folder and paths come from the environment), and a migrate costs an Airflow process of 7-8
        CPU-seconds (12-30 s wall under load). The first home that finds none migrates and keeps a copy,
        taken before any command has used the database, in the shared base (:func:`_template`): the next
        homes and sessions, CI's fresh clones included, start from it; a new Airflow (another base, or
        another set of packages in it) migrates again.
        """
        with _migrate_lock:
            template = _migrated.get("db") or _template()
            if not template.exists():
                self.run("db", "migrate", timeout=300)
                tmp = template.with_name(f"{template.name}.tmp-{os.getpid()}")
                shutil.copyfile(self.db, tmp)
                os.replace(tmp, template)  # atomic: another worker's copy is the same database
            else:
                shutil.copyfile(template, self.db)
            _migrated["db"] = template

    def env(self, extra: dict | None = None) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TRIB_CRASH"))}
        env.update({
            "AIRFLOW_HOME": str(self.home), "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "PATH": f"{Path(TRIB_BIN).parent}{os.pathsep}{env.get('PATH', '')}",
            "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
        })
        for var in ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "PYTHONPATH", "VIRTUAL_ENV"):
            env.pop(var, None)
        env.update(extra or {})
        return env

    def run(self, *args: str, timeout: float = 600, env: dict | None = None, check: bool = True
            ) -> subprocess.CompletedProcess:
        p = subprocess.run([str(AIRFLOW), *args], capture_output=True, text=True, env=self.env(env),
                           cwd=self.home, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)} exited {p.returncode}:\n{p.stdout[-4000:]}\n"
                                 f"{p.stderr[-8000:]}")
        return p

    def start(self, *args: str, env: dict | None = None, log: Path) -> subprocess.Popen:
        with open(log, "w") as out:
            return subprocess.Popen([str(AIRFLOW), *args], stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env(env), cwd=self.home, start_new_session=True)

    def dag(self, name: str, text: str) -> None:
        (self.dags / f"{name}.py").write_text(textwrap.dedent(text))

    def test(self, dag_id: str, date: str, **kw) -> subprocess.CompletedProcess:
        return self.run("dags", "test", dag_id, date, **kw)

    # -- the metadata database --------------------------------------------------------
    def query(self, sql: str, *params) -> list[tuple]:
        with sqlite3.connect(self.db, timeout=30) as c:
            return c.execute(sql, params).fetchall()

    def tasks(self, dag_id: str, run_id_like: str = "%") -> dict[str, tuple[str, int]]:
        """task_id -> (state, try_number) of the newest run of ``dag_id`` matching ``run_id_like``."""
        rows = self.query("SELECT ti.task_id, ti.state, ti.try_number FROM task_instance ti WHERE ti.dag_id = ? "
                          "AND ti.run_id = (SELECT run_id FROM dag_run WHERE dag_id = ? AND run_id LIKE ? "
                          "ORDER BY id DESC LIMIT 1)", dag_id, dag_id, run_id_like)
        return {t: (s, n) for t, s, n in rows}

    def history(self, dag_id: str, task_id: str) -> list[tuple[int, str]]:
        """(try_number, state) of the task's earlier tries in the newest run of ``dag_id`` (Airflow keeps
        them in task_instance_history)."""
        return self.query("SELECT try_number, state FROM task_instance_history WHERE dag_id = ? AND task_id = ? "
                          "AND run_id = (SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1) "
                          "ORDER BY try_number", dag_id, task_id, dag_id)

    def xcom(self, dag_id: str, task_id: str, key: str = "return_value"):
        rows = self.query("SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = ? ORDER BY dag_run_id DESC "
                          "LIMIT 1", dag_id, task_id, key)
        if not rows:
            return None
        v = rows[0][0]
        return json.loads(v) if isinstance(v, (str, bytes)) else v

    def wait_for(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = predicate()
            if v:
                return v
            time.sleep(0.5)
        raise AssertionError(f"no {what} after {timeout} s")
