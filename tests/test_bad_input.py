"""Bad input: one clear line on stderr, a non-zero exit, no traceback, nothing committed changes.

The CLI runs in this process (``invoke_trib``); one case runs a real process for its traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import invoke_trib, run_trib
from helpers import LAYOUT, PARTITION, make_source, snapshot

pytestmark = pytest.mark.unit

LOG = Path("_tributary/log")


def assert_one_line_error(proc, exit_code: int, *needles: str):
    assert proc.returncode == exit_code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def table(tmp_path):
    """A table with three commits of real data."""
    root = tmp_path / "t"
    src = make_source(tmp_path / "src.jsonl", 300)
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts",
             "--commit-every", "100", check=True)
    return root


def _last_commit(root: Path) -> Path:
    return sorted((root / LOG).glob("*[0-9].json"))[-1]


def _every_reader_refuses(root, code, *needles):
    for args in (["log", str(root)], ["verify", str(root)], ["files", str(root), "--all"],
                 ["recover", str(root), "--app-id", "a"]):
        assert_one_line_error(invoke_trib(*args), code, *needles)


def test_truncated_commit_file(table, tmp_path):
    last = _last_commit(table)
    last.write_bytes(last.read_bytes()[:40])
    before = snapshot(table)
    _every_reader_refuses(table, 6, "corrupt", last.name)
    src = make_source(tmp_path / "more.jsonl", 10)
    assert_one_line_error(invoke_trib("ingest", str(table), "--source", str(src), "--app-id", "b",
                                   "--time-field", "ts"), 6, "corrupt")
    assert snapshot(table) == before


def test_corrupt_json_fields(table):
    last = _last_commit(table)
    doc = json.loads(last.read_bytes())
    doc["files"][0]["size"] = "big"
    last.write_text(json.dumps(doc))
    before = snapshot(table)
    _every_reader_refuses(table, 6, "corrupt")
    assert snapshot(table) == before


def test_unknown_format_version(table):
    last = _last_commit(table)
    doc = json.loads(last.read_bytes())
    doc["format_version"] = 99
    last.write_text(json.dumps(doc))
    before = snapshot(table)
    _every_reader_refuses(table, 6, "format_version 99", "upgrade")
    assert snapshot(table) == before


@pytest.mark.parametrize("evil", ["../outside.jsonl", "/etc/passwd", "a/../../x", "s3://other/x"])
def test_manifest_path_escaping_root(table, evil):
    last = _last_commit(table)
    doc = json.loads(last.read_bytes())
    doc["files"][0]["path"] = evil
    last.write_text(json.dumps(doc))
    before = snapshot(table)
    _every_reader_refuses(table, 6, "escapes the table root")
    assert_one_line_error(invoke_trib("clean", str(table), "--older-than", "0s"), 6, "escapes")
    assert snapshot(table) == before


@pytest.mark.parametrize("layout,partition,needle", [
    ("{yyyy}/{dd}", PARTITION, "contiguous"),
    ("{yyyy}_{MM}_{dd}/{HH}", "dt", "malformed partition"),
    ("{yyyy}_{MM}_{dd}/{hh}", PARTITION, "unknown token"),
    ("{yyyy}_{MM}_{dd}/{HH}/", PARTITION, "malformed layout"),
    ("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}{mm}", "lacks"),
    ("{yyyy}_{MM}_{dd}/x';drop", PARTITION, "bad literal"),
])
def test_malformed_layout(tmp_path, layout, partition, needle):
    root = tmp_path / "t"
    p = invoke_trib("table", "create", str(root), "--layout", layout, "--partition", partition)
    assert_one_line_error(p, 3, needle)
    assert not root.exists()


def test_record_without_time_field_goes_to_dead_letter(tmp_path, table):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"id": 1, "ts": 1592960400000}\n{"id": 2}\nnot json\n{"id": 3, "ts": "yesterday"}\n')
    # 3 of 4 bad is far over the default limit: keeping them all is the explicit opt-out
    p = invoke_trib("ingest", str(table), "--source", str(src), "--app-id", "b", "--time-field", "ts", "--json",
                    "--on-bad-record", "dead-letter")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["records"] == 4 and res["dead_letters"] == 3
    dead = list((table / "_tributary/dead_letter").glob("*.jsonl"))
    lines = [json.loads(x) for f in dead for x in f.read_text().splitlines()]
    assert [(d["offset"], d["reason"]) for d in lines] == [
        (1, "no time field 'ts'"), (2, "not valid JSON"), (3, "unparsable time 'yesterday'")]
    assert invoke_trib("verify", str(table)).returncode == 0  # dead letters are committed files
    files = json.loads(invoke_trib("files", str(table), "--all", "--json").stdout)["files"]
    assert not any(f["path"].startswith("_tributary") for f in files)


def test_record_without_time_field_fails_the_run(tmp_path, table):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"id": 1, "ts": 1592960400000}\n{"id": 2}\n')
    before = snapshot(table)
    p = invoke_trib("ingest", str(table), "--source", str(src), "--app-id", "b", "--time-field", "ts",
                 "--on-bad-record", "fail")
    assert_one_line_error(p, 3, "bad.jsonl line 1", "no time field 'ts'")
    assert snapshot(table) == before  # the batch's files were removed, nothing committed


def test_unwritable_root(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = invoke_trib("table", "create", str(blocker / "t"), "--layout", LAYOUT, "--partition", PARTITION)
    assert_one_line_error(p, 7, "cannot")
    assert blocker.read_text() == "x"


def test_unwritable_table_during_ingest(tmp_path, table):
    # A partition directory replaced by a file: the writer cannot create its file there.
    src = tmp_path / "one.jsonl"
    src.write_text('{"id": 1, "ts": 1262304000000}\n')  # 2010-01-01T00Z
    (table / "2010_01_01").write_text("in the way")
    before = snapshot(table)
    p = invoke_trib("ingest", str(table), "--source", str(src), "--app-id", "c", "--time-field", "ts")
    assert_one_line_error(p, 7, "cannot")
    assert snapshot(table) == before


@pytest.mark.parametrize("args,code,needle", [
    (["log", "{missing}"], 4, "no trib table"),
    (["ingest", "{table}", "--source", "/nonexistent", "--app-id", "a", "--time-field", "ts"], 3,
     "not a readable file"),
    (["ingest", "{table}", "--source", "{src}", "--app-id", "a", "--time-field", "ts", "--commit-every", "0"], 3,
     "commit-every"),
    (["ingest", "{table}", "--source", "{src}", "--app-id", "a"], 3, "--time-field"),
    (["ingest", "{table}", "--source", "{src}", "--app-id", "a", "--time-field", "ts", "--max-bad-fraction",
      "150%"], 3, "from 0 to 1"),
    (["ingest", "{table}", "--source", "{src}", "--app-id", "a", "--time-field", "ts", "--final-after", "300"], 3,
     "has no unit"),
    (["table", "set", "{table}", "--max-bad-fraction", "nan"], 3, "from 0 to 1"),
    (["table", "set", "{table}"], 2, "--max-bad-fraction"),
    (["ingest", "{table}", "--source", "{src}", "--app-id", "a", "--time-regex", "("], 3, "time-regex"),
    (["clean", "{table}", "--older-than", "soon"], 3, "is not a duration"),
    (["table", "create", "{table}", "--layout", LAYOUT, "--partition", PARTITION], 4, "already exists"),
    (["table", "create", "{missing}", "--layout", LAYOUT, "--partition", PARTITION,
      "--format", "csv", "--compression", "snappy"], 3, "not available for csv"),
    (["table", "create", "{missing}", "--layout", LAYOUT, "--partition", PARTITION,
      "--timezone", "Mars/Olympus"], 3, "unknown timezone"),
    (["files", "{table}", "--mode", "manifest", "--since-version", "5", "--until-version", "2"], 3, "version range"),
])
def test_cli_argument_errors(tmp_path, table, args, code, needle):
    src = make_source(tmp_path / "s.jsonl", 3)
    subst = {"{table}": str(table), "{missing}": str(tmp_path / "nope"), "{src}": str(src)}
    args = [subst.get(a, a) for a in args]
    before = snapshot(table)
    assert_one_line_error(invoke_trib(*args), code, needle)
    assert snapshot(table) == before


@pytest.mark.integration
def test_verbose_shows_traceback(table):
    last = _last_commit(table)
    last.write_bytes(b"{")
    p = run_trib("-v", "log", str(table))
    assert p.returncode == 6 and "Traceback" in p.stderr
