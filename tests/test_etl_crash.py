"""kill -9 of a real ``trib etl run`` at each of its steps, then a re-run of the same schedule time.

Each run is a real process (``trib etl run JOB.toml --schedule-time T
--json``), a thin client of the session's warm Spark Connect server, as a user's
runs are after ``trib spark up``; the SIGKILL at a random moment is sent to a
run with its own classic Spark driver (the same job, ``[spark] master`` set),
whose JVM must go with it. ``TRIB_CRASH_AT`` (tributary_read.faults) makes it
SIGKILL itself at an exact step: before the commit, after the commit and before
the sync, during the sync, after the sync and before the ack. Then one run is
stopped by SIGTERM and one by SIGKILL sent by this test at a random moment of a
run. After every re-run the output holds the expected rows exactly once, each in
the partition of its event time, Hive (through HS2) counts the same rows, and the
consumer is acked.

A classic run that reads starts a JVM (~10 s), so the tests share one output table and move on one
schedule time each (the module's tests run in order; each checks the
cumulative output up to its schedule time).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO, TRIB, invoke_trib
from etl_data import (
    CLASSIC, LAY, Hs2, RawSource, assert_exactly_once, create_hive_table, create_output_table, dt_of, output_rows,
    write_job,
)
from helpers import group_pids as _group
from tributary_read.processes import reap_group

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

JOB = "etl_crash"
POINTS = ("etl.before_commit", "etl.after_commit", "etl.during_sync", "etl.before_ack")
#: Schedule times: the kill points, then one SIGTERM and one SIGKILL at a random moment (and one more, empty).
CYCLES = len(POINTS) + 2
RUN_TIMEOUT = 300
#: A run's progress lines on stderr (cli/etl.py), to time signals into its working steps.
STEP_LINES = {"spark": "starting Spark", "read": ": input raw:", "commit": "running the SQL and committing",
              "sync": "syncing partitions", "ack_recovery": "acking plan"}


# -- processes ------------------------------------------------------------------------
def _env(extra: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1", "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable}
    for var in ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "HIVE_CONF_DIR",
                "TRIB_CRASH_AT", "TRIB_SPARK_MASTER", "SPARK_MASTER"):
        env.pop(var, None)
    env.update(extra or {})
    return env




def _reap_group(p: subprocess.Popen, wait_s: float = 30.0) -> list[int]:
    """Wait for the run's whole process group (its JVM) to go; kill what is left. Returns the leftovers.

    PySpark's JVM exits when its Python driver's pipe closes, so killing the
    driver must not leave a JVM behind (on a small machine an orphan JVM is a
    leak that slows every later test).
    """
    return reap_group(p.pid, wait_s)  # our own run's group only


class Run:
    """One ``trib etl run`` in its own process group, its output in files (no pipe to fill up)."""

    count = 0

    def __init__(self, job: Path, schedule_iso: str, *, env: dict | None = None, cwd: Path):
        Run.count += 1
        self.args = [*TRIB, "etl", "run", str(job), "--schedule-time", schedule_iso, "--json"]
        self.logs = cwd / f"run-{Run.count}"
        self.started = time.monotonic()
        with open(f"{self.logs}.out", "w") as out, open(f"{self.logs}.err", "w") as err:
            self.p = subprocess.Popen(self.args, stdout=out, stderr=err, env=_env(env), cwd=cwd,
                                      start_new_session=True)
        self.elapsed = 0.0
        self.leftovers: list[int] = []
        self.seen: dict[str, float] = {}

    @property
    def out(self) -> str:
        return Path(f"{self.logs}.out").read_text()

    @property
    def err(self) -> str:
        return Path(f"{self.logs}.err").read_text()

    def _poll(self) -> None:
        """Note when each progress line first appeared (seconds since the start)."""
        if len(self.seen) < len(STEP_LINES):
            err = self.err
            for key, text in STEP_LINES.items():
                if key not in self.seen and text in err:
                    self.seen[key] = time.monotonic() - self.started

    def wait_for(self, key: str, timeout: float = RUN_TIMEOUT) -> bool:
        """Wait until the run prints progress line ``key``; False if it ended first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._poll()
            if key in self.seen:
                return True
            if self.p.poll() is not None:
                return False
            time.sleep(0.05)
        raise AssertionError(f"no {key!r} line after {timeout} s:\n{self.err[-6000:]}")

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        """Wait for the run, then for its JVM (leftovers are killed and kept in ``leftovers``)."""
        deadline = time.monotonic() + timeout
        while self.p.poll() is None:
            if time.monotonic() > deadline:
                # A hang: the JVM prints its threads on SIGQUIT, faulthandler Python's on SIGABRT.
                for pid in _group(self.p.pid):
                    if pid != self.p.pid:
                        os.kill(pid, signal.SIGQUIT)
                time.sleep(2)
                self.p.send_signal(signal.SIGABRT)
                self.p.wait()
                _reap_group(self.p, 5)
                raise AssertionError(f"trib etl run hung for {timeout} s; stacks:\n{self.err[-12000:]}\n"
                                     f"{self.out[-8000:]}")
            self._poll()
            time.sleep(0.05)
        self._poll()
        self.elapsed = time.monotonic() - self.started
        self.leftovers = _reap_group(self.p)
        return self.p.returncode

    def last_step(self) -> str:
        """The last progress line the run printed (where a signal found it)."""
        return max(self.seen, key=self.seen.get) if self.seen else "start-up"

    def report(self) -> dict:
        assert self.p.returncode == 0, f"exit {self.p.returncode}:\n{self.err[-6000:]}"
        return json.loads(self.out)


