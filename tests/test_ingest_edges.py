"""Ingest edge cases through the real `trib ingest` process (issue 8, part 2).

A producer mid-line, event times no partition can hold, a source that is not the
file its offsets were committed for, and dead letters that must keep the exact
bytes: each must end in either a correct table or one clear error, never in a
silently wrong table.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from conftest import run_trib
from helpers import LAYOUT, PARTITION, grow_source, make_source, one_line_error, snapshot

pytestmark = pytest.mark.integration

LOG = Path("_tributary/log")


def _table(tmp_path, fmt="jsonl", tz="UTC", name="t") -> Path:
    root = tmp_path / name
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION,
             "--format", fmt, "--timezone", tz, check=True)
    return root


def _ingest(root, src, *extra, app="a", time_field="ts"):
    """``time_field=None``: file records by arrival time, which must be said (--arrival-time)."""
    args = ["ingest", str(root), "--source", str(src), "--app-id", app, "--json", *extra]
    args += ["--time-field", time_field] if time_field else ["--arrival-time"]
    return run_trib(*args)


def _ok(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _data_lines(root) -> list[bytes]:
    files = json.loads(run_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
    return [line for f in sorted(files, key=lambda f: f["path"]) for line in (root / f["path"]).read_bytes().splitlines()]


def _dead_letters(root) -> list[dict]:
    return [json.loads(x) for f in sorted((root / "_tributary/dead_letter").glob("*.jsonl"))
            for x in f.read_bytes().splitlines()]


def _commits(root) -> list[dict]:
    return [json.loads(p.read_bytes()) for p in sorted((root / LOG).glob("*[0-9].json"))]


def _ids(root) -> list[int]:
    return sorted(json.loads(line)["id"] for line in _data_lines(root))


# -- 1. a partial last line ------------------------------------------------------------------------
def test_partial_last_line_waits_for_its_newline(tmp_path):
    root = _table(tmp_path, fmt="text")
    src = tmp_path / "app.log"
    src.write_bytes(b"rec-1 whole\nrec-2 parti")  # the producer is mid-write
    p = _ingest(root, src, time_field=None)
    res = _ok(p)
    assert (res["records"], res["last_offset"], res["pending_bytes"]) == (1, 0, 11)
    note = [x for x in p.stderr.splitlines() if "without a newline" in x]
    assert len(note) == 1 and "--final" in note[0], p.stderr
    assert _data_lines(root) == [b"rec-1 whole"]
    # The committed byte position is the end of the last whole line, not EOF.
    assert _commits(root)[-1]["transaction"]["meta"]["positions"] == {"app.log": len(b"rec-1 whole\n")}

    with open(src, "ab") as f:  # the producer finishes the line
        f.write(b"al-tail\n")
    res = _ok(_ingest(root, src, time_field=None))
    assert (res["records"], res["start_offset"], res["last_offset"], res["pending_bytes"]) == (1, 1, 1, 0)
    assert sorted(_data_lines(root)) == [b"rec-1 whole", b"rec-2 partial-tail"]
    assert _commits(root)[-1]["transaction"]["meta"]["positions"] == {"app.log": src.stat().st_size}


def test_partial_line_alone_commits_nothing(tmp_path):
    root = _table(tmp_path)
    src = tmp_path / "s.jsonl"
    src.write_bytes(b'{"id": 0, "ts": 15929604')
    before = snapshot(root)
    res = _ok(_ingest(root, src))
    assert (res["records"], res["commits"], res["pending_bytes"]) == (0, 0, len(src.read_bytes()))
    assert snapshot(root) == before


def test_final_consumes_an_unterminated_last_line(tmp_path):
    root = _table(tmp_path)
    src = tmp_path / "s.jsonl"
    src.write_bytes(b'{"id": 0, "ts": 1592960400000}\r\n{"id": 1, "ts": 1592960400001}')
    p = _ingest(root, src, "--final")
    res = _ok(p)
    assert (res["records"], res["last_offset"], res["pending_bytes"]) == (2, 1, 0)
    assert "without a newline" not in p.stderr
    assert _ids(root) == [0, 1]
    assert _commits(root)[-1]["transaction"]["meta"]["positions"] == {"s.jsonl": src.stat().st_size}
    # Nothing is left to read, and a rerun reads nothing twice.
    assert _ok(_ingest(root, src, "--final"))["records"] == 0
    assert _ids(root) == [0, 1]


# -- 2. and 5. event times that no partition can hold --------------------------------------------
OUT_OF_RANGE = [
    '"9999-12-31T23:30Z"',  # its hour has no end representable as a datetime
    "1e20", "-1e17", "1e400", "NaN", "Infinity", "-Infinity", "99999999999999999999999999999",
    '"99999999999999999999"',
]
#: integer times in ms, unchecked: what reaches the layout's range (test_timeunit.py tests the check)
ANY_MS = ("--time-unit", "ms", "--allow-any-time")


def test_out_of_range_times_go_to_dead_letter(tmp_path):
    root = _table(tmp_path)
    src = tmp_path / "s.jsonl"
    good = '{"id": 0, "ts": 1592960400000}'
    src.write_text(good + "\n" + "".join(f'{{"id": {i + 1}, "ts": {v}}}\n' for i, v in enumerate(OUT_OF_RANGE)))
    # the plausibility check off, so the integers reach the layout's own range check; every bad record
    # kept (the explicit opt-out of the bad-record limit: 9 of 10 is far over it)
    res = _ok(_ingest(root, src, *ANY_MS, "--on-bad-record", "dead-letter"))
    assert (res["records"], res["dead_letters"]) == (len(OUT_OF_RANGE) + 1, len(OUT_OF_RANGE))
    assert _ids(root) == [0]
    dead = _dead_letters(root)
    assert [d["offset"] for d in dead] == list(range(1, len(OUT_OF_RANGE) + 1))
    for d in dead:
        assert d["reason"] and ("out of range" in d["reason"] or "not a finite number" in d["reason"]), d
        assert json.loads(d["line"])["id"] == d["offset"]
    assert run_trib("verify", str(root)).returncode == 0


@pytest.fixture(scope="module")
def shared_table(tmp_path_factory) -> Path:
    """One table for runs that must leave it unchanged (each test checks that)."""
    return _table(tmp_path_factory.mktemp("shared"))


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_out_of_range_time_fails_the_run(tmp_path, shared_table, value):
    root = shared_table
    src = tmp_path / "s.jsonl"
    src.write_text(f'{{"id": 0, "ts": 1592960400000}}\n{{"id": 1, "ts": {value}}}\n')
    before = snapshot(root)
    p = _ingest(root, src, "--on-bad-record", "fail", *ANY_MS)
    one_line_error(p, 3, "s.jsonl line 1")
    assert snapshot(root) == before


def test_last_placeable_hour_in_utc(tmp_path):
    root = _table(tmp_path)
    src = tmp_path / "s.jsonl"
    src.write_text('{"id": 0, "ts": "9999-12-31T22:59:59.999Z"}\n{"id": 1, "ts": "0001-01-01T00:00Z"}\n'
                   '{"id": 2, "ts": "9999-12-31T23:00Z"}\n')
    res = _ok(_ingest(root, src, "--on-bad-record", "dead-letter"))
    assert res["dead_letters"] == 1 and _dead_letters(root)[0]["offset"] == 2
    files = json.loads(run_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
    assert sorted(f["path"].rsplit("/", 1)[0] for f in files) == ["0001_01_01/00", "9999_12_31/22"]


@pytest.mark.parametrize("tz,value,placed", [
    ("+08:00", "9999-12-31T20:00Z", None),  # 10000-01-01T04:00 local
    ("-05:00", "0001-01-01T00:10Z", None),  # year 0 local
    ("-05:00", "9999-12-31T23:30Z", "9999_12_31/18"),  # out of range in UTC, not in this zone
    ("+08:00", "0001-01-01T00:10Z", "0001_01_01/08"),
])
def test_the_range_is_the_table_zones(tmp_path, tz, value, placed):
    root = _table(tmp_path, tz=tz)
    src = tmp_path / "s.jsonl"
    src.write_text(f'{{"id": 0, "ts": "{value}"}}\n')
    res = _ok(_ingest(root, src, "--on-bad-record", "dead-letter"))
    files = json.loads(run_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
    assert [f["path"].rsplit("/", 1)[0] for f in files] == ([placed] if placed else [])
    assert res["dead_letters"] == (0 if placed else 1)


# -- 3. which file is the source? -------------------------------------------------------------------
def test_same_basename_in_another_directory_is_refused(tmp_path):
    root = _table(tmp_path)
    (tmp_path / "day1").mkdir()
    (tmp_path / "day2").mkdir()
    day1 = make_source(tmp_path / "day1/events.jsonl", 100, seed=1)
    day2 = tmp_path / "day2/events.jsonl"  # same size and line count, other records
    day2.write_text("".join(line.replace('"id": ', '"id": 1') for line in day1.read_text().splitlines(True)))
    assert len(day2.read_bytes()) == len(day1.read_bytes()) + 100
    assert _ok(_ingest(root, day1))["records"] == 100
    before = snapshot(root)
    p = _ingest(root, day2)
    one_line_error(p, 3, "events.jsonl", "--source-name")
    assert snapshot(root) == before
    # Named as a new source, it is read whole.
    res = _ok(_ingest(root, day2, "--source-name", "day2/events.jsonl"))
    assert (res["start_offset"], res["records"]) == (0, 100)
    assert len(_ids(root)) == 200


def test_replaced_source_is_not_resumed_at_a_byte_position(tmp_path):
    root = _table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 50, seed=1)
    _ok(_ingest(root, src))
    # A different, longer file under the same path (e.g. a new day's file moved into place).
    other = make_source(tmp_path / "other.jsonl", 80, seed=2)
    other.replace(src)
    before = snapshot(root)
    one_line_error(_ingest(root, src), 3, "s.jsonl", "replaced", "--source-name")
    assert snapshot(root) == before


def test_replacement_sharing_the_first_block_is_detected(tmp_path):
    """Same first 4 KiB (a shared header, the same first events), different after: the tail block tells."""
    root = _table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 200)
    _ok(_ingest(root, src))
    lines = src.read_text().splitlines(True)
    assert len("".join(lines[:100])) > 4096
    src.write_text("".join(lines[:100]) + "".join(line.replace("event", "EVENT") for line in lines[100:]) + lines[0])
    before = snapshot(root)
    one_line_error(_ingest(root, src), 3, "s.jsonl", "bytes before the committed position", "--source-name")
    assert snapshot(root) == before


def test_truncated_and_regrown_source_is_detected(tmp_path):
    root = _table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 50)
    _ok(_ingest(root, src))
    # Rotated in place (copytruncate), then the producer wrote more than before.
    src.write_text("".join(json.dumps({"id": 1000 + i, "ts": 1592960400000 + i, "msg": "after rotation"}) + "\n"
                           for i in range(80)))
    before = snapshot(root)
    one_line_error(_ingest(root, src), 3, "s.jsonl", "--source-name")
    assert snapshot(root) == before


def test_truncated_source_is_detected(tmp_path):
    root = _table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 50)
    _ok(_ingest(root, src))
    src.write_text("".join(src.read_text().splitlines(True)[:10]))
    before = snapshot(root)
    one_line_error(_ingest(root, src), 3, "s.jsonl", "only 10 lines", "--source-name")
    assert snapshot(root) == before


def test_grown_source_resumes_and_records_its_fingerprint(tmp_path):
    root = _table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 50)
    _ok(_ingest(root, src, "--commit-every", "20"))
    meta = _commits(root)[-1]["transaction"]["meta"]
    size = src.stat().st_size
    assert meta["positions"] == {"s.jsonl": size}
    fp = meta["fingerprints"]["s.jsonl"]
    assert set(fp) >= {"block", "head", "tail"}
    grow_source(src, 50, 30)
    res = _ok(_ingest(root, src))
    assert (res["start_offset"], res["last_offset"], res["records"]) == (50, 79, 30)
    assert _ids(root) == list(range(80))


def test_log_without_fingerprints_still_resumes(tmp_path):
    """A log written before fingerprints existed falls back to the newline check at the position."""
    root = _table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 50)
    _ok(_ingest(root, src))
    (last,) = sorted((root / LOG).glob("*[0-9].json"))[-1:]
    doc = json.loads(last.read_bytes())
    del doc["transaction"]["meta"]["fingerprints"]
    last.write_text(json.dumps(doc))
    grow_source(src, 50, 30)
    res = _ok(_ingest(root, src))
    assert (res["start_offset"], res["records"]) == (50, 30)
    assert _ids(root) == list(range(80))
    assert "fingerprints" in _commits(root)[-1]["transaction"]["meta"]  # and it is recorded from now on


def test_one_app_keeps_the_offsets_of_all_its_sources(tmp_path):
    """Alternating sources under one app id must not forget the first one's offsets."""
    root = _table(tmp_path)
    s1 = make_source(tmp_path / "s1.jsonl", 40, seed=1)
    s2 = tmp_path / "s2.jsonl"
    s2.write_text("".join(json.dumps({"id": 1000 + i, "ts": 1592960400000 + i}) + "\n" for i in range(30)))
    _ok(_ingest(root, s1))
    _ok(_ingest(root, s2))
    grow_source(s1, 40, 10, seed=1)
    res = _ok(_ingest(root, s1))
    assert (res["start_offset"], res["records"]) == (40, 10)
    ids = _ids(root)
    assert ids == sorted(list(range(50)) + list(range(1000, 1030)))
    offsets = _commits(root)[-1]["transaction"]["offsets"]
    assert offsets == {"s1.jsonl": 49, "s2.jsonl": 29}


# -- 4. dead letters keep the original bytes --------------------------------------------------------
def test_dead_letters_keep_the_exact_bytes(tmp_path):
    root = _table(tmp_path)
    src = tmp_path / "s.jsonl"
    latin1 = '{"id": 1, "ts": "gestern", "city": "M\u00fcnchen"}'.encode("latin-1")  # not UTF-8
    utf8 = '{"id": 2, "ts": "morgen", "city": "M\u00fcnchen \u2603"}'.encode()
    binary = b"\x00\xff\xfe garbage \x80"
    src.write_bytes(b'{"id": 0, "ts": 1592960400000}\n' + latin1 + b"\n" + utf8 + b"\n" + binary + b"\n")
    res = _ok(_ingest(root, src, "--on-bad-record", "dead-letter"))
    assert res["dead_letters"] == 3
    dead = _dead_letters(root)
    assert [d["offset"] for d in dead] == [1, 2, 3]
    assert "line" not in dead[0] and base64.b64decode(dead[0]["line_b64"]) == latin1
    assert "line_b64" not in dead[1] and dead[1]["line"].encode() == utf8
    assert base64.b64decode(dead[2]["line_b64"]) == binary
    assert {d["source"] for d in dead} == {"s.jsonl"}
