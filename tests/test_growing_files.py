"""Files that grow after delivery (issue 32, item 4): their new bytes are delivered as ranges, exactly once.

A collector appends to a visible ``app.log``. A listing consumer used to
deliver the file once and then list it in ``conflicts`` on every growth, exit
0: the appended lines were lost. Each test runs the CLI against real files in
a plain ``yyyy_MM_dd/HH`` directory; mtimes are set with ``os.utime`` rather
than slept through. The lines are read back the way another engine would,
from the ranges in ``trib files --json``, and once through trib's own Spark
reader (``read_incremental``).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import invoke_trib
from helpers import one_line_error

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
H = 3_600_000


def now_ms() -> int:
    return int(time.time() * 1000)


def hour_dir(root: Path) -> Path:
    """The current hour's partition: inside the lookback, where a collector writes."""
    d = root / time.strftime("%Y_%m_%d/%H", time.gmtime(time.time() - 600))
    d.mkdir(parents=True, exist_ok=True)
    return d


def settle(path: Path, age_ms: int = 120_000) -> None:
    """Give the file an mtime older than the default --min-age (1 minute), as a writer that paused."""
    t = (now_ms() - age_ms) * 1_000_000
    os.utime(path, ns=(t, t))


def append(path: Path, data: bytes, gz: bool = False) -> None:
    with open(path, "ab") as f:
        f.write(gzip.compress(data) if gz else data)  # each append a whole gzip member, as `cat a.gz b.gz`


def plan(root: Path, *args: str, code: int = 0):
    p = invoke_trib("files", str(root), "--layout", LAYOUT, "--consumer", "c", "--json", *args)
    assert p.returncode == code, p.stderr
    return (json.loads(p.stdout) if code == 0 else None), p.stderr


def ack(root: Path, doc: dict) -> None:
    invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"], check=True)


def ranged_lines(root: Path, doc: dict) -> list[str]:
    """The lines of a plan read as another engine would from its JSON: bytes [offset, valid_length) per file."""
    out = []
    for f in doc["files"]:
        with open(root / f["path"], "rb") as fh:
            fh.seek(f.get("offset") or 0)
            end = f["valid_length"] if f.get("valid_length") is not None else f["size"]
            data = fh.read(end - (f.get("offset") or 0))
        if f["path"].endswith(".gz"):
            data = _members(data)
        out += data.decode().splitlines()
    return out


def _members(data: bytes) -> bytes:
    """Every gzip member of ``data``, each of which must be whole."""
    out = b""
    while data:
        d = zlib.decompressobj(wbits=31)
        out += d.decompress(data)
        assert d.eof, "a range ends inside a gzip member"
        data = d.unused_data
    return out


@pytest.mark.unit
@pytest.mark.parametrize("name", ["app.log", "app.log.gz"])
def test_a_file_appended_across_ten_runs_delivers_every_line_exactly_once(tmp_path, name):
    root = tmp_path / "raw"
    f = hour_dir(root) / name
    gz = name.endswith(".gz")
    append(f, b"l0-0\nl0-1\n", gz)
    # Written a moment ago: the default --min-age holds it (it may be mid-write), and says so.
    doc, err = plan(root)
    assert doc["files"] == [] and doc["deferred"] == 1 and doc["min_age_ms"] == 60_000
    ack(root, doc)
    expected = ["l0-0", "l0-1"]
    got: list[str] = []
    offsets = []
    for run in range(10):
        settle(f)
        doc, err = plan(root)
        assert [x["path"].rsplit("/", 1)[1] for x in doc["files"]] == [name] and doc["conflicts"] == []
        offsets.append(doc["files"][0].get("offset"))
        got += ranged_lines(root, doc)
        ack(root, doc)
        lines = [f"l{run + 1}-{i}" for i in range(3)]
        append(f, "".join(x + "\n" for x in lines).encode(), gz)
        expected += lines
    settle(f)
    doc, _ = plan(root)
    got += ranged_lines(root, doc)
    ack(root, doc)
    assert got == expected  # every line, in order, once
    assert offsets[0] is None and all(o > 0 for o in offsets[1:])  # whole first, then ranges
    doc, _ = plan(root, "--full-scan")
    assert doc["files"] == [] and doc["conflicts"] == []


