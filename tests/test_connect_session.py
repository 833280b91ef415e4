"""A job's runs on a Spark Connect server keep one server session, as a new one would see it.

A server starts a Python daemon and workers for each client session, which the session's first Python
task (trib's write) waits for: seconds on a small machine, most of a warm hourly run. So a run that holds
the job's lock attaches to the session the job's last run used (its id is a note in the lock file), after
clearing what that run left: an operation still running (a killed run's write), its temporary views, its
runtime conf. Each check here is what a kept session would get wrong without the clearing, through real
``trib etl run`` processes on the suite's server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_trib
from etl_data import H, LAY, assert_exactly_once, create_output_table, dt_of, output_rows, write_job

pytestmark = pytest.mark.integration

SQL = "SELECT id, ts, msg, current_timezone() AS tz FROM raw\n"
ZONE = "Pacific/Chatham"  # no server's default: a run that sees it was given it


def _land(raw: Path, hour: int, n: int, first_id: int) -> set[tuple[int, str]]:
    d = raw / LAY.for_time(hour).path
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"part-{first_id}.jsonl"
    path.write_text("".join(json.dumps({"id": first_id + i, "ts": hour + i * 7 % H, "msg": "m"}) + "\n"
                            for i in range(n)))
    old = time.time() - 600
    os.utime(path, (old, old))
    return {(first_id + i, dt_of(hour + i * 7 % H)) for i in range(n)}


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms // 1000))


def _session(out: Path, job: str) -> str:
    """The session id the job's lock file notes (the last run's)."""
    text = (out / "_tributary" / "etl" / f"{job}.lock").read_text()
    return next(line.split()[-1] for line in text.splitlines() if line.startswith("spark_connect_session="))


def _zones(out: Path) -> dict[int, str]:
    """id -> the session time zone the run that wrote the row ran in (the SQL's ``tz`` column)."""
    import pyarrow.parquet as pq

    files = json.loads(run_trib("files", str(out), "--all", "--mode", "manifest", "--json", check=True).stdout)
    zones: dict[int, str] = {}
    for f in files["files"]:
        t = pq.read_table(out / f["path"], columns=["id", "tz"])
        zones.update(zip(t.column("id").to_pylist(), t.column("tz").to_pylist()))
    return zones


def test_a_jobs_runs_keep_one_session_and_each_sees_it_new(tmp_path, spark_connect):
    url = spark_connect.remote
    raw, out = tmp_path / "raw", tmp_path / "out"
    create_output_table(out)
    now = int(time.time() * 1000)
    h0 = now - now % H - 6 * H
    job = write_job(tmp_path / "job", name="kept", raw=raw, out=out, sql=SQL)
    head = job.read_text().split("[spark]")[0]

    def spark(conf: str = "") -> None:
        job.write_text(head + f'[spark]\nremote = "{url}"\n' + (f"conf = {{ {conf} }}\n" if conf else ""))

    def run(k: int) -> subprocess.CompletedProcess:
        return run_trib("etl", "run", job, "--schedule-time", _iso(h0 + (k + 1) * H))

    # run 0 sets a time zone; its session is noted for the next run
    want = _land(raw, h0, 300, 0)
    spark(f'"spark.sql.session.timeZone" = "{ZONE}"')
    r = run(0)
    assert r.returncode == 0, r.stderr[-3000:]
    first = _session(out, "kept")

    # run 1: the job no longer has view raw (now fresh), its SQL still reads raw. A new session has no raw;
    # the kept one had run 0's, over run 0's files: reading it would deliver them twice. The run must fail.
    one = _land(raw, h0 + H, 300, 1000)
    job.write_text(job.read_text().replace('view = "raw"', 'view = "fresh"'))
    r = run(1)
    assert r.returncode != 0 and "raw" in r.stderr, (r.returncode, r.stderr[-3000:])
    assert_exactly_once(output_rows(out), want)  # nothing of run 1 committed, run 0's rows once
    assert _session(out, "kept") == first

    # run 1 again, mended, without the time zone: the same session, its conf back at the server's default
    job.write_text(job.read_text().replace('view = "fresh"', 'view = "raw"'))
    spark()
    r = run(1)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _session(out, "kept") == first, "the second run did not keep the job's session"
    want |= one
    zones = _zones(out)
    assert {zones[i] for i in range(300)} == {ZONE}
    assert ZONE not in {zones[i] for i in range(1000, 1300)}, "a conf the job dropped stayed set in its session"

    # the server closes the session (a release; an idle timeout does the same): the next run takes a new one
    closer = ("import sys\nfrom pyspark.sql import SparkSession\n"
              "SparkSession.builder.remote(sys.argv[1] + '/;session_id=' + sys.argv[2]).create().stop()\n")
    subprocess.run([sys.executable, "-c", closer, url, first], check=True, capture_output=True, timeout=120)
    want |= _land(raw, h0 + 2 * H, 300, 2000)
    r = run(2)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _session(out, "kept") != first
    assert_exactly_once(output_rows(out), want)
    assert run_trib("verify", out).returncode == 0
