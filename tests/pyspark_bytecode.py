"""Bytecode in the test venv's ``pyspark/python/lib/pyspark.zip``, added once per venv.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' path: every Python daemon
a Spark starts (the session's Spark, each ``trib etl run`` driver, each Spark Connect session, each
executor of the tests' cluster) imports pyspark from that zip, not from site-packages. The wheel's zip
holds sources only, and Python neither caches nor writes bytecode for a zip: each daemon compiled
pyspark's modules again, ~1.6 CPU-seconds (2.1 against 0.5 from site-packages), several seconds of the
first Python task of a session on CI's loaded cores, for the hundreds of sessions of a suite.

The zip is rewritten with the same entries plus, for each module, an unchecked hash-based ``.pyc``
(PEP 552) for the venv's Python, which ``zipimport`` loads instead of compiling the source; its code
objects carry the source's path in the zip, as a compile there would. What the workers run is the same
code; only its compile is gone. Tests only, like tests/jvm_archive.py: trib never rewrites a user's
pyspark. Written under a lock, to a temporary file renamed over the zip, before any Spark of the run
starts (pytest_configure), and skipped when the zip already holds bytecode.
"""

from __future__ import annotations

import fcntl
import importlib.util
import marshal
import os
import sys
import warnings
import zipfile
from pathlib import Path


def _zip() -> Path | None:
    from jvm_archive import spark_home

    home = spark_home()
    path = home / "python" / "lib" / "pyspark.zip" if home is not None else None
    return path if path is not None and path.is_file() else None


def _has_bytecode(path: Path) -> bool:
    with zipfile.ZipFile(path) as z:
        return "pyspark/__init__.pyc" in z.NameToInfo


def add_bytecode() -> Path | None:
    """Add this Python's bytecode to the venv's pyspark.zip unless it has it; the zip, or None without one."""
    path = _zip()
    if path is None or _has_bytecode(path):
        return path
    locks = Path(sys.prefix) / "var" / "cache" / "trib-tests"  # tests/jvm_archive.py's, out of the wheel
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / "pyspark-zip.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _has_bytecode(path):
            return path
        tmp = path.with_name(f".pyspark.zip.{os.getpid()}.tmp")
        try:
            with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
                names = set(src.namelist())
                for info in src.infolist():
                    data = src.read(info)
                    out.writestr(info, data)
                    if not info.filename.endswith(".py") or f"{info.filename}c" in names:
                        continue
                    if "/tests/" in info.filename or "/testing/" in info.filename:
                        continue  # pyspark's own tests, which no worker imports: half the zip's compile
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")  # a SyntaxWarning is the source's, as without bytecode
                            code = compile(data, f"{path}/{info.filename}", "exec", dont_inherit=True)
                    except (SyntaxError, ValueError):  # left to the source, as without bytecode
                        continue
                    # PEP 552: magic, flags 0b01 (hash-based, source not checked), the source's hash, the code
                    pyc = (importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little")
                           + importlib.util.source_hash(data) + marshal.dumps(code))
                    out.writestr(zipfile.ZipInfo(f"{info.filename}c", info.date_time), pyc,
                                 compress_type=zipfile.ZIP_DEFLATED)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path


if __name__ == "__main__":
    print(add_bytecode())
