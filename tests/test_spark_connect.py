"""A warm Spark for ``trib etl run``: ``trib spark up|status|down`` and runs on a Spark Connect server.

The runs are real ``trib etl run`` processes, thin clients of the session's one server (the
``spark_connect`` fixture); the kill test SIGKILLs them while the server executes their write and checks
that a rerun commits every record once. ``TRIB_CONNECT_KILL_TRIALS`` sets its number of kills (default 3).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, TRIB, invoke_trib, run_trib
from etl_data import H, LAY, assert_exactly_once, create_output_table, dt_of, output_rows, write_job


def _hour_ms(hours_back: int) -> int:
    now = int(time.time() * 1000)
    return now - now % H - hours_back * H


def _land(raw: Path, hour: int, n: int, first_id: int) -> set[tuple[int, str]]:
    """``n`` records of ``hour`` in one jsonl file of its directory, written a while ago (past min_age)."""
    d = raw / LAY.for_time(hour).path
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"part-{first_id}.jsonl"
    path.write_text("".join(json.dumps({"id": first_id + i, "ts": hour + i * 7 % H, "msg": "m" * 40}) + "\n"
                            for i in range(n)))
    old = time.time() - 600
    os.utime(path, (old, old))
    return {(first_id + i, dt_of(hour + i * 7 % H)) for i in range(n)}


def _job(tmp: Path, name: str, remote: str | None, **kw) -> Path:
    """An hourly consumer job of ``tmp/raw`` into ``tmp/out``; ``remote``: its ``[spark] remote`` (None: no
    [spark] section, so the environment decides)."""
    raw, out = tmp / "raw", tmp / "out"
    raw.mkdir(exist_ok=True)
    if not out.exists():
        create_output_table(out)
    path = write_job(tmp, name=name, raw=raw, out=out, **kw)
    text = path.read_text().split("[spark]")[0]
    path.write_text(text + (f'[spark]\nremote = "{remote}"\nconf = {{ "spark.sql.shuffle.partitions" = "2" }}\n'
                            if remote else ""))
    return path


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


# -- refused before anything runs (no Spark) --------------------------------------------------


@pytest.mark.unit
def test_check_refuses_what_needs_a_classic_driver(tmp_path, monkeypatch):
    monkeypatch.delenv("TRIB_SPARK_REMOTE", raising=False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    job = _job(tmp_path, "hourly", "sc://127.0.0.1:1", hive_table="db.t", metastore="spark")
    r = invoke_trib("etl", "check", job)
    assert r.returncode == 3, r.stderr
    assert "[hive] metastore = spark" in r.stderr and "classic driver" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    # trib etl run refuses it the same way, before resolving anything (the consumer has no plan)
    r = invoke_trib("etl", "run", job, "--schedule-time", _iso(_hour_ms(0)))
    assert r.returncode == 3 and "classic driver" in r.stderr, r.stderr
    assert "resolving" not in r.stderr

    job = _job(tmp_path, "conf", "sc://127.0.0.1:1")
    job.write_text(job.read_text().replace('"2" }', '"2", "spark.driver.memory" = "2g" }'))
    r = invoke_trib("etl", "check", job)
    assert r.returncode == 3 and "spark.driver.memory" in r.stderr, r.stderr

    plain = _job(tmp_path, "plain", None)
    r = invoke_trib("etl", "check", plain, env={"TRIB_SPARK_REMOTE": "http://x:1"})
    assert r.returncode == 3 and "$TRIB_SPARK_REMOTE" in r.stderr and "sc://HOST:PORT" in r.stderr, r.stderr
    r = invoke_trib("etl", "check", plain, env={"SPARK_REMOTE": "sc://127.0.0.1:1"})
    assert r.returncode == 0 and "Spark Connect server sc://127.0.0.1:1" in r.stdout, r.stdout
    classic = write_job(tmp_path, name="classic", raw=tmp_path / "raw", out=tmp_path / "out")  # master local[2]
    r = invoke_trib("etl", "check", classic, env={"SPARK_REMOTE": "sc://127.0.0.1:1"})
    assert r.returncode == 0 and "a classic driver (local[2])" in r.stdout, r.stdout  # the job's master wins
    both = _job(tmp_path, "both", "sc://127.0.0.1:1")
    both.write_text(both.read_text().replace("[spark]\n", '[spark]\nmaster = "local[2]"\n'))
    r = invoke_trib("etl", "check", both)
    assert r.returncode == 3 and "spark.remote" in r.stderr and "spark.master" in r.stderr, r.stderr


# -- the server ---------------------------------------------------------------------------------


def test_spark_up_is_idempotent_uses_the_hive_pair_and_down_stops_it(tmp_path, hive_services):
    from tributary_read.processes import pid_alive

    d = tmp_path / "spark"
    args = ("--dir", d, "--hive-dir", hive_services.dir)
    try:
        up = invoke_trib("spark", "up", *args, "--port", "0", "--json", check=True)
        s = json.loads(up.stdout)
        assert not s["already_running"] and s["metastore_uri"] == hive_services.metastore_uri
        assert "starting a Spark Connect server" in up.stderr
        again = json.loads(invoke_trib("spark", "up", *args, "--json", check=True).stdout)
        assert again["already_running"] and again["pid"] == s["pid"] and again["port"] == s["port"]
        assert invoke_trib("spark", "status", "--dir", d).returncode == 0
        # the server's catalog is the pair's metastore: a database made through HiveServer2 is there
        from etl_data import Hs2

        Hs2(hive_services).execute("CREATE DATABASE IF NOT EXISTS connect_probe")
        probe = subprocess.run(
            [sys.executable, "-c", "import sys; from pyspark.sql import SparkSession; "
             "s = SparkSession.builder.remote(sys.argv[1]).create(); "
             "print([r[0] for r in s.sql('SHOW DATABASES').collect()])", s["remote"]],
            capture_output=True, text=True, timeout=120)
        assert "connect_probe" in probe.stdout, probe.stderr[-2000:]
    finally:
        down = invoke_trib("spark", "down", "--dir", d, "--json")
    assert down.returncode == 0 and json.loads(down.stdout)["was_alive"], down.stdout
    assert not pid_alive(s["pid"])
    assert invoke_trib("spark", "status", "--dir", d).returncode == 8
    assert "nothing was running" in invoke_trib("spark", "down", "--dir", d, check=True).stdout


# -- hourly runs on the server --------------------------------------------------------------------


def test_hourly_runs_on_the_server(tmp_path, spark_connect, hive_services):
    url = spark_connect.remote
    expected = set()
    h0 = _hour_ms(3)
    expected |= _land(tmp_path / "raw", h0, 500, 0)
    job = _job(tmp_path, "hourly", url, hive_table="default.connect_hourly", metastore=hive_services.metastore_uri)
    job.write_text(job.read_text().replace('metastore = "thrift', 'create = true\nmetastore = "thrift'))
    # a dry run with a Hive table to check: Spark only for the SQL's columns, and it says so
    dry = run_trib("etl", "run", job, "--schedule-time", _iso(h0 + H), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "connecting to the Spark Connect server" in dry.stderr and "Hive table check" in dry.stderr
    r = run_trib("etl", "run", job, "--schedule-time", _iso(h0 + H), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "connecting to the Spark Connect server" in r.stderr and "starting Spark" not in r.stderr
    assert json.loads(r.stdout)["hive"]["added"], r.stdout
    assert_exactly_once(output_rows(tmp_path / "out"), expected)
    assert run_trib("verify", tmp_path / "out").returncode == 0


# -- exactly once when the client is killed while the server writes ---------------------------------


class _Run:
    """A ``trib etl run`` process; ``writing`` is set once it has handed the write to the server."""

    def __init__(self, job: Path, when: str, remote: str):
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "TRIB_SPARK_REMOTE": remote}
        self.proc = subprocess.Popen([*TRIB, "etl", "run", str(job), "--schedule-time", when], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.writing = threading.Event()
        self.err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)
            if "running the SQL and committing" in line:
                self.writing.set()


def _committed(out: Path, job: str, hour_end: int) -> bool:
    from tributary_read.etl.job import app_id
    from tributary_read.etl.record import find_commit
    from tributary_read.table.config import Table

    return find_commit(Table.load(str(out)), app_id(job), hour_end) is not None


def test_kill9_while_the_server_writes_then_rerun_is_exactly_once(tmp_path, spark_connect):
    trials = int(os.environ.get("TRIB_CONNECT_KILL_TRIALS", "3"))
    rng = random.Random(int(os.environ.get("TRIB_TEST_SEED", "47")))
    url = spark_connect.remote
    job = _job(tmp_path, "killed", None)  # no [spark]: $TRIB_SPARK_REMOTE picks the server
    expected, mid_write = set(), 0
    for k in range(trials):
        hour = _hour_ms(trials + 2 - k)
        expected |= _land(tmp_path / "raw", hour, 10_000, k * 100_000)
        when = _iso(hour + H)
        run = _Run(job, when, url)
        assert run.writing.wait(120), "".join(run.err)[-3000:]
        time.sleep(rng.uniform(0.0, 1.0))  # somewhere in the server's write (or, rarely, after it)
        os.killpg(run.proc.pid, signal.SIGKILL)
        run.proc.wait(30)
        landed = not _committed(tmp_path / "out", "killed", hour + H)
        mid_write += landed
        # the rerun goes while the dead run's tasks may still be writing on the server; after a kill that
        # landed past the commit it finds the commit and needs no server
        r = run_trib("etl", "run", job, "--schedule-time", when, env={"TRIB_SPARK_REMOTE": url})
        assert r.returncode == 0, r.stderr[-3000:]
        assert (f"server {url}" if landed else "already committed") in r.stderr, r.stderr[-3000:]
    assert mid_write, "no kill landed before the commit: the write was too short to test anything"
    # let the dead runs' tasks finish on the server: what they staged must stay out of every commit
    from tributary_read.table.config import Table

    def files() -> set[str]:
        return {str(p) for p in (tmp_path / "out").rglob("*") if p.is_file()}

    seen, deadline = files(), time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(2)
        now = files()
        if now == seen:
            break
        seen = now
    assert_exactly_once(output_rows(tmp_path / "out"), expected)
    v = run_trib("verify", tmp_path / "out")
    assert v.returncode == 0, v.stdout + v.stderr
    assert Table.load(str(tmp_path / "out")).log.latest_version() == trials  # one commit per schedule time


# -- valid-length files over Spark Connect (no RDDs there) ------------------------------------------

_VALID_LENGTH_READ = """
import json, sys
from pyspark.sql import SparkSession
from tributary_read.errors import InvalidInputError
from tributary_read.read.resolve import resolve
from tributary_read.spark.read import read_files
from tributary_read.table.layout import Layout

