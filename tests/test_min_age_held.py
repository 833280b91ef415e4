"""A run that holds files back for their minimum age says how many, in its JSON result and on stderr.

Before, a consumer whose new files were all younger than ``--min-age`` answered ``"files": []``
(exit 0) and, with ``--json``, nothing on stderr; ``trib compact`` said "merged 0 files" over
partitions it left for ``compact.min_age``. Each front end now gives the count in its JSON and one
line on stderr, in the words of tributary_read.read.min_age.
"""

from __future__ import annotations

import json
import time

import pytest

from conftest import invoke_trib
from etl_data import create_output_table, write_job
from helpers import put
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.unit

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
LAY = Layout(LAYOUT, "dt={yyyy}{MM}{dd}{HH}")
H = 3_600_000


def test_a_consumer_run_says_how_many_files_it_held_back_for_min_age(tmp_path):
    now = int(time.time() * 1000)
    hour = now - now % H
    raw = tmp_path / "raw"
    old = f"{LAY.for_time(hour - 3 * H).path}/old.jsonl"
    put(raw, old, now - 2 * H, b'{"id": 1, "ts": 0, "msg": "m"}\n')
    for name in ("a.jsonl", "b.jsonl"):  # still being written, for all trib knows: a minute is the default
        put(raw, f"{LAY.for_time(hour - H).path}/{name}", now - 5_000, b'{"id": 2, "ts": 0, "msg": "m"}\n')
    line = "held back 2 files modified within the last 1m (min_age): they may still be written; a later run reads them"

    # trib files --consumer, JSON and human: the count, and the line on stderr in both modes.
    p = invoke_trib("files", str(raw), "--layout", LAYOUT, "--consumer", "c", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [f["path"] for f in doc["files"]] == [old] and doc["deferred"] == 2
    assert f"trib: {line}" in p.stderr.splitlines()
    invoke_trib("consumer", "ack", str(raw), "c", doc["plan_id"], check=True)
    p = invoke_trib("files", str(raw), "--layout", LAYOUT, "--consumer", "c")  # only young files now: 0 files
    assert p.returncode == 0 and p.stdout == "" and f"trib: {line}" in p.stderr.splitlines()

    # trib etl run: the input's report counts them, and says so on stderr (its stdout is the JSON).
    create_output_table(tmp_path / "events")
    job = write_job(tmp_path / "jobs", name="hourly", raw=raw, out=tmp_path / "events")
    when = time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(now / 1000))
    p = invoke_trib("etl", "run", str(job), "--schedule-time", when, "--dry-run", "--json")
    assert p.returncode == 0, p.stderr
    (inp,) = json.loads(p.stdout)["inputs"]
    assert inp["paths"] == [old] and inp["deferred"] == 2
    assert f"trib etl: input raw: {line}" in p.stderr.splitlines()


def test_a_compaction_says_how_many_partitions_it_held_back_for_min_age(tmp_path):
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", "dt={yyyy}{MM}{dd}{HH}", check=True)
    ts = int(time.time() * 1000) - 2 * H
    for i in range(3):
        src = tmp_path / f"s{i}.jsonl"
        src.write_text(json.dumps({"id": i, "ts": ts}) + "\n")
        invoke_trib("ingest", str(root), "--source", str(src), "--app-id", f"a{i}", "--time-field", "ts", check=True)
    line = ("trib: held back 1 partition (3 files) holding a file modified within the last 1d (compact.min_age): "
            "they may still be written; a later run compacts them")
    p = invoke_trib("compact", str(root), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["files_in"] == 0 and doc["held_for_min_age"] == {"partitions": 1, "files": 3}
    assert line in p.stderr.splitlines()
    p = invoke_trib("compact", str(root), "--min-age", "0s", "--dry-run", "--json")  # nothing held: no line
    assert json.loads(p.stdout)["held_for_min_age"] == {"partitions": 0, "files": 0} and "held back" not in p.stderr