# -- the shared table -----------------------------------------------------------------
class Etl:
    def __init__(self, base: Path, hive_services):
        self.base = base
        self.src = RawSource(base / "raw", CYCLES, seed=11, late_each=1)
        self.out = base / "events"
        create_output_table(self.out)
        self.hs2 = Hs2(hive_services)
        self.hive = f"default.etl_crash_{uuid.uuid4().hex[:8]}"
        create_hive_table(self.hs2, self.hive, self.out)
        hive = {"hive_table": self.hive, "metastore": f"hs2://127.0.0.1:{hive_services.hs2_port}?user=trib"}
        self.job = write_job(base / "job", name=JOB, raw=self.src.root, out=self.out, **hive)
        #: The same job run by its own classic driver: one name, one consumer, one lock.
        self.classic_job = write_job(base / "classic", name=JOB, raw=self.src.root, out=self.out,
                                     spark_master=CLASSIC, **hive)
        self.k = -1
        self.durations: list[float] = []

    def next_schedule(self) -> int:
        self.k += 1
        assert self.k < CYCLES
        self.src.advance(self.k)
        return self.k

    def run(self, k: int, env: dict | None = None, *, classic: bool = False) -> Run:
        return Run(self.classic_job if classic else self.job, self.src.schedule_iso(k), env=env, cwd=self.base)

    def run_ok(self, k: int) -> dict:
        r = self.run(k)
        r.wait()
        doc = r.report()
        assert not r.leftovers, f"the run left processes behind: {r.leftovers}"
        self.durations.append(r.elapsed)
        return doc

    def log_version(self) -> int:
        from tributary_read.table.config import Table

        return Table.load(str(self.out)).log.latest_version()

    def consumer(self):
        from tributary_read.read.consumer import Consumer

        return Consumer(str(self.src.root), JOB)

    def check(self, k: int) -> None:
        """The output, Hive and the consumer after a successful run of schedule time ``k``."""
        want = self.src.expected_rows(k)
        assert_exactly_once(output_rows(self.out), want)
        # Every (id, partition) Hive reads, so its count per partition too (one Thrift Server query, not two).
        assert sorted(self.hs2.rows(self.hive)) == sorted(want)
        show = self.consumer().show()
        assert show["pending"] is None, show  # acked: no plan left open
        assert show["delivered_files"] == len(self.src.visible_by(k)), show
        # Every committed file is there with its size; a killed write's files are orphans at most.
        v = invoke_trib("verify", str(self.out), "--json")
        assert v.returncode == 0, v.stdout + v.stderr


@pytest.fixture(scope="module")
def etl(warm_spark, hive_services, tmp_path_factory):
    e = Etl(tmp_path_factory.mktemp("etl-crash"), hive_services)
    yield e
    e.hs2.execute(f"DROP TABLE IF EXISTS {e.hive}")


