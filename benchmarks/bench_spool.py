#!/usr/bin/env python
"""Spool directory ingest: ``trib ingest --source-dir`` against a plain Python loop, and the
planning time of a run over a simulated year of rotations.

**Throughput.** One directory of rotated JSON logs, made once per run of this
script and read by every timed run: ``--lines`` lines (default 1,000,000, about
180 bytes each, ``ts`` ISO-8601 with milliseconds and ``Z``, nearly sorted over
``--hours`` hours) in ``--files`` files named as logrotate names them:
``app.log`` (the live log), ``app.log.1`` .. ``app.log.4`` plain and
``app.log.5.gz`` .. ``app.log.9.gz`` compressed (``--gz-files``), each file's
mtime the time of its last line, so every file but ``app.log`` is rotated away
and quiet longer than the default ``--close-inactive 5m``. Then, timed
``--repeat`` times, interleaved, each run into a fresh table or directory:

* **trib**: the real CLI as a process, bounded mode,
  ``trib -q ingest ROOT --source-dir DIR --app-id A --time-field ts --json``
  (default ``--commit-every``: 10,000 lines per commit), into an hourly table
  (``{yyyy}_{MM}_{dd}/{HH}``, ``dt={yyyy}{MM}{dd}{HH}``; jsonl + gzip, or
  Parquet with the format's default compression, snappy) created beforehand.
* **raw**: a process of this script (``--raw-worker``) running a plain loop:
  the files oldest first (by mtime, as trib reads them), a gzip one (told by its
  magic bytes, as trib tells it) through ``gzip.open``, a plain one through
  ``open``; each line by the file object's iteration, its newline stripped,
  ``json.loads``, ``datetime.fromisoformat(doc["ts"])`` (UTC when naive), its
  hour, and the line written to its hour's directory of the same layout
  (``_common.RawFiles``): the line + newline buffered to 1 MiB chunks, gzip at
  trib's level (``tributary_read.io.sinks.GZIP_LEVEL``), or the decoded record
  buffered into ``pa.Table.from_pylist`` row groups through one
  ``pq.ParquetWriter`` per file (snappy). Every ``--commit-every`` lines (the
  CLI's default), where trib commits and so closes its files, the raw loop
  closes its files and fsyncs each and its directories, one after the other,
  and starts new ones. No positions, no identity of files, no commit, no
  manifest, no dead-letter handling, no threads. **raw, no fsync**: the same
  loop without any fsync.

Both are timed from process start to exit (interpreter start and imports
included), with the CPU seconds (user + sys) and peak RSS of the process from
``wait4``. When trib's median is under 90 % of the raw loop's, ``ingest_dir``
is run once more in this process under cProfile and the top functions reported.

**Scale.** A directory kept at ``--present`` files (default 10,000) while
``--per-day`` rotations a day (default 1,000) roll through it for ``--days``
simulated days (default 365), as logrotate with ``dateext``, ``compress`` and
``delaycompress`` does it: each rotation renames ``app.log`` to
``app.log-SEQ``, compresses the previous ``app.log-SEQ`` to ``.gz`` (same mtime)
and deletes it, writes a new ``app.log`` of ``--scale-lines`` lines, and deletes
the oldest file past ``--present``. File mtimes and ``ts`` follow the simulated
clock, which ends two hours before the run. The year is compressed: rotations
run in batches of ``--batch-days`` days, each batch followed by one bounded
``trib ingest`` process (batches shorter than the retention, so no file is
deleted before a run has read it). At each of ``--sample-days``:

* the wall time and peak RSS of ``trib ingest`` when nothing is new (median of
  ``--noop-repeat`` processes): the planning of a run, listing and matching;
* the same no-op run in this process, with the listing (``Lister()``: scandir,
  open + fstat + head of each file), the matching (``plan()``) and the loading
  of the positions (``SpoolPositions.from_transaction``, snapshot included)
  timed apart;
* the size of the app's last transaction's ``meta["spool"]`` (compact JSON),
  of the commit file holding it, and of the snapshot files under
  ``_tributary/spool/APP/``.

    .venv/bin/python benchmarks/bench_spool.py            # about 10 minutes on 2 cores
    .venv/bin/python benchmarks/bench_spool.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import collections
import gc
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (REPO, RawBatches, WorkDir, emit, fmt_int, fs_type, machine_info, md_table, median,  # noqa: E402
                     shown_args, trib_commit_every)

#: trib / raw lines/s: against the fair durable baseline, and against raw without fsync
GOAL, GOAL_NOFSYNC = 0.95, 0.80
FORMATS = {"jsonl": ("jsonl", "gzip", "jsonl + gzip"), "parquet": ("parquet", "snappy", "Parquet + snappy")}
GZIP_MAGIC = b"\x1f\x8b"
DAY_MS = 86_400_000

WORDS = ("request served user login logout cart checkout payment accepted declined retry timeout cache miss "
         "hit upstream downstream shard replica leader follower commit abort snapshot compaction partition "
         "offset lag consumer producer session token refresh quota exceeded").split()
LEVELS = ("INFO", "INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
METHODS = ("GET", "GET", "GET", "POST", "PUT", "DELETE")
PATHS = ("/api/v2/cart/", "/api/v2/orders/", "/api/v2/users/", "/api/v2/search?q=", "/static/img/")
STATUS = (200, 200, 200, 200, 201, 204, 304, 400, 404, 500)


def _trib_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "trib"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tributary_read.cli.main"]


def _python() -> str:
    return os.path.abspath(sys.executable)


# -- data -----------------------------------------------------------------------------------------
def _iso(ms: int) -> str:
    s, frac = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + f".{frac:03d}Z"


class LineMaker:
    """Realistic JSON access-log lines (about 160-200 bytes) at given event times."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self._sec = (None, "")

    def line(self, ms: int) -> bytes:
        r = self.rng
        s, frac = divmod(ms, 1000)
        if self._sec[0] != s:  # strftime once a second of log
            self._sec = (s, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)))
        msg = " ".join(r.choice(WORDS) for _ in range(r.randint(1, 5)))
        return (f'{{"ts":"{self._sec[1]}.{frac:03d}Z","level":"{r.choice(LEVELS)}","host":"web-{r.randrange(16):02d}",'
                f'"trace":"{r.getrandbits(48):012x}","user":"u{r.randrange(100_000):05d}",'
                f'"req":"{r.choice(METHODS)} {r.choice(PATHS)}{r.randrange(100_000)}",'
                f'"status":{r.choice(STATUS)},"ms":{r.randrange(1, 5000) / 10},"msg":"{msg}"}}').encode()


