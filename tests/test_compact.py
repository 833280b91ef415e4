"""`trib compact` end to end (issue 28): real tables, real processes killed at its steps, the readers
that must never count a record twice or lose one: manifest consumers and version ranges, mtime
windows, and a directory reader (what Hive and Spark on the partition directories count).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import statistics
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO, TRIB, invoke_trib, run_trib
from helpers import LAYOUT, PARTITION, staged_files

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


@pytest.mark.unit
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


def _compacted_in_one_hour(tmp_path) -> tuple[Path, int]:
    """Three ingests whose files were modified in one hour, a minute apart (2023-11-14T22:00Z on),
    then compacted: one compacted file per event hour. Returns the root and that hour's start."""
    root = _table(tmp_path)
    _ingest(root, tmp_path, 3)
    base = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000
    for k, f in enumerate(sorted(root.rglob("part-*"))):
        os.utime(f, ns=((base + k * 60_000) * 1_000_000,) * 2)
    invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", check=True)
    return root, base


@pytest.mark.unit
def test_a_window_that_splits_a_compacted_file_is_refused_naming_it(tmp_path):
    root, _ = _compacted_in_one_hour(tmp_path)
    whole = ["--start", "2023-11-14T22:00Z", "--end", "2023-11-14T22:59:59.999Z"]
    assert _records(root, _files(root, "--mode", "mtime", *whole)) == _all_ids(tmp_path)
    split = invoke_trib("files", str(root), "--mode", "mtime", "--start", "2023-11-14T22:01Z",
                        "--end", "2023-11-14T23:00Z")
    assert split.returncode == 3 and "compacted file" in split.stderr and len(split.stderr.splitlines()) == 1



def test_a_window_takes_only_what_a_reader_would_read_by_span_or_mtime(tmp_path):
    """A name with the mark but no span is judged by its mtime; a hidden or staged compacted name is never
    read, so never refused (the jar's path filter decides alike: tests/test_span_filter.py)."""
    root, base = _compacted_in_one_hour(tmp_path)
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


@pytest.mark.integration
@pytest.mark.parametrize("point", ["compact.after_rewrite", "compact.before_commit", "compact.after_commit"])
def test_killed_at_each_step_then_rerun_every_reader_exact(tmp_path, point):
    root = _table(tmp_path)
    _ingest(root, tmp_path, 5)
    everything = _all_ids(tmp_path)
    p = run_trib("compact", str(root), "--min-age", "0s", env={"TRIB_CRASH_AT": point})
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert _directory_reader(root) == everything  # before or after the commit: never twice, never short
    assert _records(root, _files(root, "--all")) == everything
    assert _directory_reader(root) == everything  # a reader that finished the compaction kept it so
    done = json.loads(run_trib("compact", str(root), "--min-age", "0s", "--json", check=True).stdout)
    assert done["files_out"] == (0 if point == "compact.after_commit" else HOURS)
    assert _directory_reader(root) == everything
    assert invoke_trib("verify", str(root)).returncode == 0  # before clean: nothing left half done
    assert _records(root, _files(root, "--all")) == everything
    invoke_trib("clean", str(root), "--older-than", "0s", check=True)  # the killed run's outputs, if any
    assert invoke_trib("verify", str(root)).returncode == 0
    assert _directory_reader(root) == everything


@pytest.mark.integration
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
    left = list(root.rglob(".part-*~m*.inprogress"))  # its commit was attempted: nothing deletes its files
    assert len(left) == HOURS
    orphans = json.loads(invoke_trib("verify", str(root), "--json", check=True).stdout)["orphans"]
    assert sorted(o["path"] for o in orphans) == sorted(str(p.relative_to(root)) for p in left)
    invoke_trib("clean", str(root), "--older-than", "0s", check=True)
    assert not list(root.rglob(".part-*.inprogress"))  # orphans, which trib clean removes

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


