"""Commit times that only rise (issue 25, item 2): a commit-time window holds for any writer's clock.

A writer stamps its commit at least 1 ms after the commit it follows and
records the run of rising times it extends (``monotonic_since``); readers
binary-search only that run and read every commit of a log written before.
"""

from __future__ import annotations

import json
import random
import time

import pytest
from conftest import invoke_trib

from tributary_read.errors import LogRetentionError
from tributary_read.read.resolve import manifest_window
from tributary_read.read.window import TimeWindow
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout
from tributary_read.table.log import checkpoint_path, commit_path, commit_time
from tributary_read.table.manifest import Commit, FileEntry
from tributary_read.table.retention import clean_log
from tributary_read.write.writer import TableWriter

pytestmark = pytest.mark.unit

LAYOUT, PARTITION = "{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"
T0 = 1_592_960_400_000  # 2020-06-24T01:00:00Z: event times of the records
H = 3_600_000
MIN = 60_000


def _table(tmp_path, name="t") -> Table:
    root = tmp_path / name
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION,
                "--tracking", "manifest", check=True)
    return Table.load(str(root))


def _commit(table: Table, i: int, monkeypatch, skew_ms: int = 0) -> Commit:
    """trib's writer commits one real file, on a clock ``skew_ms`` off."""
    monkeypatch.setenv("TRIB_CLOCK_SKEW_MS", str(skew_ms))
    w = TableWriter(table)
    w.write(json.dumps({"id": i}).encode(), T0 + i * 1000)
    w.flush()
    c = w.commit()
    monkeypatch.delenv("TRIB_CLOCK_SKEW_MS")
    return c


def _window_versions(table: Table, start: int, end: int) -> list[int]:
    proc = invoke_trib("files", table.uri, "--mode", "manifest", "--start", str(start), "--end", str(end),
                       "--json")
    assert proc.returncode == 0, proc.stderr
    return sorted({f["version"] for f in json.loads(proc.stdout)["files"]})


def test_a_writer_two_hours_behind_in_the_middle_of_the_log(tmp_path, monkeypatch):
    """The issue's repro: v2 from a clock 2 h behind no longer hides v1 from its window."""
    t = _table(tmp_path)
    v1 = _commit(t, 1, monkeypatch)
    v2 = _commit(t, 2, monkeypatch, skew_ms=-2 * H)
    rest = [_commit(t, i, monkeypatch) for i in (3, 4, 5)]
    assert v2.timestamp_ms == v1.timestamp_ms + 1  # the previous commit's time + 1 ms, not the skewed clock
    stamps = [c.timestamp_ms for c in t.log.commits(0)]
    assert stamps == sorted(set(stamps)) and all(c.monotonic_since == 1 for c in t.log.commits(0))

    assert _window_versions(t, v1.timestamp_ms - 10 * MIN, v1.timestamp_ms + 30 * MIN) == [1, 2, 3, 4, 5]
    assert _window_versions(t, v1.timestamp_ms, v1.timestamp_ms) == [1]
    assert _window_versions(t, v1.timestamp_ms + 1, rest[-1].timestamp_ms) == [2, 3, 4, 5]
    # The window where the skewed clock said it was holds nothing: the commit was made later.
    assert _window_versions(t, v1.timestamp_ms - 2 * H - MIN, v1.timestamp_ms - 2 * H + MIN) == []


def test_a_writer_ahead_carries_the_next_commits_with_it(tmp_path, monkeypatch):
    t = _table(tmp_path)
    _commit(t, 1, monkeypatch)
    ahead = _commit(t, 2, monkeypatch, skew_ms=2 * H)
    after = _commit(t, 3, monkeypatch)
    assert after.timestamp_ms == ahead.timestamp_ms + 1
    assert _window_versions(t, ahead.timestamp_ms, ahead.timestamp_ms + 1) == [2, 3]


def _unstamp(root, times: dict[int, int]) -> None:
    """Rewrite commits as a trib from before the rule wrote them: no monotonic_since, times as given."""
    for v, ts in times.items():
        path = root / commit_path(v)
        with open(path) as f:
            d = json.load(f)
        d.pop("monotonic_since", None)
        d["timestamp_ms"] = ts
        with open(path, "w") as f:
            json.dump(d, f)


def test_a_log_written_before_times_rose_returns_every_commit_of_its_window(tmp_path, monkeypatch):
    """The old log of the repro: v2 stamped 2 h early. Every commit is found in its own window."""
    t = _table(tmp_path)
    for i in range(1, 6):
        _commit(t, i, monkeypatch)
    now = int(time.time() * 1000)
    old = {1: now - 30 * MIN, 2: now - 30 * MIN - 2 * H + 2000, 3: now - 29 * MIN, 4: now - 28 * MIN,
           5: now - 27 * MIN}
    _unstamp(tmp_path / "t", old)
    assert _window_versions(t, now - 40 * MIN, now) == [1, 3, 4, 5]
    assert _window_versions(t, now - 30 * MIN - 2 * H, now - 30 * MIN - 2 * H + 5000) == [2]
    assert _window_versions(t, 0, now) == [1, 2, 3, 4, 5]

    # A new writer appends: its run starts at the old commit it follows; the old ones are still all read.
    v6 = _commit(t, 6, monkeypatch, skew_ms=-3 * H)
    assert v6.monotonic_since == 5 and v6.timestamp_ms == old[5] + 1
    assert _window_versions(t, now - 40 * MIN, now) == [1, 3, 4, 5, 6]
    assert _window_versions(t, now - 30 * MIN - 2 * H, now - 30 * MIN - 2 * H + 5000) == [2]