def _set_mtime(path: Path | str, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def make_logs(directory: Path, n: int, files: int, gz_files: int, hours: float, seed: int, end_ms: int) -> dict:
    """``n`` lines over ``hours`` hours ending at ``end_ms``, in ``files`` rotated files (the oldest
    ``gz_files`` gzip-compressed). Event times nearly sorted: a line may be up to 2 s older than the one
    before it (threads writing one log)."""
    directory.mkdir(parents=True)
    rng = random.Random(seed + 1)
    mk = LineMaker(seed)
    span = int(hours * 3_600_000)
    start = end_ms - span
    per = [n // files + (1 if i < n % files else 0) for i in range(files)]
    hours_seen: set[int] = set()
    text_bytes = 0
    i = 0
    out = []
    for k, count in enumerate(per):  # k = 0: the oldest, app.log.{files-1}
        age = files - 1 - k
        gz = age >= files - gz_files
        name = "app.log" if age == 0 else f"app.log.{age}" + (".gz" if gz else "")
        lines = []
        last = start
        for _ in range(count):
            t = start + (i * span) // n
            t = max(start, t - rng.randrange(2000))
            last = max(last, t)
            hours_seen.add(t // 3_600_000)
            lines.append(mk.line(t))
            i += 1
        data = b"\n".join(lines) + b"\n"
        text_bytes += len(data)
        path = directory / name
        if gz:
            with gzip.open(path, "wb", compresslevel=6) as f:
                f.write(data)
        else:
            path.write_bytes(data)
        _set_mtime(path, last)
        out.append({"name": name, "lines": count, "bytes": path.stat().st_size, "content_bytes": len(data)})
    return {"lines": n, "text_bytes": text_bytes, "files": out, "hour_partitions": len(hours_seen)}


# -- the raw baseline (its own process: ``--raw-worker``) ---------------------------------------------
def raw_worker(fmt: str, codec: str, src: str, out: str, durable: bool = True, every: int = 0) -> dict:
    """Read every file of ``src`` once, oldest first; write each line to its hour's file (``_common.RawFiles``:
    gzip at trib's level, or Parquet row groups), closing the files every ``every`` lines (where trib commits)
    and fsyncing them and their directories if ``durable``. No positions, no commit."""
    import pyarrow  # noqa: F401  (imported up front, as trib's writer does)

    loads, fromiso, utc = json.loads, datetime.fromisoformat, timezone.utc
    files = RawBatches(out, fmt, codec, durable, every)
    dirs: dict[int, str] = {}
    names = sorted(os.listdir(src), key=lambda x: (os.stat(os.path.join(src, x)).st_mtime_ns, x))
    n = 0
    for name in names:
        path = os.path.join(src, name)
        with open(path, "rb") as probe:
            gz = probe.read(2) == GZIP_MAGIC
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
            for line in fh:
                line = line.rstrip(b"\r\n")
                doc = loads(line)
                dt = fromiso(doc["ts"])
                if dt.tzinfo is None:
                    dt = dt.replace(tzinfo=utc)
                hour = int(dt.timestamp()) // 3600
                d = dirs.get(hour)
                if d is None:
                    d = dirs[hour] = time.strftime("%Y_%m_%d/%H", time.gmtime(hour * 3600))
                if fmt == "jsonl":
                    files.files.line(d, line)
                else:
                    files.files.row(d, doc)
                files.counted()
                n += 1
    return {"records": n, "files": files.close(), "fsyncs": files.fsyncs}


# -- timed processes ----------------------------------------------------------------------------------
#: Spawns the measured process and reports its wall time, CPU and peak RSS from wait4. On Linux a child's
#: ru_maxrss starts from the RSS of the process it was forked from (exec keeps the old mm's high-water
#: mark), so a child of this script would report this script's RSS whenever that is larger: this small
#: launcher (about 10 MB) is the one that forks.
LAUNCHER = """
import json, os, sys, time
stat, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.posix_spawn(cmd[0], cmd, os.environ)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(stat, "w") as f:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "wall": wall, "cpu": ru.ru_utime + ru.ru_stime,
               "maxrss_kb": ru.ru_maxrss}, f)
"""


def run_process(cmd: list[str], stdout_path: Path, stderr_path: Path) -> dict:
    """Run ``cmd`` to its end: wall seconds from spawn to exit, CPU seconds (user + sys) and peak RSS (MB)
    of the process from wait4 (through LAUNCHER); its stdout."""
    stat_path = stdout_path.with_name(stdout_path.name + ".stat")
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(stat_path), *cmd], stdin=subprocess.DEVNULL,
                       stdout=out, stderr=err, cwd=REPO, check=True)
    st = json.loads(stat_path.read_text())
    if st["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {st['rc']}: {stderr_path.read_text()[-2000:]}")
    return {"total": st["wall"], "cpu": st["cpu"], "rss_mb": st["maxrss_kb"] / 1024,
            "out": stdout_path.read_text()}


def create_table(root: Path, fmt: str):
    from bench_writer import LAYOUT

    from tributary_read.table.config import Table, TableConfig

    kind, codec, _ = FORMATS[fmt]
    return Table.create(str(root), TableConfig(layout=LAYOUT, format=kind, compression=codec))


def trib_ingest(root: Path, src: Path, app: str, log_base: Path) -> dict:
    cmd = _trib_cmd() + ["-q", "ingest", str(root), "--source-dir", str(src), "--app-id", app,
                         "--time-field", "ts", "--json"]
    r = run_process(cmd, log_base.with_suffix(".out"), log_base.with_suffix(".err"))
    doc = json.loads(r.pop("out"))
    r.update(records=doc["records"], commits=doc["commits"], dead=doc["dead_letters"], lost=len(doc["lost"]),
             files_read=doc["files_read"], finished=doc["finished"], tracked=doc["tracked"], done=doc["done"],
             events=len(doc["events"]))
    return r


def run_trib(fmt: str, src: Path, target: Path) -> dict:
    create_table(target, fmt)
    r = trib_ingest(target, src, f"bench-{uuid.uuid4().hex[:10]}", target.parent / f"{target.name}")
    from tributary_read.table.config import Table
    from tributary_read.table.manifest import KIND_DATA

    r["files"] = sum(1 for f in Table.load(str(target)).log.state().files.values() if f.kind == KIND_DATA)
    return r


def run_raw(fmt: str, src: Path, target: Path, durable: bool = True) -> dict:
    kind, codec, _ = FORMATS[fmt]
    target.mkdir(parents=True)
    cmd = [_python(), str(Path(__file__).resolve()), "--raw-worker", kind, codec, str(src), str(target),
           "fsync" if durable else "no-fsync", str(trib_commit_every())]
    r = run_process(cmd, target.parent / f"{target.name}.out", target.parent / f"{target.name}.err")
    doc = json.loads(r.pop("out"))
    r.update(records=doc["records"], commits=0, files=doc["files"], dead=0, lost=0)
    return r


def _settle() -> None:
    if hasattr(os, "sync"):
        os.sync()
    gc.collect()


def _du(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and "_tributary" not in f.parts)


def run_variant(fmt: str, src: Path, n: int, repeat: int, work: Path) -> dict[str, list[dict]]:
    runs = {"raw": run_raw, "raw_nofsync": lambda f, s, t: run_raw(f, s, t, durable=False), "trib": run_trib}
    results: dict[str, list[dict]] = {k: [] for k in runs}
    keys = list(runs)
    for i in range(repeat):
        for k in (keys if i % 2 == 0 else keys[::-1]):
            target = work / f"{fmt}-{k}-{i}"
            _settle()
            r = runs[k](fmt, src, target)
            if r["records"] != n or r["dead"] or r["lost"]:
                raise RuntimeError(f"{fmt} {k} run {i + 1}: read {r['records']} lines ({r['dead']} dead letters, "
                                   f"{r['lost']} lost files), the directory holds {n}")
            r["out_bytes"] = _du(target)
            results[k].append(r)
            print(f"  {fmt:8s} {k:5s} run {i + 1}/{repeat}: "
                  + ", ".join(f"{kk}={v:.3f}" if isinstance(v, float) else f"{kk}={v}" for kk, v in r.items()),
                  file=sys.stderr, flush=True)
            if i < repeat - 1:
                shutil.rmtree(target, ignore_errors=True)
    return results


# -- checks (not timed) -------------------------------------------------------------------------------
def _count_by_hour_docs(docs) -> collections.Counter:
    c: collections.Counter = collections.Counter()
    for ts in docs:
        c[ts[:13]] += 1
    return c


def table_hours(root: Path) -> collections.Counter:
    """Lines per hour (``ts[:13]``) in a committed table, and in which partition each sits must agree."""
    import pyarrow.parquet as pq

    from tributary_read.table.config import Table
    from tributary_read.table.manifest import KIND_DATA

    out: collections.Counter = collections.Counter()
    for f in Table.load(str(root)).log.state().files.values():
        if f.kind != KIND_DATA:
            continue
        out.update(_hour_check(f.path, _read_ts(root / f.path, pq)))
    return out


def raw_hours(root: Path) -> collections.Counter:
    import pyarrow.parquet as pq

    out: collections.Counter = collections.Counter()
    for p in root.rglob("part-*"):
        out.update(_hour_check(str(p.relative_to(root)), _read_ts(p, pq)))
    return out


_TS = re.compile(rb'^\{"ts":"([^"]{13})', re.M)  # every line this benchmark writes starts with its ts


def _read_ts(path: Path, pq=None) -> list[str]:
    if path.name.endswith(".parquet"):
        return pq.read_table(path, columns=["ts"]).column("ts").to_pylist()
    with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as fh:
        data = fh.read()
    ts = [m.decode() for m in _TS.findall(data)]
    lines = data.count(b"\n")
    if len(ts) != lines:
        raise RuntimeError(f"{path}: {lines} lines, {len(ts)} of them start with a ts")
    return ts


def _hour_check(rel: str, ts: list[str]) -> collections.Counter:
    c = _count_by_hour_docs(ts)
    for h in c:  # '2026-11-25T07' must sit under 2026_11_25/07
        if f"{h[:4]}_{h[5:7]}_{h[8:10]}/{h[11:13]}" not in rel:
            raise RuntimeError(f"{rel} holds lines of hour {h}")
    return c


def source_hours(src: Path) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    for p in src.iterdir():
        out.update(_count_by_hour_docs(_read_ts(p)))
    return out


# -- the profile, when the goal is not met ------------------------------------------------------------
def breakdown(fmt: str, src: Path, work: Path, repeat: int) -> dict:
    """CPU seconds in this process (every thread) of the raw loop, of ``ingest_dir`` with the CLI's default
    commit_every (10,000) and of ``ingest_dir`` with a single commit, on ``src``; medians, interleaved."""
    from tributary_read import SpoolSource, TimeSpec, ingest_dir

    kind, codec, _ = FORMATS[fmt]
    seq = iter(range(1_000_000))

    def raw():
        out = work / f"bd-raw-{fmt}-{next(seq)}"
        out.mkdir()
        return raw_worker(kind, codec, str(src), str(out), True, trib_commit_every())["records"]

    def trib(every):
        def run():
            table = create_table(work / f"bd-trib-{fmt}-{next(seq)}", fmt)
            return ingest_dir(table, SpoolSource(str(src)), f"bd-{uuid.uuid4().hex[:8]}",
                              time_spec=TimeSpec(field="ts"), commit_every=every).records
        return run

    sides = {"raw": raw, "trib": trib(10_000), "trib_one_commit": trib(10**12)}
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    n = 0
    for i in range(repeat):
        for k in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            _settle()
            t0, c0 = time.perf_counter(), time.process_time()
            n = sides[k]()
            got[k].append((time.perf_counter() - t0, time.process_time() - c0))
    for p in work.glob(f"bd-*-{fmt}-*"):
        shutil.rmtree(p, ignore_errors=True)
    return {"lines": n, **{k: {"wall_s": median([w for w, _ in v]), "cpu_s": median([c for _, c in v]),
                               "cpu_us_per_line": median([c for _, c in v]) / n * 1e6} for k, v in got.items()}}


def profile_trib(fmt: str, src: Path, root: Path, top: int) -> dict:
    import cProfile
    import pstats

    from tributary_read import SpoolSource, TimeSpec, ingest_dir

    table = create_table(root, fmt)
    prof = cProfile.Profile()
    t0, c0 = time.perf_counter(), time.process_time()
    prof.enable()
    r = ingest_dir(table, SpoolSource(str(src)), f"prof-{uuid.uuid4().hex[:8]}", time_spec=TimeSpec(field="ts"))
    prof.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    st = pstats.Stats(prof)
    total = sum(v[2] for v in st.stats.values())  # tottime over every function: the profiled thread's time
    rows = []
    for (file, line, func), (cc, nc, tt, ct, _) in sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]:
        where = os.path.relpath(file, REPO) if file.startswith(str(REPO)) else os.path.basename(file)
        rows.append({"function": f"{where}:{line}({func})" if line else func, "calls": nc, "tottime_s": tt,
                     "cumtime_s": ct, "share": tt / total if total else 0.0})
    cum = {}
    for (file, line, func), (cc, nc, tt, ct, _) in st.stats.items():
        key = f"{os.path.basename(file)}:{func}"
        if key in {"ingest.py:_pass", "ingest.py:_commit", "lines.py:take", "writer.py:write", "ingest.py:from_field",
                   "ingest.py:_read_new", "scan.py:plan", "scan.py:__call__", "sinks.py:write_line",
                   "sinks.py:write_row", "ingest.py:parse_time", "layout.py:for_time", "lines.py:take_many",
                   "json_batch.py:write", "json_batch.py:_read", "json_batch.py:_times", "writer.py:write_parsed"}:
            cum[key] = max(cum.get(key, 0.0), ct)
    return {"label": FORMATS[fmt][2], "records": r.records, "commits": r.commits, "wall_s": wall, "cpu_s": cpu,
            "profiled_s": total, "top": rows, "cumulative": {k: v / total for k, v in cum.items()}}


