"""Issue 20: ``trib ingest --kafka`` against a real Kafka-protocol broker (Tansu), through the CLI.

Every check counts records in the table's committed files (never broker
watermarks): each produced record once, tombstones skipped and counted, poison
records in the dead-letter file with topic, partition and offset. A run on a
"new machine" (a copy of the table and nothing else) resumes exactly; workers
split partitions; two processes that claim one partition never both commit it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid

import pytest

from conftest import REPO, TRIB, invoke_trib, run_trib
from helpers import LAYOUT, PARTITION

pytestmark = pytest.mark.integration

T0 = 1_764_000_000_000  # 2025-11-24T16:00:00Z


def _topic(broker, partitions: int = 3) -> str:
    name = f"ev-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name, partitions)
    return name


def _records(start: int, n: int, parts: int = 3):
    return [({"id": i, "ts": T0 + i * 1000, "msg": f"m{i}"}, i % parts) for i in range(start, start + n)]


def _produce(broker, topic: str, records) -> None:
    by_part: dict[int, list] = {}
    for doc, p in records:
        by_part.setdefault(p, []).append(doc)
    for p, docs in by_part.items():
        broker.produce(topic, docs, partition=p)


def _table(tmp_path, name="t", fmt="jsonl"):
    root = tmp_path / name
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", fmt,
                check=True)
    return root


def _ids(root) -> list[int]:
    """Every id in the table's committed files (what trib's readers return)."""
    import pyarrow.parquet as pq

    from tributary_read.table.config import Table
    from tributary_read.table.manifest import KIND_DATA

    t = Table.load(str(root))
    out: list[int] = []
    for f in t.log.state().files.values():
        if f.kind != KIND_DATA:
            continue
        path = os.path.join(str(root), f.path)
        if path.endswith(".parquet"):
            out += pq.read_table(path).column("id").to_pylist()
        else:
            import gzip

            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as fh:
                out += [json.loads(line)["id"] for line in fh if line.strip()]
    return sorted(out)


def _ingest(root, broker, topic, *extra, app="feed"):
    return invoke_trib("ingest", str(root), "--kafka", broker.bootstrap, "--topic", topic, "--app-id", app,
                       "--time-field", "ts", *extra)


def test_a_bounded_run_takes_every_record_once_and_a_new_machine_resumes_from_the_table(kafka_broker, tmp_path):
    topic = _topic(kafka_broker)
    _produce(kafka_broker, topic, _records(0, 3000))
    kafka_broker.produce(topic, [None], partition=0)  # a tombstone
    kafka_broker.produce(topic, [b"not json {"], partition=1)  # poison
    root = _table(tmp_path)
    r = _ingest(root, kafka_broker, topic, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["records"] == 3002 and doc["tombstones"] == 1 and doc["dead_letters"] == 1 and doc["commits"] == 1
    assert {tp: p["next"] for tp, p in doc["partitions"].items()} == {f"{topic}/0": 1001, f"{topic}/1": 1001,
                                                                        f"{topic}/2": 1000}
    assert _ids(root) == list(range(3000))
    (f,) = json.loads(invoke_trib("dead-letters", "list", str(root), "--json", check=True).stdout)["files"]
    assert f["sources"] == {f"{topic}/1": 1} and f["reasons"][0]["reason"] == "not valid JSON"
    (d,) = [json.loads(line) for line in (root / f["path"]).read_text().splitlines()]
    assert (d["topic"], d["partition"], d["offset"], d["line"]) == (topic, 1, 1000, "not json {")

    # Nothing new: no commit. New records: exactly those.
    assert json.loads(_ingest(root, kafka_broker, topic, "--json").stdout)["commits"] == 0
    _produce(kafka_broker, topic, _records(3000, 600))
    # "A new machine": a copy of the table and nothing else (no consumer group state is read).
    moved = tmp_path / "moved"
    shutil.copytree(root, moved)
    r = _ingest(moved, kafka_broker, topic, "--json", app="feed")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["records"] == 600
    assert _ids(moved) == list(range(3600))
    assert invoke_trib("verify", str(moved)).returncode == 0
    c = json.loads((moved / "_tributary" / "log" / "00000000000000000001.json").read_text())["transaction"]
    assert c["meta"]["kafka"] == {topic: {"0": 1001, "1": 1001, "2": 1000}}
    assert c["meta"]["kafka_start"] == {f"kafka:{topic}/{p}": "earliest" for p in range(3)}


def test_start_latest_and_an_instant_are_recorded_and_time_source_kafka(kafka_broker, tmp_path):
    topic = _topic(kafka_broker, 1)
    _produce(kafka_broker, topic, _records(0, 100, parts=1))
    latest = _table(tmp_path, "latest")
    r = _ingest(latest, kafka_broker, topic, "--start", "latest", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["records"] == 0, r.stderr
    _produce(kafka_broker, topic, _records(100, 50, parts=1))
    doc = json.loads(_ingest(latest, kafka_broker, topic, "--start", "latest", "--json").stdout)
    assert doc["records"] == 50 and _ids(latest) == list(range(100, 150))
    c = json.loads((latest / "_tributary" / "log" / "00000000000000000001.json").read_text())["transaction"]
    assert c["meta"]["kafka_start"] == {f"kafka:{topic}/0": "latest"}

    # The record timestamps (set by the producer: now) file the records under the hour they were produced.
    ktime = _table(tmp_path, "ktime")
    r = invoke_trib("ingest", str(ktime), "--kafka", kafka_broker.bootstrap, "--topic", topic, "--app-id", "k",
                    "--time-source", "kafka", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["records"] == 150, r.stderr
    from tributary_read.table.config import Table

    hours = {f.partition["dt"] for f in Table.load(str(ktime)).log.state().files.values()}
    now = time.strftime("%Y%m%d%H", time.gmtime())
    assert hours <= {now, time.strftime("%Y%m%d%H", time.gmtime(time.time() - 3600))}


def test_kafka_columns_in_a_parquet_table(kafka_broker, tmp_path):
    import pyarrow.parquet as pq

    topic = _topic(kafka_broker, 2)
    _produce(kafka_broker, topic, _records(0, 40, parts=2))
    root = _table(tmp_path, fmt="parquet")
    r = _ingest(root, kafka_broker, topic, "--kafka-columns", "partition,offset,topic", "--json")
    assert r.returncode == 0, r.stderr
    from tributary_read.table.config import Table

    rows = []
    for f in Table.load(str(root)).log.state().files.values():
        rows += pq.read_table(str(root / f.path)).to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(40))
    assert {(r["kafka_partition"], r["id"] % 2) for r in rows} == {(0, 0), (1, 1)}
    assert all(r["kafka_topic"] == topic for r in rows)
    assert sorted(r["kafka_offset"] for r in rows if r["kafka_partition"] == 0) == list(range(20))


def test_workers_split_the_partitions_and_all_commits_land(kafka_broker, tmp_path):
    topic = _topic(kafka_broker, 4)
    _produce(kafka_broker, topic, _records(0, 4000, parts=4))
    root = _table(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([*TRIB, "ingest", str(root), "--kafka", kafka_broker.bootstrap, "--topic", topic,
                               "--app-id", "feed", "--time-field", "ts", "--worker", f"{i}/2", "--commit-every",
                               "300", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    docs = [json.loads(o[0]) for o in outs]
    assert sorted(docs[0]["partitions"]) == [f"{topic}/0", f"{topic}/2"]
    assert sorted(docs[1]["partitions"]) == [f"{topic}/1", f"{topic}/3"]
    assert _ids(root) == list(range(4000))
    assert invoke_trib("verify", str(root)).returncode == 0


def test_two_processes_claiming_one_partition_never_both_commit_it(kafka_broker, tmp_path):
    """A follow run owns partition 0; a second run claims it too. Whichever commits second is fenced
    (exit 16) with nothing of its batch visible; the table holds every record once."""
    topic = _topic(kafka_broker, 1)
    _produce(kafka_broker, topic, _records(0, 2000, parts=1))
    root = _table(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    follow = subprocess.Popen([*TRIB, "ingest", str(root), "--kafka", kafka_broker.bootstrap, "--topic", topic,
                               "--app-id", "feed", "--time-field", "ts", "--follow", "--commit-interval", "1s",
                               "--commit-every", "500"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
    time.sleep(0.3)
    second = run_trib("ingest", str(root), "--kafka", kafka_broker.bootstrap, "--topic", topic, "--app-id", "feed",
                      "--time-field", "ts", "--commit-every", "500")
    _produce(kafka_broker, topic, _records(2000, 500, parts=1))
    time.sleep(3)
    if follow.poll() is None:
        follow.send_signal(signal.SIGTERM)
    out, err = follow.communicate(timeout=60)
    codes = sorted([follow.returncode, second.returncode])
    assert 16 in codes or codes == [0, 0], (follow.returncode, err, second.returncode, second.stderr)
    fenced = err if follow.returncode == 16 else second.stderr
    if 16 in codes:
        assert "another process claims" in fenced and len(fenced.strip().splitlines()) == 1, fenced
    # The survivor's records, and a rerun for whatever the fenced one had read: each record once.
    assert run_trib("ingest", str(root), "--kafka", kafka_broker.bootstrap, "--topic", topic, "--app-id", "feed",
                    "--time-field", "ts").returncode == 0
    assert _ids(root) == list(range(2500))
    assert invoke_trib("verify", str(root)).returncode == 0


def test_sigterm_on_a_follow_run_makes_a_last_commit_and_exits_0(kafka_broker, tmp_path):
    topic = _topic(kafka_broker, 3)
    root = _table(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([*TRIB, "ingest", str(root), "--kafka", kafka_broker.bootstrap, "--topic", topic,
                          "--app-id", "feed", "--time-field", "ts", "--follow", "--commit-interval", "1h", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _produce(kafka_broker, topic, _records(0, 900))
    time.sleep(3)  # read, not committed (the interval is an hour)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    doc = json.loads(out)
    assert doc["stopped_by"] == "SIGTERM" and doc["commits"] == 1 and doc["records"] == 900
    assert _ids(root) == list(range(900))


def test_a_missing_topic_and_an_unreachable_broker_are_one_line_within_a_bounded_time(kafka_broker, tmp_path):
    from helpers import one_line_error

    root = _table(tmp_path)
    t0 = time.monotonic()
    one_line_error(_ingest(root, kafka_broker, f"nope-{uuid.uuid4().hex[:6]}"), 3, "does not exist")
    assert time.monotonic() - t0 < 30
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    t0 = time.monotonic()
    r = invoke_trib("ingest", str(root), "--kafka", f"127.0.0.1:{port}", "--topic", "t", "--app-id", "feed",
                    "--time-field", "ts")
    one_line_error(r, 7, f"127.0.0.1:{port} did not answer", "nothing was committed")
    assert time.monotonic() - t0 < 40
    assert invoke_trib("log", str(root), "--json").returncode == 0


def test_the_python_api_follows_until_stopped_and_commits_every_record_once(kafka_broker, tmp_path):
    """``tributary_read.ingest_kafka`` for callers who embed it: a follow run in a thread, stopped
    by the caller's StopRequest, with an on_commit hook; then a bounded run finds nothing new."""
    import threading

    import tributary_read as trib
    from tributary_read.table.config import Table
    from tributary_read.write.ingest import StopRequest

    topic = _topic(kafka_broker, 2)
    _produce(kafka_broker, topic, _records(0, 500, parts=2))
    root = _table(tmp_path)
    table = Table.load(str(root))
    source = trib.KafkaSource(kafka_broker.bootstrap, (topic,))
    commits: list = []
    stop = StopRequest()
    out: list = []
    t = threading.Thread(target=lambda: out.append(trib.ingest_kafka(
        table, source, "api", time_spec=trib.TimeSpec(field="ts"), follow=True, commit_interval_s=0.3,
        on_commit=commits.append, stop=stop)))
    t.start()
    deadline = time.monotonic() + 60
    while len(_ids(root)) < 500:
        assert time.monotonic() < deadline and t.is_alive(), "the follow run did not commit the first 500"
        time.sleep(0.1)
    _produce(kafka_broker, topic, _records(500, 100, parts=2))
    while len(_ids(root)) < 600:
        assert time.monotonic() < deadline and t.is_alive(), "the follow run did not commit the next 100"
        time.sleep(0.1)
    stop.signum = signal.SIGTERM
    t.join(30)
    (result,) = out
    assert isinstance(result, trib.KafkaIngestResult) and result.records == 600 and result.stopped_by == "SIGTERM"
    assert result.commits == len(commits) >= 2 and sum(c.records for c in commits) == 600
    assert _ids(root) == list(range(600))
    again = trib.ingest_kafka(table, source, "api", time_spec=trib.TimeSpec(field="ts"))
    assert again.records == 0 and again.commits == 0