# -- kill -9 at each step -------------------------------------------------------------------
@pytest.mark.parametrize("point", POINTS)
def test_kill9_at_a_step_then_rerun_is_exactly_once(etl, point):
    k = etl.next_schedule()
    before = etl.log_version()
    crashed = etl.run(k, env={"TRIB_CRASH_AT": point})
    rc = crashed.wait()
    assert rc == -signal.SIGKILL, f"{point}: exit {rc}, expected a SIGKILL:\n{crashed.err[-6000:]}"
    assert not crashed.leftovers, f"the killed run left processes behind: {crashed.leftovers}"
    committed = etl.log_version() == before + 1
    assert committed == (point != "etl.before_commit"), (point, before, etl.log_version())
    if point != "etl.before_commit":
        assert etl.consumer().show()["pending"] is not None  # not acked: the re-run must finish it

    doc = etl.run_ok(k)
    assert etl.log_version() == before + 1  # one commit for the schedule time, whatever the crash
    # The hour's new partition: the re-run adds it unless the crashed run's sync got past the ADD;
    # after a complete sync the re-run's sync has nothing to do.
    new_part = f"dt={dt_of(etl.src.hour(k))}"
    hive = doc["hive"]
    # The re-run mounts the partitions of the commit it finds in the log (no listing): every one of
    # them is added or, already there, refreshed; nothing else is touched.
    touched = sorted(LAY.try_parse(d).spec for d in doc["output"]["partitions"])
    assert hive["mode"] == "commit" and sorted(hive["added"] + hive["refreshed"]) == touched, (hive, touched)
    if point in ("etl.before_commit", "etl.after_commit"):
        assert new_part in hive["added"], hive
    else:  # the crashed run's ADD stands; the re-run refreshes what it mounted
        assert new_part not in hive["added"], hive
    # Committed: the re-run found its transaction and went on with the steps after it.
    assert doc["already_committed"] is committed, doc
    assert doc["skipped_steps"] == (["resolve", "read", "commit"] if committed else []), doc
    assert [a["already_acked"] for a in doc["acked"]] == [False], doc  # the re-run did the ack
    assert doc["output"]["records"] == len(etl.src.expected_rows(k)) - len(etl.src.expected_rows(k - 1))
    etl.check(k)


# -- real signals at random moments ---------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_signal_at_a_random_moment_then_rerun_is_exactly_once(etl, sig):
    k = etl.next_schedule()
    before = etl.log_version()
    name = signal.Signals(sig).name
    rng = random.Random(f"etl-{name.lower()}")
    # A random moment of the working part of a run, not of the JVM's start-up: a random step
    # (reading and counting, the SQL and its commit, the Hive sync), a random instant into it.
    step = rng.choice(["read", "commit", "sync"])
    delay = rng.uniform(0, {"read": 3.0, "commit": 2.0, "sync": 0.2}[step])
    r = etl.run(k, classic=sig == signal.SIGKILL)  # a driver's JVM must go with its killed run
    r.wait_for(step)
    time.sleep(delay)
    r._poll()
    at = r.last_step()
    r.p.send_signal(sig)
    rc = r.wait()
    assert not r.leftovers, f"the signalled run left processes behind: {r.leftovers}"
    # 0: the run finished before the signal; SIGTERM may be handled (128+15, one line).
    allowed = {0, -sig} | ({128 + sig} if sig == signal.SIGTERM else set())
    assert rc in allowed, f"exit {rc} after {name} {delay:.1f} s into {step}:\n{r.err[-6000:]}"
    if rc == 128 + sig:
        assert "Traceback" not in r.err, r.err
    committed = etl.log_version() == before + 1
    assert committed or rc != 0
    print(f"{name} {delay:.2f} s into {step} (last line: {at}): exit {rc}, committed: {committed}")

    doc = etl.run_ok(k)
    assert etl.log_version() == before + 1
    assert doc["already_committed"] is committed, doc
    etl.check(k)


def test_the_next_hour_after_the_reruns_finds_nothing_new(etl):
    """Every re-run acked its files: an hour with no new arrivals reads nothing and writes nothing."""
    k = etl.k + 1  # not advanced: no file lands
    rows = sorted(output_rows(etl.out))
    doc = etl.run_ok(k)
    (inp,) = doc["inputs"]
    assert (inp["files"], inp["records"], doc["output"]["records"]) == (0, 0, 0), doc
    assert doc["recovered"] == []  # nothing was left pending for it to ack
    assert sorted(output_rows(etl.out)) == rows
    etl.check(k - 1)
    print("run seconds:", [round(d, 1) for d in etl.durations])