# -- scale: a year of rotations -----------------------------------------------------------------------
class Rotator:
    """logrotate with dateext + compress + delaycompress, ``per_day`` times a simulated day, keeping
    ``present`` files in the directory (the oldest .gz deleted past that).

    Lines are a timestamp and one of 4,096 bodies made beforehand (each made as LineMaker makes lines):
    making 3 million fresh random lines would take longer than ingesting them. Each file's first line
    holds its own time, so no two files share a head."""

    BODIES = 4096

    def __init__(self, directory: Path, present: int, per_day: int, lines: int, seed: int, start_ms: int):
        self.dir, self.present, self.per_day, self.lines = str(directory), present, per_day, lines
        mk = LineMaker(seed)
        self.bodies = [mk.line(0).split(b",", 1)[1] for _ in range(self.BODIES)]
        self.rng = random.Random(seed + 2)
        self.interval = DAY_MS // per_day
        self.seq = 0  # the rotation count; app.log holds interval ``seq``
        self.start = start_ms
        self.kept: collections.deque[str] = collections.deque()  # rotated names, oldest first
        self.written = 0  # lines written to the directory, ever
        self.deleted = 0
        self._live = (b"", 0)  # app.log's content and mtime (ns)
        directory.mkdir(parents=True)
        self._write_live()

    def _write_live(self) -> None:
        t0 = self.start + self.seq * self.interval
        step = self.interval // self.lines
        rnd, bodies = self.rng.randrange, self.bodies
        data = b"".join(b'{"ts":"%s",%s\n' % (_iso(t0 + j * step + rnd(step)).encode(), bodies[rnd(self.BODIES)])
                        for j in range(self.lines))
        mtime_ns = (t0 + self.interval - 1) * 1_000_000
        _write(os.path.join(self.dir, "app.log"), data, mtime_ns)
        self._live = (data, mtime_ns)
        self.written += self.lines

    def rotate(self, count: int) -> None:
        d = self.dir
        for _ in range(count):
            name = f"app.log-{self.seq:09d}"
            os.rename(os.path.join(d, "app.log"), os.path.join(d, name))
            if self.kept:  # delaycompress: the previous rotated file is compressed now
                prev = os.path.join(d, self.kept[-1])
                data, mtime_ns = self._prev
                _write(prev + ".gz", gzip.compress(data, compresslevel=6, mtime=0), mtime_ns)
                os.unlink(prev)
                self.kept[-1] += ".gz"
            self.kept.append(name)
            self._prev = self._live
            self.seq += 1
            self._write_live()
            while len(self.kept) + 1 > self.present:
                os.unlink(os.path.join(d, self.kept.popleft()))
                self.deleted += 1

    def count(self) -> int:
        return len(self.kept) + 1


