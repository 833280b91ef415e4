"""Compiling trib's Java sources with the JDK on the machine, against the pyspark wheel's jars.

One place for what the metastore launcher and the hive_udfs jar both need: find pyspark's
``jars/`` without importing pyspark, find a ``javac`` that matches the ``java`` that will run the
classes, and compile into a directory that appears complete or not at all (build in a temp dir,
then rename), so a build killed halfway, or two builds racing, never leave half a result. Nothing
is downloaded: the classpath is the wheel's own jars.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from tributary_read.errors import MissingDependencyError, TributaryError, missing_extra


def spark_home() -> Path:
    """The installed pyspark wheel (located without importing pyspark); it must ship ``jars/``."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise missing_extra("pyspark", "spark")
    home = Path(spec.submodule_search_locations[0])
    if not (home / "jars").is_dir():
        raise MissingDependencyError(f"{home} has no jars/: need the full pyspark wheel, not pyspark-client")
    return home


def java(error: Callable[[str], TributaryError] = MissingDependencyError) -> str:
    java_home = os.environ.get("JAVA_HOME")
    exe = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not exe or not os.access(exe, os.X_OK):
        raise error("java not found: install a JDK 17 or set JAVA_HOME")
    return exe


def javac(java_exe: str, what: str, error: Callable[[str], TributaryError] = MissingDependencyError) -> str:
    """javac beside the resolved java: another JDK's javac could emit too new a class file."""
    exe = Path(java_exe).resolve().with_name("javac")
    found = str(exe) if os.access(exe, os.X_OK) else shutil.which("javac")
    if not found:
        raise error(f"javac not found: {what} is compiled at first use, so install a full JDK 17 "
                    "(not a JRE) or set JAVA_HOME")
    return found


def source_key(sources: Sequence[Path], jars: Path) -> str:
    """Changes whenever a source or the jar set (a pyspark upgrade) changes."""
    h = hashlib.sha256()
    for src in sorted(sources):
        h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    h.update("\n".join(sorted(p.name for p in jars.glob("*.jar"))).encode())
    return h.hexdigest()[:16]


def compile_into(sources: Sequence[Path], jars: Path, dest: Path, *, what: str, javac_exe: str,
                 timeout: float, error: Callable[[str], TributaryError] = MissingDependencyError,
                 package: Callable[[Path], None] | None = None) -> Path:
    """Compile ``sources`` into the directory ``dest`` (created by one rename; a no-op if present).

    ``package`` may turn the compiled classes (its argument) into more files inside that same
    directory before the rename, e.g. a jar.
    """
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".build-"))
    try:
        classes = tmp / "classes"
        try:
            proc = subprocess.run([javac_exe, "--release", "17", "-proc:none", "-nowarn", "-encoding", "UTF-8", "-cp",
                                   f"{jars}/*", "-d", str(classes), *map(str, sources)],
                                  capture_output=True, text=True, timeout=max(10.0, timeout))
        except subprocess.TimeoutExpired as e:
            raise error(f"compiling {what} timed out") from e
        if proc.returncode:
            errors = [ln for ln in proc.stderr.splitlines() if "error" in ln] or [proc.stderr.strip()]
            raise error(f"compiling {what} failed: {errors[0]}")
        if package is not None:
            package(classes)
        try:
            os.rename(tmp, dest)  # complete or absent, even if we are killed mid-compile
        except OSError:
            if not dest.is_dir():  # not a concurrent builder's identical result
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
