"""When a continuous source commits and reports: the one pacing rule of every ``follow`` run.

A follow run (Kafka topics, a spool directory) commits after ``every`` records
or ``interval_s`` seconds with records pending, whichever comes first, closes
files idle past the roll policy, and reports progress every ``note_s``. The
interval bounds how long a record waits between being read and being
committed; ``every`` bounds the batch a crash makes the next run read again.
"""

from __future__ import annotations

import time
from typing import Callable

from tributary_read.errors import InvalidInputError


class CommitPacer:
    """Counts records since the last commit and says when the next commit and status line are due."""

    def __init__(self, every: int, interval_s: float, follow: bool, note_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        if every < 1:
            raise InvalidInputError("the records per commit must be >= 1", commit_every="the records per commit")
        if interval_s <= 0:
            raise InvalidInputError("the commit interval must be > 0", commit_interval="the commit interval")
        self.every, self.interval_s, self.follow, self.note_s, self.clock = every, interval_s, follow, note_s, clock
        self.pending = 0
        self.last_commit = self.last_note = clock()

    def add(self) -> bool:
        """One more record read; True when the batch is full."""
        self.pending += 1
        return self.pending >= self.every

    def due(self, now: float) -> bool:
        """A follow run's time-based commit: records have waited the interval."""
        return self.follow and self.pending > 0 and now - self.last_commit >= self.interval_s

    def committed(self, now: float | None = None) -> None:
        self.pending = 0
        self.last_commit = self.clock() if now is None else now

    def note_due(self, now: float) -> float:
        """Seconds since the last status line when one is due now (and restart the count), else 0."""
        since = now - self.last_note
        if since < self.note_s:
            return 0.0
        self.last_note = now
        return since
