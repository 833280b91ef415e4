"""trib ships its own code to the executors of a cluster session: nothing to install on the nodes but pyspark and pyarrow.

Spark's write tasks, the executor listing and valid-length reads run trib's
Python on the executors (the task objects are pickled by reference, so an
executor imports ``tributary_read``). On a local master the executors are Python
workers on this machine, checked below. On a cluster (``spark://``, ``yarn``,
``k8s://``) they are the nodes' Python, which usually has not: every task would
fail with ``ModuleNotFoundError: No module named 'tributary_read'``.

trib is pure Python and its executor-side dependency (pyarrow) is one Spark's
Arrow path already needs, so :func:`ship_to_executors` adds a zip of the
``tributary_read`` package to the session (``SparkContext.addPyFile``): Spark
copies it to each executor once and puts it on the Python workers' path. Every
way trib gets a session goes through it: the session builder
(:mod:`tributary_read.spark.session`: ``trib etl run``, ``trib sql``, the demo,
the catalog backend) and the entry points that are handed a session trib did not
build (:func:`~tributary_read.spark.read.read_files`,
:func:`~tributary_read.spark.write.write`, the executor listing). It is
idempotent per SparkContext. ``trib etl submit`` hands the same zip to
``spark-submit --py-files`` (:func:`package_zip`).

A local master's executors run this machine's Python workers: not always this
interpreter. PySpark starts them with ``$PYSPARK_PYTHON`` as the SparkContext
found it, else ``python3`` from PATH. trib's own sessions set it to this
interpreter (:mod:`tributary_read.spark.session`); a session the user built,
in a venv run by its absolute path (cron, Airflow), gets the system
``python3``, where every trib task fails with ``ModuleNotFoundError``. So on a
local master :func:`ship_to_executors` checks that Python once per
SparkContext (a process that imports trib and pyarrow, only when it is not
this interpreter) and refuses before any task runs, with one line naming the fix
(:func:`check_local_workers`). Local workers are this machine's processes, so
asking them costs no Spark job and answers for all of them.

On a cluster the zip is always added, never probed first. Asking the executors whether they already
import the same version would cost a Spark job (a Python worker start) and
answer for the executor that ran it only, not for nodes that join later
(dynamic allocation, a replaced node); and the same version string is not the
same code (a development install, a patched release), while the driver and
its executors must agree on the code of the tasks it pickles. Shipping costs
a zip of a few hundred KB, uploaded once per application; Spark puts it ahead
of the nodes' site-packages, so the executors run exactly the driver's trib
even where another version is installed.

The zip holds the package's ``.py`` files as the wheel installs them
(a development install's folders mapped under ``tributary_read``, see
pyproject's ``package-dir``): executors run Python only, no SQL or Java
sources. It is named by trib's version and a hash of its contents, built once
(written to a temporary name, then renamed: complete or absent) and cached
under trib's cache directory (``$TRIB_CACHE_DIR``, else
``~/.cache/tributary-read``), ``pyfiles/``. Sessions without a SparkContext
(Spark Connect) are left as they are.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import weakref
import zipfile
import zipimport
from pathlib import Path

PACKAGE = "tributary_read"
#: trib's subpackages whose folders sit outside ``tributary_read/`` in the repository (pyproject's
#: ``package-dir``); a wheel installs them inside it. A development install finds them by name.
MAPPED_SUBPACKAGES = ("cli", "sql", "hive_udfs")
_VERSION = re.compile(rb"""^__version__\s*=\s*["']([^"']+)["']""", re.M)
#: Every zip entry's timestamp: the same code gives the same bytes.
_EPOCH = (1980, 1, 1, 0, 0, 0)

_LOG = logging.getLogger(__name__)
#: SparkContext -> the zip it was given (idempotence; a stopped context's entry goes with it).
_SHIPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: SparkContext -> the workers' Python found able to run trib's tasks (a local master's).
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def is_local(master: str) -> bool:
    """A master whose executors run in this process's JVM, with this interpreter's Python (trib is there)."""
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster[")


def ship_to_executors(spark, *, tasks: bool = True) -> str | None:
    """Make trib importable where ``spark`` runs trib's tasks, before any runs; returns the zip's path, or None.

    A cluster master: trib's zip is added to the SparkContext (idempotent per SparkContext;
    a zip of the same name that ``spark-submit --py-files`` already added counts). A local
    master: its Python workers must import trib (:func:`check_local_workers`), else
    MissingDependencyError (exit 10) names the fix; ``tasks=False`` (a call that may run no
    trib task, such as a read of whole files) skips that check. ``spark``: a SparkSession or
    a SparkContext.
    """
    try:
        sc = getattr(spark, "sparkContext", spark)
        master = sc.master
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext: the session takes the zip
        return _ship_to_session(spark)
    if is_local(master):
        if tasks:
            check_local_workers(sc)
        return None
    done = _SHIPPED.get(sc)
    if done is not None:
        return done
    path = package_zip()
    if os.path.basename(path) not in (getattr(sc, "_python_includes", None) or ()):
        _LOG.info("shipping %s to the executors of %s", path, master)
        sc.addPyFile(path)
    _SHIPPED[sc] = path
    return path


#: The Spark conf in which a server that trib started (``trib spark up``) names the code its workers run: the
#: name of this zip (trib's version and a hash of its files) when it started.
CODE_CONF = "spark.trib.code"


def _ship_to_session(spark) -> str | None:
    """A Spark Connect session: trib's zip as a Python artifact of the session (its tasks import it first).

    The server's workers may run another trib, or none (a cluster's server): as on a cluster, the
    zip is added, once per session, unless the server says its workers run this interpreter with this
    very code (:data:`CODE_CONF`, set by ``trib spark up``): a session's artifacts keep its tasks
    from reusing the server's warm Python workers, seconds per run. Not a Connect session: None.
    """
    add = getattr(spark, "addArtifacts", None)
    key = getattr(spark, "session_id", None)
    if add is None or key is None:
        return None
    done = _SESSIONS.get(key)
    if done is None:
        done = package_zip()
        try:  # one round trip for both keys (a key the server does not have fails it: ship)
            code, python = spark.client.get_configs(CODE_CONF, "spark.pyspark.python")
            same = code == os.path.basename(done) and python == sys.executable
        except Exception:  # noqa: BLE001 - a server that will not say: ship
            same = False
        if not same:
            _LOG.info("adding %s to the Spark Connect session %s", done, key)
            try:
                add(done, pyfile=True)
            except Exception as e:  # noqa: BLE001 - a kept session (an earlier run of the job) has it already
                if "ARTIFACT_ALREADY_EXISTS" not in str(e):  # the zip's name is its code's hash: the same code
                    raise
        _SESSIONS[key] = done
    return done


#: Spark Connect session id -> the zip its workers import (added to it, or the server's own).
_SESSIONS: dict[str, str] = {}


def check_active_session() -> None:
    """:func:`ship_to_executors` for this process's running SparkContext, if there is one (a sink built
    before its query starts: a refusal then comes before the first batch, not inside the stopped query)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is not None:
        ship_to_executors(sc)


