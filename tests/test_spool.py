"""A directory of rotating log files, exactly once (issue 22): every rotation tool's corner, on real files.

Each test writes numbered JSON lines, does to the directory what a rotation
tool does (rename, gzip, copytruncate, delete, reuse an inode), ingests through
the CLI or the Python API, and checks every line is in the table exactly once,
in the partition of its event time, or that the loss is reported the way the
docs say.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import invoke_trib, run_trib
from helpers import LAYOUT, PARTITION

pytestmark = pytest.mark.unit


def _table(tmp_path, fmt="jsonl", name="t") -> Path:
    root = tmp_path / name
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", fmt,
                check=True)
    return root


def _lines(ids, hour=10) -> bytes:
    return b"".join(json.dumps({"ts": f"2026-11-26T{hour + i % 3:02d}:{i % 60:02d}:00Z", "i": i}).encode() + b"\n"
                    for i in ids)


def _write(path: Path, ids, mode="ab", hour=10) -> None:
    with open(path, mode) as f:
        f.write(_lines(ids, hour))


def ingest(root, d, *extra, app="a", code=0) -> dict:
    proc = invoke_trib("ingest", str(root), "--source-dir", str(d), "--app-id", app, "--time-field", "ts",
                       "--json", *extra)
    assert proc.returncode == code, proc.stderr + proc.stdout
    return json.loads(proc.stdout) if code == 0 else {"stderr": proc.stderr, "stdout": proc.stdout}


def table_ids(root) -> Counter:
    """Each line's id, from the committed files, checking it lies in its event time's partition."""
    files = json.loads(invoke_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
    ids: Counter = Counter()
    for f in files:
        raw = (root / f["path"]).read_bytes()
        for line in (gzip.decompress(raw) if f["path"].endswith(".gz") else raw).splitlines():
            doc = json.loads(line)
            ts = doc["ts"]
            assert f["path"].startswith(f"{ts[:4]}_{ts[5:7]}_{ts[8:10]}/{ts[11:13]}/"), (f["path"], ts)
            ids[doc["i"]] += 1
    return ids


def exactly(root, n: int) -> None:
    ids = table_ids(root)
    assert sorted(ids) == list(range(n)), sorted(set(range(n)) - set(ids))[:10]
    dup = {k: v for k, v in ids.items() if v > 1}
    assert not dup, f"duplicated: {list(dup.items())[:10]}"
    assert invoke_trib("verify", str(root)).returncode == 0


def heads_cover_positions(root, name="logs") -> int:
    """Every commit's open files are known by a head covering every byte read (a file shorter than 1 KiB
    is known by all of it): else a later scan could take another file sharing those few bytes for it.
    Returns the commits checked."""
    from tributary_read.spool.identity import HEAD
    from tributary_read.table.config import Table

    n = 0
    for c in Table.load(str(root)).log.commits():
        spool = (c.transaction.meta.get("spool") or {}).get(name) if c.transaction else None
        for f in (spool or {}).get("files", []):
            assert f["hlen"] >= min(HEAD, f["pos"]), (c.version, f)
        n += spool is not None
    return n


def last_meta(root, name="logs") -> dict:
    """The app's last transaction meta, with the directory's own state as ``spool``."""
    from tributary_read.table.config import Table

    meta = dict(Table.load(str(root)).log.last_transaction("a").transaction.meta)
    return {**meta, "spool": meta["spool"][name]}


def test_a_rename_continues_the_same_file_from_its_offset(tmp_path):
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    _write(d / "app.log", range(100))
    assert ingest(root, d)["records"] == 100
    _write(d / "app.log", range(100, 130))  # written before the rotation, not yet read
    os.rename(d / "app.log", d / "app.log.1")
    _write(d / "app.log", range(130, 150))
    r = ingest(root, d, "--close-inactive", "0s")
    assert r["records"] == 50 and r["finished"] == 1
    exactly(root, 150)
    assert ingest(root, d, "--close-inactive", "0s")["records"] == 0


def test_a_compressed_copy_is_not_read_twice_and_finishes_a_half_read_file(tmp_path):
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    _write(d / "app.log", range(50))
    ingest(root, d)
    _write(d / "app.log", range(50, 80))
    os.rename(d / "app.log", d / "app.log.1")
    _write(d / "app.log", range(80, 90))
    (d / "app.log.1.gz").write_bytes(gzip.compress((d / "app.log.1").read_bytes()))
    (d / "app.log.1").unlink()  # gzip's own order: the copy is complete before the original goes
    r = ingest(root, d, "--close-inactive", "0s")
    assert r["records"] == 40, r  # 30 from the compressed copy (from offset 50 on), 10 from the new app.log
    exactly(root, 90)
    # A .gz never seen uncompressed is read whole; one of a finished file is not read at all.
    (d / "other.log.gz").write_bytes(gzip.compress(_lines(range(90, 100))))
    (d / "app.log.1.gz.bak").write_bytes((d / "app.log.1.gz").read_bytes())
    assert ingest(root, d, "--close-inactive", "0s")["records"] == 10
    exactly(root, 100)


def test_a_new_file_on_a_reused_inode_is_read_from_its_start(tmp_path):
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    _write(d / "app.log", range(200))
    ingest(root, d)
    ino = os.stat(d / "app.log").st_ino
    os.unlink(d / "app.log")
    _write(d / "app.log", range(200, 260), mode="wb", hour=14)  # ext4 and tmpfs hand out the inode just freed
    assert os.stat(d / "app.log").st_ino == ino, "the file system did not reuse the inode"
    assert os.path.getsize(d / "app.log") < 200 * 40  # shorter than what was read of the old file
    r = ingest(root, d)
    assert r["records"] == 60, r
    ids = table_ids(root)
    assert all(ids[i] == 1 for i in range(260))
    assert [e["event"] for e in last_meta(root)["spool_events"]] == ["truncated"]


def test_copytruncate_keeps_what_the_copy_holds_and_loses_only_its_window(tmp_path):
    """copytruncate copies the file, then truncates it: lines written between the two are lost by its nature
    (docs/sources.md); everything in the copy and after the truncation is read once."""
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    _write(d / "app.log", range(100))
    ingest(root, d)
    _write(d / "app.log", range(100, 120))  # unread when the copy is made: the copy holds them
    (d / "app.log.1").write_bytes((d / "app.log").read_bytes())
    _write(d / "app.log", range(1000, 1005))  # between the copy and the truncation: lost
    with open(d / "app.log", "r+b") as f:
        f.truncate(0)
    _write(d / "app.log", range(120, 150), hour=15)
    r = ingest(root, d, "--close-inactive", "0s")
    assert r["records"] == 50
    ids = table_ids(root)
    assert sorted(ids) == list(range(150)) and max(ids.values()) == 1
    events = last_meta(root)["spool_events"]
    assert events[0]["event"] == "truncated" and events[0]["name"] == "app.log"
    assert events[0]["committed_bytes"] > events[0]["size"]


def test_a_partial_last_line_waits_for_its_newline_then_ends_a_rotated_file(tmp_path):
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    line = _lines([10])
    (d / "app.log").write_bytes(_lines(range(10)) + line[:15])
    assert ingest(root, d, "--close-inactive", "0s")["records"] == 10  # the newest file: held back
    with open(d / "app.log", "ab") as f:
        f.write(line[15:] + _lines([11])[:-1])  # 10 completes; 11 has no newline yet
    os.rename(d / "app.log", d / "app.log.1")
    _write(d / "app.log", range(12, 14))
    os.utime(d / "app.log.1", (1, 1))  # rotated away and quiet for longer than close-inactive
    r = ingest(root, d, "--close-inactive", "1m")
    assert r["records"] == 4 and r["finished"] == 1  # 10, 11 (taken as the file's last record), 12, 13
    exactly(root, 14)


def test_a_file_deleted_half_read_is_lost_loudly(tmp_path):
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    _write(d / "app.log", range(100))
    _write(d / "new.log", range(100, 110))
    from tributary_read.spool.ingest import SpoolSource, ingest_dir
    from tributary_read.table.config import Table
    from tributary_read.write.ingest import StopRequest, TimeSpec

    stop = StopRequest()
    seen = []

    def on_commit(c):
        seen.append(c)
        stop.signum = 15  # stop after the first commit: app.log is half read
    t = Table.load(str(root))
    r = ingest_dir(t, SpoolSource(str(d)), "a", time_spec=TimeSpec(field="ts"), commit_every=40,
                   on_commit=on_commit, stop=stop)
    assert r.stopped_by == "SIGTERM" and r.records_committed == 40
    unread = os.path.getsize(d / "app.log") - sum(len(x) for x in _lines(range(40)).splitlines(keepends=True))
    (d / "app.log").unlink()
    out = ingest(root, d, code=13)
    assert f"{unread} bytes unread" in out["stderr"] and "app.log" in out["stderr"]
    events = last_meta(root)["spool_events"]
    assert events == [{"source": "logs", "event": "lost", "name": "app.log", "unread_bytes": unread}]
    ids = table_ids(root)
    assert sorted(ids) == list(range(40)) + list(range(100, 110)) and max(ids.values()) == 1
    assert ingest(root, d)["records"] == 0  # reported once, by the commit that recorded it
    assert ingest(root, d, "--allow-lost")["lost"] == []


@pytest.mark.parametrize("action", ["delete", "rename"])
def test_on_complete_acts_only_after_the_commit_and_a_crash_between_is_harmless(tmp_path, action):
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    _write(d / "app.log.1", range(100))
    os.utime(d / "app.log.1", (1, 1))
    _write(d / "app.log", range(100, 110))
    args = ["ingest", str(root), "--source-dir", str(d), "--app-id", "a", "--time-field", "ts",
            "--on-complete", action, "--json"]
    crashed = run_trib(*args, env={"TRIB_CRASH_AT": "spool.after_commit"})
    assert crashed.returncode == -9
    assert (d / "app.log.1").exists()  # the commit landed, the action did not happen
    r = json.loads(invoke_trib(*args, check=True).stdout)
    assert r["records"] == 0 and r["completed"] == [{"name": "app.log.1", "action": action}]
    assert (d / "app.log.1").exists() is False
    assert (d / "app.log.1.COMPLETED").exists() is (action == "rename")
    assert (d / "app.log").exists()  # the newest file is never finished
    exactly(root, 110)
    assert json.loads(invoke_trib(*args, check=True).stdout)["records"] == 0


def test_the_done_set_follows_the_directory_not_its_history(tmp_path, monkeypatch):
    """A year of rotations costs what a day does: a finished file is forgotten once the directory no longer
    holds it, and a large done set moves to a snapshot file so each commit stays small."""
    from tributary_read.spool import positions
    from tributary_read.spool.ingest import SpoolSource, ingest_dir
    from tributary_read.table.config import Table
    from tributary_read.write.ingest import TimeSpec

    monkeypatch.setattr(positions, "DELTA_MAX", 16)
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    t = Table.load(str(root))
    src = SpoolSource(str(d), close_inactive_s=0)
    n, sizes = 0, []
    for day in range(12):
        for k in range(10):  # ten rotations a "day", the oldest deleted once 30 are kept
            _write(d / f"app-{day:03d}-{k}.log", range(n, n + 5))
            os.utime(d / f"app-{day:03d}-{k}.log", (day * 100 + k, day * 100 + k))
            n += 5
        for old in sorted(d.iterdir())[:-30]:
            old.unlink()
        ingest_dir(t, src, "a", time_spec=TimeSpec(field="ts"))
        sizes.append(len(json.dumps(last_meta(root)["spool"])))
    assert ingest_dir(t, src, "a", time_spec=TimeSpec(field="ts")).records == 0
    assert max(sizes[6:]) <= max(sizes[:6]) * 1.5, sizes  # flat, not growing with every rotation
    snap = last_meta(root)["spool"]["done"]["snapshot"]
    assert snap and (root / snap).is_file()
    assert len(list((root / snap).parent.iterdir())) <= 2  # the current snapshot and the one it replaced
    done = ingest_dir(t, src, "a", time_spec=TimeSpec(field="ts")).done
    assert 29 <= done <= 31  # what the directory holds (the newest is still open)
    exactly(root, n)


def test_same_head_other_content_symlinks_and_odd_names(tmp_path):
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    common = _lines(range(40))  # more than the 1 KiB head
    assert len(common) > 1024
    (d / "a.log").write_bytes(common + _lines(range(40, 50)))
    (d / "b.log").write_bytes(common + _lines(range(50, 60)))  # same head, its own tail
    _write(d / "odd name\nwith newline é.log", range(60, 70))
    other = tmp_path / "elsewhere.log"
    _write(other, range(70, 80))
    os.symlink(other, d / "link.log")
    os.symlink(d / "a.log", d / "a-again.log")  # the same file twice: read once
    r = ingest(root, d)
    assert r["records"] == 50 + 50 + 10 + 10, r  # b.log is a file of its own: read whole, its head too
    ids = table_ids(root)
    assert all(ids[i] == 1 for i in range(40, 80)) and all(ids[i] == 2 for i in range(40))
    assert ingest(root, d)["records"] == 0


def test_bad_input_is_one_line_and_exit_3(tmp_path):
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    p = invoke_trib("ingest", str(root), "--source-dir", str(tmp_path / "nope"), "--app-id", "a",
                    "--time-field", "ts")
    assert p.returncode == 3 and "not a readable directory" in p.stderr
    p = invoke_trib("ingest", str(root), "--source", str(d / "x"), "--pattern", "*.log", "--app-id", "a",
                    "--time-field", "ts")
    assert p.returncode == 2 and "--pattern apply to --source-dir" in p.stderr
    p = invoke_trib("ingest", str(root), "--source", str(d / "x"), "--follow", "--app-id", "a", "--time-field", "ts")
    assert p.returncode == 2 and "--follow" in p.stderr
    p = invoke_trib("ingest", str(root), "--source-dir", str(d), "--source", str(d / "x"), "--app-id", "a",
                    "--time-field", "ts")
    assert p.returncode == 2 and "give one of" in p.stderr
    p = invoke_trib("ingest", str(root), "--source-dir", str(d), "--app-id", "a")
    assert p.returncode == 3 and "no time source" in p.stderr


def test_one_app_reads_two_directories_and_a_file_each_from_its_own_position(tmp_path):
    root = _table(tmp_path)
    a, b = tmp_path / "a" / "logs", tmp_path / "b" / "logs"  # one base name: the second needs its own
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    _write(a / "app.log", range(0, 30))
    _write(b / "app.log", range(30, 60))
    src = tmp_path / "one.jsonl"
    _write(src, range(60, 90))
    for _ in range(2):  # the second round finds everything committed
        ingest(root, a)
        ingest(root, b, "--source-name", "logs-b")
        invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    _write(a / "app.log", range(90, 95))
    _write(src, range(95, 100))
    assert ingest(root, a)["records"] == 5
    assert ingest(root, b, "--source-name", "logs-b")["records"] == 0
    out = json.loads(invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts",
                                 "--json", check=True).stdout)
    assert out["records"] == 5
    exactly(root, 100)


def test_a_newline_after_a_taken_last_line_ends_that_record(tmp_path):
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    (d / "app.log.1").write_bytes(_lines(range(5)) + _lines([5])[:-1])  # rotated away, its last line unended
    os.utime(d / "app.log.1", (1, 1))
    _write(d / "app.log", range(6, 8))
    assert ingest(root, d, "--close-inactive", "1m")["records"] == 8
    assert last_meta(root)["spool"]["files"][-1]["name"] == "app.log"
    with open(d / "app.log.1", "ab") as f:  # the logger's last flush lands late: the newline, then more lines
        f.write(b"\n" + _lines(range(8, 10)))
    os.utime(d / "app.log.1", (2, 2))
    assert ingest(root, d, "--close-inactive", "1m")["records"] == 2
    exactly(root, 10)


@pytest.mark.integration
def test_on_s3_with_a_done_set_snapshot(tmp_path, s3_root, monkeypatch):
    """The table on moto's S3 server: positions, the snapshot file and the exact lines, the same as on disk."""
    from tributary_read.spool import positions
    from tributary_read.spool.ingest import SpoolSource, ingest_dir
    from tributary_read.table.config import Table
    from tributary_read.write.ingest import TimeSpec

    monkeypatch.setattr(positions, "DELTA_MAX", 4)
    invoke_trib("table", "create", s3_root, "--layout", LAYOUT, "--partition", PARTITION, "--format", "jsonl",
                check=True)
    d = tmp_path / "logs"
    d.mkdir()
    for k in range(8):
        _write(d / f"app.log.{k}", range(k * 10, k * 10 + 10))
        os.utime(d / f"app.log.{k}", (k + 1, k + 1))
    _write(d / "app.log", range(80, 90))
    t = Table.load(s3_root)
    r = ingest_dir(t, SpoolSource(str(d), close_inactive_s=0), "a", time_spec=TimeSpec(field="ts"))
    assert r.records == 90 and r.finished == 8
    snap = t.log.last_transaction("a").transaction.meta["spool"]["logs"]["done"]["snapshot"]
    assert snap and t.storage.exists(snap)
    os.rename(d / "app.log.3", d / "renamed.log")
    (d / "app.log.4.gz").write_bytes(gzip.compress((d / "app.log.4").read_bytes()))
    out = json.loads(invoke_trib("ingest", s3_root, "--source-dir", str(d), "--app-id", "a", "--time-field", "ts",
                                 "--json", check=True).stdout)
    assert out["records"] == 0 and out["done"] == 8  # a renamed file and a gzip copy are files already read
    t.storage.delete(snap)
    p = invoke_trib("ingest", s3_root, "--source-dir", str(d), "--app-id", "a", "--time-field", "ts")
    assert p.returncode == 6 and "is missing" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    files = json.loads(invoke_trib("files", s3_root, "--all", "--json", check=True).stdout)["files"]
    ids = sorted(json.loads(x)["i"] for f in files for x in t.storage.read(f["path"]).splitlines())
    assert ids == list(range(90))