def _write(table: Table, v: int, ts: int, since: int | None) -> None:
    """One commit file as a writer would create it (old ones without ``monotonic_since``)."""
    c = Commit(v, ts, (FileEntry(f"2020_06_24/01/part-x-{v:06d}.jsonl", v, 1, {"dt": "2020062401"}),),
               monotonic_since=since)
    assert table.storage.create_if_absent(commit_path(v), c.encode())


def _random_log(table: Table, rng: random.Random, n: int, old: int) -> dict[int, int]:
    """``old`` commits stamped by clocks up to 3 h off, then ``n - old`` commits stamped by the rule;
    now and then an older trib writes in between again."""
    times: dict[int, int] = {}
    base = T0
    prev: Commit | None = None
    for v in range(1, n + 1):
        base += rng.randrange(0, 10 * MIN)
        wall = base + rng.choice((0, 0, 0, rng.randrange(-3 * H, 3 * H)))
        if v <= old or rng.random() < 0.05:
            ts, since = max(wall, 0), None
        else:
            ts, since = commit_time(v, prev, wall)
        _write(table, v, ts, since)
        prev = Commit(v, ts, (), monotonic_since=since)
        times[v] = ts
    return times


@pytest.mark.parametrize("seed", range(12))
def test_a_window_equals_a_scan_of_every_commit(tmp_path, seed):
    rng = random.Random(seed)
    t = Table.create(str(tmp_path / f"r{seed}"), TableConfig(layout=Layout(LAYOUT, PARTITION),
                                                             tracking="manifest", checkpoint_interval=1000))
    n = rng.randrange(1, 60)
    times = _random_log(t, rng, n, old=rng.choice((0, 0, rng.randrange(n + 1))))
    lo, hi = min(times.values()), max(times.values())
    for _ in range(40):
        a, b = sorted(rng.randrange(lo - H, hi + H) for _ in range(2))
        if rng.random() < 0.2:  # a window exactly on commit times
            a, b = sorted(rng.choice(list(times.values())) for _ in range(2))
        got = manifest_window(t, TimeWindow(a, b))
        want = {v for v, ts in times.items() if a <= ts <= b}
        assert {f.version for f in got.files} == want, (seed, a, b)


@pytest.mark.parametrize("seed", range(6))
def test_a_window_after_log_retention_is_whole_or_refused(tmp_path, monkeypatch, seed):
    """Commits removed by log retention: the answer holds every commit of the window, or says it cannot."""
    rng = random.Random(100 + seed)
    t = Table.create(str(tmp_path / f"k{seed}"), TableConfig(layout=Layout(LAYOUT, PARTITION),
                                                             tracking="manifest", checkpoint_interval=5))
    times = {}
    for v in range(1, 21):
        c = _commit(t, v, monkeypatch, skew_ms=rng.choice((0, 0, -2 * H, 2 * H, -rng.randrange(H))))
        times[v] = c.timestamp_ms
    cut = rng.choice((5, 10, 15))
    for k in range(cut + 5, 21, 5):  # checkpoints only save reads: the newest left decides what goes
        t.storage.delete(checkpoint_path(k))
    t.storage.write("_tributary/_last_checkpoint", json.dumps({"version": cut}).encode())
    trimmed = clean_log(t, 0, now_ms=int(time.time() * 1000) + H)
    assert trimmed.oldest_retained == cut and t.log.oldest_version() == cut
    refused = answered = 0
    for _ in range(40):
        a, b = sorted(rng.randrange(times[cut] - H, max(times.values()) + H) for _ in range(2))
        want = {v for v, ts in times.items() if a <= ts <= b}
        try:
            got = {f.version for f in manifest_window(t, TimeWindow(a, b)).files}
        except LogRetentionError:
            refused += 1
            assert a < times[cut]  # a removed commit may lie in the window: its time is below commit cut's
            continue
        answered += 1
        assert got == want
    assert answered


def test_monotonic_since_is_checked_when_read(tmp_path):
    t = _table(tmp_path)
    c = Commit(1, T0, (), monotonic_since=2)
    assert t.storage.create_if_absent(commit_path(1), c.encode())
    proc = invoke_trib("files", t.uri, "--mode", "manifest", "--start", str(T0), "--end", str(T0 + 1))
    assert proc.returncode != 0 and "monotonic_since" in proc.stderr


def test_a_lost_race_stamps_against_the_commit_it_lands_on(tmp_path, monkeypatch):
    """A writer whose view is stale loses slot 2 and lands at 4: its time follows commit 3, not commit 1."""
    t = _table(tmp_path)
    _commit(t, 1, monkeypatch)
    _commit(t, 2, monkeypatch)
    ahead = _commit(t, 3, monkeypatch, skew_ms=2 * H)
    c = t.log.commit([FileEntry("2020_06_24/01/part-late.jsonl", 1, 1, {"dt": "2020062401"})], base_version=1)
    assert c.version == 4 and c.timestamp_ms == ahead.timestamp_ms + 1 and c.monotonic_since == 1
    assert t.log.read_commit(4) == c