@pytest.mark.integration
@pytest.mark.s3
def test_on_s3_mtime_windows_go_by_the_span_not_by_when_the_compaction_ran(s3_root, tmp_path):
    """S3 cannot set an mtime: the compacted object's LastModified is the compaction's time."""
    from tributary_read.io.storage import open_storage

    root = s3_root
    invoke_trib("table", "create", root, "--layout", LAYOUT, "--partition", PARTITION, check=True)
    for _ in range(5):
        k = len(list(tmp_path.glob("src*.jsonl")))
        src = tmp_path / f"src{k}.jsonl"
        src.write_text("".join(json.dumps({"id": k * 1000 + j, "ts": T0 + j}) + "\n" for j in range(40)))
        invoke_trib("ingest", root, "--source", str(src), "--app-id", f"a{k}", "--time-field", "ts", check=True)
    st = open_storage(root)
    written = [f.mtime_ms for f in st.list("2020_06_24")]
    time.sleep(2.2)  # the compaction's objects get a LastModified seconds after every original's
    cut = max(written) + 1000
    invoke_trib("table", "set", root, "--compact", "period=1d", check=True)  # one period holds every original
    done = json.loads(invoke_trib("compact", root, "--min-age", "0s", "--json", check=True).stdout)
    assert done["files_out"] == 1
    (out,) = [f for f in st.list("2020_06_24")]
    assert out.mtime_ms > cut  # as S3 stamped it

    def ids(plan):
        return Counter(json.loads(line)["id"] for f in plan["files"]
                       for line in st.read(f["path"]).decode().splitlines())

    everything = Counter(json.loads(line)["id"] for p in tmp_path.glob("src*.jsonl") for line in p.read_text().splitlines())
    iso = lambda ms: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"  # noqa: E731
    before = _files_at(root, "--mode", "mtime", "--start", iso(min(written)), "--end", iso(cut))
    assert ids(before) == everything  # the window the originals were written in: the compacted object, whole
    after = _files_at(root, "--mode", "mtime", "--start", iso(cut + 1), "--end", "2100-01-01T00:00Z")
    assert after["files"] == []  # never in the window of its own LastModified
    assert ids(_files_at(root, "--all")) == everything
    assert invoke_trib("verify", root).returncode == 0


def _files_at(root: str, *args: str) -> dict:
    return json.loads(invoke_trib("files", root, *args, "--json", check=True).stdout)


@pytest.mark.integration
def test_kill9_at_random_moments_while_ingest_appends_every_record_once(tmp_path):
    """Issue 28's fault trial: a compaction SIGKILLed at a random moment while an ingest appends into
    the same partitions; each trial ends (after the next compaction finishes what the killed one left)
    with every record once for trib's readers and for a directory reader, and trib verify at 0."""
    import random

    seed = int(os.environ.get("TRIB_KILL_SEED", "28"))
    rng = random.Random(seed)
    print(f"kill delays from random.Random({seed}) (TRIB_KILL_SEED={seed})")
    root = _table(tmp_path, "jsonl", "gzip")  # gzip: a rewrite long enough to land kills in
    _ingest(root, tmp_path, 6, per=6_000)
    hits = 0
    hour_dirs = [root / "2020_06_24" / f"{h:02d}" for h in range(HOURS)]

    def staged() -> set[str]:  # the compaction's staged outputs (its names hold "~m")
        return staged_files(hour_dirs, "~m")

    spans: list[float] = []
    for trial in range(60):  # until 10 kills landed mid-run: a run that finishes first is a trial too
        if hits >= 10:
            break
        # Work for the compaction, committed first: two files of 2,000 records in each hour. Merging only
        # what the trial before appended took a few tens of ms, and two busy test workers then landed 8
        # kills in 60 trials (4 when that append was made larger: it was still being written).
        _ingest(root, tmp_path, 2, per=6_000)
        k = len(list(tmp_path.glob("src*.jsonl")))
        src = tmp_path / f"src{k}.jsonl"
        src.write_text("".join(json.dumps({"id": k * 10_000 + j, "ts": T0 + (j % HOURS) * 3_600_000 + j}) + "\n"
                               for j in range(3_000)))
        ing = _spawn("ingest", str(root), "--source", str(src), "--app-id", f"a{k}", "--time-field", "ts")
        before = staged()
        comp = _spawn("compact", str(root), "--min-age", "0s", "--min-files", "2")
        # Start-up is no moment to test: from its first staged output on (rewrite, commit, set-aside, reveal).
        while comp.poll() is None and not staged() - before:
            time.sleep(0.002)
        seen, running = time.monotonic(), comp.poll() is None
        # Within the span a compaction lasts from its first staged output (0.25 s, or about what the runs
        # that finished first took here): a fixed window landed most kills after the end on a fast machine.
        delay = rng.uniform(0.0, min(0.25, 0.9 * statistics.median(spans)) if spans else 0.25)
        time.sleep(delay)
        hit = comp.poll() is None
        if running and not hit:  # it ended within the delay: an upper bound of its span here
            spans.append(time.monotonic() - seen)
        comp.kill()
        comp.communicate()
        out, err = ing.communicate(timeout=120)
        assert ing.returncode == 0, err
        hits += hit
        everything = _all_ids(tmp_path)
        assert _records(root, _files(root, "--all")) == everything, f"trial {trial}"
        run_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", check=True)  # finishes a killed one
        assert _directory_reader(root) == everything, f"trial {trial}: kill {delay:.2f} s in"
        v = invoke_trib("verify", str(root))
        assert v.returncode == 0, v.stdout + v.stderr
        print(f"trial {trial}: kill {delay:.2f} s in ({'hit' if hit else 'finished first'})")
    assert hits >= 10, f"only {hits} kills landed while the compaction ran"
    invoke_trib("clean", str(root), "--older-than", "0s", check=True)
    assert _directory_reader(root) == _all_ids(tmp_path)
    assert invoke_trib("verify", str(root)).returncode == 0


