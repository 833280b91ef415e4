"""The shape of ``tributary_read.hive``: backends opened by URI scheme, and no import cycle.

No JVM here: a backend is proven reached by the error only it gives (HiveServer2
on a port nobody listens on, Spark's own option check), through a real
subprocess wherever "what got imported" is the question.
"""

from __future__ import annotations

import ast
import graphlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_trib
from tributary_read.errors import InvalidInputError, MetastoreError
from tributary_read.hive.metastore import BACKENDS, Metastore, backend_for, open_metastore
from tributary_read.io.location import check_location, same_location

pytestmark = pytest.mark.unit

HIVE = REPO / "tributary_read" / "hive"


def _python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True,
                          text=True).stdout


def _closed_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    return s


def test_every_backend_is_a_metastore_with_from_uri():
    out = json.loads(_python(
        "import importlib, json\n"
        "from tributary_read.hive.metastore import BACKENDS, Metastore\n"
        "res = {}\n"
        "for scheme, target in BACKENDS.items():\n"
        "    mod, _, name = target.partition(':')\n"
        "    cls = getattr(importlib.import_module(mod), name)\n"
        "    res[scheme] = [cls.__name__, issubclass(cls, Metastore), callable(getattr(cls, 'from_uri', None))]\n"
        "print(json.dumps(res))"))
    assert out == {"hs2": ["Hs2Metastore", True, True], "hive2": ["Hs2Metastore", True, True],
                   "spark": ["SparkCatalogMetastore", True, True], "thrift": ["ThriftMetastore", True, True]}
    assert set(BACKENDS) == {"hs2", "hive2", "spark", "thrift"}


@pytest.mark.parametrize("scheme", ["hs2", "hive2", "HS2"])
def test_hs2_schemes_open_hiveserver2(scheme):
    with _closed_port() as s:
        port = s.getsockname()[1]
        with pytest.raises(MetastoreError, match=f"cannot reach HiveServer2 at 127.0.0.1:{port}: connection refused"):
            open_metastore(f"{scheme}://127.0.0.1:{port}/default?user=trib")


def test_spark_scheme_opens_the_spark_catalog():
    pytest.importorskip("pyspark")
    # The Spark backend checks its options before it starts any JVM.
    with pytest.raises(InvalidInputError, match=r"unknown option 'bogus' in 'spark\?bogus=1' \(spark takes conf"):
        open_metastore("spark?bogus=1")


@pytest.mark.parametrize("uri", ["mysql://x", "thrifts://h:9083", "", "sparkly", "/tmp/metastore"])
def test_unknown_scheme_is_bad_input(uri):
    with pytest.raises(InvalidInputError, match="unknown metastore .*: use hs2://HOST:PORT, thrift://HOST:PORT or spark"):
        backend_for(uri)
    with pytest.raises(InvalidInputError, match="unknown metastore"):
        open_metastore(uri)


def test_unknown_scheme_from_the_cli_is_one_line_and_exit_3(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", "{yyyy}_{MM}_{dd}/{HH}", "--partition",
             "dt={yyyy}{MM}{dd}{HH}", check=True)
    before = (root / "_tributary" / "table.json").read_bytes()
    for args in (["sync", str(root), "--hive-table", "db.t", "--metastore", "mysql://h:9083"],
                 ["configure", str(root), "--policy", "metastore", "--hive-table", "db.t", "--metastore", "mysql://x"]):
        p = run_trib("partitions", *args)
        assert p.returncode == InvalidInputError.exit_code, (args, p.stderr)
        assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "unknown metastore" in p.stderr, p.stderr
    assert (root / "_tributary" / "table.json").read_bytes() == before
    assert not (root / "_tributary" / "hive").exists()


def test_opening_one_backend_loads_only_that_backend():
    with _closed_port() as s:
        port = s.getsockname()[1]
        out = json.loads(_python(
            "import json, sys\n"
            "import tributary_read.hive, tributary_read.hive.metastore as m\n"
            "loaded = lambda: sorted(n for n in ('tributary_read.hive.hs2', 'tributary_read.spark.catalog')"
            " if n in sys.modules)\n"
            "before = loaded()\n"
            f"try:\n    m.open_metastore('hs2://127.0.0.1:{port}?user=trib')\n"
            "except Exception as e:\n    err = type(e).__name__\n"
            "engines = [n for n in sys.modules if n.split('.')[0] in ('pyspark', 'pyhive', 'py4j')]\n"
            "print(json.dumps([before, loaded(), err, engines]))"))
    before, after, err, engines = out
    assert before == [] and after == ["tributary_read.hive.hs2"] and err == "MetastoreError"
    assert "pyspark" not in {e.split(".")[0] for e in engines}


