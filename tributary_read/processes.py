"""Who is still running in a process group: the test of "nothing of a stopped run is left".

A trib run started in a session of its own (the Airflow operator's, the tests') is one process group:
trib, its Spark driver JVM, spark-submit. Zombies do not count: a process reparented to an init that
reaps late is gone for every purpose but ``kill(pid, 0)``.
"""

from __future__ import annotations

import os


def group_pids(pgid: int) -> list[int]:
    """Live (not zombie) pids of process group ``pgid``; without /proc, ``[pgid]`` while the group has any."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(d))
    return out


def reap_group(pgid: int, grace: float) -> list[int]:
    """Wait up to ``grace`` seconds for process group ``pgid`` to end, then SIGKILL what is left of it.

    Returns the pids that were still running at the deadline (empty: the group ended by itself). A
    killed trib run's JVM exits once its Python driver's pipe closes; one that does not is a leak.
    """
    import signal
    import time

    deadline = time.monotonic() + grace
    left = group_pids(pgid)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = group_pids(pgid)
    if left:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not; one we may not signal does). Our own exited child is reaped."""
    import contextlib

    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie still answers kill(0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