# -- the bad-record limit in a small run, and partitions added later ------------------------------------------


def _dead(root) -> list[dict]:
    """Every committed dead letter (topic, partition, offset, line)."""
    from tributary_read.table.config import Table
    from tributary_read.table.manifest import KIND_DATA

    out = []
    for f in Table.load(str(root)).log.state().files.values():
        if f.kind != KIND_DATA:
            out += [json.loads(x) for x in (root / f.path).read_text().splitlines()]
    return sorted(out, key=lambda d: (d["partition"], d["offset"]))


def test_a_few_bad_records_in_a_small_run_go_to_dead_letters_and_a_flood_commits_nothing(kafka_broker, tmp_path):
    """One non-JSON message in a run of 51 is 2%: over the 1% default, it failed every run of a quiet topic.
    A run may keep a handful (10) with a loud report; more than that and over the fraction is refused with
    nothing committed, and the rerun with a raised limit takes every offset once."""
    from helpers import one_line_error, snapshot

    topic = _topic(kafka_broker, 1)
    _produce(kafka_broker, topic, _records(0, 30, parts=1))
    kafka_broker.produce(topic, [b"not json {"], partition=0)  # offset 30
    _produce(kafka_broker, topic, _records(30, 20, parts=1))
    root = _table(tmp_path)
    r = _ingest(root, kafka_broker, topic, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["records"], doc["dead_letters"], doc["commits"]) == (51, 1, 1)
    rep = doc["bad_records"]
    assert (rep["bad"], rep["read"], rep["allowance"], rep["max_bad_fraction"], rep["over_fraction"]) == \
        (1, 51, 10, 0.01, True)
    assert rep["first"] == {"at": f"{topic}/0", "offset": 30, "reason": "not valid JSON", "alike": 1}
    (warning,) = [x for x in r.stderr.splitlines() if x.startswith("trib: warning:")]
    for w in ("1 of 51 records (2.0%)", f"first: {topic}/0 offset 30: not valid JSON",
              "over --max-bad-fraction 0.01", "may keep 10 bad records", "trib dead-letters list"):
        assert w in warning, (w, warning)
    assert _ids(root) == list(range(50))
    assert [(d["partition"], d["offset"], d["line"]) for d in _dead(root)] == [(0, 30, "not json {")]

    # A flood: 20 bad among the next 60 (more than 10, and 33%): refused, nothing committed.
    _produce(kafka_broker, topic, _records(50, 30, parts=1))  # offsets 51..80
    kafka_broker.produce(topic, [f"bad {i}".encode() for i in range(20)], partition=0)  # offsets 81..100
    _produce(kafka_broker, topic, _records(80, 10, parts=1))  # offsets 101..110
    before = snapshot(root)
    one_line_error(_ingest(root, kafka_broker, topic), 3, "20 of 60 records (33.3%)",
                   "over --max-bad-fraction 0.01 and more than the 10 bad records any run may keep",
                   f"first: {topic}/0 offset 81: not valid JSON (20 records like it)", "nothing was committed")
    assert snapshot(root) == before
    # Committing every 30: the first 30 (all good) land, the batch that crosses the limit does not.
    one_line_error(_ingest(root, kafka_broker, topic, "--commit-every", "30"), 3, "20 of 60 records",
                   "this run's 1 earlier commits stand")
    assert _ids(root) == list(range(80)) and len(_dead(root)) == 1
    r = _ingest(root, kafka_broker, topic, "--max-bad-fraction", "0.7", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["records"], doc["dead_letters"], doc["bad_records"]["over_fraction"]) == (30, 20, False)
    assert _ids(root) == list(range(90))
    assert [d["offset"] for d in _dead(root)] == [30, *range(81, 101)]
    assert json.loads(_ingest(root, kafka_broker, topic, "--json").stdout)["records"] == 0


