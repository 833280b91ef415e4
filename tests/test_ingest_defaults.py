"""Issue 33, items 2-4: `trib ingest`'s defaults never drop, misplace or hide records with exit 0.

2. An explicit time source: no silent arrival time.
3. Dead letters fail loudly: a run over the bad-record limit commits nothing more,
   and `trib dead-letters list|replay` shows and re-ingests them exactly once
   (kill -9 included).
4. Complete files are complete: an unterminated last line is taken once the file
   has been unchanged for --final-after, and never while a writer may be mid-line.

Each runs the real CLI against real files (and, where the point is a process, real
processes: a writer appending, replays killed with SIGKILL).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import TRIB, invoke_trib, run_trib
from helpers import LAYOUT, PARTITION, assert_exactly_once, committed_records, make_source, one_line_error, \
    signal_loop, snapshot

from tributary_read.io.storage import open_storage

pytestmark = pytest.mark.integration

STAMP = "2024-01-01T05:00:00Z"


def _table(tmp_path, *extra, name="t") -> Path:
    root = tmp_path / name
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, *extra, check=True)
    return root


def _ingest(root, src, *extra, app="a"):
    return invoke_trib("ingest", str(root), "--source", str(src), "--app-id", app, "--json", *extra)


def _ok(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _data_files(root) -> list[dict]:
    return json.loads(invoke_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]


def _dirs(root) -> Counter:
    return Counter(f["path"].rsplit("/", 1)[0] for f in _data_files(root) for _ in range(f["records"]))


def _events(path: Path, n: int, field="event_time", value=STAMP, bad=()) -> Path:
    """n records with ids 0..n-1 and the time in ``field``; ids in ``bad`` have no time at all."""
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, **({} if i in bad else {field: value})}) + "\n")
    return path


# -- 2. an explicit time source -------------------------------------------------------------------------
def test_no_time_source_is_refused_naming_all_three(tmp_path):
    """Why 2: three lines stamped 2024-01-01 05:00 landed in today's partition, exit 0."""
    root = _table(tmp_path)
    src = _events(tmp_path / "s.jsonl", 3)
    before = snapshot(root)
    line = one_line_error(_ingest(root, src), 3, "--time-field", "--time-regex", "--arrival-time")
    assert "no time source" in line
    assert snapshot(root) == before

    assert _ok(_ingest(root, src, "--time-field", "event_time"))["records"] == 3
    assert _dirs(root) == {"2024_01_01/05": 3}
    # Arrival time is still there, said out loud; two sources at once are refused.
    one_line_error(_ingest(root, src, "--time-field", "event_time", "--arrival-time", app="b"), 3,
                   "--time-field and --arrival-time")
    t0 = time.time()
    assert _ok(_ingest(root, src, "--arrival-time", app="b"))["records"] == 3
    from tributary_read.table.layout import Layout

    now = {Layout(LAYOUT, PARTITION).for_time(int(t * 1000)).path for t in (t0, time.time())}
    assert set(_dirs(root)) - {"2024_01_01/05"} <= now


# -- 3. dead letters fail loudly ------------------------------------------------------------------------
@pytest.mark.parametrize("args,reason", [
    (("--time-field", "evnt_time"), "no time field 'evnt_time'"),  # a typo: the field is event_time
    (("--time-field", "event_time", "--time-unit", "ms"), "as ms is"),  # epoch microseconds, declared ms
])
def test_a_run_where_every_record_is_bad_fails_and_commits_nothing(tmp_path, args, reason):
    root = _table(tmp_path)
    value = 1_704_085_200_000_000  # 2024-01-01T05:00Z in microseconds
    src = _events(tmp_path / "s.jsonl", 1000, value=value if "--time-unit" in args else STAMP)
    before = snapshot(root)
    one_line_error(_ingest(root, src, *args), 3, "1000 of 1000 records", "every record is bad",
                          "first: line 0:", reason, "(1000 records like it)", "nothing was committed",
                          "--on-bad-record dead-letter")
    assert snapshot(root) == before  # no data, no dead letter, no offsets: a fixed rerun takes them all
    fixed = ("--time-field", "event_time") + (("--time-unit", "us") if "--time-unit" in args else ())
    assert (_ok(_ingest(root, src, *fixed))["records"], sum(_dirs(root).values())) == (1000, 1000)