def _hive_imports() -> dict[str, set[str]]:
    """Module -> the hive modules it imports, anywhere in its body (function-level imports too)."""
    names = {p.stem for p in HIVE.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in names:
        tree = ast.parse((HIVE / f"{name}.py").read_text())
        deps = set()
        for node in ast.walk(tree):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            if isinstance(node, ast.ImportFrom) and node.module == "tributary_read.hive":
                mods += [f"tributary_read.hive.{a.name}" for a in node.names]
            deps |= {m.split(".")[2] for m in mods if m.startswith("tributary_read.hive.")} & names
        graph[name] = deps - {name}
    return graph


def test_no_import_cycle_among_hive_modules():
    graph = _hive_imports()
    assert {"metastore", "sql_metastore", "hs2", "model", "state", "sync"} <= set(graph)
    list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on a cycle
    assert not graph["metastore"] & {"hs2", "sql_metastore"}, graph["metastore"]
    assert "sql_metastore" in graph["hs2"]
    # The Spark catalog backend lives in spark/ (it builds sessions with spark/session.py; hive/ is below spark/).
    spark_catalog = (REPO / "tributary_read" / "spark" / "catalog.py").read_text()
    assert "from tributary_read.hive.sql_metastore import SqlMetastore" in spark_catalog
    # The values and parsers stand alone: they import nothing of the metastore machinery
    # (a value renders its SQL through the one quoting module, which imports nothing of hive).
    assert graph["model"] <= {"sql"} and graph["dialect"] == set() and graph["sql"] == set()
    assert graph["uri"] == set()


def test_hive_modules_stay_small():
    sizes = {p.name: len(p.read_text().splitlines()) for p in HIVE.glob("*.py")}
    assert max(sizes.values()) < 600, sizes


def test_locations_compare_as_hadoop_spells_them():
    assert same_location("file:/tmp/a/", "file:///tmp/a")
    assert same_location("/tmp/a", "file:///tmp/a")
    assert same_location("HDFS://NN:8020/x", "hdfs://nn:8020/x/")
    assert same_location("s3a://b/x%20y", "s3a://b/x y")
    assert not same_location("hdfs://ns1/x", "hdfs://nn:8020/x")  # a name service is not its namenode
    assert not same_location("s3a://b/x", "s3://b/x")
    assert not same_location("s3a://b/x", "s3a://c/x")
    assert not same_location("file:/tmp/a", None) and not same_location(None, None)


@pytest.mark.parametrize("bad", ["", "relative/dir", "/abs/path", "C:/data", "file:///x\n", "hdfs://nn/x\x00y"])
def test_location_must_be_a_uri_without_control_characters(bad):
    with pytest.raises(InvalidInputError, match="partition location must be a URI with a scheme"):
        check_location(bad)


def test_location_check_returns_the_location_unchanged():
    for loc in ("file:///tmp/it's; `a` \\ dir", "s3a://bucket/logs/2024_01_01/00", "hdfs://nn:8020/x"):
        assert check_location(loc) == loc


def test_package_exports_what_it_did():
    import tributary_read.hive as hive

    from tributary_read.hive.sync import sync as sync_fn

    assert hive.sync is sync_fn and callable(hive.sync)
    assert hive.Metastore is Metastore and hive.open_metastore is open_metastore
    assert set(hive.__all__) == {"DIALECTS", "HivePartition", "HiveTable", "Metastore", "PartitionStats",
                                 "TableName", "open_metastore", "SyncOptions", "SyncPlan", "SyncResult",
                                 "plan_sync", "sync"}
    assert all(getattr(hive, n) is not None for n in hive.__all__)
    assert Path(hive.__file__).parent == HIVE


def test_a_password_in_a_metastore_uri_is_refused_without_echoing_it(tmp_path):
    """argv shows in `ps` and URIs in messages and reports: the password goes in $TRIB_HS2_PASSWORD."""
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", "{yyyy}_{MM}_{dd}/{HH}", "--partition",
             "dt={yyyy}{MM}{dd}{HH}", check=True)
    for uri in ("hs2://trib:s3cret@127.0.0.1:1/default", "thrift://u:s3cret@127.0.0.1:9083",
                "spark?conf.spark.hadoop.javax.jdo.option.ConnectionPassword=s3cret"):
        p = run_trib("partitions", "sync", str(root), "--hive-table", "db.t", "--metastore", uri)
        assert p.returncode == InvalidInputError.exit_code, p.stderr
        assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "not in the" in p.stderr, p.stderr
        assert "s3cret" not in p.stderr + p.stdout
    job = tmp_path / "j.toml"
    job.write_text('[job]\nname = "j"\nsql = "j.sql"\n[[inputs]]\ntable = "t"\nview = "raw"\n'
                   '[output]\ntable = "t"\ntime_column = "ts"\n'
                   '[hive]\ntable = "db.t"\nmetastore = "hs2://u:s3cret@h:10000"\n')
    (tmp_path / "j.sql").write_text("SELECT 1\n")
    p = run_trib("etl", "run", str(job), "--schedule-time", "2024-01-01T00:00:00Z", "--dry-run")
    assert p.returncode == InvalidInputError.exit_code and "s3cret" not in p.stderr, p.stderr
    assert "hive.metastore" in p.stderr and "TRIB_HS2_PASSWORD" in p.stderr, p.stderr


@pytest.mark.parametrize("text,kind,spark", [("spark", "SPARK", True), ("SPARK", "SPARK", True),
                                             ("spark?conf.a.b=1", "SPARK", True), ("hs2://h:1", "HS2", False),
                                             ("hive2://h", "HS2", False), ("thrift://h", "THRIFT", False)])
def test_the_uri_type_is_the_one_answer_to_what_a_metastore_is(text, kind, spark):
    from tributary_read.hive.uri import MetastoreKind, MetastoreURI

    u = MetastoreURI.parse(text)
    assert u.kind is MetastoreKind[kind] and u.is_spark_catalog is spark and MetastoreURI.parse(u) is u
    assert u.backend == backend_for(text)
    if kind == "HS2":
        assert u.port == (1 if ":1" in text else 10000)
        with pytest.raises(InvalidInputError, match="not a catalog"):
            u.catalog_conf()
    if kind == "THRIFT":
        assert u.catalog_conf() == {"spark.hadoop.hive.metastore.uris": "thrift://h:9083"}
