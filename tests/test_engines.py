"""Other engines read trib tables (issue 26, item 5): snappy Parquet by default, and docs/engines.md's examples run.

The DuckDB and pyarrow examples are extracted from docs/engines.md and run as
written on a scratch table made with ``trib table create`` and ``trib ingest``;
only the table's path is swapped for the scratch one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from conftest import REPO, invoke_trib
from helpers import BASE_MS, LAYOUT, PARTITION, make_source

pytestmark = pytest.mark.unit

DOC = REPO / "docs" / "engines.md"
DOC_ROOT = "/data/events"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _blocks(lang: str) -> list[str]:
    return [body for kind, body in _FENCE.findall(DOC.read_text(encoding="utf-8")) if kind == lang]


def _codecs(root) -> set[str]:
    files = sorted(root.rglob("*.parquet"))
    assert files
    return {pq.ParquetFile(f).metadata.row_group(0).column(0).compression for f in files}


def _table(tmp_path, *extra: str, name: str = "events"):
    root = tmp_path / name
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet",
                *extra, check=True)
    source = make_source(tmp_path / "src.jsonl", 300, hours=3)
    # Committed at 2020-06-24T01:30Z, so that the docs' window (01:00-01:59:59.999) holds the commit.
    skew = BASE_MS + 30 * 60_000 - int(time.time() * 1000)
    invoke_trib("ingest", str(root), "--source", str(source), "--app-id", "a", "--time-field", "ts",
                env={"TRIB_CLOCK_SKEW_MS": str(skew)}, check=True)
    return root


def test_a_new_parquet_table_is_snappy_and_compression_is_honoured(tmp_path):
    root = _table(tmp_path)
    shown = json.loads(invoke_trib("table", "show", str(root), "--json", check=True).stdout)
    assert shown["compression"] == "snappy"
    assert _codecs(root) == {"SNAPPY"}
    for codec, written in (("zstd", "ZSTD"), ("none", "UNCOMPRESSED"), ("gzip", "GZIP")):
        other = _table(tmp_path, "--compression", codec, name=f"events-{codec}")
        assert _codecs(other) == {written}, codec


def test_text_tables_stay_uncompressed_and_old_tables_keep_theirs(tmp_path):
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout

    text = invoke_trib("table", "create", str(tmp_path / "t"), "--layout", LAYOUT, "--partition", PARTITION,
                       "--json", check=True)
    assert json.loads(text.stdout)["compression"] == "none"
    assert TableConfig(Layout(LAYOUT, PARTITION), format="parquet").compression == "snappy"
    # A table.json written before the default changed (no key, or "none") reads back as it was.
    t = Table.create(str(tmp_path / "old"), TableConfig(Layout(LAYOUT, PARTITION), format="parquet",
                                                       compression="none"))
    assert Table.load(t.uri).config.compression == "none"


def test_the_docs_window_and_the_duckdb_and_pyarrow_examples_run(tmp_path):
    root = _table(tmp_path)
    shell = [line for block in _blocks("bash") for line in block.splitlines()
             if line.startswith(f"trib files {DOC_ROOT} ")]
    assert len(shell) == 1, shell
    args = shell[0].split(">")[0].split()[1:]
    args[args.index(DOC_ROOT)] = str(root)
    window = json.loads(invoke_trib(*args, check=True).stdout)
    assert (window["window"]["start"], window["window"]["end"]) == \
        ("2020-06-24T01:00:00.000+00:00", "2020-06-24T01:59:59.999+00:00")  # what the docs' comment says
    assert re.search(r"window \[2020-06-24T01:00, 2020-06-24T01:59:59\.999\]", "\n".join(_blocks("bash")))
    (tmp_path / "window.json").write_text(json.dumps(window))
    expected = {}
    for f in window["files"]:
        dt = f["partition"]["dt"]
        expected[dt] = expected.get(dt, 0) + f["records"]
    assert len(expected) > 1  # the window's one commit spans several partitions
    examples = [b for b in _blocks("python") if "window.json" in b]
    assert [("duckdb" in b, "pyarrow.dataset" in b) for b in examples] == [(True, False), (False, True)]
    for code in examples:
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        printed = eval(proc.stdout.strip())  # noqa: S307 - the example's own print of (dt, count) rows
        counts = {r["dt"]: r["dt_count"] for r in printed} if isinstance(printed[0], dict) else dict(printed)
        assert counts == expected, code[:40]