def test_the_limit_flag_table_setting_and_explicit_opt_out(tmp_path):
    root = _table(tmp_path)
    few = _events(tmp_path / "few.jsonl", 1000, bad=set(range(0, 1000, 200)))  # 5 bad: 0.5%
    many = _events(tmp_path / "many.jsonl", 1000, bad=set(range(0, 1000, 50)))  # 20 bad: 2%
    res = _ok(_ingest(root, few, "--time-field", "event_time"))
    assert (res["records"], res["dead_letters"], res["max_bad_fraction"]) == (1000, 5, 0.01)

    before = snapshot(root)
    one_line_error(_ingest(root, many, "--time-field", "event_time"), 3, "20 of 1000 records (2.0%)",
                   "over --max-bad-fraction 0.01", "no time field 'event_time' (20 records like it)",
                   "--max-bad-fraction")
    assert snapshot(root) == before
    assert _ok(_ingest(root, many, "--time-field", "event_time", "--max-bad-fraction", "5%"))["dead_letters"] == 20

    other = _table(tmp_path, "--max-bad-fraction", "0.03", name="t2")
    shown = json.loads(invoke_trib("table", "show", str(other), "--json", check=True).stdout)
    assert (shown["max_bad_fraction"], shown["final_after_ms"]) == (0.03, 300_000)
    assert _ok(_ingest(other, many, "--time-field", "event_time"))["dead_letters"] == 20
    invoke_trib("table", "set", str(other), "--max-bad-fraction", "0", check=True)
    assert "max bad fraction 0," in invoke_trib("table", "show", str(other), check=True).stdout
    one_line_error(_ingest(other, few, "--time-field", "event_time"), 3, "5 of 1000")

    # The explicit opt-out: every record kept as a dead letter, whatever the table says.
    res = _ok(_ingest(other, many, "--time-field", "evnt_time", "--on-bad-record", "dead-letter", app="c"))
    assert (res["dead_letters"], res["max_bad_fraction"]) == (1000, None)
    one_line_error(_ingest(other, many, "--time-field", "event_time", "--on-bad-record", "fail",
                           "--max-bad-fraction", "1%", app="d"), 2, "--max-bad-fraction")


def test_a_small_run_keeps_a_few_bad_lines_with_a_warning_and_a_flood_still_fails(tmp_path):
    """The same rule as for Kafka (write/lines.py): a run may keep 10 bad records whatever its share; more
    than 10 and over the fraction is refused; --max-bad-fraction 0 keeps none."""
    root = _table(tmp_path)
    one = _events(tmp_path / "one.jsonl", 51, bad={30})
    p = _ingest(root, one, "--time-field", "event_time")
    res = _ok(p)
    assert (res["records"], res["dead_letters"]) == (51, 1)
    assert (res["bad_records"]["over_fraction"], res["bad_records"]["first"]["offset"]) == (True, 30)
    assert "trib: warning: 1 of 51 records (2.0%) could not be placed" in p.stderr
    assert "may keep 10 bad records" in p.stderr
    flood = _events(tmp_path / "flood.jsonl", 60, bad=set(range(11)))
    before = snapshot(root)
    one_line_error(_ingest(root, flood, "--time-field", "event_time", app="b"), 3, "11 of 60 records",
                   "more than the 10 bad records any run may keep", "nothing was committed")
    assert snapshot(root) == before
    one_line_error(_ingest(root, one, "--time-field", "event_time", "--max-bad-fraction", "0", app="c"), 3,
                   "1 of 51 records", "over --max-bad-fraction 0;")
    # --source-dir: the same rule.
    spool, flooded = tmp_path / "spool", tmp_path / "flooded"
    spool.mkdir(), flooded.mkdir()
    (spool / "app.log").write_bytes(one.read_bytes())
    (flooded / "app.log").write_bytes(flood.read_bytes())
    p = invoke_trib("ingest", str(root), "--source-dir", str(spool), "--app-id", "d", "--time-field",
                    "event_time", "--json")
    res = _ok(p)
    assert (res["records"], res["dead_letters"]) == (51, 1)
    assert res["bad_records"]["over_fraction"] is True  # its report, and its warning even with --json
    assert "trib: warning: 1 of 51 records (2.0%) could not be placed" in p.stderr
    before = snapshot(root)
    one_line_error(invoke_trib("ingest", str(root), "--source-dir", str(flooded), "--app-id", "e", "--time-field",
                               "event_time"), 3, "11 of 60 records", "more than the 10 bad records")
    assert snapshot(root) == before


@pytest.mark.unit
def test_the_bad_record_limit_rule():
    from tributary_read.write.lines import BadRecordLimit

    def over(limit, bad, read):
        lim = BadRecordLimit(limit, "s")
        for i in range(bad):
            lim.add(i, "not valid JSON")
        return lim.over(read)

    assert not over(0.01, 1, 51) and not over(0.01, 10, 11) and over(0.01, 11, 1000)
    assert not over(0.01, 11, 1100) and over(0.01, 12, 1100)  # past the allowance the fraction rules
    assert over(0.01, 3, 3) and over(1.0, 5, 5)  # every record bad: a wrong option, whatever the limit
    assert over(0.0, 1, 10_000) and not over(None, 10, 10)