@pytest.mark.unit
def test_a_half_written_last_line_is_held_until_complete(tmp_path):
    root = tmp_path / "raw"
    f = hour_dir(root) / "app.log"
    append(f, b"a\nb\n")
    doc, _ = plan(root, "--min-age", "0s")  # 0s: every file listed is delivered, as before
    assert ranged_lines(root, doc) == ["a", "b"]
    ack(root, doc)
    append(f, b"c\nhal")  # the collector is mid-line
    doc, err = plan(root, "--min-age", "0s")
    (r,) = doc["files"]
    assert (r["offset"], r["valid_length"], r["size"]) == (4, 6, 9)  # ends at the last line break
    assert ranged_lines(root, doc) == ["c"]
    assert (doc["stats"]["held_files"], doc["stats"]["held_bytes"]) == (1, 3)
    ack(root, doc)
    doc, _ = plan(root, "--min-age", "0s")
    assert doc["files"] == []  # nothing new but the partial line
    ack(root, doc)
    append(f, b"f\r\nd\r")
    doc, _ = plan(root, "--min-age", "0s")
    assert ranged_lines(root, doc) == ["half", "d"]
    ack(root, doc)
    append(f, b"\ne\n")  # the "\r\n" split between two runs is one line break, not an empty line
    doc, _ = plan(root, "--min-age", "0s")
    assert ranged_lines(root, doc) == ["e"]
    # The path list cannot say which bytes: it warns.
    human = invoke_trib("files", str(root), "--consumer", "c")
    assert "byte ranges" in human.stderr and "[offset, valid_length)" in human.stderr


@pytest.mark.unit
def test_a_gzip_member_still_being_written_is_held_until_complete(tmp_path):
    root = tmp_path / "raw"
    f = hour_dir(root) / "app.log.gz"
    append(f, b"a\nb\n", gz=True)
    doc, _ = plan(root, "--min-age", "0s")
    assert ranged_lines(root, doc) == ["a", "b"]
    ack(root, doc)
    member = gzip.compress(b"d\ne\n")
    append(f, b"c\n", gz=True)
    append(f, member[:9])  # the collector flushed half a member
    doc, err = plan(root, "--min-age", "0s")
    assert ranged_lines(root, doc) == ["c"] and doc["stats"]["held_files"] == 1
    ack(root, doc)
    append(f, member[9:])
    doc, _ = plan(root, "--min-age", "0s")
    assert ranged_lines(root, doc) == ["d", "e"]


def _consumer_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "_tributary" / "consumers" / "c").iterdir())


