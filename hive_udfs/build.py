"""Compiling trib's Java sources with the JDK on the machine, against the pyspark wheel's jars.

The one place trib runs ``javac``: the UDF jar (``java/trib/udfs/``) and the loopback metastore
launcher of the dev Hive pair (``java/trib/hive/``) are both built here. It finds pyspark's
``jars/`` without importing pyspark, finds a ``javac`` that matches the ``java`` that will run the
classes, and compiles into a directory that appears complete or not at all (build in a temp dir,
then rename), so a build killed halfway, or two builds racing, never leave half a result. Nothing
is downloaded: the classpath is the wheel's own jars, and results are cached per source + jar set.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Sequence

from tributary_read.errors import MissingDependencyError, TributaryError, missing_extra

#: The Java sources shipped in the wheel: one folder per Java package.
JAVA_ROOT = Path(__file__).resolve().parent / "java"
UDF_SOURCES = JAVA_ROOT / "trib" / "udfs"
LAUNCHER_SOURCE = JAVA_ROOT / "trib" / "hive" / "LoopbackMetaStore.java"
LAUNCHER_CLASS = "trib.hive.LoopbackMetaStore"
#: The dev pair's reader of JSON lines, under hive-hcatalog-core's name (the wheel's Hive 2.3 has none).
JSON_SERDE_SOURCE = JAVA_ROOT / "trib" / "hive" / "JsonSerDe.java"
JAR_NAME = "trib-udfs.jar"


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


# --- what trib builds --------------------------------------------------------------------


def cache_root() -> Path:
    env = os.environ.get("TRIB_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tributary-read"


def _udf_sources() -> list[Path]:
    """Only the UDF package: the launcher is a dev-harness class and has no place in users' jar."""
    sources = sorted(UDF_SOURCES.glob("*.java"))
    if not sources:
        raise MissingDependencyError(f"no Java sources under {UDF_SOURCES}: reinstall tributary-read")
    return sources


def jar_path(cache_dir: str | os.PathLike | None = None, timeout: float = 300.0) -> Path:
    """The UDF jar, built first if this source + pyspark jar set has none yet."""
    jars = spark_home() / "jars"
    sources = _udf_sources()
    dest = Path(cache_dir) if cache_dir else cache_root() / "udfs"
    out = dest / source_key(sources, jars)
    jar = out / JAR_NAME
    if jar.is_file():
        return jar
    exe = javac(java(), "the hive_udfs jar")

    def package(classes: Path) -> None:
        tmp = classes.parent / JAR_NAME
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: tributary-read\r\n\r\n")
            for f in sorted(classes.rglob("*.class")):
                z.write(f, f.relative_to(classes).as_posix())

    compile_into(sources, jars, out, what="the hive_udfs jar", javac_exe=exe, timeout=timeout, package=package)
    return jar


def launcher_classes(java_exe: str, jars: Path, timeout: float,
                     error: Callable[[str], TributaryError] = MissingDependencyError) -> Path:
    """The dev pair's classes dir (the metastore launcher and the JSON SerDe, on both services'
    classpaths), compiled once per source and jar set for every pair of the machine's user.

    They live in trib's cache (:func:`cache_root`), beside the UDF jar, which a pair needs too: javac
    costs 5-7 CPU-seconds, which each new pair dir (a second project, a test's own pair) used to pay
    again. A build is complete or absent (:func:`compile_into`'s rename), so pairs starting at once
    share it; none is removed, since a running pair may be using it.
    """
    sources = [LAUNCHER_SOURCE, JSON_SERDE_SOURCE]
    for src in sources:
        if not src.is_file():
            raise error(f"{src} is missing: reinstall tributary-read")
    out = cache_root() / "launcher" / source_key(sources, jars)
    if (out / "classes" / Path(*LAUNCHER_CLASS.split("."))).with_suffix(".class").is_file():
        return out / "classes"
    exe = javac(java_exe, "the loopback metastore launcher", error)
    compile_into(sources, jars, out, what=f"{LAUNCHER_SOURCE.parent}/", javac_exe=exe, timeout=timeout,
                 error=error)
    return out / "classes"
