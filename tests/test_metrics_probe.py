"""The metrics probes against a table with known values (issue 31, part 2; work in progress on branch i31)."""

from __future__ import annotations

import json

import pytest

from conftest import run_trib
from helpers import LAYOUT, PARTITION, make_source
from tributary_read.metrics.probe import consumer_samples, table_samples
from tributary_read.read.consumer import Consumer
from tributary_read.table.config import Table

pytestmark = pytest.mark.unit


def _values(samples):
    return {s.family: s.value for s in samples}


def _ingest(root, src, app):
    run_trib("ingest", str(root), "--source", str(src), "--app-id", app, "--time-field", "ts", check=True)


def test_a_manifest_consumer_three_commits_behind(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--tracking", "manifest",
             check=True)
    _ingest(root, make_source(tmp_path / "a.jsonl", 20, hours=1), "a")
    plan = json.loads(run_trib("files", str(root), "--consumer", "c", "--mode", "manifest", "--json",
                               check=True).stdout)
    run_trib("consumer", "ack", str(root), "c", plan["plan_id"], check=True)
    for i in range(3):
        _ingest(root, make_source(tmp_path / f"b{i}.jsonl", 10, seed=i + 1, hours=2), f"b{i}")
    table = Table.load(str(root))
    log = table.log
    commits = [log.read_commit(v) for v in (2, 3, 4)]
    now = commits[-1].timestamp_ms + 5_000
    v = _values(consumer_samples(table, Consumer(table_source(root), "c"), lambda: now))
    assert v["trib_consumer_pending_files"] == sum(len(c.new_data) for c in commits)
    assert v["trib_consumer_pending_bytes"] == sum(f.size for c in commits for f in c.new_data)
    assert v["trib_consumer_pending_records"] == 30
    assert v["trib_consumer_oldest_pending_age_seconds"] == (now - commits[0].timestamp_ms) / 1000
    t = _values(table_samples(table))
    assert t["trib_table_commits_total"] == 4
    assert t["trib_table_last_commit_timestamp_seconds"] == commits[-1].timestamp_ms / 1000


def table_source(root):
    from tributary_read.read.resolve import Source

    return Source.of(str(root))


