"""An executor's failure, read out of py4j's wrapping, as the TributaryError it was.

A task that raises on an executor reaches the driver as a Java exception whose
text holds the Python traceback. Left as is, a full disk on an executor would
end ``trib etl run`` with exit 1 ("unexpected") instead of 7 ("storage: fix
and retry"), so the driver re-raises the executor's own error class when it is
one of trib's, or a plain OSError (storage). Anything else (a bug in the query,
a Spark failure) is left to propagate unchanged.
"""

from __future__ import annotations

import re

import tributary_read.errors as errors

_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", re.M)
#: builtin exceptions that mean the store failed, not the job
_OS_ERRORS = {"OSError", "IOError", "PermissionError", "FileNotFoundError", "FileExistsError",
              "NotADirectoryError", "IsADirectoryError", "BlockingIOError", "ConnectionError",
              "TimeoutError", "BrokenPipeError", "ConnectionResetError"}


def executor_error(e: BaseException) -> tuple[str, str] | None:
    """(class name, message) of the executor's own error (the last Python one in the text), or None."""
    for name, msg in reversed(_PY_ERROR.findall(str(e))):
        if "py4j" not in name and "org.apache" not in name and "java." not in name:
            return name.rsplit(".", 1)[-1], msg
    return None


def cause(e: BaseException) -> str:
    """The executor's own error line, else the first line of ``e``."""
    found = executor_error(e)
    if found is not None:
        return f"{found[0]}: {found[1]}"
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


_VERSION_MISMATCH = re.compile(r"Python in worker has different version:? \(?([\d, .]+)\)? than that in driver:? "
                               r"\(?([\d, .]+)\)?")
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


def _executor_python_path() -> str:
    """The Python the running SparkContext's executors start (the driver's choice), or a placeholder."""
    try:
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        return str(sc.pythonExec) if sc is not None else "unknown"
    except Exception:  # noqa: BLE001 - only for a message
        return "unknown"


def environment_error(e: BaseException, what: str) -> errors.MissingDependencyError | None:
    """The executors' Python cannot run trib's tasks: a module missing there, or another minor version.

    One line that names the module (or the versions), the executors' Python and the fix,
    instead of the Java stack a task failure prints; exit 10 (an environment to fix).
    """
    text = str(e)
    point = "point spark.pyspark.python (the job's [spark] conf) or $PYSPARK_PYTHON at a Python"
    m = _VERSION_MISMATCH.search(text)
    if m:
        def ver(v: str) -> str:
            return ".".join(x.strip() for x in v.split(",") if x.strip())

        return errors.MissingDependencyError(
            f"{what}: the executors' Python ({_executor_python_path()}) is {ver(m.group(1))}, the driver's "
            f"{ver(m.group(2))}: PySpark needs the same minor version on both; {point} of the driver's version "
            "on every node")
    m = _NO_MODULE.search(text)
    if m and "ModuleNotFoundError" in text:
        return errors.MissingDependencyError(
            f"{what}: the executors' Python ({_executor_python_path()}) cannot import {m.group(1).split('.')[0]}: "
            f"install it in that Python on every node, or {point} that has it")
    return None


def as_tributary(e: BaseException, what: str) -> errors.TributaryError | None:
    """The TributaryError to raise for an executor failure, or None to let ``e`` propagate.

    ``what`` says what failed (``writing s3://b/t on Spark executors``).
    """
    env = environment_error(e, what)
    if env is not None:
        return env
    found = executor_error(e)
    if found is None:
        return None
    name, msg = found
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, errors.TributaryError):
        try:
            return cls(f"{what}: {msg}")
        except TypeError:  # a class with required extra arguments
            return errors.StorageError(f"{what}: {name}: {msg}")
    if name in _OS_ERRORS:
        return errors.StorageError(f"{what}: {name}: {msg}")
    return None
