"""`trib compact` end to end (issue 28): real tables, real processes killed at its steps, the readers
that must never count a record twice or lose one: manifest consumers and version ranges, mtime
windows, and a directory reader (what Hive and Spark on the partition directories count).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO, TRIB, invoke_trib, run_trib
from helpers import LAYOUT, PARTITION

pytestmark = pytest.mark.unit

T0 = 1_592_956_800_000  # 2020-06-24T00:00Z: three event hours of records
HOURS = 3


def _table(tmp_path, fmt: str = "jsonl", compression: str = "none") -> Path:
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", fmt,
                "--compression", compression, check=True)
    return root


def _ingest(root: Path, tmp_path, n: int, per: int = 60) -> None:
    """``n`` ingests of ``per`` records each: n small files in each of the event hours."""
    for _ in range(n):
        k = len(list(tmp_path.glob("src*.jsonl")))
        src, base = tmp_path / f"src{k}.jsonl", k * 10_000
        src.write_text("".join(json.dumps({"id": base + j, "ts": T0 + (j % HOURS) * 3_600_000 + j}) + "\n"
                               for j in range(per)))
        invoke_trib("ingest", str(root), "--source", str(src), "--app-id", f"a{base}", "--time-field", "ts",
                    check=True)


def _ids_in(path: Path) -> list[int]:
    if path.name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path, columns=["id"]).column("id").to_pylist()
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    return [json.loads(line)["id"] for line in data.splitlines() if line.strip()]


def _directory_reader(root: Path) -> Counter:
    """What Hive or Spark count on the partition directories: every visible file, hidden names skipped."""
    ids: Counter = Counter()
    for p in root.rglob("*"):
        rel = p.relative_to(root).parts
        if p.is_file() and not any(part[:1] in "._" for part in rel):
            ids.update(_ids_in(p))
    return ids


def _files(root: Path, *args: str) -> dict:
    return json.loads(invoke_trib("files", str(root), *args, "--json", check=True).stdout)


def _records(root: Path, plan: dict) -> Counter:
    ids: Counter = Counter()
    for f in plan["files"]:
        ids.update(_ids_in(root / f["path"]))
    return ids


def _all_ids(tmp_path) -> Counter:
    ids: Counter = Counter()
    for src in tmp_path.glob("src*.jsonl"):
        ids.update(json.loads(line)["id"] for line in src.read_text().splitlines())
    return ids


@pytest.mark.parametrize("fmt,compression", [("jsonl", "gzip"), ("parquet", "snappy")])
def test_every_reader_counts_each_record_once_across_a_compaction(tmp_path, fmt, compression):
    root = _table(tmp_path, fmt, compression)
    _ingest(root, tmp_path, 6)
    before = _files(root, "--consumer", "c")  # a consumer behind the compaction: half acked, half pending
    invoke_trib("consumer", "ack", str(root), "c", before["plan_id"], check=True)
    delivered = _records(root, before)
    _ingest(root, tmp_path, 2)
    v_before = json.loads(invoke_trib("log", str(root), "--json", check=True).stdout)["commits"][-1]["version"]
    window = ["--start", "2000-01-01T00:00Z", "--end", "2100-01-01T00:00Z"]
    mtime_before = _records(root, _files(root, "--mode", "mtime", *window))

    done = json.loads(invoke_trib("compact", str(root), "--min-age", "0s", "--json", check=True).stdout)
    assert done["files_in"] == 8 * HOURS and done["files_out"] == HOURS and done["version"] == v_before + 1
    everything = _all_ids(tmp_path)
    assert _directory_reader(root) == everything  # Hive's count: the compacted copies only, once
    assert _records(root, _files(root, "--all")) == everything
    nxt = _files(root, "--consumer", "c")  # the consumer's next plan: the two later ingests, once
    assert _records(root, nxt) + delivered == everything
    invoke_trib("consumer", "ack", str(root), "c", nxt["plan_id"], check=True)
    assert _files(root, "--consumer", "c")["files"] == []  # the replace itself is no new data
    assert _files(root, "--since-version", str(v_before), "--mode", "manifest")["files"] == []
    assert _records(root, _files(root, "--since-version", "0", "--until-version", str(v_before),
                                 "--mode", "manifest")) == everything  # the compacted files: all their sources in range
    assert _records(root, _files(root, "--since-version", "6", "--until-version", str(v_before),
                                 "--mode", "manifest")) == _records(root, nxt)  # part of them: the originals, set aside
    assert _records(root, _files(root, "--mode", "mtime", *window)) == mtime_before  # the window they were in
    later = ["--start", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1)), "--end", "2100-01-01T00:00Z"]
    assert _files(root, "--mode", "mtime", *later)["files"] == []  # never again in a later window
    assert invoke_trib("verify", str(root)).returncode == 0


def test_a_window_that_splits_a_compacted_file_is_refused_naming_it(tmp_path):
    root = _table(tmp_path)
    _ingest(root, tmp_path, 3)
    # The files were modified in one hour, a minute apart (2023-11-14T22:00Z on).
    base = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000
    for k, f in enumerate(sorted(root.rglob("part-*"))):
        os.utime(f, ns=((base + k * 60_000) * 1_000_000,) * 2)
    invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", check=True)
    whole = ["--start", "2023-11-14T22:00Z", "--end", "2023-11-14T22:59:59.999Z"]
    assert _records(root, _files(root, "--mode", "mtime", *whole)) == _all_ids(tmp_path)
    split = invoke_trib("files", str(root), "--mode", "mtime", "--start", "2023-11-14T22:01Z",
                        "--end", "2023-11-14T23:00Z")
    assert split.returncode == 3 and "compacted file" in split.stderr and len(split.stderr.splitlines()) == 1



def test_a_window_takes_only_what_a_reader_would_read_by_span_or_mtime(tmp_path):
    """A name with the mark but no span is judged by its mtime; a hidden or staged compacted name is never
    read, so never refused (the jar's path filter decides alike: tests/test_span_filter.py)."""
    root = _table(tmp_path)
    _ingest(root, tmp_path, 3)
    base = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000
    for k, f in enumerate(sorted(root.rglob("part-*"))):
        os.utime(f, ns=((base + k * 60_000) * 1_000_000,) * 2)
    invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", check=True)
    compacted = {f.name for f in root.glob("*/*/part-*~m*")}  # one per event hour, each by its span: in
    d = (root / _files(root, "--all")["files"][0]["path"]).parent
    stem = "part-20200624000000-0123abcd-000001"
    for name, mtime in ((f"{stem}~mbogus.jsonl", base - 7_200_000),  # the mark, no span: by its mtime (out)
                        (f"{stem}~m{base}.jsonl", base + 5),  # the mark, no span: by its mtime (in)
                        (f".{stem}~m{base - 1}-{base + 1}.jsonl.inprogress", base),  # staged: never read
                        (f"{stem}~m{base - 1}-{base + 1}.jsonl.tmp", base)):
        (d / name).write_text(json.dumps({"id": -1, "ts": T0}) + "\n")
        os.utime(d / name, ns=(mtime * 1_000_000,) * 2)
    whole = ["--start", "2023-11-14T22:00Z", "--end", "2023-11-14T22:59:59.999Z"]
    got = {Path(f["path"]).name for f in _files(root, "--mode", "mtime", *whole)["files"]}
    assert got == compacted | {f"{stem}~m{base}.jsonl"}


def _spawn(*args: str, env: dict | None = None) -> subprocess.Popen:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen([*TRIB, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full)


@pytest.mark.parametrize("point", ["compact.after_rewrite", "compact.before_commit", "compact.after_commit"])
def test_killed_at_each_step_then_rerun_every_reader_exact(tmp_path, point):
    root = _table(tmp_path)
    _ingest(root, tmp_path, 5)
    everything = _all_ids(tmp_path)
    p = run_trib("compact", str(root), "--min-age", "0s", env={"TRIB_CRASH_AT": point})
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert _directory_reader(root) == everything  # before or after the commit: never twice, never short
    assert _records(root, _files(root, "--all")) == everything
    done = json.loads(run_trib("compact", str(root), "--min-age", "0s", "--json", check=True).stdout)
    assert done["files_out"] == (0 if point == "compact.after_commit" else HOURS)
    assert _directory_reader(root) == everything
    assert _records(root, _files(root, "--all")) == everything
    invoke_trib("clean", str(root), "--older-than", "0s", check=True)  # the killed run's outputs, if any
    assert invoke_trib("verify", str(root)).returncode == 0
    assert _directory_reader(root) == everything


def test_two_compactions_at_once_one_commits_and_an_expired_partition_is_not_resurrected(tmp_path):
    root = _table(tmp_path)
    _ingest(root, tmp_path, 5)
    everything = _all_ids(tmp_path)
    held = _spawn("compact", str(root), "--min-age", "0s", env={"TRIB_STOP_AT": "compact.before_commit"})
    deadline = time.time() + 60
    while not list(root.rglob(".part-*~m*.inprogress")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # every output written: the process stops itself at the point
    first = run_trib("compact", str(root), "--min-age", "0s", "--json", check=True)
    assert json.loads(first.stdout)["files_out"] == HOURS
    held.send_signal(signal.SIGCONT)
    out, err = held.communicate(timeout=60)
    last = err.strip().splitlines()[-1]
    assert held.returncode == 5 and last.startswith("trib: error: ") and "another compaction replaced it" in last
    assert _directory_reader(root) == everything
    invoke_trib("clean", str(root), "--older-than", "0s", check=True)
    assert not list(root.rglob(".part-*.inprogress"))  # the loser's outputs were its own to remove

    _ingest(root, tmp_path, 5)
    held = _spawn("compact", str(root), "--min-age", "0s", env={"TRIB_STOP_AT": "compact.before_commit"})
    while not list(root.rglob(".part-*~m*.inprogress")) and time.time() < deadline + 60:
        time.sleep(0.05)
    time.sleep(0.3)
    invoke_trib("expire", str(root), "--older-than", "1d", "--grace", "0s", check=True)  # 2020's hours: all
    held.send_signal(signal.SIGCONT)
    out, err = held.communicate(timeout=60)
    assert held.returncode == 5 and "trib expire removed it" in err
    assert _directory_reader(root) == Counter() and _files(root, "--all")["files"] == []
    assert invoke_trib("verify", str(root)).returncode == 0
