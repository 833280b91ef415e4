"""The lateness report as one self-contained HTML page: figures, two charts, the recommendation.

Charts are drawn by plotly.js, embedded whole in the page (no CDN, no network:
the page opens on an air-gapped laptop or as a CI artifact). Plotly is the
``report`` extra, imported only here.
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


def _plotly():
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
    except ImportError:
        raise missing_extra("plotly", "report") from None
    return go, pio


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def delay_figure(report: LatenessReport):
    """Arrival delay (hours) of every file against its partition's start, one trace per arrival source."""
    go, _ = _plotly()
    fig = go.Figure()
    for source, label, color in (("commit", "committed by trib (commit time)", "#2680c2"),
                                 ("mtime", "other tools' files (mtime)", "#e67e22")):
        arr = [a for a in report.arrivals if a.source == source]
        if not arr:
            continue
        fig.add_trace(go.Scatter(
            x=[_when(a.partition_start_ms) for a in arr], y=[a.delay_ms / 3_600_000 for a in arr],
            mode="markers", name=label, marker={"color": color, "size": 7, "opacity": 0.75},
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
    parts = "".join(
        f"<tr><td>{esc(p['partition'])}</td><td>{p['files']}</td><td>{p['late_files']}</td>"
        f"<td>{esc(format_duration(p['delay_ms']['p50']))}</td><td>{esc(format_duration(p['delay_ms']['max']))}</td></tr>"
        for p in data["partitions"])
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in data["notes"])
    delay_div = pio.to_html(delay_figure(report), full_html=False, include_plotlyjs=True, div_id=DELAY_CHART_ID)
    missed_div = pio.to_html(missed_figure(report), full_html=False, include_plotlyjs=False, div_id=MISSED_CHART_ID)
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
{delay_div}
<h2>What a naive job would miss</h2>
{missed_div}
<table><tr><th>lag</th><th>files missed</th><th>share</th><th>bytes missed</th><th>records missed</th></tr>{rows}</table>
<h2>Partitions</h2>
<table><tr><th>partition</th><th>files</th><th>late files</th><th>median delay</th><th>worst delay</th></tr>{parts}</table>
</body></html>
"""