@pytest.mark.unit
@pytest.mark.parametrize("change,why", [
    (lambda f: f.write_bytes(b"a\n"), "shrank from 7 to 2 bytes"),
    (lambda f: f.write_bytes(b"x\nyy\nzz"), "rewritten after it was delivered"),
    (lambda f: append(f, b"c\n"), "delivered last line was continued"),
], ids=["shrunk", "rewritten", "line-continued"])
def test_a_shrunk_or_rewritten_file_holds_its_partition_alone_and_the_ack_exits_17(tmp_path, change, why):
    """A delivered file changed inside the lookback holds back its partition, not the consumer: the plan
    delivers the other partitions (it stopped the whole plan with exit 15), the ack exits 17 naming the file,
    and a replay takes the change with nothing delivered twice; the held partition's new file comes once."""
    root = tmp_path / "raw"
    f = hour_dir(root) / "app.log"
    f.write_bytes(b"a\nbb\ncc")  # delivered whole, its last line without a line break
    settle(f, 600_000)
    doc, _ = plan(root)
    ack(root, doc)
    change(f)
    settle(f)
    (f.parent / "beside.log").write_bytes(b"n\n")  # new in the held partition: waits with it
    settle(f.parent / "beside.log")
    other = root / "2024_01_01/00/other.log"  # another partition's new file: delivered now
    other.parent.mkdir(parents=True)
    other.write_bytes(b"o\n")
    settle(other)
    doc, err = plan(root)
    assert [x["path"] for x in doc["files"]] == ["2024_01_01/00/other.log"]
    [held] = doc["held"]
    assert held["path"] == f.parent.relative_to(root).as_posix() and len(held["changes"]) == 1
    assert held["changes"][0].startswith("app.log ") and why in held["changes"][0]
    assert "1 partition held back" in err and "exits 17" in err
    line = one_line_error(invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"]), 17, "app.log", why,
                          f"--partition {held['path']} --execute")
    assert "--allow-changed" not in line
    invoke_trib("consumer", "replay", str(root), "c", "--partition", held["path"], "--execute", check=True)
    doc, _ = plan(root)
    assert [x["path"] for x in doc["files"]] == [f"{held['path']}/beside.log"] and doc["held"] == []
    ack(root, doc)
    doc, _ = plan(root, "--full-scan")
    assert doc["files"] == [] and doc["held"] == [] and doc["conflicts"] == []


@pytest.mark.unit
def test_allow_changed_goes_on_with_a_warning_then_follows_the_file(tmp_path):
    root = tmp_path / "raw"
    f = hour_dir(root) / "app.log"
    f.write_bytes(b"a\nb\nc\n")
    settle(f)
    doc, _ = plan(root)
    ack(root, doc)
    f.write_bytes(b"new\n")  # rotated in place: shorter
    settle(f)
    doc, err = plan(root, "--allow-changed")
    assert doc["files"] == [] and [c["reason"] for c in doc["conflicts"]] == [
        "shrank from 6 to 4 bytes after it was delivered"]
    assert "warning: 1 delivered files changed since" in err and "--allow-changed" in err
    # That plan is pending: a run without the opt-out is not handed it silently, and is told both ways.
    one_line_error(invoke_trib("files", str(root), "--consumer", "c"), 15, f"pending plan {doc['plan_id']}",
                   "app.log shrank", "made with --allow-changed", "--discard-plan --execute")
    ack(root, doc)
    doc, _ = plan(root)  # acknowledged once: the next run is clean
    assert doc["files"] == [] and doc["conflicts"] == []
    ack(root, doc)
    append(f, b"next\n")  # and the file is followed from its new length
    settle(f)
    doc, _ = plan(root)
    assert ranged_lines(root, doc) == ["next"]


def _parquet(path: Path, n: int) -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(n))}), buf)
    path.write_bytes(buf.getvalue())


@pytest.mark.unit
def test_a_parquet_file_or_gzip_stream_that_grew_holds_its_partition(tmp_path):
    root = tmp_path / "raw"
    d = hour_dir(root)
    _parquet(d / "part-0.parquet", 3)
    (d / "one.log.gz").write_bytes(gzip.compress(b"a\nb\n"))
    for p in d.iterdir():
        settle(p, 600_000)
    doc, _ = plan(root)
    assert len(doc["files"]) == 2
    ack(root, doc)
    _parquet(d / "part-0.parquet", 300)  # rewritten larger: a Parquet footer is not a line
    settle(d / "part-0.parquet")
    doc, _ = plan(root)
    assert doc["files"] == [] and len(doc["held"]) == 1
    one_line_error(invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"]), 17,
                   "part-0.parquet", "Parquet file cannot be read from an offset")
    doc, _ = plan(root, "--allow-changed")  # acknowledged instead: reported once, not delivered
    assert doc["held"] == [] and [c["path"].rpartition("/")[2] for c in doc["conflicts"]] == ["part-0.parquet"]
    ack(root, doc)
    # One gzip stream rewritten longer (not a new member at the delivered end): no range can be decoded alone.
    (d / "one.log.gz").write_bytes(gzip.compress(b"a\nb\nc\n" * 50))
    settle(d / "one.log.gz")
    doc, _ = plan(root)
    [held] = doc["held"]
    assert held["changes"][0].startswith("one.log.gz ") and "compressed member" in held["changes"][0]


