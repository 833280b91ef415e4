"""trib on a real Spark standalone cluster whose executors' Python has pyarrow and nothing else (issue 21).

The session's ``spark_cluster`` (tests/spark_cluster.py): a master and one
2-core worker from the pyspark wheel; the executors run a venv without
tributary_read. Every driver here is a real process of the test venv (which
has trib): this pytest process may already hold the suite's local
SparkContext, and a process holds one. trib ships its own code to the
executors (:mod:`tributary_read.spark.ship`), whether it builds the session
(``trib etl run``, ``trib etl submit``) or is handed one it did not build
(``read_files``, the executor listing, on a session a script made with
``SparkSession.builder``).

Each application costs a driver JVM and an executor JVM, so the checks whose
process boundary is not under test share one: ``read_files``, the executor
listing and ``trib doctor`` run in one driver script. A setting fixed when a
SparkContext starts (which Python the executors run) needs an application per
case.

The ETL tests share one raw source, output table and consumer and move through
the schedule times in order (as tests/test_etl_crash.py's do): a test may pick
up the schedule time the one before left (bad runs then the good one at 1; a
killed run then its re-run through ``trib etl submit`` at 2). Small data: a run
costs a driver JVM and an executor JVM (~15-25 s idle, ~55-80 s under CI load).
"""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from etl_data import RawSource, assert_exactly_once, create_output_table, output_rows, write_job
from test_etl_crash import Run
from test_spark_listing import HOURLY, assert_same, odd_tree

from tributary_read.processes import reap_group
from tributary_read.read.resolve import resolve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TESTS = Path(__file__).resolve().parent
JOB = "on_cluster"
CYCLES = 5
RUN_TIMEOUT = 300


# -- drivers --------------------------------------------------------------------------------
class ClusterEtl:
    """One raw source and output table, a job whose master is the cluster; runs move on one schedule time each."""

    def __init__(self, base: Path, cluster):
        self.base, self.cluster = base, cluster
        self.src = RawSource(base / "raw", CYCLES, seed=21, late_each=1)
        self.out = base / "events"
        create_output_table(self.out)
        self.job = write_job(base / "job", name=JOB, raw=self.src.root, out=self.out, spark_master=cluster.master)
        self.killed: tuple[int, int, bool] | None = None  # (schedule index, log version before, committed)

    def env(self) -> dict[str, str]:
        # The executors' Python is the driver's PYSPARK_PYTHON (tests/spark_cluster.py): the venv without trib.
        return {"PYSPARK_PYTHON": str(self.cluster.python)}

    def run(self, k: int) -> Run:
        self.src.advance(k)
        return Run(self.job, self.src.schedule_iso(k), cwd=self.base, env=self.env())

    def log_version(self) -> int:
        from tributary_read.table.config import Table

        return Table.load(str(self.out)).log.latest_version()

    def check(self, k: int) -> None:
        """Every record visible by schedule time ``k`` is in the output once, in its event time's partition."""
        assert_exactly_once(output_rows(self.out), self.src.expected_rows(k))


