"""Named crash points, so that tests can kill -9 a real process at an exact step.

A random kill lands mostly in the long steps; the short windows between two
steps of a multi-step run (after the commit, before the sync) are where a
crash is most dangerous and least likely to be hit by chance. ``TRIB_CRASH_AT``
names one point (or several, comma-separated); a process that reaches it sends
itself SIGKILL: no handler, no ``finally``, no flush, exactly like ``kill -9``.
Unset (production), a check is one dict lookup.
"""

from __future__ import annotations

import os
import signal


def crash_point(name: str) -> None:
    """SIGKILL this process here when ``TRIB_CRASH_AT`` names ``name``; SIGSTOP it when ``TRIB_STOP_AT`` does.

    A stopped process (a paused VM, a long GC pause) resumes on SIGCONT exactly
    where it was: a test lets another process act in that gap, e.g. a concurrent
    copy of the same run that commits first.
    """
    want = os.environ.get("TRIB_CRASH_AT")
    if want and name in want.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
    stop = os.environ.get("TRIB_STOP_AT")
    if stop and name in stop.split(","):
        os.kill(os.getpid(), signal.SIGSTOP)


def wall_ms() -> int:
    """The wall clock a commit is stamped with, in epoch ms.

    ``TRIB_CLOCK_SKEW_MS`` shifts it, to run a writer whose clock is off: commit
    times come from the writer's clock, and a skewed writer is a fault readers of
    commit-time windows must survive. ``trib demo`` uses it to replay a day of
    arrivals in minutes, each ingest committing at its simulated arrival time.
    """
    import time

    skew = os.environ.get("TRIB_CLOCK_SKEW_MS")
    return int(time.time() * 1000) + (int(skew) if skew else 0)
