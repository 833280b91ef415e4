"""Issue 28: the jar's mtime-window path filter judges a compacted file by the span in its name, as Python does.

* parity: a table of names x windows, each name twice (its own mtime inside the hour and far outside
  it), decided by the jar's ``trib.udfs.MtimeWindowPathFilter`` (one JVM for every case, as
  tests/test_timespec.py runs the jar's TimeSpec), by Python's ``span_in_window`` and by Python's
  own listing of a compacted table's window: the same answer everywhere, and a window that splits a
  span refused on both sides in the same words;
* end to end: a trib table whose files were modified across two hours, ``trib compact``, then seed
  002's SQL through the filter (``trib sql`` on the session's Spark): the hour that holds a compacted
  file's span counts each of its records once, the next hour none of them, the hour of the
  compaction itself (the compacted files' own mtime) nothing, and a window that splits a span fails,
  naming the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION

from tributary_read.errors import CompactedAwayError
from tributary_read.hive_udfs import registry as udfs
from tributary_read.io.storage import COMPACTED_MARK, open_storage
from tributary_read.read.listing import scan
from tributary_read.read.visibility import is_visible, span_in_window
from tributary_read.read.window import MAX_MS, MIN_MS, TimeWindow

pytestmark = pytest.mark.integration

H = 3_600_000
W0 = 1_699_999_200_000  # 2023-11-14T22:00:00Z: the hour [W0, W1]
W1 = W0 + H - 1
BASE = "part-20231114220000-0123abcd-000001"

#: (start, end) in epoch ms, None = unset (open)
WINDOWS = [
    (W0, W1), (W0 + 1, W1), (W0, W1 - 1), (W0, W0), (W1, W1), (None, W1), (W0, None), (None, None),
    (W0, W0 - 1),  # the empty window a scheduled run may get
    (W1 + 1, W1 + H), (W0 - H, W0 - 1),
]
#: names under test (a "/" puts the file in a directory of that name)
NAMES = [
    f"{BASE}.jsonl",  # an ordinary file: by its mtime
    f"{BASE}~m{W0}-{W1}.jsonl",  # the whole hour
    f"{BASE}~m{W0 + 1000}-{W0 + 2000}.jsonl",
    f"{BASE}~m{W0}-{W0}.jsonl", f"{BASE}~m{W1}-{W1}.jsonl",  # one instant, on each bound
    f"{BASE}~m{W0 - H}-{W0 - 1}.jsonl", f"{BASE}~m{W1 + 1}-{W1 + H}.jsonl",  # just outside, each side
    f"{BASE}~m{W0 - 1}-{W0 + 5}.jsonl", f"{BASE}~m{W1}-{W1 + 1}.jsonl",  # across a bound
    f"{BASE}~m{W0 - 1}-{W1 + 1}.jsonl",  # the hour and more
    f"{BASE}~m{W0 + 5}-{W0 + 1}.jsonl", f"{BASE}~m{W1 + 5}-{W0 + 5}.jsonl",  # lo > hi: taken as written
    f"{BASE}~m000{W0}-000{W1}.snappy.parquet",  # 16 digits with leading zeros
    f"{BASE}~m0-9999999999999999.jsonl.gz",  # 16 digits: past year 9999
    f"{BASE}~m0-0.jsonl",
    f"{BASE}~m0000{W0}-{W1}.jsonl", f"{BASE}~m{W0}-0000{W1}.jsonl",  # 17 digits: no span
    f"{BASE}~m.jsonl", f"{BASE}~mabc-def.jsonl", f"{BASE}~m{W0}.jsonl", f"{BASE}~m{W0}-{W1}",  # the mark, no span
    f"{BASE}~m-{W0}-{W1}.jsonl", f"{BASE}~m{W0}-{W1}x.jsonl", f"{BASE}~M{W0}-{W1}.jsonl", f"{BASE}~m {W0}-{W1}.jsonl",
    f"{BASE}~m١٢٣-٤٥٦.jsonl", f"{BASE}~m１２-３４.jsonl",  # digits of other scripts are not a span
    f"{BASE}~mX-1.~m{W0}-{W0}.jsonl",  # the first valid span counts
    f"{BASE}~m{W1 + 1}-{W1 + 2}.x~m{W0}-{W1}.jsonl",
    f"{BASE}.jsonl~m{W0}-{W1}.bak",
    f".{BASE}~m{W0}-{W1}.jsonl.inprogress", f"_{BASE}~m{W0}-{W1}.jsonl",  # unfinished: never read
    f"{BASE}~m{W0}-{W1}.jsonl.tmp", f"{BASE}~m{W0 - 1}-{W1 + 1}.jsonl._COPYING_",
    f"d~m{W0 - 1}-{W1 + 1}.x/{BASE}.jsonl",  # the mark in a directory's name only: by the file's mtime
]
#: each name exists twice: modified inside the hour, and long before it
MTIMES = {"in": W0 + 1000, "out": W0 - 100 * H}


def _bound(v: int | None) -> str:
    return "" if v is None else str(v)


def _window(start: int | None, end: int | None) -> TimeWindow:
    return TimeWindow(MIN_MS if start is None else start, MAX_MS if end is None else end)


def _python(root: Path, rel: str, window: TimeWindow) -> str:
    """span_in_window's answer, after the rules every reader applies first (hidden names, the mark)."""
    if not is_visible(rel):
        return "out"
    mtime = (root / rel).stat().st_mtime_ns // 1_000_000
    try:
        if COMPACTED_MARK not in rel:
            return "in" if mtime in window else "out"
        return "in" if span_in_window(rel, window, mtime) else "out"
    except CompactedAwayError as e:
        return f"err\t{e}"