def test_a_run_that_crosses_the_limit_later_keeps_its_earlier_commits(tmp_path):
    """The share is the run's, checked before each commit: commits made under it stand."""
    root = _table(tmp_path)
    src = _events(tmp_path / "s.jsonl", 300, bad=set(range(250, 300)))
    one_line_error(_ingest(root, src, "--time-field", "event_time", "--commit-every", "100"), 3,
                   "50 of 300 records", "first: line 250:", "this run's 2 earlier commits (up to line 199) stand")
    assert sum(_dirs(root).values()) == 200
    assert not (root / "_tributary/dead_letter").exists() or not any((root / "_tributary/dead_letter").iterdir())
    one_line_error(_ingest(root, src, "--time-field", "event_time", "--commit-every", "100"), 3,
                   "50 of 100 records", "nothing was committed")


def test_dead_letters_list_and_replay_exactly_once(tmp_path):
    root = _table(tmp_path)
    src = _events(tmp_path / "s.jsonl", 1000)
    res = _ok(_ingest(root, src, "--time-field", "evnt_time", "--on-bad-record", "dead-letter",
                      "--commit-every", "400"))
    assert (res["records"], res["dead_letters"], res["commits"]) == (1000, 1000, 3)
    listed = json.loads(invoke_trib("dead-letters", "list", str(root), "--json", check=True).stdout)
    assert (listed["records"], listed["pending"], len(listed["files"])) == (1000, 1000, 3)
    assert listed["files"][0]["reasons"] == [{"reason": "no time field 'evnt_time'", "count": 400}]
    assert listed["files"][0]["sources"] == {"s.jsonl": 400}
    human = invoke_trib("dead-letters", "list", str(root), check=True).stdout
    assert "1000 dead letters in 3 files, 1000 not replayed" in human

    # Replayed with the same typo: refused like the ingest, nothing committed.
    before = snapshot(root)
    one_line_error(invoke_trib("dead-letters", "replay", str(root), "--time-field", "evnt_time"), 3,
                   "every record is bad")
    assert snapshot(root) == before
    out = json.loads(invoke_trib("dead-letters", "replay", str(root), "--time-field", "event_time", "--json",
                                 check=True).stdout)
    assert (out["records"], out["dead_letters"], len(out["files"])) == (1000, 0, 3)
    again = json.loads(invoke_trib("dead-letters", "replay", str(root), "--time-field", "event_time", "--json",
                                   check=True).stdout)
    assert again["records"] == 0
    ids = Counter(json.loads(line)["id"] for f in _data_files(root) for line in (root / f["path"]).read_text()
                  .splitlines())
    assert ids == Counter(range(1000)) and _dirs(root) == {"2024_01_01/05": 1000}
    listed = json.loads(invoke_trib("dead-letters", "list", str(root), "--json", check=True).stdout)
    assert listed["pending"] == 0 and {f["replayed_by"] for f in listed["files"]} == {"trib-dead-letters"}
    # Another app id would take them a second time: refused.
    one_line_error(invoke_trib("dead-letters", "replay", str(root), "--time-field", "event_time",
                               "--app-id", "other"), 3, "replayed by app 'trib-dead-letters'", "--app-id")


def test_replay_killed_with_sigkill_resumes_exactly_once(tmp_path):
    """kill -9 at random moments of `trib dead-letters replay`, then a rerun: each record once."""
    n = 150_000
    root = _table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", n, hours=6)
    res = _ok(_ingest(root, src, "--time-field", "tss", "--on-bad-record", "dead-letter", "--commit-every", "30000"))
    assert res["dead_letters"] == n
    cmd = [*TRIB, "-q", "dead-letters", "replay", str(root), "--time-field", "ts", "--commit-every", "5000"]
    hits = signal_loop(cmd, 6, random.Random(33), window=(0.8, 3.0))
    assert hits >= 1
    partial = json.loads(invoke_trib("dead-letters", "list", str(root), "--json", check=True).stdout)
    assert partial["pending"] < n  # the killed runs committed part of the replay
    final = json.loads(run_trib(*cmd[len(TRIB):], "--json", check=True).stdout)
    assert final["records"] == partial["pending"]
    storage = open_storage(str(root))
    assert_exactly_once(committed_records(storage, _data_files(root)), n)
    assert json.loads(invoke_trib("dead-letters", "list", str(root), "--json", check=True).stdout)["pending"] == 0
    assert invoke_trib("verify", str(root)).returncode == 0