@pytest.mark.integration
def test_spark_reads_the_ranges_of_growing_files_exactly_once(spark, tmp_path):
    from tributary_read.read.resolve import plain_layout
    from tributary_read.spark import read_incremental

    root = tmp_path / "raw"
    d = hour_dir(root)
    files = {"app.log": False, "app.log.gz": True}
    expected = []
    for name, gz in files.items():
        append(d / name, f"{name} 0\n".encode(), gz)
        expected.append(f"{name} 0")
    got = []
    for run in range(1, 11):
        for name in files:
            settle(d / name)
        df, batch = read_incremental(spark, str(root), consumer="etl", layout=plain_layout(LAYOUT),
                                     read_options={"format": "text"})
        got += [r["value"] for r in df.collect()]
        assert all((f.offset is not None) == (run > 1) for f in batch.files)
        batch.ack()
        for name, gz in files.items():
            lines = [f"{name} {run}-{i}" for i in range(2)]
            append(d / name, "".join(x + "\n" for x in lines).encode(), gz)
            expected += lines
    assert sorted(got) == sorted(expected[:-4]) and len(got) == len(set(got))


@pytest.mark.integration
def test_spark_reads_the_rest_and_its_ack_names_the_held_partition(spark, tmp_path):
    """read_incremental over a consumer whose delivered file shrank: the batch reads every other partition,
    nothing of the held one, and ``batch.ack()`` acks it, then raises PartitionsHeldError (exit 17)."""
    from tributary_read.errors import PartitionsHeldError
    from tributary_read.read.resolve import plain_layout
    from tributary_read.spark import read_incremental

    root = tmp_path / "raw"
    f = hour_dir(root) / "app.log"
    f.write_bytes(b"a\nb\n")
    settle(f)
    kw = dict(consumer="c", layout=plain_layout(LAYOUT), read_options={"format": "text"})
    df, batch = read_incremental(spark, str(root), **kw)
    assert sorted(r["value"] for r in df.collect()) == ["a", "b"]
    batch.ack()
    f.write_bytes(b"a\n")
    settle(f)
    (f.parent / "beside.log").write_bytes(b"w\n")  # waits with its partition
    settle(f.parent / "beside.log")
    other = root / "2024_01_01/00/other.log"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"o\n")
    settle(other)
    df, batch = read_incremental(spark, str(root), **kw)
    assert [r["value"] for r in df.collect()] == ["o"]
    assert [h.path for h in batch.held] == [f.parent.relative_to(root).as_posix()]  # said before the read
    with pytest.raises(PartitionsHeldError, match="app.log shrank") as e:
        batch.ack()
    assert e.value.exit_code == 17
    df, batch = read_incremental(spark, str(root), **kw)  # the rest acked; the partition is held until replayed
    assert df.count() == 0 and len(batch.held) == 1


ETL_JOB = """\
[job]
name = "j"
sql = "q.sql"

[[inputs]]
table = "{root}"
view = "raw"
consumer = "c"
layout = "{layout}"
format = "text"
{extra}
[output]
table = "{out}"
time_column = "ts"
"""


