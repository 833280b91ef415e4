"""A class-data archive (AppCDS) for the Spark JVMs the tests start, made once per venv.

Most of the suite's CPU went to short-lived Spark drivers (each ``trib etl run``,
``trib sql``, the session's Spark, the Thrift server): a driver loads and verifies
some 10,000 classes from the wheel's jars before it runs anything. A dynamic
archive of those classes (JDK 13+: ``-XX:ArchiveClassesAtExit``, then
``-XX:SharedArchiveFile``) halves a small driver's CPU here (16 to 8.5 CPU-s).

Tests only: ``SPARK_SUBMIT_OPTS`` reaches spark-submit's JVMs, never a user's job.

* The archive is made by a background process while the first tests run; a JVM
  that starts before it exists, or whose class path differs from the archive's
  (another ``SPARK_CONF_DIR``), simply runs without it: the JVM checks the jars'
  paths, sizes and times, and its CDS log is off, so no JVM prints a word about it.
* It is written under a temporary name and renamed once its JVM has exited: no
  JVM ever maps half an archive.
* Its name hashes the JVM and the jars, so a new pyspark or JDK makes a new one.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: What the JVM is told when the archive may be used. Logging off: a missing or stale archive is not news.
USE = "-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"

#: The training run: a local session that plans, shuffles, writes and reads Parquet and JSON and calls a
#: Python UDF (the classes most drivers load), then waits for its JVM to exit, when the archive is written.
_TRAIN = r"""
import os, sys, tempfile
from pyspark import SparkContext
from pyspark.sql import SparkSession
tmp, final = sys.argv[1], sys.argv[2]
d = tempfile.mkdtemp()
s = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
df = s.range(1000).selectExpr("id", "id % 7 as k", "cast(id as string) as v")
df.write.partitionBy("k").parquet(d + "/p")
s.read.parquet(d + "/p").createOrReplaceTempView("t")
s.sql("select k, count(*) c from t group by k order by k").collect()
s.udf.register("plus", lambda x: x + 1, "long")
s.sql("select plus(id) from t").collect()
df.write.json(d + "/j")
s.read.json(d + "/j").count()
proc = SparkContext._gateway.proc
s.stop()
proc.stdin.close()
proc.wait(timeout=300)
if os.path.getsize(tmp) > 0:
    os.replace(tmp, final)
"""


def spark_home() -> Path | None:
    """The pyspark wheel's Spark home (``jars/``, ``python/lib/``), or None without pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    home = Path(spec.origin).parent
    return home if (home / "jars").is_dir() else None


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where this venv's archive lives, named for the JVM and jars it fits; None without Spark or Java."""
    home, java = spark_home(), _java()
    if home is None or java is None:
        return None
    h = hashlib.sha256(f"{java}:{java.stat().st_size}:{java.stat().st_mtime_ns}:{home}".encode())
    for jar in sorted((home / "jars").iterdir()):
        st = jar.stat()
        h.update(f"{jar.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return Path(sys.prefix) / "var" / "cache" / "trib-tests" / f"spark-{h.hexdigest()[:16]}.jsa"


def jvm_options(make: bool) -> str:
    """The options for the tests' Spark JVMs; with ``make``, start making the archive if it is missing."""
    path = archive_path()
    if path is None:
        return ""
    if make and not path.exists():
        _start(path)
    return USE.format(path=path)


def _start(path: Path) -> None:
    """Make the archive in the background, once: a second pytest finds the lock taken and leaves it be."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.parent / ".lock", "w")  # held by the child; released when it exits
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return
    for stale in path.parent.glob("*.tmp"):  # a training run that died; the lock says none is running
        stale.unlink(missing_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "HIVE_CONF_DIR")}
    env["SPARK_SUBMIT_OPTS"] = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ArchiveClassesAtExit={tmp}"
    env["PYSPARK_PYTHON"] = sys.executable
    subprocess.Popen([sys.executable, "-c", _TRAIN, str(tmp), str(path)], env=env, cwd=path.parent,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     pass_fds=(lock.fileno(),), start_new_session=True)
    lock.close()
