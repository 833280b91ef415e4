#!/usr/bin/env python
"""The benchmark page's charts, drawn from the page's own tables.

docs/benchmarks.md is the one source of its figures: each chart reads the
Markdown table it pictures (found by the text that leads into it), so a figure
is typed once, in the table, and a chart cannot disagree with it. The SVGs are
committed under docs/charts/ (the site serves them as they are: no plotting at
build time); tests/test_docs_content.py redraws them and fails when a table
changed and its chart did not::

    .venv/bin/python benchmarks/charts.py            # redraw docs/charts/bench-*.svg from docs/benchmarks.md
    .venv/bin/python benchmarks/charts.py --check    # exit 1 if a committed chart is not the page's figures

Where a chart helps: a figure against size (a flat line and a growing one read
at a glance on log axes), many ratios against one goal, and a grid of lost /
duplicated cells. The tables stay beside them with the exact numbers.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import textwrap
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "benchmarks.md"
OUT = REPO / "docs" / "charts"


# -- the page's tables ---------------------------------------------------------------------------------


def table(text: str, lead: str) -> list[dict[str, str]]:
    """The first Markdown table after the first line holding ``lead``: one dict per row, by header."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if lead in line), None)
    if start is None:
        raise ValueError(f"docs/benchmarks.md has no line with {lead!r}: its chart has nothing to draw")
    rows: list[list[str]] = []
    for line in lines[start:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    head, body = rows[0], rows[2:]  # rows[1] is the |---| line
    return [dict(zip(head, r)) for r in body]


_NUMBER = re.compile(r"(-?[\d,]*\.?\d+)\s*(M\b|ms\b|s\b)?")


def number(cell: str) -> float:
    """A cell's first number: ``**0.80**`` 0.8, ``126,077 rec/s`` 126077, ``1.39 M rec/s`` 1,390,000;
    ``134 ms`` and ``1.4 s`` both in milliseconds."""
    m = _NUMBER.search(cell.replace("*", ""))
    if not m:
        raise ValueError(f"no number in the cell {cell!r}")
    value = float(m.group(1).replace(",", ""))
    return value * {"M": 1e6, "s": 1000.0}.get(m.group(2) or "", 1.0)


def lost_dup(cell: str) -> tuple[int, int]:
    """``**32 / 0**`` -> (32, 0): files (or lines) lost and duplicated."""
    lost, dup = cell.replace("*", "").split("/")
    return int(lost), int(dup)


# -- the charts ----------------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    # The same figures give the same file: fixed ids, text kept as text (the browser's fonts, a small file).
    plt.rcParams.update({"svg.hashsalt": "trib-benchmarks", "svg.fonttype": "none", "font.size": 10,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    _plt().close(fig)
    return buf.getvalue()


def _size_chart(rows: list[dict[str, str]], x: str, series: dict[str, str], xlabel: str, title: str) -> str:
    """Milliseconds against table size, both axes logarithmic, one line per column in ``series``."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    from matplotlib.ticker import FuncFormatter, LogLocator

    xs = [number(r[x]) for r in rows]
    lines = {label: [number(r[col]) for r in rows] for label, col in series.items()}
    for label, ys in lines.items():
        ax.plot(xs, ys, marker="o", label=label)
    for i, xv in enumerate(xs):  # at each size, the lowest value's label goes under its point, the others over
        lowest = min(lines.values(), key=lambda ys: ys[i])[i]
        for ys in lines.values():
            below = ys[i] == lowest and len(lines) > 1
            ax.annotate(f"{ys[i]:,.0f} ms", (xv, ys[i]), textcoords="offset points", fontsize=8,
                        xytext=(6, -11 if below else 4))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(xs, [f"{v:,.0f}" for v in xs])
    ax.minorticks_off()
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("ms, log scale")
    ax.set_title(title, loc="left", fontsize=10)
    ax.legend(frameon=False, fontsize=9)
    return _svg(fig)


def iceberg(text: str) -> str:
    rows = table(text, "**Iceberg mirror** (")
    return _size_chart(rows, "trib commits",
                       {"trib iceberg sync, median": "sync, median", "its CPU time, median": "sync CPU, median",
                        "pyiceberg add_files, median": "`add_files`, median"},
                       "trib commits in the table", "One trib commit to Iceberg, as the table grows")


def etl_hive(text: str) -> str:
    rows = table(text, "**The hourly ETL run's Hive step as the table grows**")
    return _size_chart(rows, "partitions in the table", {"commit mount (default)": "commit mount",
                                                        "full sync": "full sync"},
                       "partitions in the table", "The hourly ETL run's Hive step, as the table grows")


def readers(text: str) -> str:
    """Files lost / duplicated per arrival pattern and reader: a red cell lost or duplicated something."""
    plt = _plt()
    rows = [r for r in table(text, "**Readers compared**") if r["files"]]
    names = [c for c in rows[0] if c not in ("arrival pattern", "files")]
    fig, ax = plt.subplots(figsize=(5.6, 0.4 * len(rows) + 1.0))
    for i, r in enumerate(rows):
        for j, name in enumerate(names):
            lost, dup = lost_dup(r[name])
            bad = lost or dup
            ax.add_patch(plt.Rectangle((j, i), 0.96, 0.9, color="#e8a39b" if bad else "#b9dcb4"))
            ax.text(j + 0.48, i + 0.45, f"{lost} / {dup}", ha="center", va="center", fontsize=9,
                    fontweight="bold" if bad else "normal")
    ax.set_xlim(0, len(names))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.48 for j in range(len(names))], [textwrap.fill(n, 11) for n in names])
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.45 for i in range(len(rows))],
                  [f"{r['arrival pattern']} ({r['files']})" for r in rows])
    ax.tick_params(length=0)
    for side in ("left", "bottom", "top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title("Files lost / duplicated (lines for the growing file), 50 hourly runs", loc="left",
                 fontsize=10, pad=42)
    return _svg(fig)


def ratios(text: str) -> str:
    """trib's throughput over its fair, fsynced baseline's, every row of the writer and Kafka tables."""
    plt = _plt()
    bars = [(f"writer: {r['format']}, {r['event-time order']}", number(r["trib / raw fsynced"]))
            for r in table(text, "**Writer** (`bench_writer.py`")]
    bars += [(f"trib ingest --kafka: {r['format']}", number(r["trib / fsynced"]))
             for r in table(text, "**Kafka ingest** (")]
    fig, ax = plt.subplots(figsize=(6.4, 0.36 * len(bars) + 1.0))
    ys = range(len(bars))
    ax.barh(ys, [v for _, v in bars], color=["#4c78a8" if v >= 0.95 else "#e45756" for _, v in bars])
    for y, (_, v) in zip(ys, bars):
        ax.text(v + 0.02, y, f"{v:.2f}", va="center", fontsize=8)
    ax.set_yticks(list(ys), [name for name, _ in bars])
    ax.invert_yaxis()
    ax.axvline(1.0, color="#555", lw=0.8)
    ax.axvline(0.95, color="#555", lw=0.8, ls="--")
    ax.annotate("goal 0.95", xy=(0.95, 0), xycoords=("data", "axes fraction"), xytext=(-3, 3),
                textcoords="offset points", ha="right", fontsize=8)
    ax.set_xlabel("trib's throughput / the fsynced baseline's (same run)")
    ax.set_title("Throughput against a baseline doing the same work", loc="left", fontsize=10)
    return _svg(fig)


#: file name -> how it is drawn from the page's text
CHARTS: dict[str, Callable[[str], str]] = {"bench-iceberg.svg": iceberg, "bench-etl-hive.svg": etl_hive,
                                           "bench-readers.svg": readers, "bench-ratios.svg": ratios}


def render(text: str | None = None) -> dict[str, str]:
    """Every chart as SVG text, from the page as it is now."""
    text = PAGE.read_text(encoding="utf-8") if text is None else text
    return {name: draw(text) for name, draw in CHARTS.items()}


def stale() -> list[str]:
    """The committed charts that are not what the page's figures draw now."""
    return [name for name, svg in render().items()
            if not (OUT / name).exists() or (OUT / name).read_text(encoding="utf-8") != svg]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only check that the committed charts are current")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale()
        for name in bad:
            print(f"docs/charts/{name} is not the page's figures: run .venv/bin/python benchmarks/charts.py",
                  file=sys.stderr)
        return 1 if bad else 0
    OUT.mkdir(exist_ok=True)
    for name, svg in render().items():
        (OUT / name).write_text(svg, encoding="utf-8")
        print(f"docs/charts/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
