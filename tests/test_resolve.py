"""Resolving file sets: manifest ranges and windows, closed mtime windows, visibility, sidecars, pruning."""

from __future__ import annotations

import io
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import invoke_trib
from helpers import put
from tributary_read import FileEntry, Layout, Table, TableConfig
from tributary_read.cli.files import ListingProgress
from tributary_read.errors import InvalidInputError
from tributary_read.table.layout import parse_timezone
from tributary_read.read.listing import scan
from tributary_read.read.partition_filter import candidate_dirs
from tributary_read.read.partition_filter import PartitionFilter
from tributary_read.read.visibility import parse_valid_length
from tributary_read.read.fileset import FileSet
from tributary_read.read.resolve import Source, resolve
from tributary_read.io.storage import open_storage
from tributary_read.read.window import TimeWindow, floor_to_period, parse_instant

pytestmark = pytest.mark.unit

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
H = 3_600_000
T0 = 1_592_956_800_000  # 2020-06-24T00:00:00Z


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def files_json(*args) -> dict:
    proc = invoke_trib("files", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def paths(doc: dict) -> list[str]:
    return [f["path"] for f in doc["files"]]


# -- windows ----------------------------------------------------------------------
def test_seed_002_schedule_window_in_beijing_time():
    # Seed 002: scheduled 2020-06-24 01:05 (+08:00) reads the previous hour, starttime 1592928000000.
    tz = parse_timezone("+08:00")
    w = TimeWindow.previous_period(parse_instant("2020-06-24T01:05:00+08:00", tz), H, 0, tz)
    assert (w.start_ms, w.end_ms) == (1_592_928_000_000, 1_592_931_599_999)
    assert w.to_json()["end"] == "2020-06-23T16:59:59.999+00:00"


def test_back_to_back_windows_tile_time_with_lag():
    wins = [TimeWindow.previous_period(T0 + k * H + 5 * 60_000, H, 10 * 60_000) for k in range(30)]
    for a, b in zip(wins, wins[1:]):
        assert b.start_ms == a.end_ms + 1  # neither overlap nor a dropped millisecond
    # The lag pushes 00:05 - 10m back into the hour before: that hour is not finished yet.
    assert wins[1].start_ms == T0 - H


def test_daily_windows_follow_local_midnight_across_dst():
    tz = parse_timezone("America/New_York")
    w = TimeWindow.previous_period(ms("2020-03-09T00:30:00-04:00"), 86_400_000, 0, tz)
    assert w.end_ms - w.start_ms + 1 == 23 * H  # the spring-forward day is 23 hours long
    assert floor_to_period(ms("2020-03-09T10:00:00-04:00"), 86_400_000, tz) == ms("2020-03-09T00:00:00-04:00")


def test_parse_instant_forms():
    assert parse_instant("1592928000000") == 1_592_928_000_000
    assert parse_instant("2020-06-23T16:00:00Z") == 1_592_928_000_000
    assert parse_instant("2020-06-24T00:00:00+08:00", parse_timezone("+08:00")) == 1_592_928_000_000
    with pytest.raises(InvalidInputError, match=r"has no UTC offset: write 2020-06-24T00:00:00Z \(UTC\) or "
                                                r"2020-06-24T00:00:00\+08:00 \(Asia/Shanghai\)"):
        parse_instant("2020-06-24T00:00:00", parse_timezone("Asia/Shanghai"))
    for bad in ("yesterday", "2020-13-01", "", "1592928000"):
        with pytest.raises(InvalidInputError):
            parse_instant(bad)
    with pytest.raises(InvalidInputError, match="before its start"):
        TimeWindow(10, 8)
    assert 9 not in TimeWindow(10, 9) and 10 not in TimeWindow(10, 9)  # the empty window a run may get (issue 25)
    with pytest.raises(InvalidInputError, match="before its start"):  # but never from a user's bounds
        TimeWindow.parse("2020-06-23T16:00:00.001Z", "2020-06-23T16:00:00Z")


# -- mtime mode ---------------------------------------------------------------------
@pytest.fixture
def plain(tmp_path) -> Path:
    root = tmp_path / "logs"
    put(root, "2020_06_24/00/a.log", T0 + 10)
    put(root, "2020_06_24/00/start.log", T0 + H)  # exactly on the next window's start
    put(root, "2020_06_24/01/end.log", T0 + 2 * H - 1)  # exactly on this window's end
    put(root, "2020_06_24/01/after.log", T0 + 2 * H)
    put(root, "2020_06_23/23/late.log", T0 + H + 5)  # old partition, new file
    return root


def test_mtime_window_is_closed_on_both_ends(plain):
    doc = files_json(str(plain), "--layout", LAYOUT, "--start", str(T0 + H), "--end", str(T0 + 2 * H - 1))
    assert paths(doc) == ["2020_06_23/23/late.log", "2020_06_24/00/start.log", "2020_06_24/01/end.log"]
    assert doc["mode"] == "mtime" and doc["window"]["start_ms"] == T0 + H
    assert {f["path"]: f["partition"] for f in doc["files"]}["2020_06_23/23/late.log"] == {"dt": "2020062323"}
    assert all(set(f) >= {"path", "size", "mtime_ms", "partition"} for f in doc["files"])


def test_schedule_time_windows_deliver_each_file_once(plain):
    seen = []
    for k in range(0, 4):
        doc = files_json(str(plain), "--layout", LAYOUT, "--schedule-time",
                         datetime.fromtimestamp((T0 + k * H + 300_000) / 1000, timezone.utc).isoformat(),
                         "--period", "1h")
        seen += paths(doc)
    assert sorted(seen) == sorted({*seen}) and len(seen) == 5


def test_plain_text_output_and_uris(plain):
    proc = invoke_trib("files", str(plain), "--layout", LAYOUT, "--start", "2020-06-24T01:00:00Z",
                    "--end", "2020-06-24T01:59:59.999Z", "--uri")
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == f"file://{plain}/2020_06_23/23/late.log"


def test_hidden_in_progress_and_metadata_files_are_never_returned(tmp_path):
    root = tmp_path / "t"
    keep = put(root, "2020_06_24/00/ok.log", T0)
    for rel in ("2020_06_24/00/_SUCCESS", "2020_06_24/00/.ok.log.crc", "2020_06_24/00/x.tmp",
                "2020_06_24/00/x.inprogress", "2020_06_24/00/_x.in-progress", "2020_06_24/00/x.pending",
                "2020_06_24/00/x.log._COPYING_", "2020_06_24/00/_temporary/0/part-0",
                "_tributary/consumers/c/state-00000000000000000001.json", ".staging/2020_06_24/00/y.log"):
        put(root, rel, T0)
    doc = files_json(str(root), "--all", "--layout", LAYOUT, "--mode", "mtime")
    assert paths(doc) == [keep.relative_to(root).as_posix()]
    assert doc["skipped"] == []


def test_unparsable_directories_are_reported_not_guessed(tmp_path):
    root = tmp_path / "t"
    put(root, "2020_06_24/00/ok.log", T0)
    put(root, "2020_06_24/24/bad-hour.log", T0)
    put(root, "2020_06_24/stray.log", T0)
    put(root, "2020_06_24/00/sub/nested.log", T0)
    doc = files_json(str(root), "--all", "--layout", LAYOUT)
    assert paths(doc) == ["2020_06_24/00/ok.log"]
    reasons = {s["path"]: s["reason"] for s in doc["skipped"]}
    assert "does not match layout" in reasons["2020_06_24/24/bad-hour.log"]
    assert reasons["2020_06_24/stray.log"] == "not inside a partition directory"
    assert "nested inside partition directory 2020_06_24/00" in reasons["2020_06_24/00/sub/nested.log"]
    proc = invoke_trib("files", str(root), "--all", "--layout", LAYOUT)
    assert proc.stdout.split() == ["2020_06_24/00/ok.log"] and "3 files not returned" in proc.stderr


def test_valid_length_sidecars(tmp_path):
    root = tmp_path / "t"
    put(root, "2020_06_24/00/flink.log", T0, b"0123456789")
    put(root, "2020_06_24/00/_flink.log.valid-length", T0 - 10 * H, b"\x00\x014")  # Java writeUTF("4")
    put(root, "2020_06_24/00/text.log", T0, b"0123456789")
    put(root, "2020_06_24/00/_text.log.valid-length", T0, b"99\n")  # longer than the file: capped
    put(root, "2020_06_24/00/bad.log", T0, b"0123")
    put(root, "2020_06_24/00/_bad.log.valid-length", T0, b"four")
    doc = files_json(str(root), "--layout", LAYOUT, "--start", str(T0), "--end", str(T0))
    got = {f["path"].rsplit("/", 1)[1]: f.get("valid_length") for f in doc["files"]}
    assert got == {"flink.log": 4, "text.log": 10}
    assert doc["bytes"] == 14
    assert [s["path"] for s in doc["skipped"]] == ["2020_06_24/00/bad.log"]
    assert "malformed valid-length sidecar" in doc["skipped"][0]["reason"]
    assert parse_valid_length(b"123") == 123
    with pytest.raises(ValueError):
        parse_valid_length(b"-1")


# -- partition pruning ----------------------------------------------------------------
def _hourly_tree(root: Path, hours: int) -> None:
    for h in range(hours):
        d = datetime.fromtimestamp((T0 + h * H) / 1000, timezone.utc)
        put(root, f"{d:%Y_%m_%d/%H}/f.log", T0 + h * H + 1)


def test_partition_range_prunes_the_listing_and_matches_a_full_filter(tmp_path):
    root = tmp_path / "t"
    _hourly_tree(root, 72)
    lay = Layout(LAYOUT, PARTITION)
    pf = PartitionFilter.parse("dt>=2020062410, dt <= '2020062505'", lay)
    assert pf.time_range(lay) == (T0 + 10 * H, T0 + 30 * H)
    listing = scan(open_storage(str(root)), lay, partitions=pf)
    assert listing.strategy == "candidates" and listing.listed_dirs == 20
    full = files_json(str(root), "--all", "--layout", LAYOUT)
    expected = [f["path"] for f in full["files"] if "2020062410" <= f["partition"]["dt"] <= "2020062505"]
    doc = files_json(str(root), "--layout", LAYOUT, "--partitions", "dt>=2020062410,dt<=2020062505")
    assert paths(doc) == expected and len(expected) == 20
    assert doc["stats"]["strategy"] == "candidates"


def test_conditions_on_non_time_keys_filter_without_pruning(tmp_path):
    root = tmp_path / "t"
    lay_dir = "dt={yyyy}{MM}{dd}/hr={HH}"
    for h in range(48):
        d = datetime.fromtimestamp((T0 + h * H) / 1000, timezone.utc)
        put(root, f"dt={d:%Y%m%d}/hr={d:%H}/f.log", T0)
    doc = files_json(str(root), "--layout", lay_dir, "--partition", "dt={yyyy}{MM}{dd},hr={HH}",
                     "--partitions", "dt=20200625 AND hr>=20")
    assert paths(doc) == [f"dt=20200625/hr={h}/f.log" for h in (20, 21, 22, 23)]
    assert doc["files"][0]["partition"] == {"dt": "20200625", "hr": "20"}


def test_candidate_dirs_for_a_day():
    lay = Layout(LAYOUT, PARTITION, "+05:30")
    c = candidate_dirs(lay, *PartitionFilter.parse("dt>=2020062400,dt<2020062500", lay).time_range(lay))
    assert [p.path for p in c][:2] == ["2020_06_24/00", "2020_06_24/01"] and len(c) == 24
    assert candidate_dirs(lay, None, 5) is None


# -- manifest mode ----------------------------------------------------------------------
@pytest.fixture
def table(tmp_path) -> Table:
    t = Table.create(str(tmp_path / "m"), TableConfig(layout=Layout(LAYOUT, PARTITION), tracking="manifest"))
    for v in range(1, 6):
        t.log.commit([FileEntry(f"2020_06_24/0{v}/part-{v}.jsonl", 10 * v, v, {"dt": f"202006240{v}"}),
                      FileEntry(f"_tributary/dead_letter/dl-{v}.jsonl", 1, 1, {}, kind="dead_letter")])
    return t


def test_manifest_version_range(table):
    doc = files_json(table.uri, "--mode", "manifest", "--since-version", "2", "--until-version", "4")
    assert paths(doc) == ["2020_06_24/03/part-3.jsonl", "2020_06_24/04/part-4.jsonl"]
    assert doc["files"][0]["version"] == 3 and doc["files"][0]["partition"] == {"dt": "2020062403"}
    assert (doc["since_version"], doc["until_version"]) == (2, 4)
    assert len(files_json(table.uri, "--all")["files"]) == 5  # auto: a trib table reads its log


def test_manifest_commit_time_window(table):
    commits = list(table.log.commits(0))
    w = TimeWindow(commits[1].timestamp_ms, commits[3].timestamp_ms)
    fs = resolve(table, mode="manifest", window=w)
    assert isinstance(fs, FileSet)
    assert {f.version for f in fs.files} == {c.version for c in commits if c.timestamp_ms in w}
    doc = files_json(table.uri, "--mode", "manifest", "--start", str(w.start_ms), "--end", str(w.end_ms))
    assert paths(doc) == [f.path for f in fs.files]
    assert resolve(table, mode="manifest", window=TimeWindow(0, commits[0].timestamp_ms - 1)).files == ()


def test_manifest_mode_filters_partitions_and_hidden_paths(table):
    table.log.commit([FileEntry("2020_06_24/09/.hidden.jsonl", 1, 1, {"dt": "2020062409"})])
    fs = resolve(table, mode="manifest", partitions="dt>=2020062404")
    assert [f.path for f in fs.files] == ["2020_06_24/04/part-4.jsonl", "2020_06_24/05/part-5.jsonl"]


def test_mtime_mode_on_a_trib_table_lists_its_directory(table, tmp_path):
    put(Path(table.storage.root), "2020_06_24/01/part-1.jsonl", T0)
    fs = resolve(table.uri, mode="mtime")
    assert [f.path for f in fs.files] == ["2020_06_24/01/part-1.jsonl"]  # no _tributary/ files


def test_layout_flags_conflicting_with_the_table_are_refused(table, plain):
    proc = invoke_trib("files", table.uri, "--all", "--layout", "{yyyy}{MM}{dd}/{HH}")
    assert proc.returncode == 3 and "drop --layout" in proc.stderr
    with pytest.raises(InvalidInputError, match="needs a trib table"):
        resolve(str(plain), mode="manifest")


# -- S3 and the library API -----------------------------------------------------------------
@pytest.mark.s3
def test_mtime_and_pruning_on_s3(s3_root, s3_server):
    st = open_storage(s3_root, s3_server)
    for h in range(6):
        st.write(f"2020_06_24/0{h}/f-{h}.log", b"abc")
    st.write("2020_06_24/00/_SUCCESS", b"")
    st.write("2020_06_24/00/.f.crc", b"")
    src = Source.open(s3_root, s3_server, Layout(LAYOUT, PARTITION))
    now = int(time.time() * 1000)
    fs = resolve(src, window=TimeWindow(now - 600_000, now + 600_000))
    assert [f.path for f in fs.files] == [f"2020_06_24/0{h}/f-{h}.log" for h in range(6)]
    assert fs.stats["strategy"] == "tree"
    fs = resolve(src, partitions="dt>=2020062402,dt<=2020062403")
    assert [f.path for f in fs.files] == ["2020_06_24/02/f-2.log", "2020_06_24/03/f-3.log"]
    assert fs.stats["strategy"] == "candidates"
    assert resolve(src, window=TimeWindow(0, now - 3_600_000)).files == ()


def test_progress_bar_draws_only_after_its_delay_and_clears():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    bar = ListingProgress("file:///t", stream=out, delay=0.0, interval=0.01)
    bar(3, 10)
    deadline = time.monotonic() + 10  # a loaded CI machine may be slow to run the drawing thread
    while "3/10" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    bar.close()
    assert "listing file:///t: 3/10 directories" in out.getvalue() and out.getvalue().endswith("\x1b[K")
    quiet = Tty()
    bar = ListingProgress("x", stream=quiet, delay=60, interval=0.01)
    time.sleep(0.05)
    bar.close()
    assert quiet.getvalue() == ""
