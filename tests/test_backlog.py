"""Issue 32 item 2: large backlogs are bounded, not skipped (``--max-files``, ``max_files``).

A new consumer delivers all history by default; a cap bounds one plan to whole
partitions (commits), oldest first, and leaves the rest pending, reported as the
plan's backlog, for the next runs. Every test goes through the CLI over real files.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from conftest import invoke_trib
from etl_data import consumer_job_text
from helpers import make_source, one_line_error, put

from tributary_read.table.config import Table

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
H = 3_600_000
Y2023 = 1_672_531_200_000  # 2023-01-01T00:00:00Z
NOW = int(datetime.now(timezone.utc).timestamp() * 1000)


def cli(*args: str, code: int = 0, cwd=None):
    p = invoke_trib(*args, cwd=cwd)
    assert p.returncode == code, (args, p.returncode, p.stdout, p.stderr)
    return p


def plan(root, *args: str) -> dict:
    return json.loads(cli("files", str(root), "--consumer", "c", "--json", "--min-age", "0s", *args).stdout)


def ack(root, doc: dict) -> None:
    cli("consumer", "ack", str(root), "c", doc["plan_id"])


def hour(ms: int) -> str:
    return f"{datetime.fromtimestamp(ms / 1000, timezone.utc):%Y_%m_%d/%H}"


@pytest.mark.unit
def test_a_year_of_hourly_partitions_drains_in_capped_runs_and_delivers_every_file_exactly_once(tmp_path):
    root = tmp_path / "raw"
    hours = [hour(Y2023 + i * H) for i in range(8760)]
    for i, d in enumerate(hours):
        put(root, f"{d}/a.log", Y2023 + i * H + 60_000)
    delivered: list[str] = []
    backlogs = []
    late_added = False
    for run in range(20):
        doc = plan(root, "--layout", LAYOUT, "--max-files", "1000")
        got = [f["path"] for f in doc["files"]]
        left = doc["backlog"]
        backlogs.append(left["files"])
        if left["files"]:  # oldest first: all it delivered is older than what it left
            assert len(got) == 1000 and max(p.rsplit("/", 1)[0] for p in got) < left["oldest_partition"]
            assert left["bytes"] == 2 * left["files"] and left["partitions"] == left["files"]
        if run == 3:  # the oldest partition with something new comes first
            assert got[0] == f"{hours[5]}/late.log"
        delivered += got
        ack(root, doc)
        if run == 2 and not late_added:
            # A sealed, delivered partition gains a file newer than its seal: delivered exactly, with the backlog.
            put(root, f"{hours[5]}/late.log", NOW - 3 * H)
            late_added = True
        if not left["files"] and not got:
            break
    assert backlogs[:9] == [7760, 6760, 5760, 4761, 3761, 2761, 1761, 761, 0], backlogs  # +1: the late file
    assert len(delivered) == len(set(delivered)) == 8761  # every file, once
    assert set(delivered) == {f"{d}/a.log" for d in hours} | {f"{hours[5]}/late.log"}
    show = json.loads(cli("consumer", "show", str(root), "c", "--json").stdout)
    assert show["delivered_files"] == 8761


@pytest.mark.unit
def test_a_cap_smaller_than_one_partition_still_progresses_and_a_grown_file_waits_its_turn(tmp_path):
    root = tmp_path / "raw"
    for d in ("2024_01_01/00", "2024_01_01/01"):
        for i in range(5):
            put(root, f"{d}/f{i}.log", Y2023 + i)
    now_hour = hour(NOW - 10 * 60_000)
    log = put(root, f"{now_hour}/app.log", NOW - 10 * 60_000, b"one\ntwo\n")
    first = plan(root, "--layout", LAYOUT, "--max-files", "2")
    assert [f["path"] for f in first["files"]] == [f"2024_01_01/00/f{i}.log" for i in range(5)]
    assert first["backlog"] == {"files": 6, "bytes": 18, "partitions": 2, "oldest_partition": "2024_01_01/01"}
    p = cli("files", str(root), "--consumer", "c", "--min-age", "0s", "--max-files", "2")  # the same pending plan
    assert "backlog: 6 files (18 bytes) in 2 partitions from 2024_01_01/01 left for the next runs" in p.stderr
    ack(root, first)
    second = plan(root, "--max-files", "2")
    assert [f["path"] for f in second["files"]] == [f"2024_01_01/01/f{i}.log" for i in range(5)]
    ack(root, second)
    third = plan(root, "--max-files", "off")
    assert [f["path"] for f in third["files"]] == [f"{now_hour}/app.log"] and third["backlog"]["files"] == 0
    ack(root, third)
    # The delivered log grows while an older new partition waits: the cap takes the old partition first,
    # the range waits in the backlog, then is delivered once from where the last delivery ended.
    with open(log, "ab") as f:
        f.write(b"three\n")
    put(root, "2024_01_02/00/g.log", Y2023)
    put(root, "2024_01_02/00/h.log", Y2023)
    fourth = plan(root, "--max-files", "1")
    assert [f["path"] for f in fourth["files"]] == ["2024_01_02/00/g.log", "2024_01_02/00/h.log"]
    assert fourth["backlog"] == {"files": 1, "bytes": 6, "partitions": 1, "oldest_partition": now_hour}
    ack(root, fourth)
    fifth = plan(root, "--max-files", "1")
    (grown,) = fifth["files"]
    assert (grown["path"], grown["offset"], grown["valid_length"]) == (f"{now_hour}/app.log", 8, 14)
    ack(root, fifth)
    assert plan(root)["files"] == []


@pytest.mark.unit
def test_the_manifest_consumer_is_capped_by_a_prefix_of_commits(tmp_path):
    root = tmp_path / "t"
    cli("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--tracking", "manifest")
    for seed in (1, 2, 3):
        src = make_source(tmp_path / f"s{seed}.jsonl", 20, seed=seed, hours=2)
        cli("ingest", str(root), "--source", str(src), "--app-id", f"a{seed}", "--time-field", "ts")
    table = Table.load(str(root))
    every = sorted(table.log.state().files)
    per_commit = [len(table.log.read_commit(v).files) for v in (1, 2, 3)]
    assert table.log.latest_version() == 3 and all(per_commit)
    delivered: list[str] = []
    for v in (1, 2, 3):
        doc = plan(root, "--max-files", "1")
        assert (doc["since_version"], doc["until_version"]) == (v - 1, v)  # one commit each: a version range
        assert doc["backlog"]["files"] == sum(per_commit[v:])
        delivered += [f["path"] for f in doc["files"]]
        ack(root, doc)
    assert sorted(delivered) == every and len(set(delivered)) == len(delivered)
    assert plan(root, "--max-files", "1")["files"] == []
    whole = json.loads(cli("files", str(root), "--consumer", "d", "--json").stdout)  # the default cap: all
    assert len(whole["files"]) == len(every) and whole["backlog"]["files"] == 0


@pytest.mark.unit
def test_the_default_cap_applies_unasked_and_reset_to_latest_takes_everything(tmp_path, monkeypatch):
    """The default (consumer_state.DEFAULT_MAX_FILES, 100,000) lowered to 1 so three files exceed it."""
    import tributary_read.read.consumer_tracking as tracking

    monkeypatch.setattr(tracking, "DEFAULT_MAX_FILES", 1)
    root = tmp_path / "raw"
    for i in range(3):
        put(root, f"2024_01_01/0{i}/a.log", Y2023)
    doc = plan(root, "--layout", LAYOUT)
    assert [f["path"] for f in doc["files"]] == ["2024_01_01/00/a.log"] and doc["backlog"]["files"] == 2
    ack(root, doc)
    # A reset to latest takes every pending file as delivered, not just one capped plan's worth.
    cli("consumer", "reset", str(root), "c", "--to-latest", "--execute")
    after = plan(root)
    assert after["files"] == [] and after["backlog"]["files"] == 0
    ack(root, after)
    put(root, "2024_01_01/03/a.log", Y2023)
    assert [f["path"] for f in plan(root)["files"]] == ["2024_01_01/03/a.log"]


@pytest.mark.unit
@pytest.mark.parametrize("value", ["-1", "lots", "1.5"])
def test_a_bad_file_cap_is_one_line(tmp_path, value):
    put(tmp_path / "raw", "2024_01_01/00/a.log", Y2023)
    one_line_error(invoke_trib("files", str(tmp_path / "raw"), "--layout", LAYOUT, "--consumer", "c",
                               "--max-files", value), 3, "--max-files", "off")
    one_line_error(invoke_trib("files", str(tmp_path / "raw"), "--layout", LAYOUT, "--all", "--max-files", "5"),
                   3, "--max-files goes with --consumer")


def _job(extra: str) -> str:
    return consumer_job_text("capped", extra)


@pytest.mark.unit
def test_an_etl_dry_run_shows_the_backlog_and_the_key_is_checked(tmp_path):
    root = tmp_path / "raw"
    for i in range(3):
        put(root, f"2024_01_01/0{i}/a.jsonl", Y2023, b'{"id": 1, "ts": 1704067200000}\n')
    cli("table", "create", str(tmp_path / "events"), "--layout", LAYOUT, "--partition", PARTITION,
        "--format", "parquet")
    (tmp_path / "etl.sql").write_text("SELECT id, ts FROM raw\n")
    job = tmp_path / "job.toml"
    job.write_text(_job("max_files = 1\nmin_age = \"0s\"\n"))
    args = ("etl", "run", str(job), "--schedule-time", "2024-01-02T00:00:00Z", "--dry-run")
    doc = json.loads(cli(*args, "--json", cwd=tmp_path).stdout)
    (inp,) = doc["inputs"]
    assert inp["files"] == 1 and inp["backlog"] == {"files": 2, "bytes": 62, "partitions": 2,
                                                    "oldest_partition": "2024_01_01/01"}
    assert ("left: 2 files (62 bytes in 2 partitions) are past max_files: the oldest partitions are read first "
            "(a later run reads them; e.g. 2024_01_01/01)") in cli(*args, cwd=tmp_path).stdout
    assert {"files": 2, "why": "(62 bytes in 2 partitions) are past max_files: the oldest partitions are read "
            "first", "later": True, "example": "2024_01_01/01"} in inp["left"]
    job.write_text(_job("max_files = \"lots\"\n"))
    one_line_error(invoke_trib(*args, cwd=tmp_path), 3, "inputs[0].max_files", "off")
    job.write_text(_job("max_files = \"off\"\n").replace('mode = "consumer"', 'mode = "mtime"'))
    one_line_error(invoke_trib(*args, cwd=tmp_path), 3, "inputs[0].max_files does not apply to mode mtime")



def test_read_incremental_takes_max_files(spark, tmp_path):
    """The Spark helper passes ``max_files`` to the same plan: one partition per batch, the rest its backlog."""
    from tributary_read.read.resolve import plain_layout
    from tributary_read.spark import read_incremental

    root = tmp_path / "raw"
    put(root, "2024_01_01/00/a.log", Y2023, b"1\n2\n")
    put(root, "2024_01_01/01/b.log", Y2023, b"3\n")
    hourly = plain_layout(LAYOUT)

    def batch():
        return read_incremental(spark, str(root), consumer="etl", layout=hourly, read_options={"format": "text"},
                                max_files=1)

    df, b = batch()
    assert sorted(r["value"] for r in df.collect()) == ["1", "2"]
    assert b.to_json()["plan"]["backlog"] == {"files": 1, "bytes": 2, "partitions": 1,
                                              "oldest_partition": "2024_01_01/01"}
    b.ack()
    df, b = batch()
    assert [r["value"] for r in df.collect()] == ["3"] and b.fileset.plan["backlog"]["files"] == 0


@pytest.mark.s3
@pytest.mark.integration
def test_on_an_object_store_listed_out_of_time_order_capped_runs_still_take_the_oldest_first(s3_root):
    """An object store is listed a parent directory at a time; with hours above days, name order is not time order.

    Each capped plan must still be the oldest partitions that fit, and the drain deliver every file once.
    """
    from tributary_read.io.storage import open_storage

    st = open_storage(s3_root)
    days, hours = 4, 6
    starts = {}
    for dd in range(days):
        for hh in range(hours):
            t = Y2023 + dd * 24 * H + hh * H
            d = f"{hh:02d}/{datetime.fromtimestamp(t / 1000, timezone.utc):%Y_%m_%d}"
            starts[d] = t
            for j in range(1 + (dd + hh) % 3):
                st.write(f"{d}/f{j}.log", b"x\n")
    total = sum(1 + (dd + hh) % 3 for dd in range(days) for hh in range(hours))
    by_time = sorted(starts, key=starts.get)
    delivered: list[str] = []
    for _ in range(30):
        doc = json.loads(cli("files", s3_root, "--layout", "{HH}/{yyyy}_{MM}_{dd}", "--consumer", "c", "--json",
                             "--min-age", "0s", "--max-files", "7").stdout)
        got_dirs = sorted({f["path"].rsplit("/", 1)[0] for f in doc["files"]}, key=starts.get)
        if got_dirs:  # the oldest directories not yet delivered, in time order, and nothing older left behind
            done = {p.rsplit("/", 1)[0] for p in delivered}
            assert got_dirs == [d for d in by_time if d not in done][:len(got_dirs)]
            assert len(doc["files"]) <= 7 or len(got_dirs) == 1
        left = doc["backlog"]
        if left["files"]:
            assert starts[left["oldest_partition"]] > starts[got_dirs[-1]]
        delivered += [f["path"] for f in doc["files"]]
        cli("consumer", "ack", s3_root, "c", doc["plan_id"])
        if not left["files"]:
            break
    assert len(delivered) == len(set(delivered)) == total