#: What a local worker's Python must answer: its minor version, then import what trib's tasks import.
_PROBE = "import sys; print('trib-probe %d.%d' % sys.version_info[:2], flush=True); import tributary_read, pyarrow"
_SAID = re.compile(r"^trib-probe (\d+\.\d+)$", re.M)  # a wrapper script may print lines of its own
_MISSING = re.compile(r"No module named '([\w.]+)'")


def check_local_workers(sc) -> None:
    """Refuse a local SparkContext whose Python workers cannot run trib's tasks, before any task runs.

    The workers run ``sc.pythonExec`` (``$PYSPARK_PYTHON`` when the context started, else
    ``python3`` from PATH). This interpreter passes at once; another one is asked, once per
    context and Python, to import trib with this process's environment (the JVM's, which the
    workers inherit). It must also be this minor version: PySpark refuses any other.
    """
    from tributary_read.errors import MissingDependencyError

    exe = str(getattr(sc, "pythonExec", "") or "")
    if not exe or _CHECKED.get(sc) == exe:
        return
    found = shutil.which(exe) or exe
    if os.path.abspath(found) != os.path.abspath(sys.executable):
        here = "%d.%d" % sys.version_info[:2]
        try:
            p = subprocess.run([found, "-c", _PROBE], capture_output=True, text=True, timeout=120,
                               stdin=subprocess.DEVNULL)
            said = _SAID.search(p.stdout)
            problem = (f"fails to start ({(p.stderr.strip().splitlines() or ['no output'])[-1]})" if not said
                       else f"is Python {said.group(1)}, this driver's {here}" if said.group(1) != here
                       else None if p.returncode == 0
                       else f"cannot import {_missing(p.stderr)}")
        except (OSError, subprocess.SubprocessError) as e:
            problem = f"cannot be started ({e.__class__.__name__}: {e})"
        if problem is not None:
            named = exe if found == exe else f"{exe}, found at {found}"
            raise MissingDependencyError(
                f"this local Spark session's Python workers run {named}, which {problem}: trib's Spark tasks "
                f"would fail there. Set PYSPARK_PYTHON={sys.executable} in the environment before the session "
                "is built (or build it with tributary_read.spark.spark_session())")
    _CHECKED[sc] = exe