@pytest.mark.parametrize("hlen, pos", [(0, 0), (20, 0), (0, 10), (20, 10)])
def test_a_short_head_never_takes_a_compressed_copy_of_another_file(tmp_path, hlen, pos):
    """plan() on real files. An open file known by only its first ``hlen`` bytes (a file found nearly empty),
    read up to its ``pos``-th line, is gone; beside its compressed copy lies the compressed copy of a
    finished file whose lines start alike and is bigger. The finished file's copy is that file (its full
    head), and the open file goes on in its own copy, told by the bytes it read (decompressed)."""
    from tributary_read.spool.identity import digest, look
    from tributary_read.spool.positions import Done, DoneSet, OpenFile, SpoolPositions, tail_of
    from tributary_read.spool.scan import plan

    a, b = _lines(range(100)), _lines(range(100, 150))
    assert a[:20] == b[:20]
    for name, data in (("app.log.1.gz", a), ("app.log.2.gz", b)):
        (tmp_path / name).write_bytes(gzip.compress(data))
    found = [look(str(tmp_path / n), n) for n in ("app.log.1.gz", "app.log.2.gz")]
    done = DoneSet()
    done.add(Done(digest(a[:1024]), tail_of(a), len(a)))
    at = len(_lines(range(100, 100 + pos)))
    e = OpenFile(digest(b[:hlen]), hlen, at, tail_of(b[:at]), "app.log", 1, 1, at)
    p = plan(found, SpoolPositions([e], done))
    assert p.copies == [(found[0], next(iter(done)))]
    reads = {f.name: x for x, f in p.reads}
    assert list(reads) == ["app.log.2.gz"] and reads["app.log.2.gz"].pos == at
    if hlen or pos:
        assert reads["app.log.2.gz"] is e
    else:  # found empty and never read: nothing but its inode tells it, so the copy is new (from 0 all the same)
        assert p.missing == [e]