def test_trib_metrics_text_passes_promtool_and_has_no_duplicate_series(tmp_path):
    import shutil
    import subprocess

    from prometheus_client.parser import text_string_to_metric_families

    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--tracking", "manifest",
             check=True)
    _ingest(root, make_source(tmp_path / "a.jsonl", 20, hours=1), "a")
    run_trib("files", str(root), "--consumer", "c", "--mode", "manifest", check=True)  # a plan, not acked
    out = run_trib("metrics", str(root), check=True).stdout
    series = [(s.name, tuple(sorted(s.labels.items()))) for f in text_string_to_metric_families(out)
              for s in f.samples]
    assert len(series) == len(set(series)) and any(n == "trib_table_commits_total" for n, _ in series)
    assert ("trib_consumer_pending_plan_created_timestamp_seconds",
            (("consumer", "c"), ("etl_job", ""), ("table", f"file://{root}"))) in series
    if shutil.which("promtool"):
        p = subprocess.run(["promtool", "check", "metrics"], input=out, capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(run_trib("metrics", str(root), "--json", check=True).stdout)
    assert {d["name"] for d in doc} >= {"trib_table_commits_total", "trib_metrics_generated_timestamp_seconds"}
    path = json.loads(run_trib("metrics", str(root), "--textfile", str(tmp_path), "--json",
                               check=True).stdout)["textfile"]
    assert open(path).read().count("trib_table_commits_total{") == 1


def test_the_run_book_counts_outcomes_and_finds_a_killed_run(tmp_path):
    from tributary_read.errors import InvalidInputError, MetastoreError
    from tributary_read.etl.runs import read_book, recorded
    from tributary_read.metrics.probe import etl_samples
    from tributary_read.table.config import Table

    root = tmp_path / "out"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    out = Table.load(str(root))

    class Report:
        def __init__(self, already):
            self.already_committed, self.version = already, None  # no restate commit to count

    H = 3_600_000
    for k, already in ((1, False), (2, False), (2, True)):
        with recorded(out, "hourly", k * H) as e:
            e.done(Report(already))
    for k, err in ((3, MetastoreError("down")), (3, InvalidInputError("bad sql"))):
        with pytest.raises(type(err)):
            with recorded(out, "hourly", k * H):
                raise err
    # A run killed -9 leaves its entry in flight; the next run counts it.
    book = read_book(out, "hourly")
    book["in_flight"] = {"schedule_ms": 4 * H}
    out.storage.replace("_tributary/etl/hourly.runs.json", json.dumps(book).encode())
    with recorded(out, "hourly", 4 * H) as e:
        e.done(Report(False))
    v = {(s.family, s.labels.get("outcome")): s.value for s in etl_samples(out)}
    assert v[("trib_etl_runs_total", "success")] == 3 and v[("trib_etl_runs_total", "already_committed")] == 1
    assert v[("trib_etl_runs_total", "failed")] == 1 and v[("trib_etl_runs_total", "refused")] == 1
    assert v[("trib_etl_runs_total", "killed")] == 1
    assert v[("trib_etl_last_success_schedule_time_seconds", None)] == 4 * H / 1000
    assert read_book(out, "hourly")["last"]["outcome"] == "success"
    p = run_trib("verify", str(root))
    assert p.returncode == 0, p.stdout + p.stderr  # the book is trib's own, never an orphan


def test_the_run_book_counts_each_restate_commit_once(tmp_path):
    """A restate job's restated partitions and their records, summed over its commits: each commit once, by the
    run that made it, or by the rerun that finds it when that run died before its book; a held-partitions exit
    (its commit made) and a backfill count too; an append job has no such series."""
    from types import SimpleNamespace

    from tributary_read.errors import PartitionsHeldError
    from tributary_read.etl.runs import count_restated, recorded
    from tributary_read.metrics.probe import etl_samples
    from tributary_read.table.config import Table

    root = tmp_path / "out"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    out = Table.load(str(root))
    H = 3_600_000

    def report(version, already, *counts):
        restated = tuple({"partition": f"p{i}", "records_before": b, "records_after": a, "cause": "input",
                          "inputs": None} for i, (b, a) in enumerate(counts))
        return SimpleNamespace(already_committed=already, version=version, output=SimpleNamespace(restated=restated))

    def totals():
        v = {(s.family, s.labels["etl_job"]): s.value for s in etl_samples(out)}
        return tuple(v.get((f"trib_etl_restated_{k}_total", "daily"))
                     for k in ("partitions", "records_before", "records_after"))

    with recorded(out, "plain", H) as e:  # an append job: no restated series
        e.done(report(1, False))
    with recorded(out, "daily", H) as e:
        e.done(report(2, False, (0, 3), (0, 2)))
    assert totals() == (2, 0, 5)
    with recorded(out, "daily", H) as e:  # the rerun of that hour finds its commit: counted already
        e.done(report(2, True, (0, 3), (0, 2)))
    with recorded(out, "daily", 2 * H) as e:  # found by a rerun: its own run died before its book
        e.done(report(3, True, (3, 4)))
    assert totals() == (3, 3, 9)
    with pytest.raises(PartitionsHeldError):
        with recorded(out, "daily", 3 * H):
            raise PartitionsHeldError("held", report=report(4, False, (4, 1)))
    count_restated(out, "daily", 5, [{"records_before": 1, "records_after": 10}] * 2)  # a backfill
    assert totals() == (6, 9, 30)
    assert not [s for s in etl_samples(out) if s.labels["etl_job"] == "plain" and "restated" in s.family]


def test_the_partition_commit_clock_is_the_logs(tmp_path):
    from helpers import BASE_MS

    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    assert "trib_partition_commit_watermark_seconds" not in _values(table_samples(Table.load(str(root))))
    run_trib("partitions", "configure", str(root), "--policy", "success-file", "--clock", "event", check=True)
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"id": i, "ts": BASE_MS + h * 3_600_000 + 1000}) + "\n"
                           for i, h in enumerate((0, 1, 2))))
    _ingest(root, src, "a")
    # No writer watermark in a file ingest's commit: the committer's mark (the newest partition's start).
    v = _values(table_samples(Table.load(str(root))))
    from tributary_read.table.layout import Layout

    assert v["trib_partition_commit_watermark_seconds"] == Layout(LAYOUT, PARTITION).for_time(
        BASE_MS + 2 * 3_600_000).start_ms / 1000


