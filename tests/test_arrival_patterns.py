"""A simulated 48-hour hourly schedule with files landing by every late-arrival pattern.

Time is simulated: each file's mtime is set with os.utime, and so is its
directory's whenever an entry is added or renamed (what the OS does with the
real clock), so nothing sleeps. Each hour runs the CLI twice over (in this
process, ``invoke_trib``: some 300 runs, each opening the table afresh from disk):

* the mtime flow: ``trib files --schedule-time S --period 1h`` (seed 002's window;
  through the library in the table ways, to keep the suite fast);
* the consumer flow: ``trib files --consumer sim`` then ``trib consumer ack``,
  with ``--full-scan`` every sixth run, as a daily job would.

Three ways, one module-scoped simulation each (one test per arrival pattern
checks its files in each):

* ``plain``: a plain directory, read with ``--layout``;
* ``foreign_table``: the directory adopted with ``trib table create`` once other
  tools have written to it (tracking ``both`` is detected);
* ``mixed_table``: the same, plus a ``trib ingest`` every few hours writing
  into the same partitions. Its files come from the manifest (their commit
  times are the real clock's, outside every simulated window), the others by
  listing, each exactly once.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import invoke_trib
from tributary_read.read.resolve import resolve
from tributary_read.read.window import TimeWindow

pytestmark = pytest.mark.unit

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
H = 3_600_000
MIN = 60_000
RUNS = 48
FULL_SCAN_EVERY = 6
WAYS = ("plain", "foreign_table", "mixed_table")
INGEST_EVERY = 6  # mixed_table: a trib ingest at every run r with r % INGEST_EVERY == 2
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
NOW = int(datetime.now(timezone.utc).timestamp() * 1000)
# Inside the consumers' default 7-day horizon of the real clock, ending well before it.
T0 = NOW - NOW % H - 60 * H


def part_dir(ms: int) -> str:
    return f"{datetime.fromtimestamp(ms / 1000, timezone.utc):%Y_%m_%d/%H}"


def schedule(run: int) -> int:
    return T0 + (run + 1) * H + 5 * MIN


def window(run: int) -> tuple[int, int]:
    return T0 + run * H, T0 + (run + 1) * H - 1


@dataclass(order=True)
class Event:
    t: int
    seq: int
    kind: str = field(compare=False)  # create | rename | append
    path: str = field(compare=False)
    mtime: int = field(compare=False, default=0)
    dst: str = field(compare=False, default="")


@dataclass
class Sim:
    root: Path
    way: str = "plain"
    trib_files: dict[int, list[str]] = field(default_factory=dict)  # run -> files its ingest committed
    patterns: dict[str, list[str]] = field(default_factory=dict)  # pattern -> final paths
    events: list[Event] = field(default_factory=list)
    #: run -> [(path, mtime)] returned by the mtime flow / expected by the model
    mtime_got: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    mtime_expected: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    consumer_files: dict[int, list[str]] = field(default_factory=dict)
    conflicts: dict[int, list[str]] = field(default_factory=dict)
    #: run -> [(path, offset, valid_length)]: files that grew after delivery, delivered as byte ranges
    ranges: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)
    beyond: dict[int, list[dict]] = field(default_factory=dict)
    hidden_seen_at_run: dict[str, list[int]] = field(default_factory=dict)
    arrival: dict[str, int] = field(default_factory=dict)  # final path -> when it became visible
    first_mtime: dict[str, int] = field(default_factory=dict)

    def add(self, pattern: str, kind: str, t: int, path: str, mtime: int = 0, dst: str = "") -> None:
        self.events.append(Event(t, len(self.events), kind, path, mtime, dst))
        final = dst or path
        if kind == "create":
            self.first_mtime[path] = mtime
        elif kind == "rename":
            self.first_mtime[dst] = self.first_mtime[path]
        names = self.patterns.setdefault(pattern, [])
        if kind != "append" and not os.path.basename(final).startswith(".") and final not in names:
            names.append(final)
            self.arrival[final] = t

    def run_of(self, t: int) -> int:
        """The first run that sees something that happened at ``t``."""
        return next(r for r in range(RUNS) if schedule(r) >= t)


def _build(root: Path) -> Sim:
    rng = random.Random(48)
    sim = Sim(root)
    for h in range(RUNS - 2):
        for k in range(2):
            t = T0 + h * H + rng.randrange(H)
            sim.add("normal", "create", t, f"{part_dir(t)}/normal-{h}-{k}.log", t)
    for i in range(10):  # rsync -t, S3 multipart: the mtime is older than the arrival
        e = T0 + rng.randrange(2 * H, 40 * H)
        sim.add("old_mtime", "create", e + rng.randrange(H, 6 * H), f"{part_dir(e)}/rsync-{i}.log", e)
    for i in range(8):  # written hidden, renamed into place later; rename keeps the mtime
        e = T0 + rng.randrange(2 * H, 40 * H)
        d = part_dir(e)
        sim.add("renamed", "create", e, f"{d}/.renamed-{i}.log.inprogress", e)
        sim.add("renamed", "rename", e + rng.randrange(int(1.5 * H), 6 * H), f"{d}/.renamed-{i}.log.inprogress",
                dst=f"{d}/renamed-{i}.log")
    for h in (3, 10, 17, 24, 31, 38):  # exactly on a window's first and last millisecond
        for t, tag in ((T0 + h * H, "start"), (T0 + h * H - 1, "end")):
            sim.add("boundary", "create", t, f"{part_dir(t)}/boundary-{tag}-{h}.log", t)
    for i in range(10):  # lands up to 6 h late in its (old) event-time partition, with a fresh mtime
        e = T0 + rng.randrange(2 * H, 40 * H)
        a = e + rng.randrange(H, 6 * H + 1)
        sim.add("late", "create", a, f"{part_dir(e)}/late-{i}.log", a)
    for k in range(2):  # lands in a partition ten days old: beyond the 7-day horizon
        a = T0 + (20 + 7 * k) * H + 123
        sim.add("beyond", "create", a, f"{part_dir(T0 - 240 * H + k * H)}/beyond-{k}.log", a)
    for k in range(2):  # delivered, then appended to in place
        t = T0 + (5 + 10 * k) * H + 777
        p = f"{part_dir(t)}/changed-{k}.log"
        sim.add("changed", "create", t, p, t)
        sim.add("changed", "append", t + 9 * H, p, t + 9 * H)
    sim.events.sort()
    return sim


def _set_mtime(p: Path, ms: int) -> None:
    os.utime(p, ns=(ms * 1_000_000, ms * 1_000_000))


def _apply(sim: Sim, e: Event, model: dict[str, int]) -> None:
    p = sim.root / e.path
    if e.kind == "create":
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f"{e.path}\n".encode())
        _set_mtime(p, e.mtime)
        _set_mtime(p.parent, e.t)
        model[e.path] = e.mtime
    elif e.kind == "rename":
        p.rename(sim.root / e.dst)
        _set_mtime(p.parent, e.t)
        model[e.dst] = model.pop(e.path)
    else:
        with open(p, "ab") as f:
            f.write(b"appended\n")
        _set_mtime(p, e.mtime)  # the directory is untouched: in-place writes do not change it
        model[e.path] = e.mtime


def _cli_json(*args: str) -> dict:
    proc = invoke_trib(*args, "--json")
    assert proc.returncode == 0, f"trib {' '.join(args)}: {proc.stderr}"
    return json.loads(proc.stdout)


def _ingest(sim: Sim, run: int, version: int) -> tuple[list[str], int]:
    """A ``trib ingest`` of records whose event times lie in the last 3 simulated hours."""
    from tributary_read.read.resolve import manifest_files
    from tributary_read.table.config import Table

    src = sim.root.parent / "source.jsonl"
    rng = random.Random(run)
    with open(src, "a") as f:
        for i in range(5):
            f.write(json.dumps({"run": run, "i": i, "ts": schedule(run) - rng.randrange(3 * H)}) + "\n")
    _cli_json("ingest", str(sim.root), "--source", str(src), "--app-id", "sim", "--time-field", "ts")
    fs = manifest_files(Table.load(str(sim.root)), version)
    return [f.path for f in fs.files], fs.plan["until_version"]


@pytest.fixture(scope="module", params=WAYS)
def sim(request, tmp_path_factory) -> Sim:
    root = tmp_path_factory.mktemp(f"arrivals-{request.param}") / "logs"
    root.mkdir()
    sim = _build(root)
    sim.way = request.param
    layout = ["--layout", LAYOUT] if sim.way == "plain" else []
    model: dict[str, int] = {}  # every path on disk -> its mtime
    pending = list(sim.events)
    version = 0
    for run in range(RUNS):
        s = schedule(run)
        while pending and pending[0].t <= s:
            _apply(sim, pending.pop(0), model)
        if run == 0 and sim.way != "plain":  # adopt the directory other tools already write to
            proc = invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION)
            assert proc.returncode == 0 and "tracking both" in proc.stdout, proc.stdout + proc.stderr
        if sim.way == "mixed_table" and run % INGEST_EVERY == 2:
            sim.trib_files[run], version = _ingest(sim, run, version)
            assert sim.trib_files[run]
        lo, hi = window(run)
        sim.mtime_expected[run] = sorted((p, m) for p, m in model.items()
                                         if lo <= m <= hi and not os.path.basename(p).startswith("."))
        for p in model:
            if os.path.basename(p).startswith("."):
                sim.hidden_seen_at_run.setdefault(p, []).append(run)
        if sim.way == "plain":
            iso = datetime.fromtimestamp(s / 1000, timezone.utc).isoformat()
            doc = _cli_json("files", str(root), *layout, "--schedule-time", iso, "--period", "1h")
            assert (doc["window"]["start_ms"], doc["window"]["end_ms"]) == (lo, hi)
        else:  # the same window through the library, in-process: a third of the CLI runs saved
            doc = resolve(str(root), window=TimeWindow(lo, hi)).to_json()
            assert doc["mode"] == "both"
        sim.mtime_got[run] = sorted((f["path"], f["mtime_ms"]) for f in doc["files"])
        full = ["--full-scan"] if run % FULL_SCAN_EVERY == FULL_SCAN_EVERY - 1 or run == RUNS - 1 else []
        plan = _cli_json("files", str(root), *layout, "--consumer", "sim", *full)
        if run % 8 == 0:  # a retried run gets the same plan
            again = _cli_json("files", str(root), "--consumer", "sim")
            assert (again["plan_id"], again["files"]) == (plan["plan_id"], plan["files"])
        sim.consumer_files[run] = [f["path"] for f in plan["files"] if f.get("offset") is None]
        sim.ranges[run] = [(f["path"], f["offset"], f["valid_length"]) for f in plan["files"] if "offset" in f]
        sim.conflicts[run] = [c["path"] for c in plan["conflicts"]]
        sim.beyond[run] = plan["beyond_horizon"]
        assert _cli_json("consumer", "ack", str(root), "sim", plan["plan_id"])["already_acked"] is False
    assert not pending
    return sim


def _delivered(sim: Sim) -> Counter:
    return Counter(p for files in sim.consumer_files.values() for p in files)


def _mtime_runs(sim: Sim, path: str) -> list[int]:
    return [r for r, got in sim.mtime_got.items() for p, _ in got if p == path]


# -- the whole schedule ---------------------------------------------------------------
def test_consumer_delivers_every_file_exactly_once(sim):
    delivered = _delivered(sim)
    expected = {p for ps in sim.patterns.values() for p in ps}
    trib = {p for ps in sim.trib_files.values() for p in ps}
    assert set(delivered) == expected | trib
    assert all(n == 1 for n in delivered.values()), [p for p, n in delivered.items() if n > 1]
    for p in expected:  # and in the first run that could see it
        assert p in sim.consumer_files[sim.run_of(sim.arrival[p])], p
    for run, ps in sim.trib_files.items():  # committed before that run's plan
        assert set(ps) <= set(sim.consumer_files[run]), run


def test_trib_written_files_come_from_the_manifest_only(sim):
    if sim.way != "mixed_table":
        pytest.skip("no trib-written files in this way")
    trib = [p for ps in sim.trib_files.values() for p in ps]
    assert len(trib) >= 8 and all(os.path.basename(p).startswith("part-") for p in trib)
    # Never by listing: the mtime windows (listing part) never return one; the
    # consumer's ledger (listing part) never records one.
    assert not {p for got in sim.mtime_got.values() for p, _ in got} & set(trib)
    from tributary_read.read.consumer import Consumer
    from tributary_read.read.resolve import Source

    st = Consumer(Source.open(str(sim.root)), "sim").current()
    assert not {f"{d}/{n}" for d, e in st.ledger.items() for n in e["files"]} & set(trib)
    assert st.manifest_version == len(sim.trib_files)


def test_mtime_windows_deliver_what_was_visible_when_they_ran_never_twice(sim):
    for run in range(RUNS):
        assert sim.mtime_got[run] == sim.mtime_expected[run], run
    pairs = Counter(pm for got in sim.mtime_got.values() for pm in got)
    assert all(n == 1 for n in pairs.values())


# -- one test per arrival pattern ---------------------------------------------------------
def test_old_mtime_rsync_t(sim):
    files = sim.patterns["old_mtime"]
    delivered = _delivered(sim)
    assert all(delivered[p] == 1 for p in files)
    # Seen by the mtime flow only if it landed before the window of its (old) mtime ran;
    # otherwise only the consumer delivers it.
    missed = 0
    for p in files:
        window_run = (sim.first_mtime[p] - T0) // H
        visible_in_time = sim.arrival[p] <= schedule(window_run)
        assert bool(_mtime_runs(sim, p)) == visible_in_time, p
        missed += not visible_in_time
    assert missed >= len(files) // 2


def test_renamed_into_place_after_a_run_listed_its_directory(sim):
    for p in sim.patterns["renamed"]:
        hidden = f"{os.path.dirname(p)}/.{os.path.basename(p)}.inprogress"
        seen = sim.hidden_seen_at_run[hidden]
        assert seen, p  # a run listed the directory while the file was still hidden...
        assert all(p not in sim.consumer_files[r] for r in seen)  # ...and did not return it
        assert _delivered(sim)[p] == 1
        assert sim.consumer_files[sim.run_of(sim.arrival[p])].count(p) == 1
        assert not _mtime_runs(sim, p)  # the rename kept an mtime whose window had run


def test_exact_window_boundaries(sim):
    for p in sim.patterns["boundary"]:
        h = int(p.rsplit("-", 1)[1].split(".")[0])
        runs = _mtime_runs(sim, p)
        assert runs == ([h] if "-start-" in p else [h - 1]), (p, runs)  # exactly one window, the right one
        assert _delivered(sim)[p] == 1


def test_late_landing_in_an_old_partition(sim):
    for p in sim.patterns["late"]:
        runs = _mtime_runs(sim, p)
        assert len(runs) == 1 and _delivered(sim)[p] == 1
        # "Read the previous hour's partition" would have missed it: the window that
        # delivered it is not its partition's hour.
        assert part_dir(window(runs[0])[0]) != os.path.dirname(p)


def test_beyond_the_horizon_a_partition_never_seen_is_delivered_and_sealed(sim):
    """A new partition past the lookback holds exactly what is new: delivered once, then sealed (not in the ledger)."""
    delivered = _delivered(sim)
    for p in sim.patterns["beyond"]:
        assert delivered[p] == 1 and p in sim.consumer_files[sim.run_of(sim.arrival[p])]
    assert not any(sim.beyond.values())  # nothing left undelivered, nothing reported
    state = max((sim.root / "_tributary/consumers/sim").glob("state-*.json"))
    doc = json.loads(state.read_text())
    assert {os.path.dirname(p) for p in sim.patterns["beyond"]} <= set(doc["sealed"]) - set(doc["ledger"])


def test_appended_after_delivery_is_delivered_once_as_a_range(sim):
    assert not any(sim.conflicts.values())
    ranges = Counter(r[0] for rs in sim.ranges.values() for r in rs)
    assert set(ranges) == set(sim.patterns["changed"]) and all(n == 1 for n in ranges.values())
    for p in sim.patterns["changed"]:
        assert _delivered(sim)[p] == 1  # whole once, then only the appended bytes
        run = next(r for r, rs in sim.ranges.items() if p in [x[0] for x in rs])
        (rng,) = [x for x in sim.ranges[run] if x[0] == p]
        first = len(f"{p}\n")
        assert rng[1:] == (first, first + len(b"appended\n"))
        assert run % FULL_SCAN_EVERY == FULL_SCAN_EVERY - 1  # an in-place rewrite needs a full scan
        assert len(_mtime_runs(sim, p)) == 2  # by mtime it is a new version, seen once per version


def test_consumer_state_stays_small(sim):
    show = _cli_json("consumer", "show", str(sim.root), "sim")
    assert show["version"] == RUNS and show["pending"] is None
    assert show["mode"] == ("listing" if sim.way == "plain" else "both")
    trib = {p for ps in sim.trib_files.values() for p in ps}
    sealed = set(sim.patterns["beyond"])  # delivered in partitions past the horizon: sealed, not in the ledger
    assert show["ledger_files"] == len(set(_delivered(sim)) - trib - sealed) and show["state_bytes"] < 64_000
    assert len(list((sim.root / "_tributary/consumers/sim").glob("state-*.json"))) <= 3