# -- 4. complete files are complete -----------------------------------------------------------------------
def _export(path: Path, n: int = 3, age_s: float = 0) -> Path:
    """A daily export: n records, the last without a newline; its mtime ``age_s`` ago."""
    path.write_text("\n".join(json.dumps({"id": i, "ts": STAMP}) for i in range(n)))
    if age_s:
        t = time.time() - age_s
        os.utime(path, (t, t))
    return path


def test_an_unterminated_last_line_is_taken_once_the_file_is_settled(tmp_path):
    """Why 4: 2 of 3 records committed, every rerun 0, exit 0."""
    root = _table(tmp_path)
    old = _export(tmp_path / "day1.jsonl", age_s=600)  # unchanged for 10 min > the default 5 min
    p = _ingest(root, old, "--time-field", "ts")
    res = _ok(p)
    assert (res["records"], res["pending_bytes"], res["took_unterminated_line"]) == (3, 0, True)
    assert "as complete" in p.stderr
    assert _ok(_ingest(root, old, "--time-field", "ts"))["records"] == 0  # nothing twice

    fresh = _export(tmp_path / "day2.jsonl")  # just written: the last line may be mid-write
    res = _ok(_ingest(root, fresh, "--time-field", "ts"))
    assert (res["records"], res["pending_bytes"]) == (2, len(json.dumps({"id": 2, "ts": STAMP})))
    assert res["pending_until"] and not res["took_unterminated_line"]
    # A longer --final-after leaves even a 10-minute-old file pending; a table setting likewise.
    t = time.time() - 600
    os.utime(fresh, (t, t))
    assert _ok(_ingest(root, fresh, "--time-field", "ts", "--final-after", "1h"))["pending_bytes"] > 0
    invoke_trib("table", "set", str(root), "--final-after", "20m", check=True)
    assert _ok(_ingest(root, fresh, "--time-field", "ts"))["pending_bytes"] > 0
    res = _ok(_ingest(root, fresh, "--time-field", "ts", "--final-after", "5m"))
    assert (res["records"], res["start_offset"], res["pending_bytes"]) == (1, 2, 0)
    assert _dirs(root) == {"2024_01_01/05": 6}


WRITER = r"""
import json, sys, time
path, n, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(path, "a", buffering=1) as f:
    for i in range(n):
        line = json.dumps({"id": i, "ts": "2024-01-01T05:00:00Z", "pad": "x" * 40})
        f.write(line[:20]); f.flush()  # mid-line: the rest comes after a pause
        time.sleep(pause)
        f.write(line[20:] + ("\n" if i < n - 1 else "")); f.flush()
"""


def test_a_line_a_writer_is_still_writing_is_never_taken(tmp_path):
    """A real process appends lines in two halves; ingests run all along with --final-after 2s.
    None may take half a line: every record lands whole, exactly once, none dead-lettered."""
    root = _table(tmp_path)
    src = tmp_path / "live.jsonl"
    src.touch()
    n = 12
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(src), str(n), "0.4"])
    runs = pending_seen = 0
    while writer.poll() is None:
        res = _ok(_ingest(root, src, "--time-field", "ts", "--final-after", "2s", "--on-bad-record", "dead-letter"))
        runs += 1
        pending_seen += bool(res["pending_bytes"])
        assert res["dead_letters"] == 0 and not res["took_unterminated_line"], res
    assert writer.wait() == 0 and runs >= 3 and pending_seen >= 1
    # The writer is done; its last line has no newline: pending until the file has settled for 2s.
    res = _ok(_ingest(root, src, "--time-field", "ts", "--final-after", "2s"))
    assert res["pending_bytes"] > 0 or res["took_unterminated_line"]
    time.sleep(2.2)
    _ok(_ingest(root, src, "--time-field", "ts", "--final-after", "2s"))
    lines = [json.loads(x) for f in _data_files(root) for x in (root / f["path"]).read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == list(range(n)) and all(r["pad"] == "x" * 40 for r in lines)
    assert not (root / "_tributary/dead_letter").exists()


def test_a_newline_after_a_taken_last_line_is_not_a_record(tmp_path):
    """A settled export taken whole, then appended to: its late newline ends the taken record."""
    root = _table(tmp_path)
    src = _export(tmp_path / "day.jsonl", age_s=600)
    assert _ok(_ingest(root, src, "--time-field", "ts"))["records"] == 3
    with open(src, "a") as f:
        f.write("\n" + json.dumps({"id": 3, "ts": STAMP}) + "\n")
    res = _ok(_ingest(root, src, "--time-field", "ts"))
    assert (res["records"], res["dead_letters"], res["start_offset"], res["last_offset"]) == (1, 0, 3, 3)
    assert _dirs(root) == {"2024_01_01/05": 4}
