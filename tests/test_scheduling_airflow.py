"""The Airflow provider against a real Airflow (its own venv, SQLite, ``airflow dags test``) and real trib runs.

One Airflow home and one set of tables for the module; the tests run in order:

1. three consecutive data intervals of an hourly DAG over a raw source with late files of every kind, on
   the session's warm Spark Connect server but the second, whose task runs a classic driver and is
   SIGTERMed mid-run (as a worker restart does) and retried by Airflow,
   then the last interval run again: every record lands once, the rerun succeeds as already
   committed, and no trib or Spark process outlives the kill;
2. a downstream DAG on ``PartitionedAssetTimetable`` is scheduled (by a real scheduler) for each hour
   the upstream runs committed;
3. each outcome of the exit-class table ends in its Airflow state: success (already committed),
   up_for_retry (a held lock; other retry classes: tests/test_airflow_parts.py), failed;
4. a deferrable sensor waits for a partition that exists but is not complete until a background
   ``trib ingest`` completes it; a DAG on a trigger timetable (zero-length interval) is refused.

3 and 4 start no Spark and mostly wait, so they run from the start in a thread, on a second Airflow
home, while 1 runs; their tests check what they left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from airflow_env import TRIB_BIN, Airflow
from conftest import REPO, run_trib
from etl_data import LAY, RawSource, assert_exactly_once, create_output_table, iso, output_rows, write_job
from helpers import group_pids

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

H = 3_600_000


class World:
    def __init__(self, base: Path):
        self.base = base
        self.src = RawSource(base / "raw", 3)
        self.out = base / "out"
        create_output_table(self.out)
        self.job = write_job(base / "jobs", name="hourly", raw=base / "raw", out=self.out)
        self.af = Airflow(base / "airflow")

    def date(self, k: int) -> str:
        """The logical date (= the data interval's end with CronDataIntervalTimetable) of schedule ``k``."""
        return iso(self.src.schedule(k) - self.src.schedule(k) % H)


class Side:
    """The outcome and sensor scenarios, run in a thread on a second Airflow home while the main one runs."""

    def __init__(self, w: World):
        self.results: dict = {}
        self.error: BaseException | None = None
        self.af: Airflow
        self.thread = threading.Thread(target=self._run, args=(w,), name="airflow-side", daemon=True)
        self.thread.start()

    def _run(self, w: World) -> None:
        try:
            self.af = Airflow(w.base / "airflow-side")
            done = _committed_elsewhere(w)
            self.results["outcomes"] = _outcomes(w, self.af, done)
            self.results["sensor"] = _sensor(w, self.af)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test that asks
            self.error = e

    def result(self, name: str):
        self.thread.join(600)
        assert not self.thread.is_alive(), "the side scenarios hung"
        if name not in self.results:
            raise AssertionError(f"the side scenario {name} did not finish") from self.error
        return self.results[name]


def docs_dag(job: Path, events: Path) -> str:
    """docs/airflow.md's DAG file as shown, its three constants pointing here (a retry after 1 s), and the
    consumer created unpaused (``is_paused_upon_creation=False``; events are queued for unpaused consumers
    only): the first ``dags test`` writes both DAGs to the database as it parses the file, so neither a
    ``dags reserialize`` nor a ``dags unpause`` process (5-8 CPU-seconds each) is needed for it."""
    text = (REPO / "docs" / "airflow.md").read_text()
    block = re.search(r"```python\n(# dags/hourly_events.py\n.*?)```", text, re.S)
    assert block, "docs/airflow.md lost its DAG file"
    code = block.group(1)
    for name, value in (("JOB", repr(str(job))), ("EVENTS", repr(str(events))),
                        ("RETRY_DELAY", "timedelta(seconds=1)")):
        code, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", code, count=1, flags=re.M)
        assert n == 1, f"docs/airflow.md's DAG has no {name} line"
    code, n = re.subn(rf'^with DAG\("{DOWNSTREAM}", ', f'with DAG("{DOWNSTREAM}", is_paused_upon_creation=False, ',
                      code, count=1, flags=re.M)
    assert n == 1, f"docs/airflow.md's DAG has no {DOWNSTREAM} DAG"
    return code


UPSTREAM, DOWNSTREAM = "hourly_events", "events_downstream"


@pytest.fixture(scope="module")
def world(warm_spark, tmp_path_factory):
    # The task's trib etl run is a thin client of the session's warm Spark ($TRIB_SPARK_REMOTE reaches the
    # worker's environment), but the killed interval's, which runs a classic driver of its own.
    w = World(tmp_path_factory.mktemp("airflow"))
    # The outcome and sensor scenarios need no Spark and mostly wait: they run meanwhile, in a second
    # Airflow home (one SQLite database per dags test process), and their tests read what they left.
    w.side = Side(w)
    # The scheduler needs the DAGs in the database, and a consumer that is not paused: the first dags test
    # writes them (Airflow's dag.test syncs the file's DAGs), the consumer unpaused (docs_dag).
    w.af.dag("hourly_events", docs_dag(w.job, w.out))
    yield w
    w.side.thread.join(300)


def _check_output(w: World, k: int) -> None:
    assert_exactly_once(output_rows(w.out), w.src.expected_rows(k))


def test_provider_is_registered(world):
    listed = world.af.run("providers", "list", "--output", "json").stdout
    names = [p.get("package_name") for p in json.loads(listed[listed.index("["):])]
    assert "tributary-read" in names


def test_three_intervals_a_kill_and_a_rerun_are_exactly_once(world):
    w, af = world, world.af
    # Interval 0.
    w.src.advance(0)
    af.test(UPSTREAM, w.date(0))
    assert af.tasks(UPSTREAM)["etl"] == ("success", 1)
    report = af.xcom(UPSTREAM, "etl")
    assert report["schedule_time"] == w.date(0).replace("+00:00", "Z") and not report["already_committed"]
    _check_output(w, 0)

    # Interval 1: SIGTERM to the task's process mid-run (a worker restart); Airflow retries it.
    w.src.advance(1)
    log = w.base / "kill.log"
    # On a classic driver (no server named: the job's own Spark), which must not outlive the kill either;
    # Airflow's retry runs on the warm server (a second cold driver cost 30-40 CPU-seconds).
    p = af.start("dags", "test", UPSTREAM, w.date(1), log=log, env=_classic_once(w.base / "classic-once", af))
    try:
        af.wait_for(lambda: "running the SQL and committing" in log.read_text(), 240, "commit step in the log")
        os.kill(p.pid, signal.SIGTERM)  # the task runner calls on_kill, as Airflow's supervisor makes it
        assert p.wait(300) == 0, log.read_text()[-6000:]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    text = log.read_text()
    groups = [int(g) for g in re.findall(r"trib: stopping the run \(process group (\d+)\)", text)]
    assert groups, text[-6000:]
    for g in groups:
        assert group_pids(g) == [], f"trib or its Spark driver outlived the kill (group {g})"
    # Try 1 started a driver of its own, the retry ran on the server.
    try1, _, try2 = text.partition("new_state=up_for_retry")
    assert "starting Spark (" in try1 and "connecting to the Spark Connect server" not in try1, try1[-6000:]
    assert "connecting to the Spark Connect server" in try2 and "starting Spark (" not in try2, try2[-6000:]
    # Try 1 ended up_for_retry (its history row keeps the try's own end, failed); try 2 succeeded.
    assert "new_state=up_for_retry" in text and af.history(UPSTREAM, "etl") == [(1, "failed")]
    assert af.tasks(UPSTREAM)["etl"] == ("success", 2)
    _check_output(w, 1)

    # Interval 2: the late files of every kind land in it.
    w.src.advance(2)
    late = {f.pattern for f in w.src.arrived_in(2) if f.pattern != "normal"}
    assert late == {"late_dir", "old_mtime", "late_rename"}
    af.test(UPSTREAM, w.date(2))
    _check_output(w, 2)

    # The same interval again: success, as already committed, and nothing changes.
    af.test(UPSTREAM, w.date(2))
    assert af.tasks(UPSTREAM)["etl"][0] == "success"
    again = af.xcom(UPSTREAM, "etl")
    assert again["already_committed"] is True and again["version"] == 3
    _check_output(w, 2)

    # One partitioned asset event per output partition each run committed, keyed by its value.
    events = af.query("SELECT partition_key, extra FROM asset_event")
    assert {k for k, _ in events} == {dt for _, dt in w.src.expected_rows(2)}
    assert {json.loads(x)["version"] for _, x in events} == {1, 2, 3}  # the commit each event stands for


def _classic_once(d: Path, af: Airflow) -> dict:
    """The environment of a ``dags test`` whose first ``trib`` (the try to be killed) runs a classic driver
    and whose later ones (the retry) the session's warm server: the operator runs the ``trib`` on PATH,
    here a wrapper that clears ``$TRIB_SPARK_REMOTE`` the first time only."""
    d.mkdir()
    wrapper = d / "trib"
    wrapper.write_text(f"#!/bin/sh\nif mkdir {d / 'first-done'} 2>/dev/null; then TRIB_SPARK_REMOTE=; "
                       f"export TRIB_SPARK_REMOTE; fi\nexec {TRIB_BIN} \"$@\"\n")
    wrapper.chmod(0o755)
    return {"PATH": f"{d}{os.pathsep}{af.env()['PATH']}"}


def test_a_downstream_dag_is_scheduled_per_committed_hour(world):
    af = world.af
    want = {k for (k,) in af.query("SELECT partition_key FROM asset_event")}
    assert want
    # One executor slot: the scheduler's LocalExecutor forks one worker per slot at start (32 by default), and
    # what is checked here is the runs it creates, not the tasks they run.
    p = af.start("scheduler", "--skip-serve-logs", log=world.base / "scheduler.log",
                 env={"AIRFLOW__CORE__PARALLELISM": "1"})
    try:
        runs = af.wait_for(
            lambda: (lambda got: got if got >= want else None)(
                {k for (k,) in af.query("SELECT partition_key FROM dag_run WHERE dag_id = '" + DOWNSTREAM + "' "
                                        "AND run_type = 'asset_triggered'")}), 60, "downstream runs")
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    assert runs == want


OUTCOMES = """\
    from datetime import datetime, timedelta, timezone
    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable
    from tributary_read.airflow import TribEtlOperator

    with DAG("trib_outcomes", schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
             start_date=datetime(2020, 1, 1, tzinfo=timezone.utc), catchup=False,
             default_args=dict(retries=1, retry_delay=timedelta(seconds=1), trib_bin={trib!r})):
        for task_id, job in {jobs!r}.items():
            TribEtlOperator(task_id=task_id, job=job)
"""


def _committed_elsewhere(w: World) -> Path:
    """Job ``done``: its run for schedule 0 is already in its output's log (written through the committer,
    no Spark), so a run of it is the already-committed case whatever the main scenario is doing."""
    from tributary_read.table.config import Table
    from tributary_read.table.manifest import Transaction
    from tributary_read.write.writer import TableWriter

    create_output_table(w.base / "out_done")
    job = write_job(w.base / "jobs", name="done", raw=w.base / "raw", out=w.base / "out_done")
    t = w.src.schedule(0) - w.src.schedule(0) % H
    writer = TableWriter(Table.load(str(w.base / "out_done")))
    writer.write({"id": 1, "ts": t - H + 1, "msg": "x"}, t - H + 1)
    writer.commit(Transaction("etl:done", {"schedule_time_ms": t}))
    return job


def _outcomes(w: World, af: Airflow, done: Path) -> subprocess.CompletedProcess:
    jobs = w.base / "jobs"
    bad = jobs / "bad.toml"
    bad.write_text("[job\nname = 'bad'\n")  # not TOML: exit 3
    no_table = write_job(jobs, name="no_table", raw=w.base / "raw", out=w.base / "missing")  # exit 4
    create_output_table(w.base / "out_locked")
    locked = write_job(jobs, name="locked", raw=w.base / "raw", out=w.base / "out_locked")  # exit 5
    tasks = {"committed": str(done), "bad_input": str(bad), "missing_table": str(no_table),
             "locked": str(locked)}
    af.dag("outcomes", OUTCOMES.format(trib=TRIB_BIN, jobs=tasks))

    from tributary_read.etl.lock import JobLock, lock_path
    from tributary_read.table.config import Table

    with JobLock(lock_path("locked", Table.load(str(w.base / "out_locked"))), "locked"):
        return af.test("trib_outcomes", w.date(0), check=False)


def test_each_exit_class_ends_in_its_airflow_state(world):
    af, p = world.side.af, world.side.result("outcomes")
    states = af.tasks("trib_outcomes")
    assert states == {"committed": ("success", 1), "bad_input": ("failed", 1), "missing_table": ("failed", 1),
                      "locked": ("failed", 2)}, p.stdout[-6000:]
    assert af.history("trib_outcomes", "locked") == [(1, "failed")]  # try 1 up_for_retry, try 2 failed
    for failed in ("bad_input", "missing_table"):  # failed at once
        assert af.history("trib_outcomes", failed) == []
    assert af.xcom("trib_outcomes", "committed")["already_committed"] is True
    log = p.stdout + p.stderr
    assert log.count("new_state=up_for_retry") == 1
    assert "(ConcurrentRunError)" in log and "(retried)" in log and "(no retry)" in log


SENSOR = """\
    from datetime import datetime, timezone
    from airflow.sdk import DAG, task
    from tributary_read.airflow import TribEtlOperator, TribPartitionSensor

    with DAG("trib_sensor", schedule="@hourly", start_date=datetime(2020, 1, 1, tzinfo=timezone.utc),
             catchup=False):
        wait = TribPartitionSensor(task_id="wait_complete", table={ing!r}, partitions=[{hour!r}], deferrable=True,
                                   poke_interval=1, timeout=120)

        @task
        def after():
            print("went on")

        wait >> after()
        TribPartitionSensor(task_id="never_complete", table={ing!r}, partitions=[{next_hour!r}], poke_interval=1,
                            timeout=3)
        TribPartitionSensor(task_id="etl_done", table={out!r}, job="done", schedule_time={etl_time!r})
        TribEtlOperator(task_id="zero_interval", job={job!r}, trib_bin={trib!r})
"""


def _records(path: Path, start_ms: int, n: int, first_id: int) -> Path:
    path.write_text("".join(json.dumps({"id": first_id + i, "ts": start_ms + i * 1000}) + "\n" for i in range(n)))
    return path


def _sensor(w: World, af: Airflow) -> dict:
    ing = w.base / "ingested"
    run_trib("table", "create", str(ing), "--layout", LAY.directory, "--partition", LAY.partition, check=True)
    run_trib("partitions", "configure", str(ing), "--policy", "success-file", "--clock", "event", check=True)
    hour = w.src.hour(0)
    # The hour's partition exists (its first file is committed) but is not complete: the watermark is its start.
    run_trib("ingest", str(ing), "--source", str(_records(w.base / "a.jsonl", hour + 60_000, 5, 0)),
             "--app-id", "a", "--time-field", "ts", check=True)
    af.dag("sensor", SENSOR.format(ing=str(ing), hour=LAY.for_time(hour).values["dt"],
                                   next_hour=LAY.for_time(hour + H).path, out=str(w.base / "out_done"),
                                   etl_time=w.date(0), job=str(w.job), trib=TRIB_BIN))
    log = w.base / "sensor.log"
    p = af.start("dags", "test", "trib_sensor", w.date(0), log=log)
    completed_at: list[float] = []

    def complete_later():  # the next hour's first records move the watermark past the hour's end
        af.wait_for(lambda: "running trigger in line" in log.read_text(), 120, "the deferred trigger")
        time.sleep(10)
        run_trib("ingest", str(ing), "--source", str(_records(w.base / "b.jsonl", hour + H + 60_000, 5, 100)),
                 "--app-id", "b", "--time-field", "ts", check=True)
        completed_at.append(time.time())

    t = threading.Thread(target=complete_later, daemon=True)
    t.start()
    try:
        code = p.wait(300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    t.join(5)
    return {"code": code, "log": log.read_text(), "completed_at": completed_at}


def test_a_deferrable_sensor_waits_for_completeness_not_existence(world):
    af, r = world.side.af, world.side.result("sensor")
    text, code, completed_at = r["log"], r["code"], r["completed_at"]
    states = af.tasks("trib_sensor")
    assert states["wait_complete"][0] == "success" and states["after"][0] == "success", text[-6000:]
    assert states["etl_done"][0] == "success"
    assert states["never_complete"][0] == "failed" and "not complete" in text
    assert states["zero_interval"][0] == "failed" and "CronDataIntervalTimetable" in text
    assert code != 0  # the run has failed tasks
    assert completed_at, "the background ingest never ran"
    ended = af.query("SELECT end_date FROM task_instance WHERE dag_id = 'trib_sensor' AND task_id = 'wait_complete'")
    from datetime import datetime, timezone

    end = datetime.fromisoformat(str(ended[0][0]))
    end = end if end.tzinfo else end.replace(tzinfo=timezone.utc)
    assert end.timestamp() >= completed_at[0] - 1  # it waited for the ingest
    done = af.xcom("trib_sensor", "wait_complete")
    assert done["partitions"][0]["complete"] is True and done["partitions"][0]["files"] == 1
