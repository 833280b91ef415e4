"""The demo's raw log: seed 002's arrival patterns, seeded and reproducible.

Every file belongs to one event hour (its events happened in that hour, and it
lands in that hour's directory) and **arrives** at one moment: the moment a
reader listing the directory can first see it. What the file's mtime says is a
separate matter, which is the whole point:

========================  ========================  ===========================  ===========
pattern                   arrives                   its mtime                    written by
========================  ========================  ===========================  ===========
``on_time``               inside its hour           (commit time)                trib ingest
``on_time_foreign``       inside its hour           = arrival                    other tools
``boundary``              exactly at the hour's     = arrival                    other tools
                          start, or exactly at its
                          end
``straggler``             1-40 min after the hour   = arrival                    other tools
``late_fresh``            1-6 h after the hour      = arrival                    other tools
``late_ingest``           1-4 h after the hour      (commit time)                trib ingest
``preserved_mtime``       1-6 h after the hour      inside its hour (cp -p)      other tools
``hidden_renamed``        1-4 h after the hour      inside its hour (the hidden  other tools
                          (renamed visible)         file's last write)
========================  ========================  ===========================  ===========

Times are offsets from a base hour, so the mix is the same on every run; the
base itself is a recent hour (listing consumers look back 7 days by default).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timezone

HOUR_MS = 3_600_000
MINUTE_MS = 60_000
#: The naive job runs this long after each hour ends (a scheduler's usual small margin).
NAIVE_LAG_MS = 5 * MINUTE_MS

PATTERNS = ("on_time", "on_time_foreign", "boundary", "straggler", "late_fresh", "late_ingest",
            "preserved_mtime", "hidden_renamed")
#: Patterns that arrive after their hour: a share of the eligible hours gets one file of each.
_LATE = {"straggler": (MINUTE_MS, 40 * MINUTE_MS), "late_fresh": (HOUR_MS, 6 * HOUR_MS),
         "late_ingest": (HOUR_MS, 4 * HOUR_MS), "preserved_mtime": (HOUR_MS, 6 * HOUR_MS),
         "hidden_renamed": (HOUR_MS, 4 * HOUR_MS)}
_ACTIONS = ("view", "click", "share", "like", "comment")


@dataclass(frozen=True)
class Event:
    time_ms: int
    event_id: str
    user: str
    action: str

    def line(self) -> str:
        """The raw log line: the columns of sql/warehouse/ods_raw_log.sql, tab-separated."""
        return f"{self.time_ms}\t{self.user}\t{self.action}\t{self.event_id}\n"


@dataclass(frozen=True)
class Drop:
    """One file of the mix."""

    pattern: str
    hour: int  # index of its event hour
    name: str  # file name (foreign) or source name (ingest)
    directory: str  # its hour directory, yyyy_MM_dd/HH
    arrival_ms: int  # visible to a lister from here on (an ingest's commit time)
    mtime_ms: int | None  # foreign files: the mtime it carries
    written_ms: int | None  # hidden_renamed: when the hidden file was written
    events: tuple[Event, ...]

    @property
    def tracked(self) -> bool:
        return self.pattern in ("on_time", "late_ingest")

    @property
    def path(self) -> str:
        return f"{self.directory}/{self.name}"


@dataclass(frozen=True)
class Mix:
    base_ms: int
    hours: int
    drops: tuple[Drop, ...]

    def hour_end(self, h: int) -> int:
        return self.base_ms + (h + 1) * HOUR_MS

    def run_at(self, h: int) -> int:
        """When hour ``h``'s cycle runs: its end plus the naive job's lag."""
        return self.hour_end(h) + NAIVE_LAG_MS

    def events(self) -> dict[str, Drop]:
        return {e.event_id: d for d in self.drops for e in d.events}

    def dt(self, h: int) -> str:
        """Hour ``h``'s partition value (``dt=yyyyMMddHH``, UTC): how the Hive tables name it."""
        return _dt(self.base_ms + h * HOUR_MS)

    def late(self, d: Drop) -> bool:
        """Whether ``d`` lands after its hour's cycle ran: every job has computed its hour once without it."""
        return d.arrival_ms > self.run_at(d.hour)


def _directory(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y_%m_%d/%H")


def _dt(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y%m%d%H")


def build(hours: int, base_ms: int, seed: int = 2002) -> Mix:
    """The mix for ``hours`` event hours from ``base_ms`` (a whole hour); every file arrives by the last cycle."""
    if hours < 1:
        raise ValueError("hours must be at least 1")
    if base_ms % HOUR_MS:
        raise ValueError("base_ms must be a whole hour")
    rng = random.Random(seed)
    n = [0]
    last_run = base_ms + hours * HOUR_MS + NAIVE_LAG_MS

    def events(h: int, count: int) -> tuple[Event, ...]:
        start = base_ms + h * HOUR_MS
        out = []
        for _ in range(count):
            n[0] += 1
            out.append(Event(start + rng.randrange(HOUR_MS), f"e{n[0]:07d}", f"u{rng.randrange(500):03d}",
                             rng.choice(_ACTIONS)))
        return tuple(sorted(out, key=lambda e: e.time_ms))

    drops: list[Drop] = []
    for h in range(hours):
        start, end = base_ms + h * HOUR_MS, base_ms + (h + 1) * HOUR_MS
        d, dt = _directory(start), _dt(start)
        inside = lambda: start + rng.randrange(2 * MINUTE_MS, HOUR_MS - 2 * MINUTE_MS)  # noqa: E731
        drops.append(Drop("on_time", h, f"ingest-{dt}", d, inside(), None, None, events(h, 120)))
        for k in range(2):
            t = inside()
            drops.append(Drop("on_time_foreign", h, f"{dt}00-node-{k}-raw.log", d, t, t, None, events(h, 60)))
        # Exactly on the boundaries: the first instant of the hour, and the instant it ends
        # (which already belongs to the next hour's window: an exclusive end).
        drops.append(Drop("boundary", h, f"{dt}00-node-start-raw.log", d, start, start, None, events(h, 20)))
        drops.append(Drop("boundary", h, f"{dt}00-node-end-raw.log", d, end, end, None, events(h, 20)))
    for pattern, (lo, hi) in _LATE.items():
        eligible = [h for h in range(hours) if base_ms + (h + 1) * HOUR_MS + lo <= last_run]
        if not eligible:
            continue
        chosen = sorted(rng.sample(eligible, max(1, min(len(eligible), round(0.35 * len(eligible))))))
        for h in chosen:
            start, end = base_ms + h * HOUR_MS, base_ms + (h + 1) * HOUR_MS
            d, dt = _directory(start), _dt(start)
            arrival = end + rng.randrange(lo, min(hi, last_run - end) + 1)
            inside = start + rng.randrange(HOUR_MS)
            ev = events(h, rng.randrange(25, 41))
            if pattern == "late_ingest":
                drops.append(Drop(pattern, h, f"late-ingest-{dt}", d, arrival, None, None, ev))
            elif pattern == "preserved_mtime":
                drops.append(Drop(pattern, h, f"{dt}00-copy-raw.log", d, arrival, inside, None, ev))
            elif pattern == "hidden_renamed":
                drops.append(Drop(pattern, h, f"{dt}00-upload-raw.log", d, arrival, inside, inside, ev))
            else:
                drops.append(Drop(pattern, h, f"{dt}00-{pattern.replace('_', '-')}-raw.log", d, arrival, arrival,
                                  None, ev))
    drops.sort(key=lambda x: (x.arrival_ms, x.path))
    return Mix(base_ms, hours, tuple(drops))