def test_a_partition_added_after_the_first_commit_starts_at_its_earliest_offset(kafka_broker, tmp_path):
    """``--start latest`` is the app's first run's choice. A partition added to the topic later holds only
    records newer than that start: it is read from its earliest offset, said on stderr and recorded.

    Tansu 0.6 answers CreatePartitions with UNSUPPORTED_FEATURE, so the partition is added the way trib
    cannot tell apart: the topic is made again with one more partition and partition 0 holds the same
    records at the same offsets."""
    topic = _topic(kafka_broker, 1)
    _produce(kafka_broker, topic, _records(0, 40, parts=1))
    root = _table(tmp_path)
    r = _ingest(root, kafka_broker, topic, "--start", "latest", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["records"] == 0, r.stderr
    _produce(kafka_broker, topic, _records(40, 20, parts=1))

    (f,) = kafka_broker.admin.delete_topics([topic], request_timeout=20).values()
    f.result(timeout=20)
    kafka_broker.create_topic(topic, 2)
    _produce(kafka_broker, topic, _records(0, 60, parts=1))  # partition 0 as it was: offsets 0..59
    _produce(kafka_broker, topic, [(d, 1) for d, _ in _records(60, 30, parts=1)])  # the added partition

    r = _ingest(root, kafka_broker, topic, "--start", "latest", "--json")
    assert r.returncode == 0, r.stderr
    assert _ids(root) == list(range(40, 90))  # was 40..59: partition 1 started at its end, 30 records skipped
    doc = json.loads(r.stdout)
    assert doc["added_partitions"] == [f"{topic}/1"] and doc["partitions"][f"{topic}/1"]["from"] == 0
    assert f"trib: note: partition {topic}/1 was added after this app first read the topic: reading from the " \
           "earliest offset (--start applies to the app's first run only)" in r.stderr
    from tributary_read.table.config import Table

    meta = Table.load(str(root)).log.read_commit(2).transaction.meta
    assert meta["kafka_start"] == {f"kafka:{topic}/1": "earliest"} and meta["kafka_partitions"] == {topic: 1}
    assert json.loads(_ingest(root, kafka_broker, topic, "--start", "latest", "--json").stdout)["records"] == 0

    # A partition that was there at the app's first run, read first by a second worker: --start applies.
    two = _topic(kafka_broker, 2)
    _produce(kafka_broker, two, _records(0, 20, parts=2))
    wide = _table(tmp_path, "wide")
    for p, more in (("0", 20), ("1", 24)):
        r = _ingest(wide, kafka_broker, two, "--start", "latest", "--partitions", p, "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["added_partitions"] == [], r.stderr
        _produce(kafka_broker, two, _records(more, 4, parts=2))
    assert _ids(wide) == []
    assert json.loads(_ingest(wide, kafka_broker, two, "--start", "latest", "--json").stdout)["records"] == 6
    assert _ids(wide) == [20, 22, 24, 25, 26, 27]  # 21 and 23 came before partition 1's first run: latest


def test_a_latest_first_run_refused_for_bad_records_leaves_the_rerun_exact(kafka_broker, tmp_path):
    """``--start latest`` resolves to another offset on every run. A first run that read records and was
    refused (a flood of bad ones) committed nothing, so the rerun started at the new end and skipped them.
    The start is committed before the first record is read: the rerun reads them again."""
    from tributary_read.table.config import Table

    topic = _topic(kafka_broker, 1)
    _produce(kafka_broker, topic, _records(0, 10, parts=1))  # before the start: not read
    root = _table(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([*TRIB, "ingest", str(root), "--kafka", kafka_broker.bootstrap, "--topic", topic,
                          "--app-id", "feed", "--time-field", "ts", "--start", "latest", "--follow",
                          "--commit-interval", "1s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    try:
        deadline = time.monotonic() + 15  # the start's commit; without it, enough time to have resolved latest
        while time.monotonic() < deadline and Table.load(str(root)).log.latest_version() < 1 and p.poll() is None:
            time.sleep(0.1)
        kafka_broker.produce(topic, [f"bad {i}".encode() for i in range(15)], partition=0)  # offsets 10..24
        _produce(kafka_broker, topic, _records(10, 5, parts=1))  # offsets 25..29
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3 and "cannot be placed" in err, (p.returncode, err)
    assert _ids(root) == []
    r = _ingest(root, kafka_broker, topic, "--start", "latest", "--max-bad-fraction", "0.9", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["records"], doc["dead_letters"]) == (20, 15)
    assert _ids(root) == list(range(10, 15)) and [d["offset"] for d in _dead(root)] == list(range(10, 25))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_values_parsed_in_bulk_keep_every_per_record_rule(kafka_broker, tmp_path, fmt):
    """Runs of values are parsed in bulk (write.json_batch); the odd ones among them still get the per-record
    rules at their own offsets: bad JSON, a missing time, JSON nested deeper than json.loads takes are dead
    letters; a value holding a line break is one record (one line of a jsonl file); a string time among
    integers is read as a time; the manifest's offsets and event times are the records'."""
    topic = _topic(kafka_broker, 1)
    values: list[bytes] = []
    odd = {40: b"not json {", 90: b'{"id":-1}', 150: b'{"id":-2,"ts":%d,"a":%s%s}' % (T0, b"[" * 1500, b"]" * 1500)}
    ids = []
    for off in range(300):
        if off in odd:
            values.append(odd[off])
            continue
        doc = {"id": off, "ts": T0 + off * 1000, "msg": f"m{off}"}
        if off == 120:
            doc["ts"] = "2025-11-24T16:02:00Z"  # = T0 + 120 s, as a string
        if off == 100:
            doc["ts"] = T0 + 3_000_000  # the newest event time, in the middle of a run
        line = json.dumps(doc, separators=(",", ":")).encode()
        values.append(line.replace(b',"ts"', b',\n"ts"') if off == 200 else line)
        ids.append(off)
    kafka_broker.produce(topic, values, partition=0)
    root = _table(tmp_path, fmt=fmt)
    r = _ingest(root, kafka_broker, topic, "--json", "--max-bad-fraction", "0.5")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # In a Parquet file whose ts column holds integers, a string ts is a column conflict (docs/parquet.md).
    conflict = [120] if fmt == "parquet" else []
    assert (doc["records"], doc["dead_letters"]) == (300, 3 + len(conflict))
    assert _ids(root) == [i for i in ids if i not in conflict]
    dead = [(d["offset"], d["reason"]) for d in _dead(root)]
    assert [x for x in dead if x[0] not in conflict] == [(40, "not valid JSON"), (90, "no time field 'ts'"),
                                                         (150, "JSON nested too deeply")]
    from tributary_read.table.config import Table

    t = Table.load(str(root))
    state = t.log.state()
    last = t.log.read_commit(state.apps["feed"].version)
    assert last.transaction.meta["kafka"] == {topic: {"0": 300}}
    assert last.transaction.meta["kafka_event_ms"] == {f"kafka:{topic}/0": T0 + 3_000_000}
    if fmt == "jsonl":  # the record with a line break is one line
        import gzip

        def text(path: str) -> bytes:
            data = (root / path).read_bytes()
            return gzip.decompress(data) if path.endswith(".gz") else data

        lines = [x for f in state.files.values() if f.kind == "data" for x in text(f.path).splitlines()]
        assert len(lines) == len(ids) and b'"id":200,"ts":' in b"\n".join(lines)