spark = SparkSession.builder.remote(sys.argv[1]).create()
fs = resolve(sys.argv[2], layout=Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"))
df = read_files(spark, fs, schema="n int, s string", options={"format": "csv"})
out = {"rows": sorted([r.n, r.s, r.dt] for r in df.collect())}
try:
    read_files(spark, fs, options={"format": "jsonl"})
except InvalidInputError as e:
    out["refused"] = str(e)
print(json.dumps(out))
"""


def test_valid_length_files_are_read_up_to_their_length_over_connect(tmp_path, spark_connect):
    root = tmp_path / "capped"
    body = b"1,a\n2,b\n"
    (root / "2024_01_01/07").mkdir(parents=True)
    (root / "2024_01_01/07/f.csv").write_bytes(body + b"3,PAST\n")
    (root / "2024_01_01/07/_f.csv.valid-length").write_bytes(str(len(body)).encode())
    (root / "2024_01_01/07/g.csv").write_bytes(b"4,d\n")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", _VALID_LENGTH_READ, spark_connect.remote, str(root)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["rows"] == [[1, "a", "2024010107"], [2, "b", "2024010107"], [4, "d", "2024010107"]]
    assert "give the input a schema" in out["refused"]  # inferring columns from capped lines takes RDDs


@pytest.mark.unit
def test_submit_and_stream_refuse_a_remote_job(tmp_path):
    job = _job(tmp_path, "hourly", "sc://127.0.0.1:1")
    r = invoke_trib("etl", "submit", job, "--schedule-time", _iso(_hour_ms(0)))
    assert r.returncode == 3 and "trib etl run" in r.stderr and "Spark Connect" in r.stderr, r.stderr
    stream = tmp_path / "stream.toml"
    stream.write_text(job.read_text().split("[[inputs]]")[0]
                      + '[stream]\nsource = "rate"\ncheckpoint = "ck"\n[output]\ntable = "out"\ntime_column = "ts"\n'
                      + '[spark]\nremote = "sc://127.0.0.1:1"\n')
    r = invoke_trib("etl", "check", stream)
    assert r.returncode == 3 and "spark.remote is for trib etl run" in r.stderr, r.stderr


@pytest.mark.unit
def test_down_never_signals_a_process_up_did_not_start(tmp_path):
    """A recorded pid that is now another process (a recycled pid, a server that died) is left alone."""
    from tributary_read.processes import pid_alive

    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        d = tmp_path / "spark"
        d.mkdir()
        (d / "spark-connect.json").write_text(json.dumps({"dir": str(d), "port": 1, "pid": other.pid}))
        st = invoke_trib("spark", "status", "--dir", d, "--json")
        assert st.returncode == 8 and json.loads(st.stdout)["alive"] is False, st.stdout
        down = invoke_trib("spark", "down", "--dir", d, "--json", check=True)
        assert json.loads(down.stdout)["was_alive"] is False
        assert pid_alive(other.pid) and not (d / "spark-connect.json").exists()
    finally:
        other.kill()
        other.wait()


_SINK_ON_CONNECT = """
import sys
from pyspark.sql import SparkSession
from tributary_read.errors import InvalidInputError
from tributary_read.spark.stream import trib_sink
SparkSession.builder.remote(sys.argv[1]).getOrCreate()
try:
    trib_sink(sys.argv[2], query="events", time_column="ts")
except InvalidInputError as e:
    print("refused:", e)
"""


def test_trib_sink_refuses_a_spark_connect_session_when_it_is_made(tmp_path, spark_connect):
    """Its batches would each fail inside the query (no SparkContext on the server's Python side for the
    query's id): one line when the sink is made, before the query starts, instead."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", _SINK_ON_CONNECT, spark_connect.remote, str(tmp_path / "out")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.startswith("refused: trib_sink needs a classic SparkSession, not a Spark Connect one"), p.stdout