def _missing(stderr: str) -> str:
    found = _MISSING.search(stderr)
    if found:
        return found.group(1).split(".")[0]
    return f"{PACKAGE} ({(stderr.strip().splitlines() or ['no output'])[-1]})"


@functools.lru_cache(maxsize=1)
def package_zip() -> str:
    """The path of this trib's zip (built on first use; once per process).

    A trib that runs from a zip already (a driver that ``spark-submit --py-files``
    started) ships that zip: its name is the one the SparkContext holds.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is not None and isinstance(spec.loader, zipimport.zipimporter):
        return spec.loader.archive
    return build_zip()


def build_zip(cache_dir: str | os.PathLike | None = None) -> str:
    """The zip of trib's package in ``cache_dir`` (default: trib's cache), built if it is not there yet."""
    files = package_files()
    digest = hashlib.sha256()
    version = "unknown"
    for name, path in files:
        data = path.read_bytes()
        digest.update(name.encode() + b"\0" + data + b"\0")
        if name == f"{PACKAGE}/__init__.py":  # the version of the code shipped (as setuptools reads it)
            found = _VERSION.search(data)
            version = found.group(1).decode() if found else version
    name = f"{PACKAGE}-{version}-{digest.hexdigest()[:16]}.zip"
    for directory in _cache_dirs(cache_dir):
        dest = directory / name
        if dest.is_file():
            return str(dest)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            _write_zip(dest, files)
            return str(dest)
        except OSError as e:
            if cache_dir is not None:
                raise
            _LOG.info("cannot cache trib's zip in %s (%s)", directory, e)
    raise OSError(f"cannot write {name} in any cache directory")  # pragma: no cover - the temp dir failed too


def package_files() -> list[tuple[str, Path]]:
    """(name in the zip, source file) of every ``.py`` file of the package as imported here, sorted by name."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover - we are running from it
        raise ImportError(f"{PACKAGE} is not importable as a package")
    root = Path(list(spec.submodule_search_locations)[0])
    trees = {PACKAGE: root}
    for sub in MAPPED_SUBPACKAGES:
        found = importlib.util.find_spec(f"{PACKAGE}.{sub}")  # imports no subpackage, only finds it
        if found is not None and found.submodule_search_locations:
            where = Path(list(found.submodule_search_locations)[0])
            if where.resolve() != (root / sub).resolve():
                trees[f"{PACKAGE}/{sub}"] = where
    out: dict[str, Path] = {}
    for prefix, top in trees.items():
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            rel = Path(dirpath).relative_to(top).as_posix()
            base = prefix if rel == "." else f"{prefix}/{rel}"
            for f in filenames:
                if f.endswith(".py") or f == "py.typed":
                    out.setdefault(f"{base}/{f}", Path(dirpath) / f)
    if f"{PACKAGE}/__init__.py" not in out:
        raise ImportError(f"{PACKAGE} is not a package directory at {root}: nothing to zip")
    return sorted(out.items())


def _cache_dirs(cache_dir) -> list[Path]:
    if cache_dir is not None:
        return [Path(cache_dir)]
    from tributary_read.hive_udfs.build import cache_root

    return [cache_root() / "pyfiles", Path(tempfile.gettempdir()) / f"tributary-read-{os.getuid()}" / "pyfiles"]


def _write_zip(dest: Path, files: list[tuple[str, Path]]) -> None:
    """Write to a temporary name beside ``dest``, then rename: a reader sees the whole zip or none."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as z:
            for name, path in files:
                info = zipfile.ZipInfo(name, _EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                z.writestr(info, path.read_bytes())
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