def test_a_compressed_file_still_being_written_is_never_finished(tmp_path):
    """A gzip stream without its trailer (a compressor that stalled, a slow network file system) is read as far
    as it decompresses and stays open, however long it is quiet: its last partial line is no record, and once
    the compressor ends it the rest is read from there. Once it was folded into the finished files when quiet
    for --close-inactive, its partial last line became a dead letter and the complete file later looked like a
    copy of the finished one: half its lines lost, exit 0."""
    import zlib

    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    data = _lines(range(1000))
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    cut = len(_lines(range(500))) + 17  # mid-line
    first = z.compress(data[:cut]) + z.flush(zlib.Z_SYNC_FLUSH)
    (d / "shipped.log.gz").write_bytes(first)
    old = time.time() - 600
    os.utime(d / "shipped.log.gz", (old, old))
    _write(d / "app.log", range(1000, 1010))
    r = ingest(root, d, "--close-inactive", "0s")
    assert r["records"] == 510 and r["finished"] == 0 and r["dead_letters"] == 0, r
    with open(d / "shipped.log.gz", "ab") as f:
        f.write(z.compress(data[cut:]) + z.flush())
    os.utime(d / "shipped.log.gz", (old, old))
    r = ingest(root, d, "--close-inactive", "0s")
    assert r["records"] == 500 and r["finished"] == 1 and r["dead_letters"] == 0, r
    exactly(root, 1010)
    assert ingest(root, d, "--close-inactive", "0s")["records"] == 0


