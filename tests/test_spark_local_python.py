"""A Spark session the user built, on a local master, whose Python workers are not the Python that has trib.

PySpark starts a local session's workers with ``$PYSPARK_PYTHON``, else ``python3`` from PATH: for a
venv run by its absolute path (cron, Airflow) that is the system Python, without trib. Every entry
point handed such a session refuses before any task runs, with one line naming the fix
(tributary_read.spark.ship.check_local_workers). The fix, ``PYSPARK_PYTHON`` set to the driver's
Python before the session starts, is what trib's own sessions do (tributary_read.spark.session), which
every other Spark test runs on.

One Spark JVM for the case, in a subprocess whose PATH starts with a ``python3`` that has no trib.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import invoke_trib
from helpers import LAYOUT, PARTITION

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SYSTEM_PYTHON = "/usr/bin/python3"

DRIVER = r"""
import json, os, sys
from pyspark.sql import SparkSession
from tributary_read.errors import MissingDependencyError
from tributary_read.spark import trib_sink, write

root = sys.argv[1]
out = {}

def session():
    return (SparkSession.builder.master("local[1]").appName("user-built").config("spark.ui.enabled", "false")
            .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
            .getOrCreate())

spark = session()
sc = spark.sparkContext
out["workers"] = sc.pythonExec
df = spark.createDataFrame([(1, 1_700_000_000_000)], "id long, ts long")
calls = {"write": lambda: write(df, root, time_column="ts", time_unit="ms"),
         "trib_sink": lambda: trib_sink(root, query="q", time_column="ts", time_unit="ms")}
for name, call in calls.items():
    try:
        call()
        out[name] = None
    except MissingDependencyError as e:
        out[name] = str(e)
out["jobs"] = len(sc.statusTracker().getJobIdsForGroup())
spark.stop()
print(json.dumps(out))
"""


def test_a_user_built_local_session_whose_python3_has_no_trib_is_refused_before_any_task(tmp_path):
    if not os.path.exists(SYSTEM_PYTHON) or subprocess.run([SYSTEM_PYTHON, "-c", "import tributary_read"],
                                                           capture_output=True, cwd=tmp_path).returncode == 0:
        pytest.skip(f"needs a {SYSTEM_PYTHON} without trib")
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").symlink_to(SYSTEM_PYTHON)
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "SPARK_HOME", "SPARK_CONF_DIR",
                        "TRIB_SPARK_MASTER", "SPARK_MASTER", "PYSPARK_GATEWAY_PORT")}
    env.update(PATH=f"{bare}{os.pathsep}{env.get('PATH', '')}", SPARK_LOCAL_IP="127.0.0.1")
    # The venv's Python by its absolute path, as cron runs it; the cwd holds no trib either.
    p = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(root)], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["workers"] == "python3"
    for name in ("write", "trib_sink"):
        line = out[name]
        assert line is not None, f"{name} was not refused"
        assert "\n" not in line and f"python3, found at {bare / 'python3'}" in line, line
        assert "cannot import tributary_read" in line and f"PYSPARK_PYTHON={sys.executable}" in line, line
    assert out["jobs"] == 0  # refused before any Spark job, not after its tasks failed
    assert shutil.which("python3", path=env["PATH"]) == str(bare / "python3")
