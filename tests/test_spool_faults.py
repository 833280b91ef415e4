"""A rotating directory under real signals (issue 22, item 5): kill -9 at random moments of ``--follow``
while a logging process appends, rotates by rename, gzips and deletes; SIGTERM and SIGINT.

Every run ends with every line the logger wrote in the table exactly once, in the partition of its event
time, nothing reported lost, and ``trib verify`` exiting 0.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO, TRIB, run_trib
from test_spool import _lines, _table, _write, exactly, heads_cover_positions, ingest

pytestmark = pytest.mark.integration

WRITER = [sys.executable, str(Path(__file__).parent / "spool_writer.py")]
#: kill -9 landings wanted; TRIB_KILL_TRIALS raises it.
TRIALS = int(os.environ.get("TRIB_KILL_TRIALS", "20"))


def _follow(root, d) -> list[str]:
    return [*TRIB, "ingest", str(root), "--source-dir", str(d), "--pattern", "app.log*", "--app-id", "a",
            "--time-field", "ts", "--follow", "--commit-interval", "200ms", "--commit-every", "700",
            "--close-inactive", "1s"]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _drain(root, d) -> dict:
    """After the logger is done: a bounded run reads the rest and must find nothing lost."""
    p = run_trib("ingest", str(root), "--source-dir", str(d), "--pattern", "app.log*", "--app-id", "a",
                 "--time-field", "ts", "--close-inactive", "0s", "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _plain_reader_ids(root: Path) -> Counter:
    """Each line's id as a plain directory reader sees the table (Hive over the hour directories): every file
    but hidden ones (``_``/``.`` names: trib's metadata, staged files) and none of trib's own bookkeeping."""
    ids: Counter = Counter()
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(("_", "."))]
        for name in names:
            if name.startswith(("_", ".")):
                continue
            raw = Path(dirpath, name).read_bytes()
            ids.update(json.loads(line)["i"] for line in (gzip.decompress(raw) if name.endswith(".gz") else raw).splitlines())
    return ids


def _commits(root: Path) -> int:
    log = root / "_tributary" / "log"
    return len(os.listdir(log)) if log.exists() else 0


def test_signals_at_random_moments_of_follow_while_the_logger_rotates_every_way(tmp_path):
    """The randomized trial: a logger rotating by rename, by copytruncate (writing on through the truncated
    descriptor) and compressing the rotation before, in place and a piece at a time (delaycompress); ``--follow``
    ended by SIGKILL, SIGTERM or SIGINT at random moments, each run started again. Then a bounded run drains
    the directory: every line exactly once for trib's reader and for a plain directory reader, and no run
    reported a loss (nothing was lost: the logger writes nothing between a copy and its truncation)."""
    root, d = _table(tmp_path, fmt="jsonl"), tmp_path / "logs"
    d.mkdir()
    rng = random.Random(int(os.environ.get("TRIB_SPOOL_SEED", "44")))
    lines = 24_000  # 20 s of a logger rotating every second and keeping ten rotations
    writer = subprocess.Popen([*WRITER, str(d), "--lines", str(lines), "--rate", "1200", "--rotate", "1200",
                               "--keep", "16", "--mode", "mixed", "--seed", str(rng.randrange(1 << 30))],
                              stdout=subprocess.PIPE)
    sent: Counter = Counter()
    errors = []
    try:
        while sum(sent.values()) < TRIALS:
            before = _commits(root)
            p = subprocess.Popen(_follow(root, d), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
            # Each run makes progress before its signal (a busy machine starts a process slowly, and rotations
            # deleted past --keep before any run read them would be lost at the source), then the signal
            # lands at a random moment of its reads and commits.
            deadline = time.monotonic() + 60
            while (_commits(root) == before and writer.poll() is None and p.poll() is None
                   and time.monotonic() < deadline):
                time.sleep(0.02)
            progressed = _commits(root) != before
            time.sleep(rng.uniform(0.0, 1.0) if progressed else rng.uniform(0.5, 1.5))
            if p.poll() is not None:
                errors.append(p.stderr.read().decode())
                break
            # SIGTERM and SIGINT only once the run is reading: one that lands while the interpreter starts ends
            # it the plain way, before trib is there to handle it (after the logger is done, nothing commits).
            sig = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGINT]) if progressed \
                else signal.SIGKILL
            p.send_signal(sig)
            code = p.wait(timeout=60)
            err = p.stderr.read().decode()
            p.stderr.close()
            if "lost" in err or "deleted" in err or code not in (0, -sig, 128 + sig):
                errors.append(f"{sig.name} -> exit {code}: {err}")
            sent[sig.name] += 1
    finally:
        assert writer.wait(timeout=120) == 0
    assert not errors, errors
    r = _drain(root, d)
    assert r["lost"] == [], r
    exactly(root, lines)
    plain = _plain_reader_ids(root)
    assert sorted(plain) == list(range(lines)) and max(plain.values()) == 1
    assert _drain(root, d)["records"] == 0
    assert heads_cover_positions(root) >= TRIALS // 2  # every run but the last few committed something
    print(f"signals sent: {dict(sent)}")


def _wait_stopped(p, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while True:
        with open(f"/proc/{p.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        assert p.poll() is None, p.stderr.read().decode()
        assert time.monotonic() < end, "the run never reached its next listing"
        time.sleep(0.02)


def test_a_file_that_grows_between_the_listing_and_the_read_is_known_by_what_was_read(tmp_path):
    """The logger writes between a follow run's listing and its read (the run is held stopped at the
    listing), the run commits, is killed, and the file is rotated and compressed beside the compressed copy
    of a finished file whose lines start like its own. Once a run read past what its listing saw of a file
    found empty, committed it known by no bytes at all, and the next run took the finished file's copy for
    it: both files' lines twice."""
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    _write(d / "app.log.1", range(100))
    os.utime(d / "app.log.1", (time.time() - 60,) * 2)
    (d / "app.log").write_bytes(b"")
    assert ingest(root, d, "--close-inactive", "0s")["finished"] == 1
    p = subprocess.Popen([*TRIB, "ingest", str(root), "--source-dir", str(d), "--app-id", "a", "--time-field",
                          "ts", "--follow", "--commit-every", "10", "--close-inactive", "0s"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env={**_env(), "TRIB_STOP_AT": "spool.listed"})
    try:
        _wait_stopped(p)  # listed: app.log is empty
        _write(d / "app.log", range(100, 150))
        for _ in range(2):  # the read after that listing, then one after a listing that saw the lines
            p.send_signal(signal.SIGCONT)
            time.sleep(0.1)
            _wait_stopped(p)
    finally:
        p.kill()
        p.wait()
        p.stderr.close()
    assert heads_cover_positions(root) >= 1
    os.rename(d / "app.log", d / "app.log.2")
    for n in ("app.log.1", "app.log.2"):
        (d / f"{n}.gz").write_bytes(gzip.compress((d / n).read_bytes()))
        (d / n).unlink()
    assert _lines([0])[:20] == _lines([100])[:20]  # the lines of both files start alike
    ingest(root, d, "--close-inactive", "0s")
    exactly(root, 150)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_make_a_clean_last_commit_and_exit_0(tmp_path, sig):
    root, d = _table(tmp_path, fmt="jsonl"), tmp_path / "logs"
    d.mkdir()
    lines = 6_000
    writer = subprocess.Popen([*WRITER, str(d), "--lines", str(lines), "--rate", "3000", "--rotate", "1000"],
                              stdout=subprocess.PIPE)
    p = subprocess.Popen([*_follow(root, d)[:-6], "--commit-interval", "60s", "--close-inactive", "1s", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    # The signal must find the run reading (a staged file open), not still starting: a signal that
    # lands while the modules load ends the process the plain way, with nothing read (under load a
    # fixed 1.5 s was not always enough).
    deadline = time.monotonic() + 60
    while p.poll() is None and not any(root.rglob(".part-*.inprogress")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    result = json.loads(out)
    assert result["stopped_by"] == signal.Signals(sig).name
    # The interval was a minute: what the run read reached the table only through its last commit.
    assert result["records"] > 0 and result["commits"] >= 1
    from tributary_read.table.config import Table

    committed = Table.load(str(root)).log.last_transaction("a").transaction.offsets["logs"] + 1
    assert committed == result["records_committed"] == result["records"]
    assert writer.wait(timeout=60) == 0
    _drain(root, d)
    exactly(root, lines)


def _stepped(root, d, *extra, steps, env=None) -> tuple[int, str, str]:
    """A bounded run held at each listing (``TRIB_STOP_AT=spool.listed``): ``steps[k]()`` acts on the directory
    while the run is stopped at its k-th listing, then the run goes on. Returns (exit code, stdout, stderr)."""
    p = subprocess.Popen([*TRIB, "ingest", str(root), "--source-dir", str(d), "--app-id", "a", "--time-field", "ts",
                          "--json", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**_env(), "TRIB_STOP_AT": "spool.listed", **(env or {})})
    try:
        for step in steps:
            _wait_stopped(p)
            step()
            p.send_signal(signal.SIGCONT)
        while p.poll() is None:  # later listings: let them go
            try:
                out, err = p.communicate(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                with open(f"/proc/{p.pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "T":
                        p.send_signal(signal.SIGCONT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out.decode(), err.decode()


def _copytruncate(d, new_ids, hour=15) -> None:
    """logrotate's copytruncate, with the program writing on at once: copy, truncate in place, new lines."""
    (d / "app.log.1").write_bytes((d / "app.log").read_bytes())
    with open(d / "app.log", "r+b") as f:
        f.truncate(0)
    _write(d / "app.log", new_ids, hour=hour)


def test_copytruncate_between_the_listing_and_the_read_is_never_read_as_growth(tmp_path):
    """The file is copied, truncated and written again (longer than what was read) after the run listed it and
    before it reads: it keeps its inode, so only its bytes can tell it is not the file read so far. Once the
    run read the new lines from the old position, then again from the start (250 of 400 lines twice), and the
    copy no longer fitted the position, so a later run reported it deleted before it was read to its end."""
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    _write(d / "app.log", range(200))
    ingest(root, d)
    _write(d / "app.log", range(200, 260))  # unread when the copy is made: the copy holds them
    code, out, err = _stepped(root, d, steps=[lambda: _copytruncate(d, range(260, 660))])
    assert code == 0, err
    assert "lost" not in err and json.loads(out)["lost"] == [], err
    again = ingest(root, d, "--close-inactive", "0s")
    assert again["lost"] == [], again
    exactly(root, 660)
    assert ingest(root, d, "--close-inactive", "0s")["records"] == 0