def test_a_log_and_its_compressed_copy_both_new_to_one_scan_are_read_once(tmp_path):
    """A first run (or one that starts after a rotation and its compression) finds ``app.log.1`` and the
    ``app.log.1.gz`` gzip is writing or has just finished, both new: they are one content, read once (the
    plain one). Once both were read from 0: every line of the rotation twice."""
    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    _write(d / "app.log.1", range(300))
    data = (d / "app.log.1").read_bytes()
    (d / "app.log.1.gz").write_bytes(gzip.compress(data)[:len(gzip.compress(data)) // 2])  # gzip writing it
    (d / "app.log.2.gz").write_bytes(gzip.compress(_lines(range(300, 400))))
    _write(d / "app.log.2", range(300, 400))  # compressed and not yet unlinked: both whole
    _write(d / "app.log", range(400, 410))
    r = ingest(root, d, "--close-inactive", "0s")
    assert r["records"] == 410, r
    (d / "app.log.1.gz").write_bytes(gzip.compress(data))
    (d / "app.log.1").unlink()
    (d / "app.log.2").unlink()
    assert ingest(root, d, "--close-inactive", "0s")["records"] == 0
    exactly(root, 410)


def test_a_compressed_file_deleted_half_read_is_lost_loudly_with_its_content_bytes(tmp_path):
    """An open compressed file's size is its content's, learnt by decompressing it: deleted half-read, its
    unread content bytes are reported. Once its compressed size stood for the content, which is smaller than
    the position read, so the loss went unreported: exit 0, the lines gone."""
    from tributary_read.spool.ingest import SpoolSource, ingest_dir
    from tributary_read.table.config import Table
    from tributary_read.write.ingest import StopRequest, TimeSpec

    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    data = _lines(range(300))
    (d / "old.log.gz").write_bytes(gzip.compress(data))
    stop = StopRequest()

    def on_commit(c):
        stop.signum = 15  # stop after the first commit: old.log.gz is half read
    r = ingest_dir(Table.load(str(root)), SpoolSource(str(d)), "a", time_spec=TimeSpec(field="ts"), commit_every=100,
                   on_commit=on_commit, stop=stop)
    assert r.records_committed == 100
    (d / "old.log.gz").unlink()
    out = ingest(root, d, code=13)
    unread = len(data) - len(_lines(range(100)))
    assert f"{unread} bytes unread" in out["stderr"], out


def test_zstd_files_are_read_by_content_and_one_still_being_written_is_never_finished(tmp_path):
    """zstd is told by its magic bytes, like gzip: a zstd copy of a file already read is that file (not read
    again), a zstd file never seen plain is read whole, and one whose frame is cut short (the compressor still
    writing) is read as far as it decompresses and finished only once the frame ends. Once a zstd file was read
    as plain bytes: every line a dead letter."""
    import pyarrow as pa

    root, d = _table(tmp_path), tmp_path / "logs"
    d.mkdir()
    _write(d / "app.log.1", range(100))
    old = time.time() - 600
    os.utime(d / "app.log.1", (old, old))
    _write(d / "app.log", range(100, 110))
    assert ingest(root, d, "--close-inactive", "0s")["records"] == 110
    with pa.CompressedOutputStream(str(d / "app.log.1.zst"), "zstd") as out:
        out.write((d / "app.log.1").read_bytes())
    (d / "app.log.1").unlink()
    data = _lines(range(200, 10200))
    with pa.CompressedOutputStream(str(d / "shipped.log.zst"), "zstd") as out:
        out.write(data[:len(data) // 2])
        out.flush()
        (d / "part.zst").write_bytes((d / "shipped.log.zst").read_bytes())  # the frame as it stood mid-way
        out.write(data[len(data) // 2:])
    (d / "shipped.log.zst").rename(d / "whole.zst.keep")
    (d / "part.zst").rename(d / "shipped.log.zst")
    os.utime(d / "shipped.log.zst", (old, old))
    r = ingest(root, d, "--close-inactive", "0s", "--exclude", "*.keep")
    assert r["dead_letters"] == 0 and r["finished"] == 0 and 0 < r["records"] < 5000, r
    os.replace(d / "whole.zst.keep", d / "shipped.log.zst")
    os.utime(d / "shipped.log.zst", (old, old))
    r2 = ingest(root, d, "--close-inactive", "0s")
    assert r2["dead_letters"] == 0 and r2["finished"] == 1 and r["records"] + r2["records"] == 10000, r2
    ids = table_ids(root)
    assert sorted(ids) == list(range(110)) + list(range(200, 10200)) and max(ids.values()) == 1
