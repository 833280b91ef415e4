"""A rotating directory under real signals (issue 22, item 5): kill -9 at random moments of ``--follow``
while a logging process appends, rotates by rename, gzips and deletes; SIGTERM and SIGINT.

Every run ends with every line the logger wrote in the table exactly once, in the partition of its event
time, nothing reported lost, and ``trib verify`` exiting 0.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TRIB, run_trib
from test_spool import _table, exactly

pytestmark = pytest.mark.integration

WRITER = [sys.executable, str(Path(__file__).parent / "spool_writer.py")]
#: kill -9 landings wanted; TRIB_KILL_TRIALS raises it.
TRIALS = int(os.environ.get("TRIB_KILL_TRIALS", "20"))


def _follow(root, d) -> list[str]:
    return [*TRIB, "ingest", str(root), "--source-dir", str(d), "--pattern", "app.log*", "--app-id", "a",
            "--time-field", "ts", "--follow", "--commit-interval", "200ms", "--commit-every", "700",
            "--close-inactive", "1s"]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _drain(root, d) -> dict:
    """After the logger is done: a bounded run reads the rest and must find nothing lost."""
    p = run_trib("ingest", str(root), "--source-dir", str(d), "--pattern", "app.log*", "--app-id", "a",
                 "--time-field", "ts", "--close-inactive", "0s", "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_kill9_at_random_moments_of_follow_while_the_logger_rotates(tmp_path):
    root, d = _table(tmp_path, fmt="jsonl"), tmp_path / "logs"
    d.mkdir()
    rng = random.Random(22)
    lines = 24_000  # 20 s of a logger rotating every second and keeping ten rotations
    writer = subprocess.Popen([*WRITER, str(d), "--lines", str(lines), "--rate", "1200", "--rotate", "1200",
                               "--keep", "10"], stdout=subprocess.PIPE)
    kills, errors = 0, []
    try:
        while kills < TRIALS:
            p = subprocess.Popen(_follow(root, d), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
            time.sleep(rng.uniform(0.4, 1.6))  # a process takes about 0.6 s to start
            if p.poll() is not None:
                errors.append(p.stderr.read().decode())
                break
            p.send_signal(signal.SIGKILL)
            p.wait()
            err = p.stderr.read().decode()
            if "lost" in err:
                errors.append(err)
            p.stderr.close()
            kills += 1
    finally:
        assert writer.wait(timeout=120) == 0
    assert not errors, errors
    assert kills >= TRIALS
    r = _drain(root, d)
    assert r["lost"] == [], r
    exactly(root, lines)
    assert _drain(root, d)["records"] == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_make_a_clean_last_commit_and_exit_0(tmp_path, sig):
    root, d = _table(tmp_path, fmt="jsonl"), tmp_path / "logs"
    d.mkdir()
    lines = 6_000
    writer = subprocess.Popen([*WRITER, str(d), "--lines", str(lines), "--rate", "3000", "--rotate", "1000"],
                              stdout=subprocess.PIPE)
    p = subprocess.Popen([*_follow(root, d)[:-6], "--commit-interval", "60s", "--close-inactive", "1s", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    time.sleep(1.5)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    result = json.loads(out)
    assert result["stopped_by"] == signal.Signals(sig).name
    # The interval was a minute: what the run read reached the table only through its last commit.
    assert result["records"] > 0 and result["commits"] >= 1
    from tributary_read.table.config import Table

    committed = Table.load(str(root)).log.last_transaction("a").transaction.offsets["logs"] + 1
    assert committed == result["records_committed"] == result["records"]
    assert writer.wait(timeout=60) == 0
    _drain(root, d)
    exactly(root, lines)
