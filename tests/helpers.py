"""Test helpers shared by the end-to-end suites (sources, table reads, snapshots)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Callable

from tributary_read.processes import group_pids
from tributary_read.table.layout import Layout

__all__ = ["group_pids"]  # re-exported: the tests' process-group check is the library's

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
BASE_MS = 1_592_960_400_000  # 2020-06-24T01:00:00Z


def _source_lines(start: int, stop: int, seed: int, hours: int):
    rng = random.Random(seed)
    for i in range(stop):
        ts = BASE_MS + rng.randrange(hours * 3_600_000)
        if i >= start:
            yield json.dumps({"id": i, "ts": ts, "msg": f"event {i}"}) + "\n"


def make_source(path: Path, n: int, seed: int = 7, hours: int = 48) -> Path:
    """n jsonl records with unique ids and event times spread over ``hours``."""
    with open(path, "w") as f:
        f.writelines(_source_lines(0, n, seed, hours))
    return path


def grow_source(path: Path, n: int, extra: int, seed: int = 7, hours: int = 48) -> Path:
    """Append records n..n+extra-1, as if a live log grew: the file then equals make_source(path, n + extra)."""
    with open(path, "a") as f:
        f.writelines(_source_lines(n, n + extra, seed, hours))
    return path


def read_records(data: bytes, name: str) -> list[dict]:
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    return [json.loads(line) for line in data.splitlines() if line]


def committed_records(storage, files: list[dict]) -> list[tuple[dict, str]]:
    """(record, directory) for every record of the committed files."""
    out = []
    for f in files:
        data = storage.read(f["path"])
        assert len(data) == f["size"], f"{f['path']}: size {len(data)} != committed {f['size']}"
        directory = f["path"].rsplit("/", 1)[0]
        out.extend((r, directory) for r in read_records(data, f["path"]))
    return out


def visible_records(storage) -> list[tuple[dict, str]]:
    """What a plain directory walk (Hive reading the dirs) sees: no hidden files, no metadata."""
    out = []
    for info in storage.list():
        parts = info.path.split("/")
        if parts[0] == "_tributary" or any(p.startswith(("_", ".")) for p in parts):
            continue
        directory = info.path.rsplit("/", 1)[0]
        out.extend((r, directory) for r in read_records(storage.read(info.path), info.path))
    return out


def assert_exactly_once(records: list[tuple[dict, str]], n: int, layout: Layout | None = None) -> None:
    """Each id 0..n-1 exactly once, each in the directory of its event time."""
    layout = layout or Layout(LAYOUT, PARTITION)
    counts = Counter(r["id"] for r, _ in records)
    dup = [i for i, c in counts.items() if c > 1]
    missing = sorted(set(range(n)) - set(counts))
    assert not dup, f"{len(dup)} duplicated ids, e.g. {dup[:5]}"
    assert not missing, f"{len(missing)} missing ids, e.g. {missing[:5]}"
    assert len(records) == n
    wrong = [(r["id"], d) for r, d in records if layout.for_time(r["ts"]).path != d]
    assert not wrong, f"{len(wrong)} records in the wrong partition, e.g. {wrong[:3]}"


def snapshot(root: str | os.PathLike) -> dict[str, str]:
    """relpath -> sha1 of every file under a local root (to prove nothing changed)."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha1(f.read()).hexdigest()
    return out


def put(root: Path, rel: str, mtime_ms: int, data: bytes = b"x\n") -> Path:
    """Write ``root/rel`` with an exact mtime (ms), as a late or rsync'd file would have."""
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    os.utime(p, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    return p


def kill9(p) -> bool:
    """The default ``send`` of :func:`signal_loop`: SIGKILL, a hit if the process was still alive."""
    import signal

    p.send_signal(signal.SIGKILL)
    p.wait()
    return True


def signal_loop(cmd, hits_wanted: int, rng, window=(0.1, 0.5), env=None, send=kill9, started=None,
                spawn=None) -> int:
    """Start ``cmd``, call ``send(process)`` after a random delay, repeat; return the hits.

    ``send`` signals the live process, waits for it, checks how it ended and
    returns whether the signal counted (landed while the work was under way).
    A run that ends before the signal is due must succeed; then the loop stops.
    ``started(process)``: the delay counts from when it says the work began, not
    from the process start, whose length varies with the machine's load. ``spawn(cmd)``: starts
    the process instead of ``Popen`` (a :class:`forkserver.ForkServer`'s, whose environment is its own).
    """
    import subprocess
    import time

    from conftest import REPO

    env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO)}
    hits = 0
    for _ in range(hits_wanted * 3):
        p = spawn(cmd) if spawn else subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                                      env=env)
        while started is not None and p.poll() is None and not started(p):
            time.sleep(0.005)
        time.sleep(rng.uniform(*window))
        if p.poll() is None:
            hits += bool(send(p))
        else:
            err = p.stderr.read().decode()
            assert p.returncode == 0, f"ingest failed between signals: {err}"
            return hits  # finished before we could signal it again
        p.stderr.close()
        if hits >= hits_wanted:
            break
    return hits


def opened(path) -> Callable:
    """A ``started`` for :func:`signal_loop`: the process holds ``path`` open (an ingest reading its source)."""
    target = str(Path(path).resolve())

    def check(p) -> bool:
        try:
            fds = os.listdir(f"/proc/{p.pid}/fd")
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(f"/proc/{p.pid}/fd/{fd}") == target:
                    return True
            except OSError:
                pass
        return False

    return check


def signal_growing_source(cmd, src, n: int, hits_wanted: int, rng, hours=48, **kw) -> tuple[int, int]:
    """Signal the ingest ``hits_wanted`` times; return (hits, records now in the source).

    A fast machine can finish the source between signals. Rather than count on
    timing, the source then grows the way a live log does (appended lines with
    new ids) and the signals go on, so every run lands them whatever the speed.
    """
    hits = signal_loop(cmd, hits_wanted, rng, **kw)
    for _ in range(10):
        if hits >= hits_wanted:
            break
        # Whole thousands keep every commit full (250 or 100 records), so a
        # commit count can still be compared with n // commit_every.
        extra = max(1000, n // 2000 * 1000)
        grow_source(src, n, extra, hours=hours)
        n += extra
        hits += signal_loop(cmd, hits_wanted - hits, rng, **kw)
    return hits, n


def staged_files(dirs, marker: str = "") -> set[str]:
    """The staged (``.part-*.inprogress``) files in ``dirs`` whose names hold ``marker``, by one scandir
    per directory. The kill tests poll this every few ms to time a kill in a write's own progress: a
    walk of the whole table took a core from the work it waited for, and longer as the table grew.
    A directory not there yet holds nothing."""
    found: set[str] = set()
    for d in dirs:
        try:
            with os.scandir(d) as it:
                found.update(f"{d}/{e.name}" for e in it
                             if e.name.startswith(".part-") and e.name.endswith(".inprogress") and marker in e.name)
        except FileNotFoundError:
            pass
    return found


def one_line_error(proc, code: int, *words: str) -> str:
    """A refused run: exit ``code``, one ``trib: error:`` line on stderr holding ``words``, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trib: error: ") and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def source_users(pattern: str) -> set[str]:
    """The library and CLI files (repo-relative) whose text matches ``pattern``: who calls an owner."""
    import re

    repo = Path(__file__).resolve().parents[1]
    return {p.relative_to(repo).as_posix() for d in ("tributary_read", "cli") for p in (repo / d).rglob("*.py")
            if re.search(pattern, p.read_text())}