def _listing(root: Path, rel: str, window: TimeWindow) -> str:
    """Python's own listing of a window over a table that has compacted (the span rule on)."""
    try:
        listing = scan(open_storage(str(root)), None, window=window, spans=True)
    except CompactedAwayError as e:
        return f"err\t{e}"
    got = [f.path for f in listing.files]
    assert got in ([], [rel]), got
    return "in" if got else "out"


@pytest.fixture(scope="module")
def java_filter():
    """Runs the jar's filter on (start, end, path) lines; one JVM per call, all cases in one call."""
    from tributary_read.hive_udfs import build

    cp = f"{build.jar_path()}{os.pathsep}{build.spark_home() / 'jars'}/*"

    def run(lines: list[str]) -> list[str]:
        env = {**os.environ, "LC_ALL": "C.UTF-8"}  # the JVM's file names in UTF-8, as Python's
        out = subprocess.run([build.java(), "-cp", cp, udfs.PATH_FILTER_CLASS], input="\n".join(lines) + "\n",
                             capture_output=True, text=True, encoding="utf-8", timeout=300, check=True,
                             env=env).stdout
        return out.splitlines()
    return run


def test_the_filter_decides_every_name_and_window_as_python_does(java_filter, tmp_path):
    cases = []  # (case root, rel, window)
    for i, rel in enumerate(NAMES):
        for kind, mtime in MTIMES.items():
            root = tmp_path / f"{i:02d}{kind}"
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}\n")
            os.utime(path, ns=(mtime * 1_000_000,) * 2)
            cases += [(root, rel, w) for w in WINDOWS]
    got = java_filter([f"{_bound(s)}\t{_bound(e)}\t{root / rel}" for root, rel, (s, e) in cases])
    assert len(got) == len(cases)
    differ = []
    answers: Counter = Counter()
    for (root, rel, (s, e)), java in zip(cases, got):
        window = _window(s, e)
        py, listed = _python(root, rel, window), _listing(root, rel, window)
        answers[py.split("\t")[0]] += 1
        if py.startswith("err\t"):  # the same words; the jar names the file by its full path
            want = f"err\ttrib mtime window: {root}/{py[4:]}"
            ok = java == want and listed == py
        else:
            ok = java == py == listed
        if not ok:
            differ.append(f"{rel} [{s}, {e}] mtime {(root / rel).stat().st_mtime_ns // 1_000_000}: "
                          f"jar {java!r}, span_in_window {py!r}, listing {listed!r}")
    assert not differ, f"{len(differ)} of {len(cases)} cases differ:\n" + "\n".join(differ)
    assert min(answers["in"], answers["out"], answers["err"]) >= 20, answers  # every answer well exercised


