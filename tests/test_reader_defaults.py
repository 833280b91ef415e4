"""Issue 32, safe defaults for readers: no default that leaves data behind or reads it twice with exit 0.

Each test is one trap from the issue, tried through the CLI in subprocesses on
real files, the way a user would meet it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import run_trib
from helpers import one_line_error, put, snapshot
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.integration

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
LAY = Layout(LAYOUT, "dt={yyyy}{MM}{dd}{HH}")
H = 3_600_000
NOW = int(time.time() * 1000)
T0 = NOW - NOW % H - 6 * H


def lines_of(root: Path, plan: dict) -> list[str]:
    return [ln for f in plan["files"] for ln in (root / f["path"]).read_text().splitlines()]


def plan(root: Path, *extra: str) -> dict:
    proc = run_trib("files", str(root), "--consumer", "c", "--layout", LAYOUT, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_reset_needs_a_target_and_changes_nothing_without_execute(tmp_path):
    """Why: a bare reset forgot 100 delivered records and the next plan delivered them again (110, exit 0)."""
    root = tmp_path / "logs"
    put(root, f"{LAY.for_time(T0).path}/a.log", T0, "".join(f"r{i}\n" for i in range(100)).encode())
    first = plan(root)
    assert run_trib("consumer", "ack", str(root), "c", first["plan_id"]).returncode == 0
    put(root, f"{LAY.for_time(T0 + H).path}/b.log", T0 + H, "".join(f"s{i}\n" for i in range(10)).encode())
    pending = plan(root)
    assert len(lines_of(root, pending)) == 10
    before = snapshot(root)

    # The bare reset is refused, naming the targets; nothing is written.
    line = one_line_error(run_trib("consumer", "reset", str(root), "c"), 3, "needs a target")
    for flag in ("--to-earliest", "--to-latest", "--to-version", "--discard-plan"):
        assert flag in line
    one_line_error(run_trib("consumer", "reset", str(root), "c", "--to-earliest", "--discard-plan"), 3,
                   "one target, not several")
    # A target without --execute is a preview: it says what would be forgotten, and writes nothing.
    proc = run_trib("consumer", "reset", str(root), "c", "--to-earliest", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["applied"] is False and doc["discarded_plan"] == pending["plan_id"]
    assert "forgets everything delivered (1 file so far)" in doc["effect"]
    human = run_trib("consumer", "reset", str(root), "c", "--to-latest")
    assert "1 file not delivered yet (30 bytes)" in human.stdout and "add --execute" in human.stderr
    assert snapshot(root) == before
    assert plan(root)["plan_id"] == pending["plan_id"]

    # What the operator meant: drop the pending plan only. The next plan holds the 10 new records, not 110.
    proc = run_trib("consumer", "reset", str(root), "c", "--discard-plan", "--execute", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["applied"] is True
    again = plan(root)
    assert again["plan_id"] != pending["plan_id"] and len(lines_of(root, again)) == 10


def test_messages_suggest_the_whole_reset_command(tmp_path):
    root = tmp_path / "logs"
    put(root, f"{LAY.for_time(T0).path}/a.log", T0)
    plan(root)
    proc = run_trib("files", str(root), "--consumer", "c", "--layout", LAYOUT, "--lookback", "30d")
    line = one_line_error(proc, 5, "pending plan")
    assert f"trib consumer reset file://{root} c --discard-plan --execute" in line
    # ... and the suggestion runs as written.
    cmd = line.split("drop it with: ", 1)[1].split()
    assert run_trib(*cmd[1:]).returncode == 0
    assert plan(root, "--lookback", "30d")["files"]


def test_trib_files_without_a_bound_is_refused_and_all_asks_for_everything(tmp_path):
    """Why: "the exact files of ROOT for this run" with no bound returned every file, on every run."""
    root = tmp_path / "logs"
    for h in range(3):
        put(root, f"{LAY.for_time(T0 + h * H).path}/f{h}.log", T0 + h * H)
    line = one_line_error(run_trib("files", str(root), "--layout", LAYOUT), 3, "no bound")
    for flag in ("--consumer", "--start/--end/--schedule-time", "--since-version/--until-version", "--partitions",
                 "--all"):
        assert flag in line
    every = run_trib("files", str(root), "--layout", LAYOUT, "--all")
    assert every.returncode == 0 and len(every.stdout.split()) == 3
    one_line_error(run_trib("files", str(root), "--layout", LAYOUT, "--all", "--start", str(T0), "--end",
                            str(T0 + H - 1)), 3, "--all cannot be combined with a bound")
    one_line_error(run_trib("files", str(root), "--layout", LAYOUT, "--all", "--consumer", "c"), 3,
                   "--all cannot be combined with --consumer")
    bounded = run_trib("files", str(root), "--layout", LAYOUT, "--start", str(T0), "--end", str(T0 + H - 1))
    assert bounded.returncode == 0 and len(bounded.stdout.split()) == 1


def test_a_copied_job_writing_elsewhere_does_not_split_the_consumer(tmp_path):
    """Why: a job file copied with its output changed but ``[job] name`` kept shares the consumer
    ``etl-<job>-<view>`` with the original; each run took part of the input. Now the consumer records the
    job and output it serves, and the copy is refused with a line naming both."""
    from etl_data import create_output_table, write_job

    raw = tmp_path / "raw"
    put(raw, f"{LAY.for_time(T0).path}/a.jsonl", T0, b'{"id": 1, "ts": 0, "msg": "m"}\n')
    jobs = {}
    for out in ("events", "copy"):
        create_output_table(tmp_path / out)
        jobs[out] = write_job(tmp_path / f"jobs-{out}", name="hourly", raw=raw, out=tmp_path / out,
                              consumer="etl-hourly-raw")
    when = time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(NOW / 1000))
    first = run_trib("etl", "run", str(jobs["events"]), "--schedule-time", when, "--dry-run", "--json")
    assert first.returncode == 0, first.stderr
    plan_id = json.loads(first.stdout)["inputs"][0]["plan_id"]
    before = snapshot(raw)
    # The pending plan is the original job's: the copy is refused, naming both outputs and the fix.
    line = one_line_error(run_trib("-q", "etl", "run", str(jobs["copy"]), "--schedule-time", when, "--dry-run"), 3,
                          "consumer 'etl-hourly-raw' serves job 'hourly' writing", str(tmp_path / "events"),
                          str(tmp_path / "copy"), "consumer = \"...\" of its own in its [[inputs]]")
    assert line.startswith("trib: error: input raw: ")
    assert snapshot(raw) == before
    # Once acked, the state records the owner: still refused; `trib consumer show` says whose it is.
    assert run_trib("consumer", "ack", str(raw), "etl-hourly-raw", plan_id).returncode == 0
    shown = json.loads(run_trib("consumer", "show", str(raw), "etl-hourly-raw", "--json").stdout)
    assert shown["owner"] == {"job": "hourly", "output": f"file://{tmp_path / 'events'}"}
    one_line_error(run_trib("-q", "etl", "run", str(jobs["copy"]), "--schedule-time", when, "--dry-run"), 3,
                   "serves job 'hourly'")
    # The original job goes on.
    again = run_trib("etl", "run", str(jobs["events"]), "--schedule-time", when, "--dry-run", "--json")
    assert again.returncode == 0, again.stderr


def test_an_etl_run_names_what_its_inputs_left_and_why(tmp_path):
    """Item 6: a run never leaves data behind in silence; its report says what was left, why, and whether a
    later run reads it (files still settling, a line still being written) or none will (acknowledged)."""
    from etl_data import create_output_table, write_job

    raw = tmp_path / "raw"
    a = f"{LAY.for_time(T0).path}/a.jsonl"
    put(raw, a, T0 + H, b'{"id": 1, "ts": 0, "msg": "m"}\n')
    put(raw, f"{LAY.for_time(T0 + H).path}/young.jsonl", int(time.time() * 1000) - 5_000,
        b'{"id": 4, "ts": 0, "msg": "m"}\n')  # younger than the default min_age, whenever this test runs
    create_output_table(tmp_path / "events")
    job = write_job(tmp_path / "jobs", name="hourly", raw=raw, out=tmp_path / "events")
    when = time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(NOW / 1000))

    def dry(*extra: str):
        proc = run_trib("etl", "run", str(job), "--schedule-time", when, "--dry-run", *extra)
        assert proc.returncode == 0, proc.stderr
        return proc

    (inp,) = json.loads(dry("--json").stdout)["inputs"]
    assert inp["paths"] == [a]
    (young,) = inp["left"]
    assert young == {"files": 1, "why": "modified within the last 1m (min_age): they may still be written",
                     "later": True, "example": None}
    assert ("left: 1 file modified within the last 1m (min_age): they may still be written (a later run reads them)"
            in dry().stdout)
    # Delivered; then the log grows by a whole line and half of the next one.
    assert run_trib("consumer", "ack", str(raw), "hourly", inp["plan_id"]).returncode == 0
    with open(raw / a, "ab") as f:
        f.write(b'{"id": 2, "ts": 0, "msg": "m"}\n{"id": 3, "ts"')
    os.utime(raw / a, ns=((T0 + 2 * H) * 1_000_000,) * 2)
    (inp,) = json.loads(dry("--json").stdout)["inputs"]
    held = [x for x in inp["left"] if x["why"].startswith("end in a line still being written")]
    assert len(held) == 1 and held[0]["files"] == 1 and held[0]["later"] is True