@pytest.mark.unit
def test_an_etl_input_whose_file_shrank_holds_its_partition_unless_allow_changed(tmp_path):
    root = tmp_path / "raw"
    f = hour_dir(root) / "app.log"
    f.write_bytes(b"a\nb\n")
    settle(f)
    doc, _ = plan(root)  # delivered by an earlier run of the job (its consumer, `c`)
    ack(root, doc)
    f.write_bytes(b"a\n")
    settle(f)
    out = tmp_path / "out"
    invoke_trib("table", "create", str(out), "--layout", LAYOUT, "--partition", "dt={yyyy}{MM}{dd}{HH}", check=True)
    (tmp_path / "q.sql").write_text("SELECT value, 0 AS ts FROM raw;\n")
    job = tmp_path / "job.toml"
    schedule = time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime())
    job.write_text(ETL_JOB.format(root=root, layout=LAYOUT, out=out, extra=""))
    p = invoke_trib("etl", "run", str(job), "--schedule-time", schedule, "--dry-run")
    assert p.returncode == 0, p.stderr  # the dry run says what the run does: it holds the partition, exits 17
    assert "in 1 partition(s) held back until `trib consumer replay`" in p.stdout and "exits 17" in p.stdout
    assert f"e.g. {f.parent.relative_to(root).as_posix()}" in p.stdout
    job.write_text(ETL_JOB.format(root=root, layout=LAYOUT, out=out, extra="allow_changed = true\n"))
    # The dry run's plan is pending and held the partition: one that takes the change is not mixed into it.
    line = one_line_error(invoke_trib("etl", "run", str(job), "--schedule-time", schedule, "--dry-run", "-q"), 5,
                          "1 partition held back", "discard-plan --execute")
    invoke_trib(*line.split("drop it with: trib ")[1].split(), check=True)
    p = invoke_trib("etl", "run", str(job), "--schedule-time", schedule, "--dry-run")
    assert p.returncode == 0, p.stderr
    assert "1 delivered files changed since and are not read again" in p.stderr
    # a window input cannot take it: it has nothing delivered to compare with
    job.write_text(ETL_JOB.format(root=root, layout=LAYOUT, out=out, extra='allow_changed = true\nmode = "mtime"\n')
                   .replace('consumer = "c"\n', ""))
    p = invoke_trib("etl", "run", str(job), "--schedule-time", schedule, "--dry-run")
    assert p.returncode == 3 and "allow_changed does not apply to mode mtime" in p.stderr


@pytest.mark.unit
def test_a_both_consumer_delivers_a_foreign_file_that_grew_as_a_range(tmp_path):
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", "dt={yyyy}{MM}{dd}{HH}", check=True)
    f = hour_dir(root) / "collector.jsonl"  # another tool's file in the table's partition
    f.write_bytes(b'{"n": 1}\n')
    settle(f)
    got = []
    for n in range(2, 5):
        p = invoke_trib("files", str(root), "--consumer", "c", "--json")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["tracking"] == "both"
        got += ranged_lines(root, doc)
        ack(root, doc)
        append(f, f'{{"n": {n}}}\n'.encode())
        settle(f)
    assert got == [f'{{"n": {n}}}' for n in range(1, 4)]


@pytest.mark.unit
@pytest.mark.parametrize("range_first", [False, True], ids=["delivered-whole", "delivered-as-a-range"])
def test_a_file_rewritten_in_place_with_longer_content_is_a_change_not_growth(tmp_path, range_first):
    """A file rewritten in place with longer content keeps its name and grows: only its bytes tell it from one
    that was appended to. The consumer keeps the digests of what it delivered (its first bytes, the bytes
    before the delivered end) and checks them before delivering anything past that end. Once the bytes past
    the old length were delivered as a range: 9 of 15 new records lost, exit 0, no conflict."""
    root = tmp_path / "raw"
    f = hour_dir(root) / "app.log"
    f.write_bytes(b"".join(b'{"i": %d}\n' % i for i in range(10, 16)))  # lines of one length: the new content
    settle(f, 600_000)                                                  # has a line break at the old end too
    doc, _ = plan(root)
    ack(root, doc)
    if range_first:  # grew once already: the ledger keeps the range's end with its digests
        append(f, b"".join(b'{"i": %d}\n' % i for i in range(16, 19)))
        settle(f, 300_000)
        doc, _ = plan(root)
        assert [x.get("offset") for x in doc["files"]] == [60]
        ack(root, doc)
    f.write_bytes(b"".join(b'{"i": %d}\n' % i for i in range(50, 65)))  # the same name, other, longer content
    settle(f)
    doc, _ = plan(root)
    [held] = doc["held"]
    assert doc["files"] == [] and [c.partition(":")[0] for c in held["changes"]] == [
        "app.log rewritten after it was delivered"]
    invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"])  # exits 17; the ledger stays before the change
    doc, _ = plan(root)
    assert doc["files"] == [] and [h["path"] for h in doc["held"]] == [f.parent.relative_to(root).as_posix()]