@pytest.fixture(scope="module")
def etl(spark_cluster, tmp_path_factory):
    return ClusterEtl(tmp_path_factory.mktemp("cluster-etl"), spark_cluster)


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> Path:
    """A venv of the driver's Python version with nothing installed (no pyarrow), made once for the module."""
    tmp = tmp_path_factory.mktemp("bare-python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "bare")], check=True)
    return tmp / "bare" / "bin" / "python"


def run_driver(cluster, tmp: Path, code: str, params: dict) -> dict:
    """Run ``code`` as a driver script on the cluster (a process of the test venv); its last stdout line, as JSON.

    The script gets ``params`` as JSON in ``sys.argv[1]``; its process group
    (the driver JVM too) must be gone when it ends, and its application must
    have given the executors one trib zip.
    """
    script = tmp / "driver.py"
    script.write_text(code)
    apps = cluster.app_dirs()
    with open(tmp / "driver.out", "w") as out, open(tmp / "driver.err", "w") as err:
        p = subprocess.Popen([sys.executable, str(script), json.dumps(params)], stdout=out, stderr=err, cwd=tmp,
                             env=cluster.driver_env({"PYTHONPATH": str(TESTS)}), start_new_session=True)
    try:
        rc = p.wait(RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # our own driver's group only
        p.wait()
        raise AssertionError(f"the driver hung:\n{(tmp / 'driver.err').read_text()[-6000:]}") from None
    left = reap_group(p.pid, 30)
    assert rc == 0, f"exit {rc}:\n{(tmp / 'driver.err').read_text()[-6000:]}"
    assert not left, f"the driver left processes behind: {left}"
    one_zip_each(cluster, apps)
    return json.loads((tmp / "driver.out").read_text().strip().splitlines()[-1])


#: The head of every driver script: a session trib did not build (a user's, a notebook's), and the executors'
#: own Python probed before trib is called: the venv, without tributary_read.
SCRIPT_HEAD = """\
import importlib.util, json, os, sys
from pyspark.sql import SparkSession

params = json.loads(sys.argv[1])
spark = (SparkSession.builder.master(os.environ["TRIB_SPARK_MASTER"]).appName(params["app"])
         .config("spark.ui.enabled", "false").getOrCreate())
sc = spark.sparkContext


def probe(_):
    import sys, importlib.util
    spec = importlib.util.find_spec("tributary_read")
    yield sys.executable, None if spec is None else spec.origin


before = sc.parallelize([0], 1).mapPartitions(probe).collect()[0]
"""
def one_zip_each(cluster, before: set[Path]) -> None:
    """Each application since ``before`` gave its executors one trib zip, no second one."""
    apps = cluster.app_dirs() - before
    assert apps, "no application ran on the cluster"
    for app in apps:
        zips = [f for f in cluster.fetched(app) if f.startswith("tributary_read-")]
        assert len(zips) == 1 and "-unknown-" not in zips[0], (app.name, cluster.fetched(app))


def assert_shipped(cluster, doc: dict) -> None:
    """The executors ran the venv's Python, found no trib before trib was called, and trib's zip after."""
    python, origin = doc["before"]
    assert Path(python).parent == cluster.python.parent, doc["before"]
    assert origin is None, f"the executors' Python has a tributary_read of its own: {origin}"
    python, origin = doc["after"]
    assert Path(python).parent == cluster.python.parent and origin is not None, doc["after"]
    assert ".zip" in origin and os.path.basename(origin.split(".zip")[0]).startswith("tributary_read-"), origin


# -- trib etl run / submit ---------------------------------------------------------------------
def _job_with_python(etl, tmp: Path, python: Path | str, *, attempts: int | None = None) -> Path:
    """The same job (name, consumer, tables) with ``spark.pyspark.python`` in its ``[spark] conf``.

    ``attempts``: ``spark.task.maxFailures`` in the same conf, for a job whose tasks fail the same way
    on every attempt (a cluster's default is 4 attempts of each task: a Python worker started and
    failing each time, ~10 s idle, ~25 s under CI's load, for one more copy of the same error)."""
    job = write_job(tmp, name=JOB, raw=etl.src.root, out=etl.out, spark_master=etl.cluster.master)
    extra = f'"spark.task.maxFailures" = "{attempts}", ' if attempts is not None else ""
    text = job.read_text().replace('conf = { ', f'conf = {{ "spark.pyspark.python" = "{python}", {extra}')
    job.write_text(text)
    return job


def test_a_bad_spark_pyspark_python_in_the_job_is_one_line_and_commits_nothing(etl, bare, tmp_path):
    """Issue 21 items 2 and 3: ``spark.pyspark.python`` in the job's ``[spark] conf`` wins over the
    environment's ``$PYSPARK_PYTHON``; executors that cannot import pyarrow, or run another minor
    version, end the run with one line naming the module or the versions, the executors' Python and
    the fix, exit 10, with nothing committed. The next test runs the same schedule time with a good
    ``spark.pyspark.python`` (winning over a bad ``$PYSPARK_PYTHON``): exactly once.

    Each case is an application of its own: which Python the executors run is fixed when the driver's
    SparkContext starts. Each job makes one attempt per task (``spark.task.maxFailures = 1`` in its conf):
    the error, the exit code and the log are those of the first failure, not of Spark's fourth copy of it."""
    k = 1
    etl.src.advance(k)
    before = etl.log_version()
    bad = Run(_job_with_python(etl, tmp_path / "bad", bare, attempts=1), etl.src.schedule_iso(k), cwd=etl.base,
              env={"PYSPARK_PYTHON": str(etl.cluster.python)})  # the conf wins over the environment
    rc = bad.wait()
    last = bad.err.strip().splitlines()[-1]
    assert rc == 10, f"exit {rc}:\n{bad.err[-6000:]}"
    assert last.startswith("trib: error: ") and "cannot import pyarrow" in last and str(bare) in last, last
    assert "spark.pyspark.python" in last and "Traceback" not in bad.err and "\tat org.apache" not in bad.err, \
        bad.err[-4000:]
    assert etl.log_version() == before  # nothing committed
    etl.cluster.wait_idle()

    other = next((p for p in (Path(f"/root/.pyenv/versions/{v}/bin/python") for v in ("3.12.1", "3.13.0", "3.10.13"))
                  if p.exists()), None)
    if other is not None and sys.version_info[:2] == (3, 11):
        r = Run(_job_with_python(etl, tmp_path / "version", other, attempts=1), etl.src.schedule_iso(k), cwd=etl.base)
        rc = r.wait()
        last = r.err.strip().splitlines()[-1]
        assert rc == 10 and "the driver's 3.11" in last and str(other) in last, f"exit {rc}: {r.err[-4000:]}"
        assert etl.log_version() == before
        etl.cluster.wait_idle()


def test_etl_run_on_a_cluster_without_trib_writes_every_record_exactly_once(etl, bare, tmp_path):
    """The issue's reproduction: the write tasks used to fail with ModuleNotFoundError: tributary_read.

    The executors' Python (pyarrow, no trib) is named by the job's ``spark.pyspark.python``, which wins over
    the environment's ``$PYSPARK_PYTHON`` (a Python without pyarrow here, which would fail the run), and the
    schedule time the previous test's bad runs left uncommitted now commits once. The later runs name the
    executors' Python by ``$PYSPARK_PYTHON`` alone."""
    k = 1
    etl.src.advance(k)
    before = etl.log_version()
    apps = etl.cluster.app_dirs()
    r = Run(_job_with_python(etl, tmp_path / "good", etl.cluster.python), etl.src.schedule_iso(k), cwd=etl.base,
            env={"PYSPARK_PYTHON": str(bare)})  # the conf wins here too
    rc = r.wait()
    assert rc == 0, f"exit {rc}:\n{r.err[-6000:]}"
    assert not r.leftovers, f"the run left processes behind: {r.leftovers}"
    doc = r.report()
    assert doc["output"]["records"] == len(etl.src.expected_rows(k)) > 0, doc
    assert etl.log_version() == before + 1
    etl.check(k)
    one_zip_each(etl.cluster, apps)
    print(f"run on the cluster: {r.elapsed:.1f} s")


def test_etl_run_killed_with_sigkill_while_executors_write_leaves_nothing_running(etl):
    """A ``trib etl run`` killed with SIGKILL while the executors run its write stage: its processes and its
    application go, and its commit either landed whole or not at all. The next test re-runs the same
    schedule time (through ``trib etl submit``, a driver process of its own): exactly once."""
    k = 2
    before = etl.log_version()
    r = etl.run(k)
    assert r.wait_for("commit"), f"the run ended before its commit step:\n{r.err[-6000:]}"
    # The write stage's tasks are running on the executor once a stage line follows the commit line.
    deadline = time.monotonic() + RUN_TIMEOUT
    while r.p.poll() is None and "[Stage" not in r.err.partition("running the SQL and committing")[2]:
        assert time.monotonic() < deadline, r.err[-6000:]
        time.sleep(0.05)
    time.sleep(random.Random("cluster-kill").uniform(0, 0.5))
    r.p.send_signal(signal.SIGKILL)
    rc = r.wait()
    assert rc in (0, -signal.SIGKILL), f"exit {rc}:\n{r.err[-6000:]}"
    assert not r.leftovers, f"the killed run left processes behind: {r.leftovers}"
    committed = etl.log_version() == before + 1
    assert committed or rc != 0
    # The killed driver's application and its executor go; nothing is left on the worker.
    etl.cluster.wait_idle()
    etl.killed = (k, before, committed)
    print(f"killed {'after' if committed else 'before'} its commit (exit {rc})")


def test_etl_submit_reruns_the_killed_schedule_time_exactly_once_and_ships_trib_with_py_files(etl):
    """``trib etl submit --run`` in client mode re-runs the schedule time the previous test's run was killed
    at: one commit for it, every record once. spark-submit's ``--py-files`` carries the zip (the session
    builder finds it among the context's Python includes and adds no second one).

    One application serves both: the re-run needs a fresh driver, not a ``trib etl run`` one. If the kill
    landed after the commit, the re-run writes nothing, so the next schedule time is submitted too, for the
    write tasks on the executors."""
    from conftest import invoke_trib, run_trib
    from spark_cluster import spark_home

    k, before, committed = etl.killed
    env = etl.cluster.driver_env(etl.env())

    def submit(k: int) -> dict:
        args = ["etl", "submit", str(etl.job), "--schedule-time", etl.src.schedule_iso(k),
                "--spark-submit", str(spark_home() / "bin" / "spark-submit")]
        # the line alone starts no Spark: in this process (the run below is the process that matters)
        line = json.loads(invoke_trib(*args, "--json", env=env, check=True, cwd=etl.base).stdout)
        argv = line["argv"]
        shipped = argv[argv.index("--py-files") + 1]
        assert os.path.basename(shipped).startswith("tributary_read-") and shipped.endswith(".zip"), argv
        p = run_trib(*args, "--run", env=env, cwd=etl.base)
        assert p.returncode == 0, p.stderr[-6000:]
        return json.loads(p.stdout[p.stdout.index("{"):])

    t, apps, had = time.monotonic(), etl.cluster.app_dirs(), len(output_rows(etl.out))
    doc = submit(k)
    assert etl.log_version() == before + 1  # one commit for the schedule time
    assert doc["already_committed"] is committed, doc
    if not committed:
        assert doc["output"]["records"] == len(etl.src.expected_rows(k)) - had > 0, doc
    etl.check(k)
    if committed:
        k += 1
        etl.src.advance(k)
        had = len(output_rows(etl.out))
        doc = submit(k)
        assert doc["output"]["records"] == len(etl.src.expected_rows(k)) - had > 0, doc
        etl.check(k)
    one_zip_each(etl.cluster, apps)  # --py-files' zip, which the session builder found among the includes
    etl.cluster.wait_idle()
    print(f"submit on the cluster: {time.monotonic() - t:.1f} s")


# -- handed a session: read_files, the executor listing and trib doctor, in one application ---------------
#: One driver script, one application (each costs a driver JVM and an executor JVM): on a session the script
#: built, ``read_files`` over many directories, then the executor listing, then ``trib doctor --master`` run in
#: the same process (click's runner; it reuses the session, as ``getOrCreate`` does, and stops it). The process
#: boundary is not what these check: a session trib builds itself is the ETL runs' and the bad doctor's.
HANDED = SCRIPT_HEAD + """
import pickle
from click.testing import CliRunner
from tributary_read.cli.main import cli
from tributary_read.read.resolve import plain_layout, resolve
from tributary_read.spark.listing import list_on_executors
from tributary_read.spark.read import read_files

fs = resolve(params["read_root"], layout=plain_layout("{yyyy}_{MM}_{dd}/{HH}"))
df = read_files(spark, fs, schema="id BIGINT, msg STRING", options={"format": "jsonl"})
rows = sorted((r.id, r.msg, r.dt) for r in df.collect())
read = {"files": len(fs.files), "capped": sum(f.valid_length is not None for f in fs.files), "rows": rows}

sc.setJobGroup("trib-listing", "the executor listing")
listed = list_on_executors(spark, params["list_root"], layout=plain_layout("{yyyy}_{MM}_{dd}/{HH}"))
sc.setLocalProperty("spark.jobGroup.id", None)
with open(params["out"], "wb") as f:
    pickle.dump(listed, f)
listing = {"jobs": len(sc.statusTracker().getJobIdsForGroup("trib-listing"))}

after = sc.parallelize([0], 1).mapPartitions(probe).collect()[0]
doctor = CliRunner().invoke(cli, ["doctor", "--master", os.environ["TRIB_SPARK_MASTER"], "--json"],
                            catch_exceptions=False)
spark.stop()
print(json.dumps({"read": read, "listing": listing, "doctor": [doctor.exit_code, doctor.stdout, doctor.stderr],
                  "before": before, "after": after}))
"""


def _put(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _read_tree(root: Path) -> list[tuple]:
    """72 hourly directories of whole files, and files with a valid length; the rows read_files must return."""
    want = []
    for h in range(72):
        d = f"2024_01_{1 + h // 24:02d}/{h % 24:02d}"
        dt = d.replace("_", "").replace("/", "")
        lines = [json.dumps({"id": 10 * h + i, "msg": f"m{h}-{i}"}) for i in range(2)]
        _put(root / d / f"part-{h}.jsonl", "".join(x + "\n" for x in lines).encode())
        want += [(10 * h + i, f"m{h}-{i}", dt) for i in range(2)]
    for h in (5, 40):  # Flink's in-progress files: the bytes past the valid length are never read
        d = f"2024_01_{1 + h // 24:02d}/{h % 24:02d}"
        good = json.dumps({"id": 5000 + h, "msg": "capped"}) + "\n"
        _put(root / d / "flink-0", (good + '{"id": 666, "msg": "PAST"}\ntorn{').encode())
        body = str(len(good)).encode()
        _put(root / d / "_flink-0.valid-length", len(body).to_bytes(2, "big") + body)
        want.append((5000 + h, "capped", d.replace("_", "").replace("/", "")))
    return sorted(want)


@pytest.fixture(scope="module")
def handed(spark_cluster, tmp_path_factory) -> dict:
    """The one driver script's answers (HANDED), with the trees it read and the rows it should have read."""
    tmp = tmp_path_factory.mktemp("handed")
    want = _read_tree(tmp / "raw")
    odd_tree(tmp / "t")
    local = resolve(str(tmp / "t"), mode="mtime", layout=HOURLY)
    doc = run_driver(spark_cluster, tmp, HANDED, {"app": "trib-cluster-handed", "read_root": str(tmp / "raw"),
                                                  "list_root": str(tmp / "t"), "out": str(tmp / "fs.pickle")})
    with open(tmp / "fs.pickle", "rb") as f:
        remote = pickle.load(f)
    return {"doc": doc, "want": want, "local": local, "remote": remote}


def test_read_files_over_many_directories_on_a_session_trib_did_not_build(spark_cluster, handed):
    """72 hourly directories of whole files, and files with a valid length (their lines are read by trib's code
    on the executors): exactly the FileSet's rows, each with its directory's partition value."""
    doc = handed["doc"]
    assert (doc["read"]["files"], doc["read"]["capped"]) == (74, 2)
    assert [tuple(r) for r in doc["read"]["rows"]] == handed["want"]
    assert_shipped(spark_cluster, doc)


def test_executor_listing_on_a_session_trib_did_not_build_equals_the_local_listing(spark_cluster, handed):
    """tests/test_spark_listing.py's tree (odd names, hidden files, links, sidecars), listed by the executors."""
    doc = handed["doc"]
    assert doc["listing"]["jobs"] >= 1, "no Spark job ran: the driver listed alone"
    assert len(handed["remote"].files) == 31
    assert_same(handed["local"], handed["remote"], split=True)
    assert_shipped(spark_cluster, doc)


def test_doctor_reports_the_executors_python_pyarrow_and_the_shipped_trib(spark_cluster, handed):
    """``trib doctor --master spark://…``: one tiny task; the executors' Python, pyarrow and the shipped trib."""
    rc, out, err = handed["doc"]["doctor"]
    assert rc == 0, err[-4000:]
    doc = json.loads(out)
    assert doc["executors_python"] == str(spark_cluster.python)
    (x,) = {(e["python"], e["pyarrow"], e["trib"]) for e in doc["executors"]}
    assert Path(x[0]).parent == spark_cluster.python.parent and x[1] == doc["driver"]["pyarrow"]
    assert x[2] == doc["driver"]["trib"]
    assert all(".zip" in e["trib_from"] for e in doc["executors"]), doc["executors"]  # shipped, not installed


def test_doctor_with_a_python_without_pyarrow_is_one_line_exit_10(spark_cluster, bare, tmp_path):
    """``trib doctor --master … --conf spark.pyspark.python=…`` in a process of its own (the executors' Python
    is fixed when its SparkContext starts): a Python without pyarrow is one line, exit 10. One attempt per
    task (``spark.task.maxFailures=1``): the cluster's default makes four, each failing the same way."""
    from conftest import run_trib

    p = run_trib("doctor", "--master", spark_cluster.master, "--conf", f"spark.pyspark.python={bare}",
                 "--conf", "spark.task.maxFailures=1", env=spark_cluster.driver_env(), cwd=tmp_path)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 10 and "cannot import pyarrow" in last and str(bare) in last, p.stderr[-4000:]
    assert "Traceback" not in p.stderr and "\tat org.apache" not in p.stderr, p.stderr[-4000:]
    spark_cluster.wait_idle()
