"""trib's zip for the executors (tributary_read.spark.ship): its contents, its cache, and who adds it.

No JVM: a SparkContext is a stand-in that records ``addPyFile``. That the zip
really runs on executors without trib is tests/test_spark_cluster.py's part.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tributary_read.spark import ship
from tributary_read.spark.ship import build_zip, package_files, ship_to_executors

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent


class FakeContext:
    """What ship_to_executors uses of a SparkContext."""

    def __init__(self, master: str, includes=()):
        self.master = master
        self._python_includes = list(includes)
        self.added: list[str] = []

    def addPyFile(self, path: str) -> None:
        self.added.append(path)
        self._python_includes.append(os.path.basename(path))


class FakeSession:
    def __init__(self, sc):
        self.sparkContext = sc


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """trib's cache in a temp dir, and no zip remembered from earlier tests."""
    monkeypatch.setenv("TRIB_CACHE_DIR", str(tmp_path / "cache"))
    ship.package_zip.cache_clear()
    yield tmp_path / "cache" / "pyfiles"
    ship.package_zip.cache_clear()


def test_the_zip_holds_every_module_the_wheel_installs(tmp_path):
    from test_architecture import MODULES

    want = {name.replace(".", "/") + ("/__init__.py" if path.name == "__init__.py" else ".py")
            for name, path in MODULES.items()}
    with zipfile.ZipFile(build_zip(tmp_path)) as z:
        names = set(z.namelist())
    assert {n for n in names if n.endswith(".py")} == want
    assert "tributary_read/py.typed" in names and "tributary_read/cli/main.py" in names
    assert not any("__pycache__" in n or n.endswith((".pyc", ".java", ".sql")) for n in names)


def test_python_imports_trib_from_the_zip(tmp_path):
    """What an executor does: the zip ahead on sys.path, then the modules its tasks use."""
    path = build_zip(tmp_path)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import tributary_read, tributary_read.spark.write, "
            "tributary_read.spark.listing, tributary_read.spark.valid_length; "
            "print(tributary_read.__file__, tributary_read.__version__)")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, cwd=tmp_path,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    where, version = out.stdout.split()
    assert where == os.path.join(path, "tributary_read", "__init__.py")
    import tributary_read

    assert version == tributary_read.__version__ and f"-{version}-" in os.path.basename(path)


def test_a_trib_running_from_its_zip_ships_that_zip(tmp_path):
    """A driver that ``spark-submit --py-files`` started imports trib from the zip: that zip is the one to ship."""
    path = build_zip(tmp_path)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tributary_read.spark.ship import package_zip; "
            "print(package_zip())")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, cwd=tmp_path,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == path and os.listdir(tmp_path) == [os.path.basename(path)]


def test_built_once_atomically_and_named_by_version_and_content(tmp_path, monkeypatch):
    first = build_zip(tmp_path)
    data, mtime = Path(first).read_bytes(), os.stat(first).st_mtime_ns
    assert build_zip(tmp_path) == first and os.stat(first).st_mtime_ns == mtime  # found, not rebuilt
    assert os.listdir(tmp_path) == [os.path.basename(first)]  # no temporary file left
    os.unlink(first)
    assert Path(build_zip(tmp_path)).read_bytes() == data  # the same code, the same bytes

    files = package_files()
    extra = tmp_path / "patched.py"
    extra.write_text("x = 1\n")
    monkeypatch.setattr(ship, "package_files", lambda: [*files, ("tributary_read/patched.py", extra)])
    patched = build_zip(tmp_path)
    assert patched != first and os.path.basename(patched).startswith(os.path.basename(first).rsplit("-", 1)[0])


