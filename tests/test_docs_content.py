"""What the docs must say, checked against the code that decides it (issue 26, Why 3).

A user copies from the docs. A metastore scheme the code accepts but the job
reference leaves out, or a Hive quick start that writes DDL by hand while a
command does it, sent a new user the long way round.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tributary_read.hive.uri import MetastoreKind

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_job_references_metastore_row_names_every_kind_the_parser_takes():
    row = next(line for line in (DOCS / "etl.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `metastore` |"))
    for kind in MetastoreKind:
        shown = f"`{kind.value}`" if kind is MetastoreKind.SPARK else f"`{kind.value}://"
        assert shown in row, f"docs/etl.md's [hive] metastore row does not name {kind.value}: {row}"


def test_the_hive_quick_start_uses_the_local_pair_and_create_table():
    text = (DOCS / "hive.md").read_text(encoding="utf-8")
    quick = re.search(r"```sh\n(.*?)```", text, re.S).group(1)  # the first block: the quick start
    assert "trib hive up" in quick
    assert "trib hive create-table" in quick
    assert not re.search(r"CREATE\s+EXTERNAL\s+TABLE", quick, re.I), "the quick start writes DDL by hand"


def _included(page: Path) -> list[Path]:
    """The files a page pulls in with pymdownx.snippets (``--8<-- "PATH"``, PATH from the repository root,
    mkdocs.yml's base_path): they render on the site as the page's own text."""
    return [DOCS.parent / m.group(1)
            for m in re.finditer(r'^\s*-{1,}8<-{1,}\s+"([^"]+)"', page.read_text(encoding="utf-8"), re.M)]


def test_no_user_facing_page_names_an_internal_issue_number():
    """Users never saw the tracker: history goes in CHANGELOG.md, and the docs say what is true now. The files the
    site includes (benchmarks/results.md, CHANGELOG.md) are pages too."""
    pages = [DOCS.parent / "README.md", *sorted(DOCS.rglob("*.md"))]
    included = sorted({f for p in pages for f in _included(p)})
    assert {"benchmarks/results.md", "CHANGELOG.md"} <= {f.relative_to(DOCS.parent).as_posix() for f in included}
    found = [f"{p.relative_to(DOCS.parent)}:{n}: {line.strip()[:80]}"
             for p in pages + included for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bissues?[\s-]#?\d+\b|\bissue #\w+", line, re.I)]
    assert not found, "\n".join(found)


def test_the_job_file_reference_lists_exactly_the_keys_each_section_takes():
    """The job file's keys have one owner, tributary_read.etl.spec; the reference page lists exactly those."""
    from tributary_read.etl import spec

    owners = {"[job]": spec._JOB_KEYS, "[[inputs]]": spec._INPUT_KEYS, "[output]": spec._OUTPUT_KEYS,
              "[hive]": spec._HIVE_KEYS, "[spark]": spec._SPARK_KEYS, "[stream]": spec._STREAM_KEYS}
    shown = {}
    for line in (DOCS / "reference" / "job-file.md").read_text(encoding="utf-8").splitlines():
        cells = line.split("|")
        if len(cells) == 5 and cells[1].strip().startswith("`["):
            section = re.match(r"`(\[+\w+\]+)`", cells[1].strip()).group(1)
            shown[section] = set(re.findall(r"`(\w+)`", cells[2]))
    assert shown == owners
    assert set(spec._SECTIONS) == {s.strip("[]") for s in shown}


def test_the_benchmark_charts_are_the_pages_figures():
    """docs/charts/ holds what benchmarks/charts.py draws from docs/benchmarks.md's tables, and the page shows each:
    a figure changed in a table and not in its chart fails here (redrawing the four takes about a second)."""
    sys.path.insert(0, str(DOCS.parent / "benchmarks"))
    import charts

    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert {p.name for p in (DOCS / "charts").glob("bench-*.svg")} == set(charts.CHARTS)
    assert all(f"](charts/{name})" in page for name in charts.CHARTS), "the page shows every chart"
    assert charts.stale() == [], "a chart is not the page's figures: run .venv/bin/python benchmarks/charts.py"
    assert charts.number("**1.22**") == 1.22 and charts.number("1.39 M rec/s") == 1_390_000
    assert charts.number("2.3 s") == charts.number("2,300 ms") == 2300 and charts.lost_dup("**0 / 12**") == (0, 12)


def test_history_lives_in_the_changelog_not_in_the_guides():
    """A guide says what is true now; what changed for an older script is the changelog's Upgrading section."""
    pages = [DOCS.parent / "README.md", *sorted(DOCS.rglob("*.md"))]
    found = [f"{p.relative_to(DOCS.parent)}:{n}: {line.strip()[:80]}"
             for p in pages for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\*{1,2}(Changed|Upgrading)\b", line)]
    assert not found, "\n".join(found)
    assert "### Upgrading" in (DOCS.parent / "CHANGELOG.md").read_text(encoding="utf-8")
