"""`trib report lateness` against the demo's raw table, checked against the arrival mix that built it.

The table is built exactly as `trib demo` builds it (foreign files placed with their mtimes, ingests
committed by the real CLI with their writer clock at the arrival time), without Spark or Hive: the
report needs neither.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import invoke_trib, run_trib
from tributary_read.demo.mix import HOUR_MS
from tributary_read.demo.run import LAYOUT, Demo

pytestmark = pytest.mark.integration
HOURS = 8
#: An ingest's commit lands this long at most after the moment its clock was skewed to.
COMMIT_SLACK_MS = 30_000


@pytest.fixture(scope="module")
def demo_table(tmp_path_factory):
    work = tmp_path_factory.mktemp("demo")
    demo = Demo(work, HOURS, work / "hive", lambda _m: None)
    demo.create_tables()
    demo.arrive_until(demo.mix.run_at(HOURS - 1))
    assert demo.applied == len(demo.mix.drops)
    return demo


def _seen(d) -> int:
    """When the report should say a file arrived: its commit time if trib wrote it, else its mtime."""
    return d.arrival_ms if d.tracked else d.mtime_ms


def _report(root, *args: str) -> dict:
    r = invoke_trib("report", "lateness", str(root), "--json", "--files", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_every_file_with_its_arrival_and_delay(demo_table):
    mix = demo_table.mix
    data = _report(demo_table.raw)
    got = {a["path"]: a for a in data["arrivals"]}
    assert data["files"] == len(mix.drops) == len(got)
    assert data["arrival_from"] == {"commit": sum(d.tracked for d in mix.drops),
                                    "mtime": sum(not d.tracked for d in mix.drops)}
    by_dir: dict[str, list] = {}
    for a in data["arrivals"]:
        by_dir.setdefault(a["path"].rsplit("/", 1)[0], []).append(a)
    for d in mix.drops:
        end = mix.hour_end(d.hour)
        if d.tracked:  # trib-named files: find the one ingest wrote into the hour's directory at that time
            cands = [a for a in by_dir[d.directory] if a["source"] == "commit"
                     and 0 <= a["arrived_ms"] - d.arrival_ms <= COMMIT_SLACK_MS]
            assert len(cands) == 1, (d, by_dir[d.directory])
            a = cands[0]
        else:
            a = got[d.path]
            assert a["source"] == "mtime" and a["arrived_ms"] == d.mtime_ms, (d.pattern, a)
        assert a["partition"] == "dt=" + d.directory.replace("_", "").replace("/", "")
        assert a["partition_end_ms"] == end
        assert a["delay_ms"] == a["arrived_ms"] - end


def test_missed_counts_and_recommendation_match_the_mix(demo_table):
    mix = demo_table.mix
    data = _report(demo_table.raw, "--lag", "15m", "--lag", "2h")
    delays = sorted(_seen(d) - mix.hour_end(d.hour) for d in mix.drops)
    sizes = {d.path: sum(len(e.line()) for e in d.events) for d in mix.drops}
    lags = {m["lag"]: m for m in data["missed"]}
    assert list(lags) == ["0s", "5m", "10m", "15m", "30m", "1h", "2h", "6h"]
    for m in data["missed"]:
        gone = [d for d in mix.drops if _seen(d) - mix.hour_end(d.hour) > m["lag_ms"]]
        assert m["files"] == len(gone), m
        assert m["bytes"] == sum(sizes[d.path] for d in gone), m
        assert m["share_files"] == pytest.approx(len(gone) / len(mix.drops))
        # records are known only when every missed file is trib's (its commit counts them)
        assert m["records"] == (sum(len(d.events) for d in gone) if all(d.tracked for d in gone) else None)
    # Boundary files: the one arriving exactly at its hour's end is not late (delay 0).
    assert data["late_files"] == sum(1 for x in delays if x > 0)
    n = len(delays)
    for key, share in (("p99", 0.99), ("p99.9", 0.999)):
        rank = -(-int(share * 1000) * n // 1000)  # ceil(share * n)
        assert data["recommended_lag"][key]["lag_ms"] == max(0, delays[rank - 1])
    assert "only an incremental consumer catches 100%" in data["consumer"]
    assert any("mtime, which can lie" in note for note in data["notes"])


def test_mtimes_hide_preserved_copies_and_late_renames(demo_table):
    """What the report cannot see is said, not hidden: those files look on time."""
    mix = demo_table.mix
    got = {a["path"]: a for a in _report(demo_table.raw)["arrivals"]}
    hidden = [d for d in mix.drops if d.pattern in ("preserved_mtime", "hidden_renamed")]
    assert hidden and all(d.arrival_ms > mix.hour_end(d.hour) + HOUR_MS for d in hidden)  # really late...
    assert all(got[d.path]["delay_ms"] <= 0 for d in hidden)  # ...yet on time by their mtime
    fresh = [d for d in mix.drops if d.pattern in ("late_fresh", "straggler")]
    assert fresh and all(got[d.path]["delay_ms"] == d.arrival_ms - mix.hour_end(d.hour) > 0 for d in fresh)


def test_since_keeps_later_partitions(demo_table):
    mix = demo_table.mix
    cut = mix.hour_end(HOURS // 2 - 1)  # partitions ending after this: the second half
    data = _report(demo_table.raw, "--since", str(cut))
    assert data["since_ms"] == cut
    assert data["files"] == sum(1 for d in mix.drops if mix.hour_end(d.hour) > cut)
    assert [p["partition"] for p in data["partitions"]] == sorted({p["partition"] for p in data["partitions"]})


def test_a_plain_directory_with_a_layout(demo_table, tmp_path):
    """Other tools' files alone, copied with their mtimes: every arrival is an mtime."""
    plain = tmp_path / "plain"
    shutil.copytree(demo_table.raw, plain, copy_function=shutil.copy2,
                    ignore=shutil.ignore_patterns("_tributary", "part-*", ".*"))
    foreign = [d for d in demo_table.mix.drops if not d.tracked]
    data = _report(plain, "--layout", LAYOUT)
    assert data["files"] == len(foreign) and data["arrival_from"] == {"commit": 0, "mtime": len(foreign)}
    assert sorted(a["path"] for a in data["arrivals"]) == sorted(d.path for d in foreign)


