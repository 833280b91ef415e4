"""trib on a real Spark standalone cluster whose executors' Python has pyarrow and nothing else (issue 21).

The session's ``spark_cluster`` (tests/spark_cluster.py): a master and one
2-core worker from the pyspark wheel; the executors run a venv without
tributary_read. Every driver here is a real process of the test venv (which
has trib): this pytest process may already hold the suite's local
SparkContext, and a process holds one. trib ships its own code to the
executors (:mod:`tributary_read.spark.ship`), whether it builds the session
(``trib etl run``) or is handed one that it did not build (``read_files``, the
executor listing, on a session a script made with ``SparkSession.builder``).

Small data: a run costs a driver JVM and an executor JVM (~15-25 s here).
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from etl_data import RawSource, assert_exactly_once, create_output_table, output_rows, write_job
from test_etl_crash import Run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

JOB = "on_cluster"
CYCLES = 4


class ClusterEtl:
    """One raw source and output table, a job whose master is the cluster; runs move on one schedule time each."""

    def __init__(self, base: Path, cluster):
        self.base, self.cluster = base, cluster
        self.src = RawSource(base / "raw", CYCLES, seed=21, late_each=1)
        self.out = base / "events"
        create_output_table(self.out)
        self.job = write_job(base / "job", name=JOB, raw=self.src.root, out=self.out, spark_master=cluster.master)

    def run(self, k: int, env: dict | None = None) -> Run:
        self.src.advance(k)
        # The executors' Python is the driver's PYSPARK_PYTHON: the venv without trib.
        return Run(self.job, self.src.schedule_iso(k), cwd=self.base,
                   env={"PYSPARK_PYTHON": str(self.cluster.python), **(env or {})})

    def log_version(self) -> int:
        from tributary_read.table.config import Table

        return Table.load(str(self.out)).log.latest_version()


@pytest.fixture(scope="module")
def etl(spark_cluster, tmp_path_factory):
    return ClusterEtl(tmp_path_factory.mktemp("cluster-etl"), spark_cluster)


def test_etl_run_on_a_cluster_without_trib_writes_every_record_exactly_once(etl):
    """The issue's reproduction: the write tasks used to fail with ModuleNotFoundError: tributary_read."""
    k = 1
    r = etl.run(k)
    rc = r.wait()
    assert rc == 0, f"exit {rc}:\n{r.err[-6000:]}"
    assert not r.leftovers, f"the run left processes behind: {r.leftovers}"
    doc = r.report()
    want = etl.src.expected_rows(k)
    assert doc["output"]["records"] == len(want) > 0, doc
    assert_exactly_once(output_rows(etl.out), want)
    print(f"run on the cluster: {r.elapsed:.1f} s")
