"""A restate job's file: ``[output] mode``, and which jobs trib can recompute exactly (etl/restate.py).

``trib etl check`` and ``trib etl run`` refuse the same jobs with the same line, before anything is
resolved; no Spark starts.
"""

from __future__ import annotations

import json

import pytest

from conftest import invoke_trib
from helpers import one_line_error
from tributary_read.etl.job import Job
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.unit

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"


def _job(tmp_path, *, mode: str | None = "restate", input_mode: str = "consumer", layout: bool = True,
         trib_input: bool = False, name: str = "agg"):
    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir(exist_ok=True)
    if trib_input and not (raw / "_tributary").exists():
        Table.create(str(raw), TableConfig(Layout(LAYOUT, "dt={yyyy}{MM}{dd}{HH}")))
    if not (out / "_tributary").exists():
        Table.create(str(out), TableConfig(Layout("{yyyy}_{MM}_{dd}", "dt={yyyy}{MM}{dd}"), format="parquet"))
    (tmp_path / f"{name}.sql").write_text("SELECT ts, count(DISTINCT user) AS users FROM raw GROUP BY ts\n")
    lines = ["[job]", f'name = "{name}"', f'sql = "{name}.sql"', "", "[[inputs]]", f'table = "{raw}"',
             'view = "raw"', f'mode = "{input_mode}"']
    if layout and not trib_input:
        lines.append(f'layout = "{LAYOUT}"')
    lines += ["", "[output]", f'table = "{out}"', 'time_column = "ts"']
    if mode is not None:
        lines.append(f'mode = "{mode}"')
    lines += ["", "[spark]", 'master = "local[1]"', ""]
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines))
    return path


def test_append_is_the_default_and_restate_is_parsed(tmp_path):
    assert Job.load(_job(tmp_path, mode=None)).output.mode == "append"
    job = Job.load(_job(tmp_path))
    assert job.output.mode == "restate" and job.to_json()["output"]["mode"] == "restate"


def test_an_unknown_mode_is_one_line(tmp_path):
    one_line_error(invoke_trib("etl", "check", _job(tmp_path, mode="overwrite")), 3, "output.mode", "'overwrite'",
                   "append, restate")


@pytest.mark.parametrize("trib_input", [False, True], ids=["plain-dir-with-layout", "trib-table"])
def test_a_consumer_input_laid_out_by_event_time_is_restatable(tmp_path, trib_input):
    r = invoke_trib("etl", "check", _job(tmp_path, trib_input=trib_input), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["mode"] == "restate"
    r = invoke_trib("etl", "check", _job(tmp_path, trib_input=trib_input))
    assert "recomputes the output partitions its new input touches" in r.stdout, r.stdout
    assert not list((tmp_path / "out" / "_tributary").glob(".swap-probe-*"))  # the probe leaves nothing
    if trib_input:  # a manifest window over a trib table: the commits of the window, exactly
        assert invoke_trib("etl", "check", _job(tmp_path, trib_input=True, input_mode="manifest")).returncode == 0


def test_what_trib_cannot_recompute_exactly_is_refused_by_check_and_run_alike(tmp_path):
    cases = [
        (_job(tmp_path, input_mode="mtime", name="win"), ("inputs[0] (raw) is an mtime window", 'mode = "consumer"')),
        (_job(tmp_path, layout=False, name="nolayout"), ("plain directory with no layout", "layout = ")),
    ]
    for path, words in cases:
        line = one_line_error(invoke_trib("etl", "check", path), 3, *words)
        assert 'keep mode = "append"' in line
        r = invoke_trib("etl", "run", path, "--schedule-time", "2026-11-28T06:00:00Z")
        assert one_line_error(r, 3) == line  # the same line, before anything is resolved
        assert not (tmp_path / "out" / "_tributary" / "consumers").exists()
    # an append job over the same inputs passes: it needs none of this
    assert invoke_trib("etl", "check", _job(tmp_path, mode="append", input_mode="mtime", name="app")).returncode == 0


def test_a_stream_job_cannot_restate(tmp_path):
    (tmp_path / "q.sql").write_text("SELECT * FROM stream\n")
    out = tmp_path / "out"
    Table.create(str(out), TableConfig(Layout(LAYOUT, "dt={yyyy}{MM}{dd}{HH}")))
    (tmp_path / "s.toml").write_text(
        f'[job]\nname = "s"\nsql = "q.sql"\n\n[stream]\nsource = "rate"\ncheckpoint = "{tmp_path / "cp"}"\n\n'
        f'[output]\ntable = "{out}"\ntime_column = "timestamp"\nmode = "restate"\n')
    one_line_error(invoke_trib("etl", "check", tmp_path / "s.toml"), 3, "output.mode restate is for trib etl run")


def test_restate_by_is_parsed_for_a_restate_job_only_and_move_needs_a_hive_section(tmp_path):
    """``restate_by = "move"`` on a local output takes the way of S3 and HDFS: without ``[hive]`` no directory
    reader would stay exact, refused in one line naming the ways out; an append job's restate_by is refused."""
    path = _job(tmp_path)
    path.write_text(path.read_text().replace('mode = "restate"', 'mode = "restate"\nrestate_by = "move"'))
    assert Job.load(path).to_json()["output"]["restate_by"] == "move"
    one_line_error(invoke_trib("etl", "check", path), 3, 'restate_by = "move"', "stale partitions",
                   "add a [hive] section", 'drop restate_by = "move"')
    path.write_text(path.read_text().replace('restate_by = "move"', 'restate_by = "swap"'))
    assert invoke_trib("etl", "check", path).returncode == 0  # a local file system swaps
    path.write_text(path.read_text().replace('mode = "restate"\n', ""))
    one_line_error(invoke_trib("etl", "check", path), 3, "output.restate_by is for a restate job")
