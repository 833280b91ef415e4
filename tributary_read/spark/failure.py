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


def as_tributary(e: BaseException, what: str) -> errors.TributaryError | None:
    """The TributaryError to raise for an executor failure, or None to let ``e`` propagate.

    ``what`` says what failed (``writing s3://b/t on Spark executors``).
    """
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