@pytest.mark.parametrize("args, code, words", [
    (["{plain}"], 3, "is not a trib table: give --layout"),
    (["{missing}"], 4, "no directory at"),
    (["{plain}", "--layout", LAYOUT, "--lag", "soon"], 3, "--lag 'soon' is not a duration"),
    (["{plain}", "--layout", LAYOUT, "--since", "yesterday"], 3, "unparsable --since 'yesterday'"),
])
def test_bad_input_is_one_line(tmp_path, args, code, words):
    (tmp_path / "plain").mkdir()
    args = [a.replace("{plain}", str(tmp_path / "plain")).replace("{missing}", str(tmp_path / "nope")) for a in args]
    r = run_trib("report", "lateness", *args)
    assert r.returncode == code, r.stderr
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_html_is_self_contained(demo_table, tmp_path):
    out = tmp_path / "r.html"
    data = _report(demo_table.raw, "--out", str(out))
    page = out.read_text()
    assert data["report"] == str(out)
    assert "trib-delay-chart" in page and "trib-missed-chart" in page
    # plotly.js is inline: no script, stylesheet, image or font is fetched from anywhere
    import re

    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=", page, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", page.split("<script", 1)[0], re.I)
    assert page.count("Plotly.newPlot") == 2


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_both_charts_draw_their_marks_in_headless_chromium(demo_table, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on this machine: .ci/run installs Debian's chromium package")
    out = tmp_path / "r.html"
    _report(demo_table.raw, "--out", str(out))
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000",
                          "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120).stdout
    import html.parser

    class Marks(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.chart, self.depth, self.points, self.lines = None, 0, {}, {}

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if a.get("id") in ("trib-delay-chart", "trib-missed-chart"):
                self.chart = a["id"]
            cls = (a.get("class") or "").split()
            if self.chart and tag == "path" and "point" in cls and a.get("d"):
                self.points[self.chart] = self.points.get(self.chart, 0) + 1
            if self.chart and tag == "path" and "js-line" in cls and len(a.get("d") or "") > 20:
                self.lines[self.chart] = self.lines.get(self.chart, 0) + 1
            if self.chart and tag == "canvas":
                self.canvases[self.chart] = self.canvases.get(self.chart, 0) + 1

    p = Marks()
    p.canvases = {}
    p.feed(dom)
    # plotly.js came out of its gzip in the browser and drew both charts: the delay chart's per-partition
    # p50 / p99 / worst lines in SVG, its file points on WebGL canvases; the missed curve and its marks.
    assert p.lines.get("trib-delay-chart", 0) >= 3 and p.canvases.get("trib-delay-chart", 0) >= 1, \
        (p.lines, p.canvases, dom[:500])
    assert p.lines.get("trib-missed-chart", 0) >= 1 and p.points.get("trib-missed-chart", 0) >= 6, (p.lines, p.points)
    n = len(demo_table.mix.drops)
    page = out.read_text()
    assert page.count('"type":"scattergl"') >= 1 and f"{n:,}" in page  # every file is in the sample below 2,000


def test_the_page_stays_small_at_a_million_files():
    """Issue 26 item 7: per-partition aggregates and a bounded sample, not a point per file."""
    from tributary_read.report.html import MAX_POINTS, MAX_ROWS, render, sample
    from tributary_read.report.lateness import Arrival, LatenessReport, lag_for, missed

    hour = 3_600_000
    t0 = 1_704_067_200_000
    arrivals = tuple(Arrival(f"2024/{i % 2000:05d}/part-{i:07d}.jsonl", f"dt={i % 2000:05d}", t0 + (i % 2000) * hour,
                             t0 + (i % 2000 + 1) * hour, t0 + (i % 2000 + 1) * hour + (i * 7919) % (30 * hour) - hour,
                             "mtime", 100)
                     for i in range(1_000_000))
    report = LatenessReport("file:///big", arrivals, tuple(missed(arrivals, lag) for lag in (0, hour)),
                            {"p99": lag_for(arrivals, 0.99)})
    drawn = sample(report.arrivals)
    assert len(drawn) == MAX_POINTS and max(a.delay_ms for a in drawn) == max(a.delay_ms for a in arrivals)
    page = render(report)
    assert len(page.encode()) < 2_500_000, len(page)
    assert page.count("<tr><td>dt=") == MAX_ROWS and "1,800 more partitions" in page


def test_a_hostile_file_name_shows_as_text_in_the_report(tmp_path):
    """Issue 25, Why 11: file names went unescaped into plotly's hover text, which plotly renders as HTML."""
    import os

    d = tmp_path / "land" / "2024_01_01" / "05"
    d.mkdir(parents=True)
    hostile = d / "<script>alert(1)<\\script><img src=x onerror=alert(2)>.log"
    hostile.write_text("x\n")
    os.utime(hostile, ns=(1_704_088_800_000 * 1_000_000,) * 2)
    out = tmp_path / "r.html"
    p = invoke_trib("report", "lateness", str(tmp_path / "land"), "--layout", "{yyyy}_{MM}_{dd}/{HH}",
                    "--out", str(out), "--json")
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert "&lt;script&gt;alert(1)" in page  # shown as text
    assert "<script>alert(1)" not in page and "<img src=x" not in page