def test_the_docs_alert_rules_pass_promtool(tmp_path):
    import re
    import shutil
    import subprocess

    from conftest import REPO

    if not shutil.which("promtool"):
        pytest.skip("needs Debian's prometheus package (promtool)")
    text = (REPO / "docs" / "observability.md").read_text()
    block = re.search(r"```yaml\n(groups:.*?)```", text, re.S)
    assert block, "docs/observability.md lost its alert rules"
    rules = tmp_path / "rules.yml"
    rules.write_text(block.group(1))
    p = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert p.returncode == 0 and "SUCCESS: 3 rules found" in p.stdout, p.stdout + p.stderr


def test_a_listing_consumer_is_counted_with_list_by_a_preview_that_writes_nothing(tmp_path):
    """Files another tool writes into a table tracked by listing: pending only with ``--list``, from a
    preview equal to the next plan, which leaves the consumer's documents as they were."""
    import os
    import time

    from tributary_read.table.layout import Layout

    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--tracking", "listing",
             check=True)
    H = 3_600_000
    now = int(time.time() * 1000)
    hour = now - now % H
    lay = Layout(LAYOUT, PARTITION)

    def land(name, hour_ms, text, mtime_ms):
        """A file another tool writes, its mtime set (older than the listing's minimum age)."""
        path = root / lay.for_time(hour_ms).path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        return path

    land("a.jsonl", hour - 2 * H, '{"id": 1}\n' * 4, now - 3 * H)
    plan = json.loads(run_trib("files", str(root), "--consumer", "L", "--mode", "mtime", "--json",
                               check=True).stdout)
    assert [f["path"] for f in plan["files"]] == [lay.for_time(hour - 2 * H).path + "/a.jsonl"]
    run_trib("consumer", "ack", str(root), "L", plan["plan_id"], check=True)
    # Since the ack: a late file into a partition a day old (copied with its mtime: 2 h ago), and a new one.
    late = land("late.jsonl", hour - 24 * H, '{"id": 2}\n' * 3, now - 2 * H)
    new = land("b.jsonl", hour - H, '{"id": 3}\n', now - 90 * 60_000)

    state_dir = root / "_tributary" / "consumers" / "L"
    before = {p: p.read_bytes() for p in state_dir.rglob("*") if p.is_file()}
    labels = (("consumer", "L"), ("etl_job", ""), ("table", f"file://{root}"))

    def series(*args):
        doc = json.loads(run_trib("metrics", str(root), *args, "--json", check=True).stdout)
        return {(d["name"], tuple(sorted(d["labels"].items()))): d["value"] for d in doc}

    plain = series()
    assert ("trib_consumer_last_ack_timestamp_seconds", labels) in plain
    assert not any(n.startswith("trib_consumer_pending_") and lb == labels for n, lb in plain)  # needs a listing
    listed = series("--list")
    gen = listed[("trib_metrics_generated_timestamp_seconds", ())]
    assert listed[("trib_consumer_pending_files", labels)] == 2
    assert listed[("trib_consumer_pending_bytes", labels)] == late.stat().st_size + new.stat().st_size
    assert ("trib_consumer_pending_records", labels) not in listed  # a listed file's records are unknown
    # The age is the oldest mtime's (the late file's, 2 h), not its partition's (a day).
    assert listed[("trib_consumer_oldest_pending_age_seconds", labels)] == pytest.approx(
        gen - (now - 2 * H) / 1000, abs=1e-3)
    assert listed[("trib_consumer_last_ack_timestamp_seconds", labels)] == \
        plain[("trib_consumer_last_ack_timestamp_seconds", labels)]
    # The preview wrote nothing: no plan handed out, the consumer's documents as they were ...
    assert {p: p.read_bytes() for p in state_dir.rglob("*") if p.is_file()} == before
    assert ("trib_consumer_pending_plan_created_timestamp_seconds", labels) not in listed
    # ... and it is what the next plan delivers.
    nxt = json.loads(run_trib("files", str(root), "--consumer", "L", "--json", check=True).stdout)
    assert sorted(f["path"] for f in nxt["files"]) == sorted(str(p.relative_to(root)) for p in (late, new))


