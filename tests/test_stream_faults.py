"""Issue 23: kill -9 of a streaming driver (the Python process and its JVM) at random moments of its
micro-batches, then a restart from the same checkpoint: every input record in the table exactly once,
and ``trib verify`` exits 0.

The kills land after a random number (1 or 2) of batches began in the run, at a random delay into it: during
the Spark tasks, during the commit, and between the commit and Spark's own checkpoint commit (the batch
Spark then runs again, which the sink must skip).
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from conftest import REPO, invoke_trib
from helpers import LAYOUT, PARTITION

from tributary_read.table.config import Table

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

T0 = 1_592_960_400_000
TRIALS = int(os.environ.get("TRIB_KILL_TRIALS_STREAM", "10"))
FILES, PER = 40, 50
SEED = int(os.environ.get("TRIB_KILL_SEED", "23"))


def _lines(p: subprocess.Popen) -> queue.Queue:
    q: queue.Queue = queue.Queue()

    def pump():
        for line in p.stdout:
            q.put(line.decode().strip())
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _run(cmd, env, rng, kill: bool) -> tuple[bool, list[str]]:
    """Run the driver; with ``kill``, SIGKILL its process group a random moment into a random batch."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    out = _lines(p)
    seen: list[str] = []
    # The first batch of a restart is Spark's re-run of the batch the last kill interrupted, if that one had
    # no checkpoint commit yet (the sink skips it if trib committed it); the second is a fresh batch. A third
    # adds no other kind of moment, only a batch of time per trial.
    begins_wanted = rng.randint(1, 2)
    begins = 0
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            try:
                line = out.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            seen.append(line)
            if kill and line.startswith("begin"):
                begins += 1
                if begins >= begins_wanted:
                    time.sleep(rng.uniform(0.0, 2.5))
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
                        return True, seen
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    err = p.stderr.read().decode()
    assert p.returncode == 0, f"the driver failed: {err[-3000:]}"
    return False, seen


def test_kill9_of_the_streaming_driver_then_restart_from_its_checkpoint_is_exactly_once(tmp_path):
    rng = random.Random(SEED)
    print(f"kill moments from random.Random({SEED}) (TRIB_KILL_SEED)")
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    inbox = tmp_path / "in"
    inbox.mkdir()
    for k in range(FILES):  # each file's records over three hours, some late
        rows = [{"id": k * PER + i, "ts": T0 + (k * PER + i) * 5_000 - (7_200_000 if i % 17 == 0 else 0)}
                for i in range(PER)]
        (inbox / f"f{k:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = [sys.executable, str(REPO / "tests" / "stream_driver.py"), str(root), str(inbox), str(tmp_path / "ck")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    for var in ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR"):
        env.pop(var, None)
    hits = 0
    for _ in range(TRIALS * 3):
        if hits >= TRIALS:
            break
        hit, seen = _run(cmd, env, rng, kill=True)
        hits += hit
        print(f"run: {'killed' if hit else 'finished'} after {seen[-3:]}")
        if not hit:  # the input ran out before the kill: more files, as a live feed would bring
            base = FILES + hits * 10
            for k in range(base, base + 10):
                rows = [{"id": 100_000 + k * PER + i, "ts": T0 + i * 60_000} for i in range(PER)]
                (inbox / f"g{k:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert hits >= TRIALS, f"only {hits} kills landed while the driver ran"
    # The restart from the last kill's checkpoint drains the rest in one batch (after Spark's re-run of
    # the interrupted batch): one file a batch is for the kills, and at the end would only cost time.
    hit, seen = _run([*cmd, "1000"], env, rng, kill=False)
    assert "finished" in seen
    want = Counter(json.loads(line)["id"] for f in inbox.iterdir() for line in f.read_text().splitlines())
    table = Table.load(str(root))
    got = Counter(json.loads(line)["id"] for f in table.log.state().files.values()
                  for line in (root / f.path).read_text().splitlines())
    twice = {i: n for i, n in got.items() if n > 1}
    assert not twice, f"{len(twice)} records twice, e.g. {list(twice)[:5]}"
    assert got == want, f"{len(set(want) - set(got))} records lost"
    v = invoke_trib("verify", str(root), "--json")
    assert v.returncode == 0, v.stdout + v.stderr
