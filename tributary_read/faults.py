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
    """SIGKILL this process here when ``TRIB_CRASH_AT`` names ``name``."""
    want = os.environ.get("TRIB_CRASH_AT")
    if want and name in want.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
