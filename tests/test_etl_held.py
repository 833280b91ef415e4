"""An hourly ETL whose input file is rewritten inside the lookback holds back that partition, not the job.

A file the job's consumer delivered is shrunk in place (a copytruncate that a collector then refills, an
export written again) while other hours receive new files. The run used to stop with exit 15 and commit
nothing, so every other hour waited for a person too. Now the run commits everything but the changed
partition, acks, and ends with PartitionsHeldError (exit 17) naming the file; the changed partition's new
file waits with it. ``trib consumer replay`` takes the change as it is, and the next run commits the
waiting file once. Runs are in-process on the session's Spark (``run_job``); replay and verify are the CLI.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import invoke_trib
from etl_data import LAY, assert_exactly_once, create_output_table, dt_of, hour_dir, output_rows, write_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

H = 3_600_000


def _put(root: Path, rel: str, ids: range, ts: int, age_ms: int = 600_000) -> Path:
    """A JSON-lines file of records ``ids`` at event time ``ts``, mtime ``age_ms`` ago (past any min_age)."""
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps({"id": i, "ts": ts, "msg": "m"}) + "\n" for i in ids))
    t = (int(time.time() * 1000) - age_ms) * 1_000_000
    os.utime(p, ns=(t, t))
    return p


def test_a_rewritten_input_holds_its_partition_and_the_rest_is_committed(spark, tmp_path):
    from tributary_read.errors import PartitionsHeldError
    from tributary_read.etl.job import Job
    from tributary_read.etl.run import run_job

    now = int(time.time() * 1000)
    hour = now - now % H
    a, b = hour - 4 * H, hour - 3 * H  # two hours inside the 7-day lookback
    raw, out = tmp_path / "raw", tmp_path / "out"
    create_output_table(out)
    job = Job.load(str(write_job(tmp_path / "job", name="held", raw=raw, out=out)))

    changed = _put(raw, f"{hour_dir(a)}/app.jsonl", range(0, 5), a + 1)
    run_job(job, a + H, spark=spark)
    assert sorted(i for i, _, _ in output_rows(out)) == list(range(5))

    changed.write_text(changed.read_text().splitlines(keepends=True)[0])  # shrunk in place after delivery
    t = (int(time.time() * 1000) - 300_000) * 1_000_000  # and settled: past the consumer's minimum age
    os.utime(changed, ns=(t, t))
    _put(raw, f"{hour_dir(a)}/beside.jsonl", range(100, 103), a + 2)  # new beside it: waits with its partition
    _put(raw, f"{hour_dir(b)}/next.jsonl", range(200, 204), b + 1)  # another hour: committed now
    with pytest.raises(PartitionsHeldError) as e:
        run_job(job, b + H, spark=spark)
    assert e.value.exit_code == 17 and "app.jsonl shrank" in str(e.value) and hour_dir(a) in str(e.value)
    assert "trib consumer replay" in str(e.value)
    assert sorted(i for i, _, _ in output_rows(out)) == [*range(5), *range(200, 204)]

    # Held until resolved: a run before the replay commits nothing of it and exits 17 again.
    with pytest.raises(PartitionsHeldError):
        run_job(job, b + 2 * H, spark=spark)
    p = invoke_trib("consumer", "replay", str(raw), "held", "--partition", hour_dir(a), "--execute")
    assert p.returncode == 0, p.stderr
    # A scheduler's task that failed with exit 17, cleared after the replay: its rerun finds its commit and
    # ends 0 (an Airflow task then emits the asset events of what it committed).
    again = run_job(job, b + H, spark=spark)
    assert again.already_committed and sorted(i for i, _, _ in output_rows(out)) == [*range(5), *range(200, 204)]
    run_job(job, b + 3 * H, spark=spark)
    expected = {(i, dt_of(ts)) for ids, ts in ((range(5), a), (range(100, 103), a), (range(200, 204), b))
                for i in ids}
    assert_exactly_once(output_rows(out), expected)
    assert invoke_trib("verify", str(out)).returncode == 0
    assert LAY.parse(hour_dir(a)).values["dt"] == dt_of(a)