def test_a_compacted_span_is_judged_without_a_stat(java_filter, tmp_path):
    """The name is enough: a compacted file is decided even where no file is (no request per file)."""
    gone = tmp_path / "gone"
    lines = [f"{W0}\t{W1}\t{gone}/{BASE}~m{W0}-{W1}.jsonl", f"{W1 + 1}\t{W1 + H}\t{gone}/{BASE}~m{W0}-{W1}.jsonl",
             f"{W0}\t{W1}\t{gone}/{BASE}.jsonl"]
    assert java_filter(lines) == ["in", "out", "out"]  # an ordinary name is stat'ed: gone, so not read


# -- end to end: trib compact, then seed 002's SQL through the filter ------------------------
T0 = 1_592_956_800_000  # 2020-06-24T00:00Z: records of two event hours


def _ids(out: dict) -> Counter:
    assert out["columns"] == ["id"]
    return Counter(int(r[0]) for r in out["rows"])


def test_seed002_sql_reads_a_compacted_table_by_span(clean_session, hive_services, tmp_path):
    spark = clean_session
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "jsonl",
                "--compression", "none", check=True)
    by_hour: dict[int, Counter] = {0: Counter(), 1: Counter()}  # mtime hour -> ids of its files
    for k in range(6):  # six ingests, each a file in both event hours; three modified in each mtime hour
        src = tmp_path / f"src{k}.jsonl"
        ids = range(k * 100, k * 100 + 20)
        src.write_text("".join(json.dumps({"id": i, "ts": T0 + (i % 2) * H + i}) + "\n" for i in ids))
        before = set(root.rglob("part-*"))
        invoke_trib("ingest", str(root), "--source", str(src), "--app-id", f"a{k}", "--time-field", "ts", check=True)
        for j, f in enumerate(sorted(set(root.rglob("part-*")) - before)):
            os.utime(f, ns=((W0 + (k // 3) * H + (k % 3) * 60_000 + j) * 1_000_000,) * 2)
        by_hour[k // 3].update(ids)
    done = json.loads(invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", "--json",
                                  check=True).stdout)
    compacted = sorted(p for p in root.rglob(f"part-*{COMPACTED_MARK}*") if not p.name.startswith("."))
    assert done["files_in"] == 12 and done["files_out"] == 4 == len(compacted)  # 2 partitions x 2 mtime hours
    assert not [p for p in root.rglob("part-*") if "_tributary" not in p.parts and COMPACTED_MARK not in p.name]
    now = int(time.time() * 1000)
    for p in compacted:  # their own mtime as S3 gives it: when the compaction ran (a local one keeps the span's end)
        os.utime(p, ns=(now * 1_000_000,) * 2)

    db = f"span_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {db}")
    try:
        spark.sql(f"CREATE EXTERNAL TABLE {db}.logs (line STRING) PARTITIONED BY (dt STRING) STORED AS TEXTFILE "
                  f"LOCATION '{root.as_uri()}'")
        for hour in ("00", "01"):
            spark.sql(f"ALTER TABLE {db}.logs ADD PARTITION(dt = '20200624{hour}') "
                      f"LOCATION '{(root / '2020_06_24' / hour).as_uri()}'")

        def sql(start: int, end: int, sync: str = "true"):
            script = tmp_path / f"q-{start}-{end}-{sync}.sql"
            script.write_text(
                "set hive.input.format=org.apache.hadoop.hive.ql.io.HiveInputFormat;\n\n"
                f"set dip.mapreduce.input.fileinputformat.sync={sync};\n\n"
                f"set dip.mapreduce.input.fileinputformat.starttime={start};\n"
                f"set dip.mapreduce.input.fileinputformat.endtime={end};\n\n"
                "SELECT\n    get_json_object(line, '$.id') AS id\nFROM\n    logs\n")
            return invoke_trib("-q", "sql", "-f", str(script), "--database", db,
                               "--metastore", hive_services.metastore_uri, "--json")

        first, second = (sql(W0 + h * H, W1 + h * H) for h in (0, 1))
        assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
        assert _ids(json.loads(first.stdout)) == by_hour[0]  # each record of the hour's files, once
        assert _ids(json.loads(second.stdout)) == by_hour[1]  # none of the first hour's
        at_compaction = sql(now - H, now + H)  # the compacted files' own mtime: not their window
        assert at_compaction.returncode == 0, at_compaction.stderr
        assert json.loads(at_compaction.stdout)["rows"] == []

        split = sql(W0 + 60_000, W1 + 60_000)  # a minute off the hours: splits both hours' spans
        err = split.stderr.strip()
        assert split.returncode == 3 and len(err.splitlines()) == 1, split.stderr
        assert any(p.name in err for p in compacted), err
        assert "is a compacted file of files modified 2023-11-14T2" in err and err.endswith(
            "read windows aligned to the table's compaction period (compact.period, docs/compaction.md)"), err
        off = sql(W0, W1, "false")  # sync off: Hive reads every file, as it always did: each record once
        assert off.returncode == 0 and _ids(json.loads(off.stdout)) == by_hour[0] + by_hour[1], off.stderr
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


def test_a_table_with_restated_partitions_is_refused_by_the_filter_as_by_python(java_filter, tmp_path):
    """A restate job's partitions carry fresh mtimes and every record again: a window would read them twice.
    The jar fails the listing in Python's words; a table beside it without restatements reads as before."""
    from tributary_read.errors import RestatedInputError
    from tributary_read.read.resolve import mtime_files
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout

    lines, expect = [], []
    for name, restated in (("restated", True), ("plain", False)):
        root = tmp_path / name
        Table.create(str(root), TableConfig(Layout(LAYOUT, PARTITION)))
        if restated:
            (root / "_tributary" / "restated").write_text("{}\n")
        for rel in ("2023_11_14/22/part-a.jsonl", f"2023_11_14/22/{BASE}~m{W0}-{W1}.jsonl"):
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("{}\n")
            os.utime(p, ns=((W0 + 1000) * 1_000_000,) * 2)
            lines.append(f"{W0}\t{W1}\t{p}")
            expect.append(restated)
    got = java_filter(lines)
    words = "has restated partitions: a window of mtimes would read each of their records again"
    for line, restated in zip(got, expect):
        assert (line.startswith("err\t") and words in line) if restated else line == "in", line
    with pytest.raises(RestatedInputError, match=words):
        mtime_files(str(tmp_path / "restated"), _window(W0, W1))
    assert len(mtime_files(str(tmp_path / "plain"), _window(W0, W1)).files) == 2


def test_hiveserver2_lists_a_table_of_many_partitions_through_the_filter(hive_services, hs2_cursor, tmp_path):
    """More than 32 partitions: Spark lists them in a job of its own and ships the filter to its executors. The
    filter serializes with its configuration: the count is whole with sync off, and with a window the executors
    judge each file by it (a filter arriving without its window would pass every file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "many"
    hours = 40
    for h in range(hours):
        d = root / f"dt={h:02d}"
        d.mkdir(parents=True)
        pq.write_table(pa.table({"id": list(range(h * 10, h * 10 + 3))}), str(d / "part-0.parquet"))
        os.utime(d / "part-0.parquet", ns=((W0 + h * 60_000) * 1_000_000,) * 2)  # one minute apart
    name = f"default.many_{uuid.uuid4().hex[:8]}"
    cur = hs2_cursor
    cur.execute(f"CREATE EXTERNAL TABLE {name} (id BIGINT) PARTITIONED BY (dt STRING) STORED AS PARQUET "
                f"LOCATION '{root.as_uri()}'")
    try:
        cur.execute(f"MSCK REPAIR TABLE {name}")
        cur.execute(f"SELECT count(*) FROM {name}")
        assert cur.fetchall() == [(3 * hours,)]
        for k, v in (("sync", "true"), ("starttime", W0), ("endtime", W0 + 5 * 60_000 - 1)):
            cur.execute(f"SET dip.mapreduce.input.fileinputformat.{k}={v}")
        cur.execute(f"REFRESH TABLE {name}")
        cur.execute(f"SELECT count(*) FROM {name}")
        assert cur.fetchall() == [(3 * 5,)]  # the first five minutes' files, judged on the executors
    finally:
        cur.execute("SET dip.mapreduce.input.fileinputformat.sync=false")
        cur.execute(f"DROP TABLE IF EXISTS {name}")
