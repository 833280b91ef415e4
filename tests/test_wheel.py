"""The wheel: one top-level package, every module and data file in it, and ``trib`` working from it.

The wheel is built offline (``--no-build-isolation``, setuptools from the dev
extras) from a copy of the working tree, so the build's ``build/`` and
``*.egg-info`` never land in the checkout. It is installed with ``pip --target``
and run by an interpreter that sees the test venv's dependencies but not its
editable install: the editable finder would otherwise quietly serve any module
the wheel lacks from the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
from conftest import REPO
from helpers import LAYOUT, PARTITION, make_source

pytestmark = pytest.mark.integration

#: repository folder -> where the wheel installs it (pyproject's package-dir mapping)
MAPPED = {"tributary_read": "tributary_read", "cli": "tributary_read/cli", "sql": "tributary_read/sql",
          "hive_udfs": "tributary_read/hive_udfs"}
#: the package data pyproject lists: (repository folder, glob)
DATA = [("sql/metastore", "*.sql"), ("sql/warehouse", "*.sql"), ("hive_udfs", "*.md"), ("hive_udfs", "**/*.java"),
        ("tributary_read", "py.typed")]
_SKIP = {".venv", ".git", "build", "__pycache__", ".trib", ".pytest_cache", ".mypy_cache"}


def _copy_tree(dst: Path) -> None:
    def ignore(d, names):
        rel = Path(d).relative_to(REPO)
        return [n for n in names if n in _SKIP or n.endswith(".egg-info") or (rel == Path("benchmarks") and n == "out")]

    shutil.copytree(REPO, dst, ignore=ignore)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    _copy_tree(tmp / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(tmp / "src"), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp / "dist")], check=True, capture_output=True, text=True)
    (whl,) = (tmp / "dist").glob("tributary_read-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, Path]:
    """(a clean interpreter, the --target directory holding the installed wheel)."""
    tmp = tmp_path_factory.mktemp("installed")
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, text=True)
    env_dir = tmp / "py"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    # The venv's dependencies (click, pyarrow) as a plain path: its .pth files, the
    # editable install's finder among them, are not run from a path added this way.
    purelib = Path(sysconfig.get_paths(vars={"base": str(env_dir), "platbase": str(env_dir)})["purelib"])
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env_dir / "bin" / "python", site


def _run(installed, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    python, site = installed
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TRIB_"))}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([str(python), *args], capture_output=True, text=True, env=env, cwd=cwd)
    assert proc.returncode == 0, (args, proc.stderr)
    return proc


def test_wheel_holds_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert len(dist_info) == 1 and top - dist_info == {"tributary_read"}, sorted(top)
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[console_scripts]\ntrib = tributary_read.cli.main:main\n" in text
    # Airflow finds the provider through this entry point (`airflow providers list`).
    assert "[apache_airflow_provider]\nprovider_info = tributary_read.airflow:get_provider_info\n" in text


def test_wheel_holds_every_module_and_data_file(wheel):
    """A package or data file the pyproject lists forgot is missing here, not only in production."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "tributary_read/cli/main.py" in names
    assert "tributary_read/py.typed" in names  # PEP 561: without it users' type checkers ignore the annotations
    expected = set()
    for folder, target in MAPPED.items():
        for path in (REPO / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                expected.add(f"{target}/{path.relative_to(REPO / folder).as_posix()}")
    for folder, pattern in DATA:
        target = MAPPED.get(folder.split("/")[0], "tributary_read") + folder[len(folder.split("/")[0]):]
        expected |= {f"{target}/{p.relative_to(REPO / folder).as_posix()}" for p in (REPO / folder).glob(pattern)}
    assert any(n.endswith(".sql") for n in expected) and any(n.endswith(".java") for n in expected)
    # The dev Hive pair's launcher: compiled from the wheel at `trib hive start`, so it must ship there.
    assert "tributary_read/hive_udfs/java/trib/hive/LoopbackMetaStore.java" in names
    assert {"tributary_read/sql/metastore/create_table.sql", "tributary_read/sql/warehouse/hourly_trib.sql"} <= names
    assert sorted(expected - names) == []


def test_trib_runs_from_the_installed_wheel_outside_the_repository(wheel, installed, tmp_path):
    python, site = installed
    work = tmp_path / "elsewhere"
    work.mkdir()
    trib = [str(site / "bin" / "trib")]  # the console script pip wrote, run by the clean interpreter
    version = _run(installed, *trib, "--version", cwd=work)
    assert version.stdout == f"trib, version {wheel.name.split('-')[1]}\n"  # the package's version is the wheel's
    assert _run(installed, "-m", "tributary_read.cli.main", "--version", cwd=work).stdout == version.stdout

    root = work / "t"
    _run(installed, *trib, "table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, cwd=work)
    src = make_source(work / "s.jsonl", 50, hours=2)
    _run(installed, *trib, "ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts",
         cwd=work)
    files = json.loads(_run(installed, *trib, "files", str(root), "--all", "--json", cwd=work).stdout)
    assert files["count"] == len(files["files"]) > 0

    # Every tributary_read module a run can load comes from the wheel, none from the checkout.
    probe = textwrap.dedent("""
        import importlib, importlib.resources, json, pkgutil, sys, tributary_read
        for m in pkgutil.walk_packages(tributary_read.__path__, "tributary_read."):
            try:
                importlib.import_module(m.name)
            except ModuleNotFoundError as e:  # the provider's operator, sensor, trigger: Airflow's side only
                if not (m.name.startswith("tributary_read.airflow.") and e.name.split(".")[0] == "airflow"):
                    raise
        from tributary_read.hive.sql import METASTORE_DIR, WAREHOUSE_DIR
        sql = [p.name for d in (METASTORE_DIR, WAREHOUSE_DIR) for p in d.iterdir() if p.name.endswith(".sql")]
        files = {n: getattr(m, "__file__", None) for n, m in sys.modules.items() if n.split(".")[0] == "tributary_read"}
        print(json.dumps({"files": files, "sql": sql}))
    """)
    loaded = json.loads(_run(installed, "-c", probe, cwd=work).stdout)
    assert loaded["sql"], "the SQL templates are not readable from the installed package"
    outside = {n: f for n, f in loaded["files"].items() if f is not None and not f.startswith(str(site) + os.sep)}
    assert outside == {}
    assert loaded["files"]["tributary_read"] == str(site / "tributary_read" / "__init__.py")
    assert "tributary_read.cli.main" in loaded["files"]
