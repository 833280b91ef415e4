"""Several real processes committing to one table at once: no commit lost or overwritten."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import REPO, TRIB, run_trib
from helpers import LAYOUT, PARTITION, make_source

from tributary_read.table.config import Table

pytestmark = pytest.mark.integration


def _run_concurrently(root, sources, env=None):
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([*TRIB, "ingest", str(root), "--source", str(src), "--app-id", f"app{i}",
                          "--time-field", "ts", "--commit-every", "1", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for i, src in enumerate(sources)
    ]
    outs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    return [json.loads(out) for out, _ in outs]


def _check_log(root, writers, per_writer, env=None):
    t = Table.load(str(root))
    latest = t.log.latest_version()
    assert latest == writers * per_writer
    commits = list(t.log.commits(0, latest))  # raises on any gap
    assert [c.version for c in commits] == list(range(1, latest + 1))
    by_app = {}
    for c in commits:
        by_app.setdefault(c.transaction.app_id, []).append(c.transaction.offsets[f"src{c.transaction.app_id[3:]}.jsonl"])
    assert sorted(by_app) == [f"app{i}" for i in range(writers)]
    for offsets in by_app.values():
        # Each app's commits appear in its own order, one per record, none lost.
        assert offsets == list(range(per_writer))
    state = t.log.state()
    assert sum(f.records for f in state.files.values()) == writers * per_writer
    assert run_trib("verify", str(root), env=env).returncode == 0


def test_four_processes_200_commits_each(tmp_path):
    root = tmp_path / "table"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION,
             "--checkpoint-interval", "50", check=True)
    sources = [make_source(tmp_path / f"src{i}.jsonl", 200, seed=i) for i in range(4)]
    results = _run_concurrently(root, sources)
    assert [r["commits"] for r in results] == [200] * 4
    _check_log(root, 4, 200)


@pytest.mark.s3
def test_four_processes_against_s3_server(tmp_path, s3_root, s3_env):
    run_trib("table", "create", s3_root, "--layout", LAYOUT, "--partition", PARTITION,
             "--checkpoint-interval", "10", check=True, env=s3_env)
    sources = [make_source(tmp_path / f"src{i}.jsonl", 25, seed=i) for i in range(4)]
    _run_concurrently(s3_root, sources, env=s3_env)
    _check_log(s3_root, 4, 25, env=s3_env)