@pytest.mark.integration
def test_a_write_error_mid_rewrite_commits_nothing_and_the_old_files_stand(tmp_path):
    """The output passes the process's file size limit (EFBIG, as a full disk's ENOSPC): exit 7, one
    line, nothing committed, no staged output left, every original where it was; a rerun completes."""
    import resource

    root = _table(tmp_path)
    _ingest(root, tmp_path, 6, per=900)  # each small file ~ 9 kB, a partition's output ~ 55 kB
    everything = _all_ids(tmp_path)
    before = sorted(p.relative_to(root) for p in root.rglob("part-*"))
    v = json.loads(invoke_trib("log", str(root), "--json", check=True).stdout)["commits"][-1]["version"]

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, 30_000))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([*TRIB, "compact", str(root), "--min-age", "0s"], capture_output=True, text=True, env=env,
                       preexec_fn=limit)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 7 and last.startswith("trib: error: ") and "Traceback" not in p.stderr, p.stderr
    assert json.loads(invoke_trib("log", str(root), "--json", check=True).stdout)["commits"][-1]["version"] == v
    assert sorted(p.relative_to(root) for p in root.rglob("part-*")) == before  # no output, no original moved
    assert not list(root.rglob(".part-*")) and not (root / "_tributary" / "replaced").exists()
    assert _directory_reader(root) == everything and invoke_trib("verify", str(root)).returncode == 0
    run_trib("compact", str(root), "--min-age", "0s", check=True)
    assert _directory_reader(root) == everything and _records(root, _files(root, "--all")) == everything


@pytest.mark.unit
def test_the_lateness_report_is_the_same_after_a_compaction(tmp_path):
    """A compacted file arrived as its originals did: the report never shows a closed partition's records
    as arriving when the compaction ran."""
    root = _table(tmp_path)
    _ingest(root, tmp_path, 5)
    before = json.loads(invoke_trib("report", "lateness", str(root), "--json", check=True).stdout)
    invoke_trib("compact", str(root), "--min-age", "0s", check=True)
    after = json.loads(invoke_trib("report", "lateness", str(root), "--json", check=True).stdout)

    def arrivals(report):  # sizes aside: a compacted file's bytes are shared out among its originals
        if isinstance(report, dict):
            return {k: arrivals(v) for k, v in report.items() if k != "bytes"}
        return [arrivals(v) for v in report] if isinstance(report, list) else report

    assert before["files"] == 5 * HOURS and arrivals(after) == arrivals(before)