def test_an_unwritable_cache_falls_back_to_the_temp_dir(tmp_path, monkeypatch):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory should be")
    monkeypatch.setenv("TRIB_CACHE_DIR", str(blocked))
    monkeypatch.setattr(ship.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    path = build_zip()
    assert path.startswith(str(tmp_path / "tmp")) and zipfile.is_zipfile(path)


def test_added_once_per_context_and_only_for_cluster_masters(cache):
    for master in ("local", "local[2]", "local[*]", "local[2,2]", "local-cluster[2,1,1024]"):
        sc = FakeContext(master)
        assert ship_to_executors(FakeSession(sc)) is None and sc.added == []
    sc = FakeContext("spark://127.0.0.1:7077")
    path = ship_to_executors(FakeSession(sc))
    assert path is not None and sc.added == [path] and Path(path).parent == cache
    assert ship_to_executors(FakeSession(sc)) == path and ship_to_executors(sc) == path
    assert sc.added == [path]  # idempotent per SparkContext
    other = FakeContext("yarn")
    assert ship_to_executors(other) == path and other.added == [path]  # a new context gets it again


def test_a_zip_spark_submit_already_added_is_not_added_again(cache):
    path = ship.package_zip()
    sc = FakeContext("k8s://https://api:6443", includes=[os.path.basename(path)])
    assert ship_to_executors(sc) == path and sc.added == []


def test_a_session_without_a_spark_context_is_left_alone():
    class Connect:
        @property
        def sparkContext(self):
            raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext is not supported in Spark Connect")

    assert ship_to_executors(Connect()) is None


class Stop(Exception):
    """Raised by the stand-in right after the zip was added: the entry point got that far."""


class StopContext(FakeContext):
    def addPyFile(self, path: str) -> None:
        super().addPyFile(path)
        raise Stop


def test_every_entry_point_handed_a_session_ships_trib_first(cache, tmp_path):
    """read_files, write and the executor listing add the zip before any Spark job (the builder: the cluster tests)."""
    pytest.importorskip("pyspark")
    from tributary_read.io.storage import open_storage
    from tributary_read.read.fileset import FileSet
    from tributary_read.spark.listing import SparkLister
    from tributary_read.spark.read import read_files
    from tributary_read.spark.write import write

    def df_of(session):
        return type("DF", (), {"sparkSession": session})()

    calls = {
        "read_files": lambda s: read_files(s, FileSet(mode="mtime", files=())),
        "write": lambda s: write(df_of(s), str(tmp_path / "nowhere"), time_column="ts"),
        "listing": lambda s: SparkLister(s, {}).list_many(open_storage(str(tmp_path)), ["a"], None),
    }
    for name, call in calls.items():
        sc = StopContext("spark://127.0.0.1:7077")
        with pytest.raises(Stop):
            call(FakeSession(sc))
        assert len(sc.added) == 1, name


def _bare_python3(tmp_path) -> Path:
    """A ``python3`` that has no trib (the system one), as PATH would find it before a venv's."""
    system = Path("/usr/bin/python3")
    if not system.exists() or subprocess.run([str(system), "-c", "import tributary_read"], capture_output=True,
                                             cwd=tmp_path).returncode == 0:
        pytest.skip("needs a /usr/bin/python3 without trib")
    bare = tmp_path / "bin" / "python3"
    bare.parent.mkdir()
    bare.symlink_to(system)
    return bare


def test_a_local_session_whose_workers_cannot_import_trib_is_refused_by_every_entry_point(tmp_path, monkeypatch):
    """A local master's workers run ``sc.pythonExec``: a Python without trib is refused before any Spark job,
    with one line naming the fix (the real session and trib_sink: tests/test_spark_local_python.py)."""
    pytest.importorskip("pyspark")
    from tributary_read.errors import MissingDependencyError
    from tributary_read.io.storage import open_storage
    from tributary_read.read.fileset import FileSet, ResolvedFile
    from tributary_read.spark.listing import SparkLister
    from tributary_read.spark.read import read_files
    from tributary_read.spark.rewrite import rewrite_on_executors
    from tributary_read.spark.write import write
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout

    bare = _bare_python3(tmp_path)
    monkeypatch.setenv("PATH", f"{bare.parent}{os.pathsep}{os.environ['PATH']}")
    table = Table.create(str(tmp_path / "t"), TableConfig(Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")))
    grown = FileSet(mode="mtime", files=(ResolvedFile("a/x.log", 10, {}, valid_length=5),))
    calls = {
        "read_files": lambda s: read_files(s, grown),  # a valid length: trib's code reads it on the executors
        "write": lambda s: write(type("DF", (), {"sparkSession": s})(), table, time_column="ts"),
        "listing": lambda s: SparkLister(s, {}).list_many(open_storage(str(tmp_path)), ["a"], None),
        "rewrite": lambda s: rewrite_on_executors(s, table, [(0, [], (0, 0))], writer_id="w"),
    }
    for name, call in calls.items():
        for exe in ("python3", str(bare)):  # found on PATH, or named
            sc = StopContext("local[2]")
            sc.pythonExec = exe
            with pytest.raises(MissingDependencyError) as e:
                call(FakeSession(sc))
            line = str(e.value)
            # the cwd (this repository) puts trib on a worker's path, not pyarrow
            assert "\n" not in line and "cannot import pyarrow" in line, (name, line)
            assert f"PYSPARK_PYTHON={sys.executable}" in line, (name, line)
    other = tmp_path / "bin" / "python-other"  # a wrapper that says it is another minor version
    other.write_text("#!/bin/sh\necho starting\necho trib-probe 3.99\n")
    other.chmod(0o755)
    for exe, said in ((str(other), "is Python 3.99, this driver's %d.%d" % sys.version_info[:2]),
                      ("no-such-python3", "cannot be started")):
        sc = StopContext("local[2]")
        sc.pythonExec = exe
        with pytest.raises(MissingDependencyError, match=said):
            ship_to_executors(FakeSession(sc))
    ok = FakeContext("local[2]")
    ok.pythonExec = sys.executable  # trib's own sessions: this interpreter, no process started
    monkeypatch.setattr(subprocess, "run", None)
    assert ship_to_executors(FakeSession(ok)) is None and not ok.added
