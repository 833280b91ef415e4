"""Issue #33 item 1: uncommitted bytes are never visible to a directory reader.

kill -9 at random moments of real writers, then the rerun; every trial's committed
records must equal a Hive count through the real ``beeline`` client (the table
mounted by ``trib partitions sync``, or by the ETL's own sync) and a Spark read of
the trial's directories, every record once:

* ``trib ingest``, a real process, killed while it writes and commits;
* ``trib etl run``'s executor side: a Python worker of the write stage, found by
  the staged file it holds open, killed mid-task (Spark retries the task);
* ``trib etl run``, a real process on the warm Spark Connect server, killed
  while the server runs the SQL and writes, and while it commits.

The counts of all of a test's trials run at its end, in one beeline query and one
Spark job that still count each trial on its own: each trial writes only places
no later trial writes (an ingest trial its own table, an ETL trial its own hour),
and what a directory reader sees of a trial is fingerprinted when the trial ends
(every file under its directories that a directory reader lists, with size and
mtime, the metastore's partitions and locations, and for the ETL the log's files there) and must be unchanged when it is counted.
A count per trial cost a Hive query, a Spark job and a Hive session each, most of
these tests' time. The Hive tables are text tables read through Hadoop's
CombineTextInputFormat: the directory listing and its hidden-name filter are
TextInputFormat's (FileInputFormat.listStatus), but a partition's small files are one
task, not one each (:data:`HIVE_TEXT_INPUT`).

Tables are created with every option left at its default: the default protocol
is what is under test. A control with ``--protocol direct`` proves that the same
harness sees the duplicates the issue reported.

Kill delays come from one seeded RNG; the seed is printed (``TRIB_KILL_SEED``
replays a failing sequence).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, TRIB, invoke_trib, run_trib
from etl_data import LAY, Hs2, RawSource, write_job
from forkserver import ForkServer
from helpers import LAYOUT, PARTITION, grow_source, make_source, staged_files

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

SEED = int(os.environ.get("TRIB_KILL_SEED", "33"))
#: Kills that must land per writer (TRIB_KILL_TRIALS sets it: lower for a quick local look, higher for a
#: soak). The suite runs 15: with the driver's 3 these three tests are a fifth of CI's 40-minute budget.
TRIALS = int(os.environ.get("TRIB_KILL_TRIALS", "15"))
HOURS = 6  # ingest's event hours: a few Hive partitions, every trial touching all of them


def _rng(what: str) -> random.Random:
    print(f"{what}: kill delays from random.Random({SEED}) (TRIB_KILL_SEED={SEED})")
    return random.Random(f"{what}-{SEED}")


def _spark_stats(spark, reads: dict[str, list[Path]]) -> dict[str, tuple[int, ...]]:
    """(rows, distinct ids, min id, max id, min ts, max ts) of each read's jsonl lines, by Spark: one job
    for all, each read (a trial's directories, or the files the log commits there) its own DataFrame, told
    apart by a column."""
    from functools import reduce

    from pyspark.sql import functions as F

    frames = [spark.read.option("recursiveFileLookup", "true").text([str(p) for p in paths])
              .withColumn("read", F.lit(name)) for name, paths in reads.items()]
    df = reduce(lambda x, y: x.unionByName(y), frames)
    df = df.select("read", F.json_tuple("value", "id", "ts").alias("id", "ts"))  # one parse a line
    i, ts = F.col("id"), F.col("ts")
    rows = df.groupBy("read").agg(F.count("*"), F.countDistinct(i), F.min(i.cast("long")), F.max(i.cast("long")),
                                  F.min(ts.cast("long")), F.max(ts.cast("long"))).collect()
    return {r[0]: tuple(r[1:]) for r in rows}


def _spark_counts(spark, trials: dict[str, list[Path]]) -> dict[str, tuple[int, int]]:
    """(rows, distinct ids) a Spark read of each trial's directories returns: one job (:func:`_spark_stats`)."""
    return {k: (int(v[0]), int(v[1])) for k, v in _spark_stats(spark, trials).items()}


#: The input format of the tests' Hive text tables: TextInputFormat's sibling (Hadoop's new API, which Spark
#: reads with a NewHadoopRDD; the old API's mapred.lib class has no new-API reader and fails there) that packs
#: a partition's files into one split. Both list a directory through FileInputFormat.listStatus, with its
#: filter of names that start with ``.`` or ``_`` (what hides trib's staged files), and read lines with a
#: LineRecordReader; only the task count differs. With TextInputFormat, the Thrift Server ran a task per
#: file (an ingest trial leaves 84: 14 commits x 6 hours), ~30 ms of CPU each: the ingest test's count was
#: 1,260 tasks, 40-50 CPU-seconds, as many as its 15 trials' writing.
HIVE_TEXT_INPUT = "org.apache.hadoop.mapreduce.lib.input.CombineTextInputFormat"


def _create_text_table(hs2, name: str, root: Path) -> None:
    """A trial's EXTERNAL Hive table over a jsonl trib table: one ``line`` column (etl_data.create_hive_table's
    text table), read through :data:`HIVE_TEXT_INPUT`; the partitions trib mounts take the table's format."""
    hs2.execute(f"CREATE EXTERNAL TABLE {name} (line STRING) PARTITIONED BY (dt STRING) "
                f"STORED AS INPUTFORMAT '{HIVE_TEXT_INPUT}' "
                "OUTPUTFORMAT 'org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat' "
                f"LOCATION 'file://{Path(root).resolve()}'")


def _cpu_s(*pids: int) -> float:
    """CPU-seconds (user + system) the processes ``pids`` have used: the figure a loaded machine's wall
    clock hides."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _beeline_counts(hs2: Hs2, sql: str) -> dict[str, tuple[int, int]]:
    """``sql``'s rows (key, rows, distinct ids) through the real beeline client, as an operator counts."""
    out = hs2.beeline(sql, 3)
    counts = {key: (int(rows), int(ids)) for key, rows, ids in out}
    assert len(counts) == len(out), out
    return counts


class _Mounts:
    """The metastore's partitions of a Hive table (spec -> location), through its Thrift API: milliseconds,
    where a Hive query costs seconds. What Hive counts is these locations' files."""

    def __init__(self, services):
        from tributary_read.hive.thrift_metastore import ThriftMetastore

        self.ms = ThriftMetastore("127.0.0.1", services.hms_port)

    def __call__(self, table: str) -> frozenset[tuple[str, str | None]]:
        from tributary_read.hive.model import TableName

        return frozenset((p.spec, p.location) for p in self.ms.list_partitions(TableName.parse(table)))

    def close(self) -> None:
        self.ms.close()


def _tree(*dirs: Path) -> frozenset[tuple[str, int, int]]:
    """Every file under ``dirs`` that a directory reader lists (Hive and Spark skip a name, file or directory,
    that starts with ``.`` or ``_``): (path, size, mtime ns). Taken when a trial ends and again before its
    deferred count: equal, the count reads what the trial left. A killed run's staged files are hidden, so
    its tasks still writing on the Connect server after the trial do not change it; a staged file revealed
    after the trial would."""
    out = set()
    for d in dirs:
        for p in d.rglob("*"):
            if not any(part.startswith((".", "_")) for part in p.relative_to(d).parts) and p.is_file():
                st = p.stat()
                out.add((str(p), st.st_size, st.st_mtime_ns))
    return frozenset(out)


def _committed(root: Path) -> int:
    """The records the log holds (what trib's own readers return)."""
    files = json.loads(invoke_trib("files", str(root), "--all", "--mode", "manifest", "--json", check=True).stdout)
    return sum(f["records"] for f in files["files"])


def _hidden(root: Path) -> int:
    """Staged files on disk: after a rerun, only files of attempts that never committed."""
    return sum(1 for _ in root.rglob(".part-*.inprogress"))


def _ingest(root: Path, src: Path, *extra: str) -> list[str]:
    return [*TRIB, "ingest", str(root), "--source", str(src), "--app-id", "feed", "--time-field", "ts",
            "--commit-every", "3000", *extra]


def _kill_ingest_at(spawn, cmd: list[str], delay: float, root: Path, pattern: str = ".part-*.inprogress") -> bool:
    """Start ``cmd`` (``spawn``: a :class:`forkserver.ForkServer`'s, a real process forked from a warm
    interpreter, not a cold ``python -m`` whose imports took 1-3 s of each trial on CI's loaded cores);
    SIGKILL it ``delay`` s after it starts writing (a new ``pattern`` file appears under ``root``). True if
    it was still running (a hit)."""
    before = set(root.rglob(pattern))
    p = spawn(cmd)
    # The interpreter's start-up is no moment to test, and its length varies with the machine's load.
    while p.poll() is None and not set(root.rglob(pattern)) - before:
        time.sleep(0.01)
    time.sleep(delay)
    hit = p.poll() is None
    if hit:
        p.send_signal(signal.SIGKILL)
    p.wait()
    err = p.stderr.read().decode()
    assert hit or p.returncode == 0, f"ingest failed before the kill: {err}"
    return hit


# -- trib ingest ------------------------------------------------------------------------
def test_ingest_killed_at_random_moments_hive_and_spark_count_the_committed_records(
        tmp_path, hive_services, spark):
    """Each trial on a table of its own (a Hive table of its own too): no later trial writes where it
    wrote, so all trials are counted at the end, each on its own, against what it committed."""
    from conftest import hs2_connect

    rng = _rng("ingest")
    hs2 = Hs2(hive_services)
    conn = hs2_connect(hive_services)
    ddl = conn.cursor()  # one session for the tables' DDL (a count opens its own: Hs2's docstring)
    mounts = _Mounts(hive_services)
    forks = ForkServer()  # the killed runs: each a child of one warm interpreter
    made: list[str] = []
    #: per trial: its Hive table -> (its root, committed records, its files and its mounts when it ended)
    trials: dict[str, tuple[Path, int, frozenset, frozenset]] = {}
    hits, left_hidden, per = 0, 0, 40_000
    try:
        # Until TRIALS kills have landed mid-run: a run that finishes first is a trial too, not a hit.
        for trial in range(TRIALS * 3):
            if hits >= TRIALS:
                break
            root = tmp_path / f"t{trial}"
            t0 = time.monotonic()
            # Only the killed ingest needs a process of its own: the rest runs the CLI in this one.
            invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
            if trial == 0:
                show = json.loads(invoke_trib("table", "show", str(root), "--json", check=True).stdout)
                assert show["protocol"] == "rename"
            hive = f"default.hidden_ingest_{uuid.uuid4().hex[:8]}"
            _create_text_table(ddl, hive, root)
            made.append(hive)
            src = make_source(tmp_path / f"src{trial}.jsonl", per, seed=trial, hours=HOURS)
            delay = rng.uniform(0.0, 0.4)  # into the writing: 40,000 records take 0.5-2 s here, with the load
            t1 = time.monotonic()
            hit = _kill_ingest_at(forks.spawn, _ingest(root, src), delay, root)
            hits += hit
            killed_hidden = _hidden(root)  # before the rerun (committed-but-unrenamed ones too)
            t2 = time.monotonic()
            done = invoke_trib(*_ingest(root, src)[len(TRIB):], "--json")
            assert done.returncode == 0, done.stderr
            t3 = time.monotonic()
            invoke_trib("partitions", "sync", str(root), "--hive-table", hive, "--metastore",
                        hive_services.metastore_uri, check=True)
            committed = _committed(root)
            assert committed == per
            trials[hive] = (root, committed, _tree(root), mounts(hive))
            assert len(trials[hive][3]) == HOURS, trials[hive][3]  # every hour mounted
            left_hidden += _hidden(root)
            print(f"trial {trial}: kill {delay:.2f} s into the writing ({'hit' if hit else 'finished first'}), "
                  f"{killed_hidden} staged files on disk after the kill; committed {committed}; set-up "
                  f"{t1 - t0:.1f} s, killed run {t2 - t1:.1f} s, rerun {t3 - t2:.1f} s, sync and fingerprint "
                  f"{time.monotonic() - t3:.1f} s")
        assert hits >= TRIALS, f"only {hits} kills landed while the ingest ran"
        # The kills did leave uncommitted bytes behind (hidden): the counts below were at risk.
        assert left_hidden > 0
        t0, c0 = time.monotonic(), _cpu_s(hive_services.hs2_pid)
        for hive, (root, _, tree, mounted) in trials.items():
            assert _tree(root) == tree and mounts(hive) == mounted, f"{hive}: changed after its trial"
        hive_rows = _beeline_counts(hs2, " UNION ALL ".join(
            f"SELECT '{hive}', count(*), count(DISTINCT get_json_object(line, '$.id')) FROM {hive}"
            for hive in trials))
        t1, c1 = time.monotonic(), _cpu_s(hive_services.hs2_pid)
        spark_cpu = _cpu_s(*_descendants(os.getpid()))
        spark_rows = _spark_counts(spark, {hive: [root] for hive, (root, *_) in trials.items()})
        print(f"{len(trials)} trials counted: beeline {t1 - t0:.1f} s (Thrift Server {c1 - c0:.1f} CPU-s), Spark "
              f"{time.monotonic() - t1:.1f} s ({_cpu_s(*_descendants(os.getpid())) - spark_cpu:.1f} CPU-s)")
        for trial, (hive, (_, committed, _, _)) in enumerate(trials.items()):
            want = (committed, committed)
            assert hive_rows[hive] == want, f"trial {trial}: Hive counted {hive_rows[hive]} for {committed} committed"
            assert spark_rows[hive] == want, f"trial {trial}: Spark counted {spark_rows[hive]} for {committed} committed"
        assert len(hive_rows) == len(spark_rows) == len(trials)
    finally:
        forks.close()
        mounts.close()
        for name in made:
            ddl.execute(f"DROP TABLE IF EXISTS {name}")
        conn.close()
    v = run_trib("verify", str(root), "--json")
    assert v.returncode == 0, v.stdout + v.stderr


def test_the_same_kills_under_explicit_direct_leave_duplicates_a_directory_reader_counts(tmp_path, spark):
    """The control: ``--protocol direct`` is still the issue's behaviour, so the harness above can fail.

    The kill lands at a named point (every file written, no commit attempted), not at a random
    moment: a fast machine can finish 40,000 records inside a random delay, and a control that
    only sometimes fails proves nothing.
    """
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--protocol", "direct",
             check=True)
    src = make_source(tmp_path / "src.jsonl", 0, hours=HOURS)
    n = 40_000
    grow_source(src, 0, n, hours=HOURS)
    killed = subprocess.run(_ingest(root, src), env={**os.environ, "PYTHONPATH": str(REPO),
                                                       "TRIB_CRASH_AT": "writer.before_commit"},
                            capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _committed(root) == 0 and list(root.rglob("part-*")), "the killed run left no visible file"
    assert run_trib(*_ingest(root, src)[len(TRIB):]).returncode == 0
    assert _committed(root) == n  # trib's own readers stay exact
    rows, ids = _spark_counts(spark, {"t": [root]})["t"]
    assert rows > n and ids == n, f"a directory reader counted {rows} rows for {ids} ids"


# -- trib etl run: the executor and the driver ----------------------------------------------
EXECUTOR_TRIALS = TRIALS
DRIVER_TRIALS = max(2, TRIALS // 5)
PER_FILE = 50_000  # records per raw file, two files an hour: long enough a write stage to land in


@pytest.fixture(scope="module")
def etl_job(warm_spark, hive_services, tmp_path_factory):
    """A consumer job over a raw hourly source, its jsonl output (created with the defaults) and
    its Hive table, which the job's own sync step mounts. The executor trials run it in this process on
    the session's classic Spark; the driver trials' runs are processes on the warm Spark Connect server,
    killed while the server writes (a classic driver killed: test_etl_crash)."""
    from tributary_read.table.config import RollPolicy, Table, TableConfig

    base = tmp_path_factory.mktemp("hidden-etl")
    # No early records (one of an hour two hours back, in every third hour): each run writes its own hour's
    # partition only, so no later trial changes what an earlier one left, and all are counted at the end.
    src = RawSource(base / "raw", EXECUTOR_TRIALS + DRIVER_TRIALS, seed=33, late_each=0, per_file=PER_FILE,
                    early=False)
    out = base / "events"
    # Small files: a task closes and opens several while it runs, so a kill finds any state.
    Table.create(str(out), TableConfig(LAY, format="jsonl", roll=RollPolicy(max_records=4000)))
    hs2 = Hs2(hive_services)
    hive = f"default.hidden_etl_{uuid.uuid4().hex[:8]}"
    _create_text_table(hs2, hive, out)
    job = write_job(base / "job", name="hidden", raw=src.root, out=out, hive_table=hive,
                    metastore=hive_services.metastore_uri)
    mounts = _Mounts(hive_services)
    counted: list[_EtlTrial] = []  # the trials a test has counted: the next test checks them unchanged
    yield base, src, out, hs2, hive, job, mounts, counted
    mounts.close()
    hs2.execute(f"DROP TABLE IF EXISTS {hive}")


@dataclass(frozen=True)
class _EtlTrial:
    """What run ``k`` left in its hour's partition when its trial ended: to count at the test's end."""

    k: int
    dt: str
    dirs: tuple[Path, ...]
    committed: int  # the records the log holds in the partition (the oracle's count, checked)
    files: frozenset  # the log's files there: (path, size, records)
    tree: frozenset  # every file a directory reader lists in its directory (_tree)
    mounted: frozenset  # its metastore partition and location


def _log_files(out: Path) -> dict[str, frozenset[tuple[str, int, int]]]:
    """The files the log commits, by partition (dt): (path, size, records); no data read."""
    from tributary_read.read.resolve import manifest_files
    from tributary_read.table.config import Table

    by_dt: dict[str, set] = {}
    for f in manifest_files(Table.load(str(out)), 0).files:
        by_dt.setdefault(LAY.parse(f.path.rsplit("/", 1)[0]).values["dt"], set()).add((f.path, f.size, f.records))
    return {dt: frozenset(fs) for dt, fs in by_dt.items()}


def _end_trial(src: RawSource, out: Path, hive: str, mounts: _Mounts, k: int) -> _EtlTrial:
    """Run ``k`` (and its rerun) ended: the log holds its partition's records, counted by the oracle; the
    partition's files and mount are fingerprinted for the count at the end (:func:`_count_trials`)."""
    dirs = tuple(_trial_dirs(src, out, k))
    dts = {f"{d.parent.name.replace('_', '')}{d.name}" for d in dirs}
    assert len(dts) == 1, dts  # the source has no early records: a run writes its own hour only
    (dt,) = dts
    files = _log_files(out).get(dt, frozenset())
    committed = sum(r for _, _, r in files)
    assert committed == len(src.rows_of(k, dts)), f"trial {k}: the log holds {committed} records in {dt}"
    mounted = frozenset(p for p in mounts(hive) if p[0] == f"dt={dt}")
    assert len(mounted) == 1, f"trial {k}: {dt} is not mounted: {mounts(hive)}"
    return _EtlTrial(k, dt, dirs, committed, files, _tree(*dirs), mounted)


def _count_trials(spark, src: RawSource, out: Path, hs2: Hs2, hive: str, mounts: _Mounts,
                  trials: list[_EtlTrial], earlier: list[_EtlTrial] | None = None) -> None:
    """After the last trial: each trial's partition unchanged since its trial ended, then counted, each
    on its own, by one beeline query (GROUP BY dt) and one Spark job, against what the log committed there;
    and the files the log commits there, every record once in its partition.

    What a directory reader lists in a trial's hour is exactly the files the log commits there (path and
    size, checked here), so one Spark read of the directories is also the read of the log's files: the same
    bytes read twice cost the executor test half its Spark time. ``earlier``: trials an earlier test counted
    the same way (the executor's, before the driver's): each is checked unchanged (files, mount, the log's
    files), so Hive counts only this test's partitions and the whole table's count is still checked."""
    earlier = earlier or []
    t0 = time.monotonic()
    now_files = _log_files(out)
    now_mounted = mounts(hive)
    for t in [*earlier, *trials]:
        assert _tree(*t.dirs) == t.tree, f"trial {t.k}: {t.dt}'s files changed after the trial"
        assert t.mounted <= now_mounted, f"trial {t.k}: {t.dt}'s mount changed after the trial"
        assert now_files.get(t.dt) == t.files, f"trial {t.k}: the log's files in {t.dt} changed after the trial"
        visible = {(p, size) for p, size, _ in t.tree}
        assert visible == {(str(out / p), size) for p, size, _ in t.files}, \
            f"trial {t.k}: a directory reader lists other files in {t.dt} than the log commits"
    last = max(t.k for t in trials)
    want = src.expected_rows(last)
    # The log holds every partition the oracle has, and the oracle's count of records (its metadata); the
    # metastore mounts exactly those partitions, no other.
    assert set(now_files) == {dt for _, dt in want}
    assert {spec for spec, _ in now_mounted} == {f"dt={dt}" for _, dt in want}, now_mounted
    assert sum(r for fs in now_files.values() for _, _, r in fs) == len(want)
    assert {t.dt for t in [*earlier, *trials]} == set(now_files)
    t1, c1 = time.monotonic(), _cpu_s(hs2.services.hs2_pid)
    only = f" WHERE dt IN ({', '.join(repr(t.dt) for t in trials)})" if earlier else ""
    hive_rows = _beeline_counts(hs2, f"SELECT dt, count(*), count(DISTINCT get_json_object(line, '$.id')) "
                                     f"FROM {hive}{only} GROUP BY dt")
    t2, c2 = time.monotonic(), _cpu_s(hs2.services.hs2_pid)
    spark_cpu = _cpu_s(*_descendants(os.getpid()))
    # One Spark job: each trial's directories as a directory reader reads them (the log's files, above).
    stats = _spark_stats(spark, {t.dt: list(t.dirs) for t in trials})
    print(f"{len(trials)} trials counted: log metadata {t1 - t0:.0f} s, beeline {t2 - t1:.0f} s (Thrift Server "
          f"{c2 - c1:.1f} CPU-s), Spark {time.monotonic() - t2:.0f} s "
          f"({_cpu_s(*_descendants(os.getpid())) - spark_cpu:.1f} CPU-s); {_hidden(out)} hidden orphans")
    for t in trials:
        n = (t.committed, t.committed)
        assert hive_rows.get(t.dt) == n, f"trial {t.k}: Hive counted {hive_rows.get(t.dt)} for {t.committed} committed"
        spark_rows = tuple(stats[t.dt][:2])
        assert spark_rows == n, f"trial {t.k}: Spark counted {spark_rows} for {t.committed} committed"
        # The log's files: every record of the hour once, in the hour of its event time. The hour's ids are
        # one run of numbers (the source numbers records in order): a count, a distinct count and the ends
        # equal to the oracle's are its exact set.
        ids = sorted(i for i, _ in src.rows_of(last, {t.dt}))
        assert len(ids) == t.committed and ids[-1] - ids[0] + 1 == len(ids)
        for p, size, _ in t.files:
            assert (out / p).stat().st_size == size, f"trial {t.k}: {p} is not the size the log committed"
        start = LAY.parse(f"{t.dirs[0].parent.name}/{t.dirs[0].name}").start_ms
        rows, distinct, lo, hi, ts_lo, ts_hi = stats[t.dt]
        assert (rows, distinct, lo, hi) == (t.committed, t.committed, ids[0], ids[-1]), \
            f"trial {t.k}: the log's files hold {stats[t.dt]}, the oracle {len(ids)} ids {ids[0]}-{ids[-1]}"
        assert start <= ts_lo and ts_hi < start + 3_600_000, f"trial {t.k}: a record outside {t.dt}"
    # and Hive sees nothing but the committed records: the whole table, every record once (the earlier
    # trials' partitions as the earlier test counted them, their files and mounts unchanged since)
    assert set(hive_rows) == {t.dt for t in trials}, hive_rows
    before = sum(t.committed for t in earlier)
    assert before + sum(r for r, _ in hive_rows.values()) == before + sum(i for _, i in hive_rows.values()) == len(want)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _writing_workers(out: Path) -> list[int]:
    """Our Spark's Python workers that hold a staged output file open: write-stage tasks at work."""
    prefix = str(out.resolve()) + "/"
    found = []
    for pid in _descendants(os.getpid()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(prefix) and target.endswith(".inprogress"):
                found.append(pid)
                break
    return found


def _trial_dirs(src: RawSource, out: Path, k: int) -> list[Path]:
    """The hour directories run ``k`` writes (LAYOUT's directory of each new dt): where its staged files appear."""
    dts = {r.dt for f in src.arrived_in(k) for r in f.records}
    return [out / f"{dt[:4]}_{dt[4:6]}_{dt[6:8]}" / dt[8:10] for dt in sorted(dts)]


def _wait_for_staged(dirs: list[Path], before: set[str], n: int, running) -> bool:
    """Until ``n`` new staged files exist: a moment measured in the write stage's own progress
    (a 4,000-record file each), not in seconds, which vary with the machine's load."""
    while running():
        if len(staged_files(dirs) - before) >= n:
            return True
        time.sleep(0.01)
    return False


def test_etl_executor_killed_at_random_moments_hive_and_spark_count_the_committed_records(etl_job, spark):
    import threading

    from tributary_read.etl.job import Job
    from tributary_read.etl.run import run_job

    base, src, out, hs2, hive, job_path, mounts, counted = etl_job
    rng = _rng("etl-executor")
    job = Job.load(str(job_path))
    hits, trials = 0, []
    for k in range(EXECUTOR_TRIALS):
        src.advance(k)
        # Each task writes ~13 files of 4,000 records: the kill lands after the n-th, anywhere in a task.
        n, delay = rng.randint(1, 16), rng.uniform(0.0, 0.02)
        killed: list[int] = []
        stop = threading.Event()
        dirs = _trial_dirs(src, out, k)
        before = staged_files(dirs)

        def killer():
            if _wait_for_staged(dirs, before, n, lambda: not stop.is_set()):
                time.sleep(delay)
                # The first task found holding a file open from then on: a moment between one file's close
                # and the next one's open (a one-time look missed a third of the kills) waits for the next.
                while not stop.is_set():
                    for pid in _writing_workers(out)[:1]:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    if killed:
                        return
                    time.sleep(0.005)

        t = threading.Thread(target=killer, daemon=True)
        t0 = time.monotonic()
        t.start()
        try:
            first = run_job(job, src.schedule_iso(k), spark=spark)  # Spark retries the killed task
        finally:
            stop.set()
            t.join()
        t1 = time.monotonic()
        hits += bool(killed)
        again = run_job(job, src.schedule_iso(k), spark=spark)  # the rerun finds the commit
        assert again.already_committed and again.version == first.version
        t2 = time.monotonic()
        trials.append(_end_trial(src, out, hive, mounts, k))
        print(f"executor trial {k}: kill after staged file {n} ({'hit' if killed else 'missed'}); committed "
              f"{trials[-1].committed} in {trials[-1].dt}; run {t1 - t0:.1f} s, rerun {t2 - t1:.1f} s, "
              f"fingerprint {time.monotonic() - t2:.1f} s")
    # A kill misses only if the write stage ends within the delay after its n-th file (of ~25): one at most.
    assert hits >= EXECUTOR_TRIALS - 1, f"only {hits} of {EXECUTOR_TRIALS} kills found a writing task"
    assert _hidden(out) > 0  # the killed attempts' files: hidden, never counted
    _count_trials(spark, src, out, hs2, hive, mounts, trials)
    counted.extend(trials)


def test_etl_driver_killed_at_random_moments_hive_and_spark_count_the_committed_records(etl_job, spark):
    from test_etl_crash import Run
    from tributary_read.etl.job import Job
    from tributary_read.etl.run import run_job

    base, src, out, hs2, hive, job_path, mounts, counted = etl_job
    rng = _rng("etl-driver")
    job = Job.load(str(job_path))
    hits, trials = 0, []
    for k in range(EXECUTOR_TRIALS, EXECUTOR_TRIALS + DRIVER_TRIALS):
        src.advance(k)
        dirs = _trial_dirs(src, out, k)
        before = staged_files(dirs)
        t0 = time.monotonic()
        r = Run(job_path, src.schedule_iso(k), cwd=base)
        # Anywhere from the write stage's first file to just after its last (~25 files): the
        # commit, the sync and the ack follow within the next second.
        n, delay = rng.randint(1, 24), rng.uniform(0.0, 0.3)
        started = _wait_for_staged(dirs, before, n, lambda: r.p.poll() is None)
        time.sleep(delay)
        hit = started and r.p.poll() is None
        if hit:
            r.p.send_signal(signal.SIGKILL)
        rc = r.wait()
        assert not r.leftovers, f"the killed run left processes behind: {r.leftovers}"
        assert rc in (0, -signal.SIGKILL), f"exit {rc}:\n{r.err[-4000:]}"
        hits += rc == -signal.SIGKILL
        t1 = time.monotonic()
        # The rerun runs here, on the session's Spark, as the executor trials' does: what is under
        # test is the killed driver's leftovers; a rerun in a process of its own is test_etl_crash's.
        again = run_job(job, src.schedule_iso(k), spark=spark)
        t2 = time.monotonic()
        trials.append(_end_trial(src, out, hive, mounts, k))
        print(f"driver trial {k}: kill {delay:.2f} s after staged file {n} (exit {rc}, last step "
              f"{r.last_step()}, rerun already_committed={again.already_committed}); committed "
              f"{trials[-1].committed} in {trials[-1].dt}; run {t1 - t0:.1f} s, rerun {t2 - t1:.1f} s, "
              f"fingerprint {time.monotonic() - t2:.1f} s")
    assert hits >= DRIVER_TRIALS * 3 // 4, f"only {hits} of {DRIVER_TRIALS} kills landed while the driver ran"
    _count_trials(spark, src, out, hs2, hive, mounts, trials, earlier=counted)
    counted.extend(trials)