@pytest.mark.integration
def test_on_spark_executors_the_same_records_and_one_commit(spark, tmp_path):
    """--spark: a task per compacted file on the executors, the commit here, once; a table on Spark
    gives the same records as the local engine, and a failed task commits nothing and leaves nothing."""
    from tributary_read.compact.plan import plan_compaction
    from tributary_read.compact.run import compact
    from tributary_read.table.config import Table

    root = _table(tmp_path, "parquet", "snappy")
    _ingest(root, tmp_path, 6)
    everything = _all_ids(tmp_path)
    t = Table.load(str(root))
    v = t.log.latest_version()
    plan = plan_compaction(t, settings=t.config.compact.with_values({"min_age": "0s"}),
                           now_ms=int(time.time() * 1000))
    done = compact(t, plan, spark=spark)
    assert done.version == v + 1 and len(done.outputs) == HOURS
    assert _directory_reader(root) == everything and _records(root, _files(root, "--all")) == everything
    assert invoke_trib("verify", str(root)).returncode == 0

    _ingest(root, tmp_path, 3)
    everything = _all_ids(tmp_path)
    t = Table.load(str(root))
    plan = plan_compaction(t, settings=t.config.compact.with_values({"min_age": "0s", "min_files": 2}),
                           now_ms=int(time.time() * 1000))
    victim = plan.groups[-1].inputs[-1]
    (root / victim.path).write_bytes(b"not parquet")  # a task fails on the executor: an undecodable input
    v = t.log.latest_version()
    from tributary_read.errors import TributaryError

    with pytest.raises(TributaryError, match="compacting|parquet|decode|size"):
        compact(t, plan, spark=spark)
    assert t.log.latest_version() == v  # nothing committed
    assert not list(root.rglob(".part-*.inprogress"))  # every task's output removed, the failed one's too


@pytest.mark.integration
def test_killed_after_its_commit_the_next_compaction_finishes_it_without_a_reader(tmp_path):
    """No trib reader in between: the next trib compact sets the originals aside and reveals the
    compacted files; Hive never sees both, and verify passes with no hint to follow."""
    root = _table(tmp_path)
    _ingest(root, tmp_path, 5)
    everything = _all_ids(tmp_path)
    p = run_trib("compact", str(root), "--min-age", "0s", env={"TRIB_CRASH_AT": "compact.after_commit"})
    assert p.returncode == -signal.SIGKILL
    assert _directory_reader(root) == everything
    run_trib("compact", str(root), "--min-age", "0s", check=True)
    assert _directory_reader(root) == everything and len(list(root.rglob("part-*~m*"))) == HOURS
    assert invoke_trib("verify", str(root)).returncode == 0


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_or_sigterm_mid_compaction_then_rerun_every_reader_exact(tmp_path, sig):
    """A scheduler's stop mid-run: one line and 128+signal (or 0 if it had finished), no traceback;
    every reader exact before and after the rerun, and verify at 0."""
    root = _table(tmp_path, "jsonl", "gzip")
    _ingest(root, tmp_path, 6, per=6_000)
    everything = _all_ids(tmp_path)
    comp = _spawn("compact", str(root), "--min-age", "0s")
    while comp.poll() is None and not list(root.rglob(".part-*~m*.inprogress")):
        time.sleep(0.002)
    time.sleep(0.02)
    comp.send_signal(sig)
    out, err = comp.communicate(timeout=60)
    assert comp.returncode in (0, 128 + sig), err
    assert "Traceback" not in err and (comp.returncode == 0 or err.strip().splitlines()[-1].startswith("trib: "))
    assert _directory_reader(root) == everything and _records(root, _files(root, "--all")) == everything
    run_trib("compact", str(root), "--min-age", "0s", check=True)
    assert _directory_reader(root) == everything and _records(root, _files(root, "--all")) == everything
    assert invoke_trib("verify", str(root)).returncode == 0


@pytest.mark.unit
def test_files_other_tools_wrote_are_left_where_they_are(tmp_path):
    """A both table's foreign file (and a symbolic link) in a compacted partition: not adopted, not moved."""
    root = _table(tmp_path)
    _ingest(root, tmp_path, 3)
    d = next(root.rglob("part-*")).parent
    (d / "flume.log").write_text(json.dumps({"id": -1}) + "\n")
    (d / "link.jsonl").symlink_to(tmp_path / "src0.jsonl")
    done = json.loads(invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", "--json",
                                  check=True).stdout)
    assert done["files_out"] == HOURS
    assert (d / "flume.log").read_text() == json.dumps({"id": -1}) + "\n" and (d / "link.jsonl").is_symlink()
    assert not any("flume.log" in p or "link.jsonl" in p for g in done["plan"] for p in g["inputs"])
