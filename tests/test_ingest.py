"""Ingest routing and resume behaviour through the real CLI."""

from __future__ import annotations

import json
import time

import pytest
from conftest import run_trib
from helpers import LAYOUT, PARTITION, grow_source, make_source

pytestmark = pytest.mark.integration


def _files(root):
    return json.loads(run_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]


def test_time_regex_over_text_lines(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION,
             "--format", "text", "--timezone", "Asia/Shanghai", check=True)
    src = tmp_path / "access.log"
    src.write_text(
        "2020-06-24 09:59:59 GET /a\n"
        "2020-06-24 10:00:00 GET /b\n"
        "2020-06-24T02:30:00+00:00 GET /c\n"   # explicit offset: 10:30 in Shanghai
    )
    run_trib("ingest", str(root), "--source", str(src), "--app-id", "logs",
             "--time-regex", r"^([0-9-]{10}[ T][0-9:]{8}(?:[+-][0-9]{2}:[0-9]{2})?) ", check=True)
    got = {f["path"].rsplit("/", 1)[0]: (root / f["path"]).read_text().splitlines() for f in _files(root)}
    assert got == {"2020_06_24/09": ["2020-06-24 09:59:59 GET /a"],
                   "2020_06_24/10": ["2020-06-24 10:00:00 GET /b", "2020-06-24T02:30:00+00:00 GET /c"]}


def test_arrival_time_without_time_field(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    src = make_source(tmp_path / "s.jsonl", 50)
    before = time.time()
    run_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--arrival-time", check=True)
    from tributary_read.table.layout import Layout

    lay = Layout(LAYOUT, PARTITION)
    allowed = {lay.for_time(int(t * 1000)).path for t in (before, time.time())}
    files = _files(root)
    assert {f["path"].rsplit("/", 1)[0] for f in files} <= allowed
    assert sum(f["records"] for f in files) == 50


def test_hive_style_multi_key_layout(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", "dt={yyyy}{MM}{dd}/hr={HH}",
             "--partition", "dt={yyyy}{MM}{dd},hr={HH}", check=True)
    src = tmp_path / "s.jsonl"
    src.write_text('{"ts": "2020-06-24T01:15:00Z"}\n{"ts": 1592964000}\n')  # 01:15, 02:00 UTC
    # epoch seconds need their unit (it used to be guessed from the size): ISO strings need none
    run_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", "--time-unit", "s",
             check=True)
    parts = sorted((f["path"].rsplit("/", 1)[0], json.dumps(f["partition"], sort_keys=True)) for f in _files(root))
    assert parts == [("dt=20200624/hr=01", '{"dt": "20200624", "hr": "01"}'),
                     ("dt=20200624/hr=02", '{"dt": "20200624", "hr": "02"}')]


def test_resume_appends_only_new_lines(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    src = make_source(tmp_path / "s.jsonl", 100)
    run_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    # The source grows (a log being appended to); the next run takes only the new lines.
    grow_source(src, 100, 30)
    r = json.loads(run_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts",
                            "--json", check=True).stdout)
    assert (r["start_offset"], r["last_offset"], r["records"]) == (100, 129, 30)
    ids = sorted(json.loads(line)["id"] for f in _files(root) for line in (root / f["path"]).read_text().splitlines())
    assert ids == list(range(130))
    # A different app id reads the same source independently.
    r = json.loads(run_trib("ingest", str(root), "--source", str(src), "--app-id", "b", "--time-field", "ts",
                            "--json", check=True).stdout)
    assert r["records"] == 130


def test_source_shorter_than_committed_offsets(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    src = make_source(tmp_path / "s.jsonl", 100)
    run_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    src.write_text("\n".join(src.read_text().splitlines()[:10]) + "\n")  # truncated / replaced source
    p = run_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts")
    assert p.returncode == 3 and "only 10 lines" in p.stderr and len(p.stderr.splitlines()) == 1
