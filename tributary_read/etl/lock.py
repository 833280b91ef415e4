"""One run of a job at a time: an advisory ``flock`` on a lock file.

The kernel releases an flock when its process dies, kill -9 included, so a
crashed run never leaves a stale lock for the next one to clear by hand (a
lock *file* that merely exists would). The file itself is never deleted:
unlinking a lock file while another process waits on it lets two runs hold
"the" lock at once.

Where the lock lives: under the output table (``ROOT/_tributary/etl/JOB.lock``)
when the table is on a local or shared POSIX file system, so every run of the
job on that file system sees it; otherwise (S3, HDFS) in a local directory
(``[job] lock_dir``, else ``$XDG_STATE_HOME/trib/etl``), which serialises runs
on one machine only. Either way a duplicate run stays harmless for the
output: its commit finds the transaction already in the log (docs/etl.md).
"""

from __future__ import annotations

import errno
import hashlib
import os
from typing import TYPE_CHECKING

from tributary_read.errors import ConcurrentRunError, StorageError

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.table.config import Table

LOCK_DIR = "_tributary/etl"  # table/maintenance.py knows this name (verify skips the locks)


def lock_path(job_name: str, output: Table, lock_dir: str | None = None) -> str:
    """Where ``job_name``'s lock file lives (see the module docstring)."""
    if lock_dir:
        return os.path.join(lock_dir, f"{job_name}.lock")
    from tributary_read.io.local import LocalStorage

    if isinstance(output.storage, LocalStorage):
        return output.storage.abspath(f"{LOCK_DIR}/{job_name}.lock")
    from tributary_read.paths import state_dir

    # The same job name may write different tables: the output's URI is part of the name.
    tag = hashlib.sha256(output.uri.encode()).hexdigest()[:12]
    return os.path.join(state_dir("etl"), f"{job_name}-{tag}.lock")


class JobLock:
    """``with JobLock(path, job):`` holds the lock or raises :class:`ConcurrentRunError` at once.

    The lock file also keeps what a run leaves to the job's next run and to no other process (the job's
    kept Spark Connect session): the holder's pid on its first line, then ``key=value`` notes
    (:meth:`note`, :meth:`set_note`), read and written only by the lock's holder.
    """

    def __init__(self, path: str, job: str):
        self.path = path
        self.job = job
        self._fd: int | None = None
        self._notes: dict[str, str] = {}

    def __enter__(self) -> JobLock:
        import fcntl

        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(f"cannot open the lock file {self.path} of job {self.job!r}: "
                               f"{e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_holder(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                who = f" (pid {holder})" if holder else ""
                raise ConcurrentRunError(
                    f"another run of job {self.job!r} is in progress{who}: it holds {self.path}; "
                    "wait for it to end, then rerun") from None
            raise StorageError(f"cannot lock {self.path}: {e.strerror or e}") from None
        self._fd = fd
        self._notes = _read_notes(fd)
        self._write()  # who holds it, for the message a second run prints
        return self

    def note(self, key: str) -> str | None:
        """The value an earlier holder left under ``key`` (None: none)."""
        return self._notes.get(key)

    def set_note(self, key: str, value: str) -> None:
        """Leave ``value`` under ``key`` for the job's next run (best effort: a note is a hint, never truth)."""
        self._notes[key] = value
        self._write()

    def _write(self) -> None:
        text = "".join([f"{os.getpid()}\n", *(f"{k}={v}\n" for k, v in sorted(self._notes.items()))])
        try:
            os.ftruncate(self._fd, 0)  # type: ignore[arg-type]
            os.pwrite(self._fd, text.encode(), 0)  # type: ignore[arg-type]
        except OSError:
            pass

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the flock
            self._fd = None


def _read_holder(fd: int) -> str | None:
    try:
        text = os.pread(fd, 32, 0).decode().split("\n", 1)[0].strip()  # the pid's line; notes follow
    except (OSError, UnicodeDecodeError):
        return None
    return text if text.isdigit() else None


def _read_notes(fd: int) -> dict[str, str]:
    try:
        lines = os.pread(fd, 4096, 0).decode().splitlines()[1:]
    except (OSError, UnicodeDecodeError):
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)
