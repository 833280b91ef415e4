"""The lateness report as one self-contained HTML page: figures, two charts, the recommendation.

Charts are drawn by plotly.js, embedded in the page (no CDN, no network: the
page opens on an air-gapped laptop or as a CI artifact). Plotly is the
``report`` extra, imported only here.

The page's size must not follow the table's: a million files drawn as a million
SVG points made a page no browser opens comfortably. So the delay chart draws
every partition's p50, p99 and worst delay (SVG lines, binned beyond
:data:`MAX_PARTITION_POINTS` partitions) and the files only as a bounded sample
(:data:`MAX_POINTS`: the latest quarter always, every k-th of the rest) on WebGL;
the partition table shows the :data:`MAX_ROWS` latest partitions; ``--json``
has everything. plotly.js itself (4.8 MB) is embedded gzip-compressed
(1.5 MB, base64) and unpacked by the browser's DecompressionStream before the
charts are drawn.
"""

from __future__ import annotations

import html
from datetime import datetime, timezone

from tributary_read.errors import missing_extra
from tributary_read.report.lateness import LatenessReport, format_duration, missed_curve

#: The charts' DOM ids: a test finds their marks by them.
DELAY_CHART_ID = "trib-delay-chart"
MISSED_CHART_ID = "trib-missed-chart"

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1f2933; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.sub { color: #52606d; margin-top: 0; } .cards { display: flex; gap: 1rem; flex-wrap: wrap; }
.card { border: 1px solid #d9e2ec; border-radius: 8px; padding: 0.8rem 1.1rem; min-width: 10rem; }
.card b { display: block; font-size: 1.4rem; } .card span { color: #52606d; font-size: 0.85rem; }
table { border-collapse: collapse; font-size: 0.9rem; } td, th { padding: 0.25rem 0.8rem; text-align: right; }
th { border-bottom: 1px solid #9fb3c8; } td:first-child, th:first-child { text-align: left; }
.note { background: #fffbea; border-left: 4px solid #f0b429; padding: 0.5rem 0.8rem; margin: 0.4rem 0; }
.ok { background: #effcf6; border-left: 4px solid #3ebd93; padding: 0.5rem 0.8rem; }
"""


#: Per-file points the delay chart draws at most.
MAX_POINTS = 2_000
#: Partitions the delay chart draws one point each at most (beyond: bins of consecutive partitions).
MAX_PARTITION_POINTS = 3_000
#: Partition rows the page's table shows at most (those with the latest files); ``--json`` has them all.
MAX_ROWS = 200


def sample(arrivals, limit: int = MAX_POINTS) -> list:
    """At most ``limit`` files to draw: the latest quarter always, then every k-th of the rest (deterministic)."""
    if len(arrivals) <= limit:
        return list(arrivals)
    worst = sorted(range(len(arrivals)), key=lambda i: arrivals[i].delay_ms, reverse=True)[: limit // 4]
    taken = set(worst)
    rest = [i for i in range(len(arrivals)) if i not in taken]
    k = len(rest) / (limit - len(worst))
    return [arrivals[i] for i in sorted(worst + [rest[int(j * k)] for j in range(limit - len(worst))])]


def partition_points(parts: list[dict], limit: int = MAX_PARTITION_POINTS) -> tuple[list[dict], int]:
    """Each partition's delays, or bins of consecutive partitions when there are more than ``limit``
    (the bin's worst p99 and max, its partitions' median p50); and the partitions per point."""
    if len(parts) <= limit:
        return parts, 1
    k = -(-len(parts) // limit)
    out = []
    for i in range(0, len(parts), k):
        group = parts[i:i + k]
        p50s = sorted(p["delay_ms"]["p50"] for p in group)
        out.append({"start_ms": group[0]["start_ms"], "files": sum(p["files"] for p in group),
                    "delay_ms": {"p50": p50s[len(p50s) // 2], "p99": max(p["delay_ms"]["p99"] for p in group),
                                 "max": max(p["delay_ms"]["max"] for p in group)}})
    return out, k


def _plotly():
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
    except ImportError:
        raise missing_extra("plotly", "report") from None
    return go, pio


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def delay_figure(report: LatenessReport, parts: list[dict] | None = None):
    """Each partition's p50, p99 and worst delay (hours), and a bounded sample of files by arrival source."""
    go, _ = _plotly()
    fig = go.Figure()
    points, per = partition_points(report.partitions() if parts is None else parts)
    xs = [_when(p["start_ms"]) for p in points]
    binned = f" ({per} partitions a point)" if per > 1 else ""
    for key, label, color, dash in (("max", "worst delay", "#c62828", "solid"), ("p99", "p99 delay", "#8e44ad", "dot"),
                                    ("p50", "median delay", "#52606d", "dash")):
        fig.add_trace(go.Scatter(x=xs, y=[p["delay_ms"][key] / 3_600_000 for p in points], mode="lines",
                                 name=f"{label} per partition{binned}", line={"color": color, "width": 1.5,
                                                                              "dash": dash, "shape": "hv"}))
    drawn = sample(report.arrivals)
    note = "" if len(drawn) == report.files else f" (a sample: {len(drawn):,} of {report.files:,}, the latest included)"
    for source, label, color in (("commit", "files committed by trib (commit time)", "#2680c2"),
                                 ("mtime", "other tools' files (mtime)", "#e67e22")):
        arr = [a for a in drawn if a.source == source]
        if not arr:
            continue
        fig.add_trace(go.Scattergl(
            x=[_when(a.partition_start_ms) for a in arr], y=[a.delay_ms / 3_600_000 for a in arr],
            mode="markers", name=label + note, marker={"color": color, "size": 6, "opacity": 0.7},
            # a file name is data, not markup: plotly renders hover text as HTML (issue 25, Why 11)
            text=[f"{html.escape(a.path)}<br>delay {format_duration(a.delay_ms)}" for a in arr], hoverinfo="text+x"))
    fig.add_hline(y=0, line={"color": "#9fb3c8", "dash": "dot"})
    fig.update_layout(title="Arrival delay by partition (above 0: landed after its hour ended)",
                      xaxis_title="partition (UTC)", yaxis_title="delay after the partition's end (hours)",
                      template="plotly_white", height=430, legend={"orientation": "h", "y": -0.2},
                      margin={"t": 60, "l": 70, "r": 20, "b": 40})
    return fig


def missed_figure(report: LatenessReport):
    """Share of files a naive job misses against its lag, with the recommended lags marked."""
    go, _ = _plotly()
    curve = missed_curve(report.arrivals)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[lag / 3_600_000 for lag, _ in curve], y=[100 * s for _, s in curve],
                             mode="lines", name="missed by a job at end + lag", line={"color": "#c62828", "width": 3,
                                                                                      "shape": "hv"}))
    fig.add_trace(go.Scatter(x=[m.lag_ms / 3_600_000 for m in report.lags], y=[100 * m.share_files for m in report.lags],
                             mode="markers", name="evaluated lags (table below)",
                             marker={"color": "#1f2933", "size": 9},
                             text=[f"lag {format_duration(m.lag_ms)}: {100 * m.share_files:.1f}% missed" for m in report.lags],
                             hoverinfo="text"))
    marks: dict[int, list[str]] = {}
    for key, lag in report.recommended.items():
        if lag is not None:
            marks.setdefault(lag, []).append(key)
    for i, (lag, keys) in enumerate(sorted(marks.items())):  # p99 and p99.9 often agree: one line, one label
        fig.add_vline(x=lag / 3_600_000, line={"color": "#3ebd93", "dash": "dash"},
                      annotation_text=f"{' / '.join(k[1:] + '%' for k in keys)}: {format_duration(lag)}",
                      annotation_position="top left" if i == 0 and len(marks) > 1 else "top right")
    fig.update_layout(title="What a naive hourly job would miss, by its lag (a consumer misses 0%)",
                      xaxis_title="lag after the partition's end (hours)", yaxis_title="files missed (%)",
                      template="plotly_white", height=430, legend={"orientation": "h", "y": -0.2},
                      margin={"t": 60, "l": 70, "r": 20, "b": 40})
    return fig


def render(report: LatenessReport, title: str | None = None) -> str:
    """The whole page: plotly.js inline once, then both charts."""
    _, pio = _plotly()
    data = report.to_json()
    esc = html.escape
    title = title or f"Lateness of {report.table}"
    cards = [
        (f"{data['files']:,}", "files"),
        (f"{data['late_files']:,}", "landed after their hour ended"),
        (format_duration(data["delay_ms"]["max"]) if data["delay_ms"] else "-", "worst delay"),
    ]
    for key, rec in data["recommended_lag"].items():
        cards.append((rec["lag"] if rec else "-", f"lag that catches {key[1:]}% of files"))
    rows = ""
    for m in data["missed"]:
        records = "unknown" if m["records"] is None else f"{m['records']:,}"
        rows += (f"<tr><td>{esc(m['lag'])}</td><td>{m['files']:,}</td><td>{100 * m['share_files']:.2f}%</td>"
                 f"<td>{m['bytes']:,}</td><td>{records}</td></tr>")
    shown = sorted(sorted(data["partitions"], key=lambda p: p["delay_ms"]["max"], reverse=True)[:MAX_ROWS],
                   key=lambda p: p["start_ms"])
    parts = "".join(
        f"<tr><td>{esc(p['partition'])}</td><td>{p['files']}</td><td>{p['late_files']}</td>"
        f"<td>{esc(format_duration(p['delay_ms']['p50']))}</td><td>{esc(format_duration(p['delay_ms']['max']))}</td></tr>"
        for p in shown)
    more = len(data["partitions"]) - len(shown)
    if more:
        parts += (f'<tr><td colspan="5">… and {more:,} more partitions (the {len(shown)} with the latest files are '
                  "shown): <code>trib report lateness --json</code> lists them all</td></tr>")
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in data["notes"])
    charts = _charts({DELAY_CHART_ID: delay_figure(report, data["partitions"]), MISSED_CHART_ID: missed_figure(report)},
                     pio)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{esc(title)}</h1>
<p class="sub">Arrival = commit time for files trib committed, else the file's mtime; delay = arrival minus
the end of the file's partition. Generated by <code>trib report lateness</code>.</p>
<div class="cards">{''.join(f'<div class="card"><b>{esc(v)}</b><span>{esc(k)}</span></div>' for v, k in cards)}</div>
<p class="ok">{esc(data['consumer'][0].upper() + data['consumer'][1:])}.</p>
{notes}
<h2>Arrival delay</h2>
<div id="{DELAY_CHART_ID}" style="height:430px"></div>
<h2>What a naive job would miss</h2>
<div id="{MISSED_CHART_ID}" style="height:430px"></div>
<table><tr><th>lag</th><th>files missed</th><th>share</th><th>bytes missed</th><th>records missed</th></tr>{rows}</table>
<h2>Partitions</h2>
<table><tr><th>partition</th><th>files</th><th>late files</th><th>median delay</th><th>worst delay</th></tr>{parts}</table>
{charts}
</body></html>
"""


def _charts(figures: dict, pio) -> str:
    """plotly.js, gzip-compressed and base64-encoded in the page, unpacked by the browser; then each chart."""
    import base64
    import gzip
    import json
    from importlib import resources

    js = resources.files("plotly").joinpath("package_data/plotly.min.js").read_bytes()
    packed = base64.b64encode(gzip.compress(js, 9, mtime=0)).decode("ascii")
    draws = "\n".join(
        f"  Plotly.newPlot({json.dumps(div)}, fig.data, fig.layout, {{responsive: true}});".replace(
            "fig.", f"F[{json.dumps(div)}].")
        for div in figures)
    data = json.dumps({div: json.loads(pio.to_json(fig, validate=False)) for div, fig in figures.items()},
                      separators=(",", ":"))
    data = data.replace("</", "<\\/")  # no text in the data can close the script element
    return f"""<script type="application/octet-stream" id="trib-plotly-gz">{packed}</script>
<script>
(async function () {{
  const F = {data};
  const b64 = document.getElementById("trib-plotly-gz").textContent;
  const bytes = Uint8Array.from(atob(b64), function (c) {{ return c.charCodeAt(0); }});
  const code = await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  (0, eval)(code);
{draws}
}})();
</script>"""