def _write(path: str, data: bytes, mtime_ns: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.utime(fd, ns=(mtime_ns, mtime_ns))
    finally:
        os.close(fd)


def _timed_wrappers():
    """Patch spool.ingest's Lister, plan and from_transaction to record their durations (in this process)."""
    from tributary_read.spool import ingest as sp
    from tributary_read.spool.positions import SpoolPositions

    times: dict[str, list[float]] = {"list": [], "plan": [], "positions": [], "start": []}
    orig_lister, orig_plan, orig_init = sp.Lister, sp.plan, sp._Run.__init__
    orig_from = SpoolPositions.__dict__["from_transaction"]

    class TimedLister(orig_lister):
        def __call__(self):
            t0 = time.perf_counter()
            try:
                return super().__call__()
            finally:
                times["list"].append(time.perf_counter() - t0)

    def timed_plan(found, state, *args):
        t0 = time.perf_counter()
        try:
            return orig_plan(found, state, *args)
        finally:
            times["plan"].append(time.perf_counter() - t0)

    def timed_from(cls, *a, **kw):
        t0 = time.perf_counter()
        try:
            return orig_from.__func__(cls, *a, **kw)
        finally:
            times["positions"].append(time.perf_counter() - t0)

    def timed_init(run, *a, **kw):
        t0 = time.perf_counter()
        try:
            return orig_init(run, *a, **kw)
        finally:
            times["start"].append(time.perf_counter() - t0)

    def restore():
        sp.Lister, sp.plan, sp._Run.__init__ = orig_lister, orig_plan, orig_init
        SpoolPositions.from_transaction = orig_from

    sp.Lister, sp.plan, sp._Run.__init__ = TimedLister, timed_plan, timed_init
    SpoolPositions.from_transaction = classmethod(timed_from)
    return times, restore


def noop_in_process(root: Path, src: Path, app: str) -> dict:
    from tributary_read import SpoolSource, TimeSpec, ingest_dir
    from tributary_read.table.config import Table

    times, restore = _timed_wrappers()
    try:
        t0 = time.perf_counter()
        table = Table.load(str(root))
        t1 = time.perf_counter()
        r = ingest_dir(table, SpoolSource(str(src)), app, time_spec=TimeSpec(field="ts"))
        t2 = time.perf_counter()
    finally:
        restore()
    if r.records or r.commits:
        raise RuntimeError(f"the no-op run read {r.records} lines in {r.commits} commits")
    return {"load_table_ms": (t1 - t0) * 1000, "run_ms": (t2 - t1) * 1000,
            "positions_ms": sum(times["positions"]) * 1000, "start_ms": sum(times["start"]) * 1000,
            "list1_ms": times["list"][0] * 1000, "plan1_ms": times["plan"][0] * 1000,
            "list2_ms": times["list"][1] * 1000 if len(times["list"]) > 1 else 0.0,
            "plan2_ms": times["plan"][1] * 1000 if len(times["plan"]) > 1 else 0.0}


def commit_sizes(root: Path, log, v0: int, v1: int, app: str) -> dict:
    """The largest ``meta.spool`` (compact JSON) and commit file among the commits ``v0 < v <= v1``, and the
    most open files one of them lists."""
    from tributary_read.table.log import commit_path

    meta = files = opened = 0
    for v in range(v0 + 1, v1 + 1):
        c = log.read_commit(v)
        if c is None or c.transaction is None or c.transaction.app_id != app:
            continue
        spool = c.transaction.meta.get("spool", {})
        meta = max(meta, len(json.dumps(spool, separators=(",", ":")).encode()))
        files = max(files, (root / commit_path(v)).stat().st_size)
        opened = max(opened, max((len(d.get("files", [])) for d in spool.values() if isinstance(d, dict)), default=0))
    return {"max_meta_bytes": meta, "max_commit_bytes": files, "max_open_listed": opened}


def state_sizes(root: Path, app: str, src_name: str) -> dict:
    from tributary_read.table.config import Table
    from tributary_read.table.log import commit_path

    table = Table.load(str(root))
    st = table.log.last_transaction(app)
    meta = st.transaction.meta
    spool = meta.get("spool", {})
    one = spool.get(src_name, spool)  # meta.spool.DIR (before fa53155: meta.spool itself)
    done = one.get("done", {})
    snap_dir = root / "_tributary" / "spool" / app
    snaps = list(snap_dir.iterdir()) if snap_dir.is_dir() else []
    cp = root / commit_path(st.version)
    return {"meta_bytes": len(json.dumps(spool, separators=(",", ":")).encode()),
            "open_files": len(one.get("files", [])),
            "inline_added": len(done.get("added", "")) * 3 // 4 // 24,
            "inline_removed": len(done.get("removed", "")) * 3 // 4 // 16,
            "snapshot_bytes": (root / done["snapshot"]).stat().st_size if done.get("snapshot") else 0,
            "commit_file_bytes": cp.stat().st_size if cp.exists() else -1,
            "snapshot_files": len(snaps), "snapshot_files_bytes": sum(p.stat().st_size for p in snaps),
            "table_version": st.version}


def scale(args, work: Path) -> dict:
    from tributary_read.table.config import Table

    src, root = work / "scale-logs", work / "scale-table"
    create_table(root, "jsonl")
    app = "rotations"
    retention_days = args.present / args.per_day
    if args.batch_days >= retention_days:
        raise SystemExit(f"--batch-days must be under the retention ({retention_days:g} days): a file deleted "
                         "before a run read it would be lost")
    end_ms = (int(time.time() * 1000) - 2 * 3_600_000) // 1000 * 1000
    total_rot = args.present - 1 + args.days * args.per_day
    start_ms = end_ms - (total_rot + 1) * (DAY_MS // args.per_day)
    t0 = time.perf_counter()
    rot = Rotator(src, args.present, args.per_day, args.scale_lines, args.seed + 7, start_ms)
    rot.rotate(args.present - 1)  # the directory as found: ``present`` files, the retention's worth
    made_s = time.perf_counter() - t0
    sizes = [p.stat().st_size for p in src.iterdir()]
    print(f"scale: {rot.count():,} files ({sum(sizes) / 1e6:.1f} MB) made in {made_s:.1f}s", file=sys.stderr,
          flush=True)
    runs: list[dict] = []
    ingested = 0
    rotate_s = 0.0

    log = Table.load(str(root)).log

    def ingest(day: float) -> dict:
        nonlocal ingested
        v0 = log.latest_version()
        r = trib_ingest(root, src, app, work / f"scale-run-{len(runs)}")
        if r["dead"] or r["lost"]:
            raise RuntimeError(f"scale run at day {day:g}: {r['dead']} dead letters, {r['lost']} lost files")
        ingested += r["records"]
        r.update(commit_sizes(root, log, v0, log.latest_version(v0), app))
        runs.append({"day": day, **r})
        print(f"  scale day {day:6.1f}: {r['records']:,} lines, {r['commits']} commits, {r['total']:.2f}s, "
              f"RSS {r['rss_mb']:.0f} MB, {r['tracked']} open, {r['done']} done", file=sys.stderr, flush=True)
        return r

    ingest(0)
    samples: list[dict] = []
    sample_days = ([int(x) for x in args.sample_days.split(",") if x.strip()] if args.sample_days else
                   [1] + [round(args.days * q / 4) for q in (1, 2, 3)])
    sample_days = sorted(set(sample_days) | {args.days})
    sample_days = [d for d in sample_days if 0 < d <= args.days]
    day = 0
    first_batch = len(runs)
    for target in sample_days:
        while day < target:
            step = min(args.batch_days, target - day)
            t = time.perf_counter()
            rot.rotate(step * args.per_day)
            rotate_s += time.perf_counter() - t
            day += step
            ingest(day)
        batches = runs[first_batch:]
        first_batch = len(runs)
        _settle()
        noop = [trib_ingest(root, src, app, work / f"scale-noop-{day}-{i}") for i in range(args.noop_repeat)]
        for r in noop:
            if r["records"] or r["commits"]:
                raise RuntimeError(f"no-op run at day {day}: {r['records']} lines in {r['commits']} commits")
        inproc = [noop_in_process(root, src, app) for _ in range(args.noop_repeat)]
        s = {"day": day, "files_present": rot.count(), "rotations": rot.seq, "lines_written": rot.written,
             "lines_ingested": ingested, "deleted": rot.deleted,
             "noop_s": median([r["total"] for r in noop]), "noop_runs_s": [r["total"] for r in noop],
             "noop_cpu_s": median([r["cpu"] for r in noop]), "noop_rss_mb": max(r["rss_mb"] for r in noop),
             "batches": len(batches), "batch_lines": sum(b["records"] for b in batches),
             "batch_commits": sum(b["commits"] for b in batches), "batch_rss_mb": max(b["rss_mb"] for b in batches),
             "batch_s_median": median([b["total"] for b in batches]),
             "batch_s_max": max(b["total"] for b in batches),
             "batch_max_meta_bytes": max(b["max_meta_bytes"] for b in batches),
             "batch_max_commit_bytes": max(b["max_commit_bytes"] for b in batches),
             "batch_max_open_listed": max(b["max_open_listed"] for b in batches), "tracked": noop[-1]["tracked"], "done": noop[-1]["done"],
             "dir_inode_bytes": os.stat(src).st_size,
             **{k: median([x[k] for x in inproc]) for k in inproc[0]}, **state_sizes(root, app, src.name)}
        samples.append(s)
        print(f"  sample day {day}: " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                                                    for k, v in s.items() if k != "noop_runs_s"),
              file=sys.stderr, flush=True)
    if ingested != rot.written:
        raise RuntimeError(f"scale: {ingested:,} lines ingested, {rot.written:,} written")
    table = Table.load(str(root))
    committed = sum(f.records for f in table.log.state().files.values())
    return {"present": args.present, "per_day": args.per_day, "days": args.days, "batch_days": args.batch_days,
            "lines_per_file": args.scale_lines, "file_bytes_median": median(sizes), "made_s": made_s,
            "rotate_s": rotate_s, "runs": runs, "samples": samples, "lines_written": rot.written,
            "lines_committed": committed, "check": "OK" if committed == rot.written else
            f"FAILED: {committed:,} committed, {rot.written:,} written"}


# -- report ---------------------------------------------------------------------------------------------
def summarise(n: int, runs: list[dict]) -> dict:
    totals = [r["total"] for r in runs]
    med, best = median(totals), min(totals)
    return {"median_s": med, "best_s": best, "lps_median": n / med, "lps_best": n / best,
            "cpu_s_median": median([r["cpu"] for r in runs]), "rss_mb": max(r["rss_mb"] for r in runs),
            "runs_s": totals, "out_bytes": runs[-1]["out_bytes"], "commits": runs[-1]["commits"],
            "files": runs[-1]["files"]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--lines", type=int, default=1_000_000, help="lines in the directory (default 1,000,000)")
    ap.add_argument("--files", type=int, default=10, help="rotated files they are split in (default 10)")
    ap.add_argument("--gz-files", type=int, default=5, help="of which the oldest are gzip (default 5)")
    ap.add_argument("--hours", type=float, default=24.0, help="event-time spread in hours (default 24)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per side and format; median (default 3)")
    ap.add_argument("--formats", default="jsonl,parquet", help="comma list of jsonl,parquet")
    ap.add_argument("--profile-top", type=int, default=15, help="functions listed when a goal is missed (default 15)")
    ap.add_argument("--no-profile", action="store_true", help="no cProfile run, even when a goal is missed")
    ap.add_argument("--breakdown-repeat", type=int, default=2,
                    help="in-process runs per side of the CPU breakdown made with the profile (default 2)")
    ap.add_argument("--present", type=int, default=10_000, help="scale: files kept in the directory (default 10,000)")
    ap.add_argument("--per-day", type=int, default=1000, help="scale: rotations a simulated day (default 1,000)")
    ap.add_argument("--days", type=int, default=91,
                    help="scale: simulated days (default 91, a quarter: nine turnovers of the directory in about 4 "
                         "minutes; 365, the issue's year, takes about 9)")
    ap.add_argument("--batch-days", type=int, default=7,
                    help="scale: days of rotations between two ingest runs (default 7; under the retention)")
    ap.add_argument("--sample-days", help="scale: comma list of days measured (default 1 and each quarter of --days)")
    ap.add_argument("--scale-lines", type=int, default=8, help="scale: lines per rotated file (default 8)")
    ap.add_argument("--noop-repeat", type=int, default=3, help="scale: no-op runs per sample; median (default 3)")
    ap.add_argument("--skip", default="", help="comma list of throughput,scale to skip")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out, on the repo's disk)")
    ap.add_argument("--keep", action="store_true", help="keep the written files")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 50,000 lines; 1,000 files, 100 rotations a day for 30 days")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.lines = min(args.lines, 50_000)
        args.present, args.per_day, args.days, args.batch_days = 1000, 100, 30, 7
        args.sample_days = args.sample_days or "1,30"
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}

    from tributary_read.io.formats import default_compression

    if FORMATS["parquet"][1] != default_compression("parquet"):
        sys.exit(f"bench_spool: Parquet's default compression is now {default_compression('parquet')}")

    info = machine_info()
    result: dict = {"args": vars(args), "machine": info, "variants": {}, "profiles": {}, "scale": None}
    with WorkDir(args.dir, "spool-", args.keep) as work:
        result["workdir_fstype"] = fs_type(work)
        if "throughput" not in skip:
            src = work / "logs"
            t0 = time.perf_counter()
            end_ms = (int(time.time() * 1000) - 3_600_000) // 1000 * 1000
            data = make_logs(src, args.lines, args.files, args.gz_files, args.hours, args.seed, end_ms)
            print(f"made {args.lines:,} lines ({data['text_bytes'] / 1e6:.1f} MB of content) in {args.files} files "
                  f"in {time.perf_counter() - t0:.1f}s: "
                  + ", ".join(f"{f['name']} {f['bytes'] / 1e6:.1f} MB" for f in data["files"]),
                  file=sys.stderr, flush=True)
            result["data"] = data
            expected = source_hours(src)
            for fmt in formats:
                runs = run_variant(fmt, src, args.lines, args.repeat, work)
                last = args.repeat - 1
                checks = {}
                for side, fn in (("trib", table_hours), ("raw", raw_hours)):
                    got = fn(work / f"{fmt}-{side}-{last}")
                    checks[side] = "OK" if got == expected else (
                        f"FAILED: {sum(got.values()):,} lines, {sum(expected.values()):,} expected, per hour "
                        f"{'equal' if set(got) == set(expected) else 'differ'}")
                v = {"label": FORMATS[fmt][2], "raw": summarise(args.lines, runs["raw"]),
                     "raw_nofsync": summarise(args.lines, runs["raw_nofsync"]),
                     "trib": summarise(args.lines, runs["trib"]), "check": checks}
                v["ratio_median"] = v["trib"]["lps_median"] / v["raw"]["lps_median"]
                v["ratio_best"] = v["trib"]["lps_best"] / v["raw"]["lps_best"]
                v["ratios"] = [rw / tr for rw, tr in zip(v["raw"]["runs_s"], v["trib"]["runs_s"])]
                v["ratio_nofsync_median"] = v["trib"]["lps_median"] / v["raw_nofsync"]["lps_median"]
                result["variants"][fmt] = v
                for k in ("raw", "raw_nofsync", "trib"):
                    shutil.rmtree(work / f"{fmt}-{k}-{last}", ignore_errors=True)
            if not args.no_profile and any(v["ratio_median"] < GOAL for v in result["variants"].values()):
                # The newest gzip file and the oldest plain one (hard links): both kinds of file, a fifth of the data.
                psrc = work / "logs-profile"
                psrc.mkdir()
                names = [f["name"] for f in data["files"]]
                picked = [next(x for x in reversed(names) if x.endswith(".gz")),
                          next(x for x in names if not x.endswith(".gz"))]
                for x in picked:
                    os.link(src / x, psrc / x)
                for fmt, v in result["variants"].items():
                    if v["ratio_median"] < GOAL:
                        _settle()
                        p = profile_trib(fmt, psrc, work / f"profile-{fmt}", args.profile_top)
                        p["files"] = picked
                        p["breakdown"] = breakdown(fmt, psrc, work, args.breakdown_repeat)
                        result["profiles"][fmt] = p
                        print(f"  profile {fmt}: {p['records']:,} lines, wall {p['wall_s']:.2f}s cpu {p['cpu_s']:.2f}s",
                              file=sys.stderr, flush=True)
                        shutil.rmtree(work / f"profile-{fmt}", ignore_errors=True)
            shutil.rmtree(src, ignore_errors=True)
        if "scale" not in skip:
            _settle()
            result["scale"] = scale(args, work)
    result["loadavg_after"] = machine_info()["loadavg"]
    md = render(result, argv if argv is not None else sys.argv[1:])
    return emit(md, result, args)


def render(r: dict, argv: list[str]) -> str:
    import shlex

    a = r["args"]
    m = r["machine"]
    shown = shown_args(argv)
    lines = [
        "## Spool directory ingest: `trib ingest --source-dir` against a plain Python loop, and a run's planning "
        "under rotations (`benchmarks/bench_spool.py`)",
        "",
        f"- command: `{' '.join(['.venv/bin/python', 'benchmarks/bench_spool.py'] + [shlex.quote(x) for x in shown])}` "
        "(from the repository root)",
        f"- {m['date']}, git {m['git']}; {m['nproc']} CPUs ({m['cpu']}); python {m['python']}, pyarrow "
        f"{m['pyarrow']}; scratch dir on {r.get('workdir_fstype', '?')}",
        f"- load average (1/5/15 min) before: {m['loadavg']}; after: {r.get('loadavg_after', '?')}"
        + (" **(above 3: the machine was shared; read the same-run ratios, not the absolute rates)**"
           if _load1(m["loadavg"]) > 3 or _load1(r.get("loadavg_after", "0")) > 3 else ""),
        "",
    ]
    d = r.get("data")
    if d:
        gz = [f for f in d["files"] if f["name"].endswith(".gz")]
        lines += [
            f"{d['lines']:,} JSON lines ({d['text_bytes'] / 1e6:.1f} MB of content, "
            f"{d['text_bytes'] / d['lines']:.0f} bytes a line with its newline, `ts` ISO-8601 with ms, nearly "
            f"sorted over {a['hours']:g} h: {d['hour_partitions']} hourly partitions) in {len(d['files'])} files: "
            f"`app.log`, `app.log.1`..`app.log.{len(d['files']) - len(gz) - 1}` plain, "
            f"{len(gz)} older ones gzip ({sum(f['bytes'] for f in gz) / 1e6:.1f} MB on disk for "
            f"{sum(f['content_bytes'] for f in gz) / 1e6:.1f} MB); each file's mtime its last line's time. Made "
            "once, read by every run. Both sides are processes timed from start to exit; median (and best) of "
            f"{a['repeat']} interleaved runs, each into a fresh table or directory.",
            "",
        ]
    if r["variants"]:
        rows = []
        for v in r["variants"].values():
            raw = v["raw"]
            for side, label in (("raw", "raw: read + json.loads + fromisoformat + write per hour, files closed and "
                                        "fsynced where trib commits (fair durable baseline), no commit"),
                                ("raw_nofsync", "raw, the same without fsync"),
                                ("trib", "trib ingest --source-dir (CLI, bounded, default --commit-every 10,000)")):
                if side not in v:
                    continue
                s = v[side]
                ratio = (f"**{v['ratio_median']:.2f}** ({v['ratio_best']:.2f}); no fsync: "
                         f"**{v['ratio_nofsync_median']:.2f}**" if side == "trib" else
                         "1.00" if side == "raw" else f"{s['lps_median'] / raw['lps_median']:.2f}")
                rows.append([v["label"], label, fmt_int(s["lps_median"]) + f" ({fmt_int(s['lps_best'])})",
                             f"{s['median_s']:.2f}", f"{s['cpu_s_median']:.2f}",
                             f"{raw['cpu_s_median'] / s['cpu_s_median']:.2f}", f"{s['rss_mb']:.0f}",
                             f"{s['out_bytes'] / 1e6:.1f}",
                             f"0 / {s['files']}" if side.startswith("raw") else f"{s['commits']} / {s['files']}",
                             ratio])
        lines.append(md_table(["format", "reader", "lines/s median (best)", "time s (median)",
                               "CPU s of the process (median)", "CPU raw/this", "peak RSS MB", "output MB",
                               "commits / files", "ratio trib/raw fsynced lines/s, median (best); to raw no fsync"],
                              rows))
        lines.append("")
        for v in r["variants"].values():
            lines.append(f"- {v['label']}: ratios of the runs (trib/raw, back to back): "
                         f"{', '.join(f'{x:.2f}' for x in v['ratios'])}; output check of the last runs (lines per "
                         f"hour against the source, each in its hour's directory): trib {v['check']['trib']}, raw "
                         f"{v['check']['raw']}.")
        lines.append(f"- goals (trib >= {GOAL:.0%} of the fair durable baseline, >= {GOAL_NOFSYNC:.0%} of raw "
                     "without fsync): " + ", ".join(
            f"{v['label']}: {'met' if v['ratio_median'] >= GOAL else 'NOT met'} ({v['ratio_median']:.0%}), "
            f"{'met' if v.get('ratio_nofsync_median', 0) >= GOAL_NOFSYNC else 'NOT met'} "
            f"({v.get('ratio_nofsync_median', 0):.0%})" for v in r["variants"].values()))
        lines.append("")
    for fmt, p in r.get("profiles", {}).items():
        lines += [
            f"cProfile of `ingest_dir` in this process, {p['label']}, on two of the files ({', '.join(p['files'])}: "
            f"{p['records']:,} lines, {p['commits']} commits; "
            f"{p['wall_s']:.1f} s wall under the profiler), top functions by own time (share of the profiled "
            "thread's time; the writer's encoder threads are not in it):",
            "",
            md_table(["function", "calls", "own s", "share", "cumulative s"],
                     [[f"`{x['function']}`", fmt_int(x["calls"]), f"{x['tottime_s']:.2f}", f"{x['share']:.0%}",
                       f"{x['cumtime_s']:.2f}"] for x in p["top"]]),
            "",
            "- cumulative shares: " + ", ".join(f"`{k}` {v:.0%}" for k, v in sorted(p["cumulative"].items(),
                                                                                    key=lambda kv: -kv[1])),
        ]
        b = p.get("breakdown")
        if b:
            raw_us, trib_us, one_us = (b[k]["cpu_us_per_line"] for k in ("raw", "trib", "trib_one_commit"))
            gap = trib_us - raw_us
            lines.append(
                f"- without the profiler, same {b['lines']:,} lines in this process (CPU of every thread, median of "
                f"{a['breakdown_repeat']}): raw loop {raw_us:.1f} us a line, `ingest_dir` {trib_us:.1f} us "
                f"(10,000 lines a commit), `ingest_dir` with one commit {one_us:.1f} us: of trib's extra "
                f"{gap:.1f} us a line, {(trib_us - one_us):.1f} go to the commits"
                + (f" ({(trib_us - one_us) / gap:.0%})" if gap > 0 else "") + f" and {(one_us - raw_us):.1f} "
                "to the per-line path.")
        lines.append("")
    s = r.get("scale")
    if s:
        lines += [
            f"Scale: a directory kept at {s['present']:,} files while {s['per_day']:,} rotations a day roll through "
            f"it for {s['days']} simulated days ({s['samples'][-1]['rotations']:,} rotations; logrotate with "
            f"dateext, compress, delaycompress: rename `app.log` to `app.log-SEQ`, gzip the previous one, write a "
            f"new `app.log` of {s['lines_per_file']} lines ({s['file_bytes_median'] / 1e3:.1f} KB a gzip file), "
            f"delete the oldest). mtimes and `ts` follow the simulated clock. Time is compressed: rotations in "
            f"batches of {s['batch_days']} days, each followed by one bounded `trib ingest` process "
            f"({len(s['runs'])} runs in all; {s['lines_written']:,} lines, check: {s['check']}). At each sample, "
            "a bounded run that finds nothing new: as a process (median of "
            f"{a['noop_repeat']}), and in this process with its parts timed (medians).",
            "",
        ]
        rows = []
        for x in s["samples"]:
            rows.append([x["day"], fmt_int(x["rotations"]),
                         f"{x['files_present']:,} ({x['dir_inode_bytes'] / 1e3:.0f} KB)", f"{x['noop_s']:.2f}",
                         f"{x['noop_cpu_s']:.2f}", f"{x['noop_rss_mb']:.0f}", f"{x['list1_ms']:.0f}",
                         f"{x['plan1_ms']:.0f}", f"{x['list2_ms']:.0f} / {x['plan2_ms']:.0f}",
                         f"{x['start_ms']:.0f} ({x['positions_ms']:.0f})", f"{x['run_ms']:.0f}"])
        lines.append(md_table(["day", "rotations so far", "files present (size of the directory itself)",
                               "no-op `trib ingest` s (process)",
                               "its CPU s", "its peak RSS MB", "listing ms (1st pass)", "matching ms (1st pass)",
                               "2nd pass listing / matching ms", "start: log state, positions ms (of which "
                               "positions + snapshot)", "whole no-op `ingest_dir` ms"], rows))
        lines.append("")
        rows = []
        for x in s["samples"]:
            rows.append([x["day"], f"{x['batches']}: {x['batch_lines']:,} lines, {x['batch_commits']} commits",
                         f"{x['batch_s_median']:.1f} / {x['batch_s_max']:.1f}",
                         f"{x['batch_rss_mb']:.0f}", f"{x['tracked']} / {x['done']:,}",
                         f"{x['inline_added']} / {x['inline_removed']}", f"{x['meta_bytes']:,}",
                         f"{x['commit_file_bytes']:,}",
                         f"{x['batch_max_meta_bytes']:,} / {x['batch_max_commit_bytes']:,} / "
                         f"{x['batch_max_open_listed']:,}", f"{x['snapshot_bytes'] / 1e3:.0f}",
                         f"{x['snapshot_files']:,} / {x['snapshot_files_bytes'] / 1e6:.1f}", x["table_version"]])
        lines.append(md_table(["day", "ingest runs since the last sample", "their s (median / max)",
                               "their peak RSS MB (max)",
                               "open / done files", "inline done changes (added / removed)",
                               "`meta.spool` bytes (compact JSON)", "commit file bytes",
                               "largest in those runs' commits: `meta.spool` bytes / commit file bytes / open "
                               "files listed", "current snapshot KB",
                               "snapshot files / MB under `_tributary/spool/APP`", "table version"], rows))
        rss = [x["rss_mb"] for x in s["runs"]]
        secs = [x["total"] for x in s["runs"][1:]]
        lines += ["", f"- every batch's ingest process: peak RSS {min(rss):.0f}-{max(rss):.0f} MB, "
                      f"{min(secs):.1f}-{max(secs):.1f} s; the directory was made in {s['made_s']:.0f} s, the "
                      f"rotations took {s['rotate_s']:.0f} s (not timed)."]
    return "\n".join(lines).rstrip()


def _load1(text: str) -> float:
    try:
        return float(str(text).split()[0])
    except (ValueError, IndexError):
        return 0.0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--raw-worker":
        _, _, kind, codec, src_dir, out_dir, sync, every = sys.argv
        print(json.dumps(raw_worker(kind, codec, src_dir, out_dir, sync == "fsync", int(every))))
    else:
        main()
