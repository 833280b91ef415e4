"""kill -9 of a real `trib ingest` process at random moments, then resume to completion.

The final table must hold every source record exactly once, in the partition of
its event time, whatever instant each kill hit (mid-write, mid-commit, between
the commit and the renames of the rename protocol).
"""

from __future__ import annotations

import json
import random

import pytest

from tributary_read.io.storage import open_storage

from conftest import TRIB, invoke_trib, run_trib
from forkserver import ForkServer
from helpers import (
    LAYOUT, PARTITION, assert_exactly_once, committed_records, make_source, opened, signal_growing_source, snapshot,
    visible_records,
)

pytestmark = pytest.mark.integration


def _ingest_cmd(root, src, protocol, commit_every):
    return [*TRIB, "ingest", str(root), "--source", str(src), "--app-id", "etl",
            "--time-field", "ts", "--commit-every", str(commit_every), "--protocol", protocol]


def _check_table(root, n, protocol, env=None):
    """What the table holds, read in this process (the reads are not what the kills test)."""
    files = json.loads(invoke_trib("files", str(root), "--all", "--mode", "manifest", "--json", check=True,
                                   env=env).stdout)
    storage = open_storage(str(root))
    assert_exactly_once(committed_records(storage, files["files"]), n)
    v = invoke_trib("verify", str(root), env=env)
    assert v.returncode == 0, v.stdout + v.stderr
    rec = json.loads(invoke_trib("recover", str(root), "--app-id", "etl", "--json", check=True, env=env).stdout)
    assert rec["offsets"] == {"src.jsonl": n - 1}
    if protocol == "rename":
        # Hive reading the directories directly must also see each record once.
        assert_exactly_once(visible_records(storage), n)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["direct", "rename"])
def test_kill9_at_30_random_moments_local(tmp_path, protocol):
    n = 50_000
    src = make_source(tmp_path / "src.jsonl", n)
    root = tmp_path / "table"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    rng = random.Random(f"kill9-{protocol}")
    cmd = _ingest_cmd(root, src, protocol, commit_every=250)

    # From the moment the run opens its source (the interpreter's start-up before it lasts 0.3 s on an idle
    # machine and seconds on a loaded one): the kills land in reading, writing and committing.
    # Each run is a child of a fork server that has imported trib (tests/forkserver.py): a real process
    # killed by a real SIGKILL, without the cold interpreter's start-up per trial.
    with ForkServer() as fs:
        kills, n = signal_growing_source(cmd, src, n, 30, rng, window=(0.0, 0.6), started=opened(src),
                                         spawn=fs.spawn)
    assert kills >= 30, f"only {kills} kills landed"
    # Progress was made across the kills, so they hit the middle of the run. The last kill
    # may land after the last commit (the process was still exiting): a full log counts.
    log = json.loads(invoke_trib("log", str(root), "--json", check=True).stdout)["commits"]
    assert 0 < len(log) <= n // 250

    # The run to completion is not killed: without fsync (the page cache outlives a process), as the
    # source spreads each commit over ~48 hourly files and their fsyncs made it most of the test on CI.
    done = run_trib(*cmd[len(TRIB):], env={"TRIB_FSYNC": "false"})
    assert done.returncode == 0, done.stderr
    _check_table(root, n, protocol)
    # A further run is a no-op: nothing left to ingest, nothing duplicated, not a byte under ROOT changed
    # (so the checks above still hold, without reading the table's ~10,000 files again).
    before = snapshot(root)
    again = json.loads(run_trib(*cmd[len(TRIB):], "--json", check=True).stdout)
    assert again["records"] == 0 and again["commits"] == 0
    assert snapshot(root) == before


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.parametrize("protocol", ["direct", "rename"])
def test_kill9_against_s3_server(tmp_path, s3_root, s3_env, protocol):
    n = 3_000
    src = make_source(tmp_path / "src.jsonl", n, hours=6)
    invoke_trib("table", "create", s3_root, "--layout", LAYOUT, "--partition", PARTITION, check=True, env=s3_env)
    rng = random.Random(f"kill9-s3-{protocol}")
    cmd = _ingest_cmd(s3_root, src, protocol, commit_every=100)

    # As on the local FS, from the moment the run opens its source: a kill counted from the process start
    # landed in the interpreter's start-up on a loaded machine, and counted as a kill all the same. Up to
    # 2.5 s after it: a commit of 100 records is up to 7 requests to a server that shares this process's
    # GIL, and on a loaded machine 0.9 s did not reach the first commit of any of the 8 runs.
    with ForkServer(s3_env, preload=(*ForkServer.PRELOAD, "tributary_read.io.s3", "boto3")) as fs:
        kills, n = signal_growing_source(cmd, src, n, 8, rng, hours=6, window=(0.0, 2.5), started=opened(src),
                                         spawn=fs.spawn)
    assert kills >= 8
    log = json.loads(invoke_trib("log", s3_root, "--json", check=True, env=s3_env).stdout)["commits"]
    assert 0 < len(log) <= n // 100  # the kills hit the middle of the run
    done = run_trib(*cmd[len(TRIB):], env=s3_env)
    assert done.returncode == 0, done.stderr

    files = json.loads(invoke_trib("files", s3_root, "--all", "--json", check=True, env=s3_env).stdout)["files"]
    storage = open_storage(s3_root)
    assert_exactly_once(committed_records(storage, files), n)
    v = invoke_trib("verify", s3_root, env=s3_env)
    assert v.returncode == 0, v.stdout + v.stderr
    if protocol == "rename":
        assert_exactly_once(visible_records(storage), n)