@pytest.mark.unit
def test_every_changed_file_is_named_in_the_one_line(tmp_path):
    """Two files changed in one run: the ack's exit-17 line names both, with their reasons, so one look fixes
    the run."""
    root = tmp_path / "raw"
    d = hour_dir(root)
    for name in ("a.log", "b.log"):
        (d / name).write_bytes(b"x\ny\n")
        settle(d / name, 600_000)
    doc, _ = plan(root)
    ack(root, doc)
    (d / "a.log").write_bytes(b"x\n")
    (d / "b.log").write_bytes(b"q\nz\n")
    for name in ("a.log", "b.log"):
        settle(d / name)
    doc, _ = plan(root)
    one_line_error(invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"]), 17,
                   "a.log shrank from 4 to 2 bytes", "b.log rewritten after it was delivered", "trib consumer replay")


@pytest.mark.unit
def test_a_removed_file_holds_its_partition_but_an_emptied_one_is_retention(tmp_path):
    """Another tool compacts a partition inside the lookback: it writes the records of the delivered files
    again under a new name and removes them. Delivering the new file would repeat every record, so the
    removal holds the partition, as past the lookback. A partition whose every file is gone is retention:
    nothing is held, and a file reappearing under a delivered name is still a change."""
    root = tmp_path / "raw"
    d = hour_dir(root)
    gone = root / "2024_01_01/00"  # an old hour: emptied by retention
    gone.mkdir(parents=True)
    for p in (d / "part-0.log", d / "part-1.log", gone / "old.log"):
        p.write_bytes(b"r1\nr2\n")
        settle(p, 600_000)
    doc, _ = plan(root)
    ack(root, doc)
    (d / "compacted.log").write_bytes(b"r1\nr2\nr1\nr2\n")
    settle(d / "compacted.log")
    for p in (d / "part-0.log", d / "part-1.log", gone / "old.log"):
        p.unlink()
    doc, _ = plan(root)
    assert doc["files"] == []
    assert [(h["path"], sorted(h["changes"])) for h in doc["held"]] == [(d.relative_to(root).as_posix(), [
        "part-0.log was removed after it was delivered", "part-1.log was removed after it was delivered"])]
    one_line_error(invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"]), 17, "part-0.log was removed")
    # Looked at, the replay takes the removals; the new file is the next plan's, and the user who knows it
    # repeats what was delivered leaves it unread (nothing is decided for them: a new file may be new data).
    held = d.relative_to(root).as_posix()
    r = invoke_trib("consumer", "replay", str(root), "c", "--partition", held, "--json", "--execute", check=True)
    assert json.loads(r.stdout)["new_files"] == 1
    doc, _ = plan(root)
    assert [f["path"] for f in doc["files"]] == [f"{held}/compacted.log"] and doc["held"] == []
    invoke_trib("consumer", "skip", str(root), "c", f"{held}/compacted.log", "--execute", check=True)
    ack(root, doc)  # the run reads the plan's other files (none) and acks it
    (gone / "old.log").write_bytes(b"r1\n")  # back under a delivered name in the emptied partition
    settle(gone / "old.log")
    doc, _ = plan(root)
    assert doc["files"] == [] and [h["path"] for h in doc["held"]] == ["2024_01_01/00"]