def test_the_consumers_of_a_plain_directory_are_monitored(tmp_path):
    """A plain directory of hour dirs (no table.json), the most common ETL input: its consumers, kept in
    ``ROOT/_tributary/consumers`` or in a ``--state-dir``, are sampled like a table's (the same families
    and labels; pending with ``--list``). A state directory's consumers of another input are left out."""
    import os
    import time

    from conftest import invoke_trib
    from tributary_read.table.layout import Layout

    base, other, st = tmp_path / "base", tmp_path / "other", tmp_path / "st"
    H = 3_600_000
    now = int(time.time() * 1000)
    hour = now - now % H
    lay = Layout(LAYOUT, PARTITION)

    def land(root, name, hour_ms, text, mtime_ms):
        path = root / lay.for_time(hour_ms).path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        return path

    a = land(base, "a.jsonl", hour - 3 * H, '{"id": 1}\n' * 4, now - 3 * H)
    land(other, "x.jsonl", hour - 3 * H, '{"id": 9}\n', now - 3 * H)

    def files(root, name, *args):
        return json.loads(invoke_trib("files", str(root), "--layout", LAYOUT, "--partition", PARTITION,
                                      "--consumer", name, *args, "--json", check=True).stdout)

    plan = files(base, "c")  # kept in the directory itself
    invoke_trib("consumer", "ack", str(base), "c", plan["plan_id"], check=True)
    files(base, "s", "--state-dir", str(st))  # planned, never acked: its layout is its plan's
    files(other, "o", "--state-dir", str(st))  # another input's consumer in the same state directory
    b = land(base, "b.jsonl", hour - H, '{"id": 2}\n' * 2, now - 2 * H)

    def series(*args):
        p = invoke_trib("metrics", str(base), *args, "--json")
        assert p.returncode == 0, p.stderr
        return {(d["name"], tuple(sorted(d["labels"].items()))): d["value"] for d in json.loads(p.stdout)}

    def labels(name):
        return (("consumer", name), ("etl_job", ""), ("table", f"file://{base}"))

    plain = series("--state-dir", str(st))
    assert ("trib_consumer_last_ack_timestamp_seconds", labels("c")) in plain
    assert ("trib_consumer_pending_plan_created_timestamp_seconds", labels("s")) in plain
    assert not any(dict(lb).get("consumer") == "o" for _, lb in plain)
    assert not any(n.startswith("trib_table_") for n, _ in plain)  # no log: no table series
    listed = series("--state-dir", str(st), "--list")
    gen = listed[("trib_metrics_generated_timestamp_seconds", ())]
    assert listed[("trib_consumer_pending_files", labels("c"))] == 1
    assert listed[("trib_consumer_pending_bytes", labels("c"))] == b.stat().st_size
    assert listed[("trib_consumer_oldest_pending_age_seconds", labels("c"))] == pytest.approx(
        gen - (now - 2 * H) / 1000, abs=1e-3)
    assert listed[("trib_consumer_pending_files", labels("s"))] == 2
    assert listed[("trib_consumer_pending_bytes", labels("s"))] == a.stat().st_size + b.stat().st_size
    assert ("trib_consumer_pending_files", labels("s")) not in series("--list")  # without its state dir
    # A directory nobody reads is still an error, its own line and exit 4.
    p = invoke_trib("metrics", str(other))
    assert p.returncode == 4 and "no consumer" in p.stderr
